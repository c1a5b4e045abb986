// Elementwise CPU loops: unary, binary with broadcasting, where, cast, strided copy.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <type_traits>

#include <chorus/ops/cpu/loops.h>
#include <chorus/ops/cpu/numeric.h>

namespace chorus::ops::cpu {
namespace {

using chorus::internal::str_cat;

constexpr std::int64_t kParallelGrain = 1 << 15;

// Calls body(begin, end) over [0, n), split across the OpenMP threads when n is large.
template <typename Body>
void parallel_range(std::int64_t n, Body body) {
  if (n < 2 * kParallelGrain) {
    body(std::int64_t{0}, n);
    return;
  }
  const std::int64_t chunks = (n + kParallelGrain - 1) / kParallelGrain;
  // An exception must not leave an OpenMP region (that terminates): keep the first, rethrow after.
  std::exception_ptr error;
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) {
    try {
      body(c * kParallelGrain, std::min(n, (c + 1) * kParallelGrain));
    } catch (...) {
#pragma omp critical(chorus_parallel_range_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

// Calls block(i, k) over [b, e) with k a std::integral_constant: 16 for the full blocks, 1 for the
// tail. The fixed trip count of a full block is what lets -O2's cheap vectorizer (and SLP) turn
// the per-element loops of the 16-bit types' load/compute/store into SIMD code.
template <typename Block>
void in_blocks(std::int64_t b, std::int64_t e, Block block) {
  std::int64_t i = b;
  for (; i + 16 <= e; i += 16) block(i, std::integral_constant<std::int64_t, 16>{});
  for (; i < e; ++i) block(i, std::integral_constant<std::int64_t, 1>{});
}

// Walks `layout` one innermost run at a time: body(out_index, count, offsets[N], inner_strides[N]).
template <int N, typename Body>
void walk(const StridedLayout& L, Body body) {
  std::int64_t off[N], inner_stride[N];
  for (int o = 0; o < N; ++o) off[o] = L.offsets[o];
  if (L.rank == 0) {
    for (int o = 0; o < N; ++o) inner_stride[o] = 0;
    body(std::int64_t{0}, std::int64_t{1}, off, inner_stride);
    return;
  }
  const int r = L.rank;
  const std::int64_t inner = L.dims[r - 1];
  if (inner == 0) return;
  for (int o = 0; o < N; ++o) inner_stride[o] = L.strides[o][r - 1];
  const std::int64_t outer = L.num_elements() / inner;
  std::int64_t idx[kMaxRank] = {};
  std::int64_t out = 0;
  for (std::int64_t k = 0; k < outer; ++k) {
    body(out, inner, off, inner_stride);
    out += inner;
    for (int d = r - 2; d >= 0; --d) {
      ++idx[d];
      for (int o = 0; o < N; ++o) off[o] += L.strides[o][d];
      if (idx[d] < L.dims[d]) break;
      for (int o = 0; o < N; ++o) off[o] -= L.strides[o][d] * L.dims[d];
      idx[d] = 0;
    }
  }
}

template <typename C>
C sigmoid(C x) {
  if (x >= C(0)) return C(1) / (C(1) + std::exp(-x));
  const C e = std::exp(x);
  return e / (C(1) + e);
}

template <typename C>
C gelu(C x) {
  return C(0.5) * x * (C(1) + std::erf(x * C(0.70710678118654752440)));
}

template <typename C>
C silu_grad(C x) {
  const C s = sigmoid(x);
  return s * (C(1) + x * (C(1) - s));
}

// TF's Softplus switches to x above -threshold and to exp(x) below threshold, threshold =
// log(epsilon) + 2 in the element type T: float32 (-13.94) also for float16 (TF computes half in
// float there, measured with TF 2.21), float64 (-34.04), and bfloat16's coarse -2.84375
// (bfloat16(log(2^-7)) + 2, both rounded to bfloat16: softplus(2.875) is 2.875 in TF's bfloat16).
template <typename T, typename C>
C softplus_threshold() {
  if constexpr (std::is_same_v<T, bfloat16>) return C(-2.84375);
  if constexpr (std::is_same_v<T, double>) return std::log(std::numeric_limits<double>::epsilon()) + 2.0;
  return C(std::log(std::numeric_limits<float>::epsilon()) + 2.f);
}

template <typename T, typename C>
C softplus(C x) {
  const C threshold = softplus_threshold<T, C>();
  if (x > -threshold) return x;           // softplus(x) = x within epsilon (and +inf stays +inf)
  if (x < threshold) return std::exp(x);  // softplus(x) = exp(x) within epsilon
  // NaN falls through both tests and stays NaN. For x >= 0, 1 + e^x loses at most half an ulp
  // of a result >= log 2, so log (glibc's logf is ~3x faster than log1pf) is as accurate there.
  const C e = std::exp(x);
  return x >= C(0) ? std::log(C(1) + e) : std::log1p(e);
}

template <typename T>
void unary_typed(UnaryOp op, const T* x, T* y, std::int64_t n, double alpha_in) {
  using N = Num<T>;
  using C = typename N::C;
  auto run = [&](auto f) {
    parallel_range(n, [&](std::int64_t b, std::int64_t e) {
      in_blocks(b, e, [&](std::int64_t i, auto k) {
        constexpr std::int64_t K = decltype(k)::value;
        C v[K];
        for (std::int64_t j = 0; j < K; ++j) v[j] = N::load(x[i + j]);
        for (std::int64_t j = 0; j < K; ++j) v[j] = f(v[j]);
        for (std::int64_t j = 0; j < K; ++j) y[i + j] = N::store(v[j]);
      });
    });
  };
  if constexpr (std::is_same_v<T, bool>) {
    if (op == UnaryOp::kLogicalNot) return run([](C v) { return !v; });
    throw InvalidArgumentError("unary op on bool: only logical_not is defined");
  } else if constexpr (std::is_integral_v<C>) {
    switch (op) {
      case UnaryOp::kNeg: return run([](C v) { return static_cast<C>(-v); });
      case UnaryOp::kSquare: return run([](C v) { return static_cast<C>(v * v); });
      case UnaryOp::kAbs: return run([](C v) { return static_cast<C>(v < 0 ? -v : v); });
      case UnaryOp::kSign: return run([](C v) { return static_cast<C>((v > 0) - (v < 0)); });
      case UnaryOp::kRelu: return run([](C v) { return static_cast<C>(v > 0 ? v : 0); });
      default: throw InvalidArgumentError("this unary op needs a floating dtype");
    }
  } else {
    switch (op) {
      case UnaryOp::kNeg: return run([](C v) { return -v; });
      case UnaryOp::kExp: return run([](C v) { return std::exp(v); });
      case UnaryOp::kLog: return run([](C v) { return std::log(v); });
      case UnaryOp::kSqrt: return run([](C v) { return std::sqrt(v); });
      case UnaryOp::kRsqrt: return run([](C v) { return C(1) / std::sqrt(v); });
      case UnaryOp::kSquare: return run([](C v) { return v * v; });
      case UnaryOp::kAbs: return run([](C v) { return std::abs(v); });
      case UnaryOp::kSign: return run([](C v) { return v > C(0) ? C(1) : (v < C(0) ? C(-1) : v); });
      case UnaryOp::kReciprocal: return run([](C v) { return C(1) / v; });
      case UnaryOp::kRelu: return run([](C v) { return v <= C(0) ? C(0) : v; });  // NaN stays NaN, as in TF
      case UnaryOp::kSigmoid: return run([](C v) { return sigmoid(v); });
      case UnaryOp::kTanh: return run([](C v) { return std::tanh(v); });
      case UnaryOp::kGelu: return run([](C v) { return gelu(v); });
      // x / (1 + e^-x): branch-free; -inf / inf is NaN as TF's -inf·sigmoid(-inf), and a large
      // negative x gives -0 (e^-x overflows to inf), as TF.
      case UnaryOp::kSilu: return run([](C v) { return v / (C(1) + std::exp(-v)); });
      case UnaryOp::kLeakyRelu: {
        const C alpha = static_cast<C>(alpha_in);
        return run([alpha](C v) { return v > C(0) ? v : v * alpha; });
      }
      // expm1, not TF's exp(x) - 1: the same up to one rounding of 1, accurate near 0.
      case UnaryOp::kElu: return run([](C v) { return v < C(0) ? std::expm1(v) : v; });
      case UnaryOp::kSoftplus: return run([](C v) { return softplus<T>(v); });
      case UnaryOp::kLogicalNot: break;
    }
    throw InvalidArgumentError("logical_not needs a bool tensor");
  }
}

// Runs out[i] = f(a, b) over the layout; Out is the output storage type.
template <typename T, typename Out, typename F>
void binary_walk(const StridedLayout& L, const T* a, const T* b, Out* out, F f) {
  using N = Num<T>;
  walk<2>(L, [&](std::int64_t o, std::int64_t count, const std::int64_t* off, const std::int64_t* st) {
    const T* pa = a + off[0];
    const T* pb = b + off[1];
    Out* po = out + o;
    // Contiguous runs (the common cases) in blocks: every input of a block is loaded before any
    // output is written, so an output that is also an input stays correct.
    const auto contiguous = [&](std::int64_t sa, std::int64_t sb) {
      parallel_range(count, [&](std::int64_t s, std::int64_t e) {
        in_blocks(s, e, [&](std::int64_t i, auto k) {
          constexpr std::int64_t K = decltype(k)::value;
          typename N::C x[K], y[K];
          for (std::int64_t j = 0; j < K; ++j) x[j] = N::load(pa[(i + j) * sa]);
          for (std::int64_t j = 0; j < K; ++j) y[j] = N::load(pb[(i + j) * sb]);
          Out r[K];
          for (std::int64_t j = 0; j < K; ++j) r[j] = f(x[j], y[j]);
          for (std::int64_t j = 0; j < K; ++j) po[i + j] = r[j];
        });
      });
    };
    if (st[0] == 1 && st[1] == 1) {
      contiguous(1, 1);
    } else if (st[0] == 1 && st[1] == 0) {
      contiguous(1, 0);
    } else if (st[0] == 0 && st[1] == 1) {
      contiguous(0, 1);
    } else {
      for (std::int64_t i = 0; i < count; ++i) po[i] = f(N::load(pa[i * st[0]]), N::load(pb[i * st[1]]));
    }
  });
}

template <typename T>
void binary_typed(BinaryOp op, const StridedLayout& L, const T* a, const T* b, void* out_raw, double alpha_in) {
  using N = Num<T>;
  using C = typename N::C;
  if (is_comparison(op) || is_logical(op)) {
    auto* out = static_cast<bool*>(out_raw);
    switch (op) {
      case BinaryOp::kEqual: return binary_walk(L, a, b, out, [](C x, C y) { return x == y; });
      case BinaryOp::kNotEqual: return binary_walk(L, a, b, out, [](C x, C y) { return x != y; });
      case BinaryOp::kLess: return binary_walk(L, a, b, out, [](C x, C y) { return x < y; });
      case BinaryOp::kLessEqual: return binary_walk(L, a, b, out, [](C x, C y) { return x <= y; });
      case BinaryOp::kGreater: return binary_walk(L, a, b, out, [](C x, C y) { return x > y; });
      case BinaryOp::kGreaterEqual: return binary_walk(L, a, b, out, [](C x, C y) { return x >= y; });
      case BinaryOp::kLogicalAnd: return binary_walk(L, a, b, out, [](C x, C y) { return x && y; });
      case BinaryOp::kLogicalOr: return binary_walk(L, a, b, out, [](C x, C y) { return x || y; });
      default: break;
    }
  }
  T* out = static_cast<T*>(out_raw);
  auto run = [&](auto f) { binary_walk(L, a, b, out, [f](C x, C y) { return N::store(f(x, y)); }); };
  if constexpr (std::is_same_v<T, bool>) {
    throw InvalidArgumentError("arithmetic on bool tensors is not defined (cast them first)");
  } else if constexpr (std::is_integral_v<C>) {
    switch (op) {
      case BinaryOp::kAdd: return run([](C x, C y) { return static_cast<C>(x + y); });
      case BinaryOp::kSub: return run([](C x, C y) { return static_cast<C>(x - y); });
      case BinaryOp::kMul: return run([](C x, C y) { return static_cast<C>(x * y); });
      case BinaryOp::kDiv:
        return run([](C x, C y) {
          if (y == 0) throw InvalidArgumentError("Integer division by zero");
          if constexpr (std::is_signed_v<C>)
            if (x == std::numeric_limits<C>::min() && y == -1) return x;  // wraps, as TF's kernels do
          return static_cast<C>(x / y);
        });
      case BinaryOp::kPow:
        return run([](C x, C y) {
          if (y < 0) throw InvalidArgumentError("Integers to negative integer powers are not allowed");
          C r = 1;
          for (C e = y, base = x; e > 0; e >>= 1, base = static_cast<C>(base * base))
            if (e & 1) r = static_cast<C>(r * base);
          return r;
        });
      case BinaryOp::kMaximum: return run([](C x, C y) { return x > y ? x : y; });
      case BinaryOp::kMinimum: return run([](C x, C y) { return x < y ? x : y; });
      case BinaryOp::kReluGrad: return run([](C dy, C x) { return x > 0 ? dy : C(0); });
      default: throw InvalidArgumentError("this binary op needs a floating dtype");
    }
  } else {
    switch (op) {
      case BinaryOp::kAdd: return run([](C x, C y) { return x + y; });
      case BinaryOp::kSub: return run([](C x, C y) { return x - y; });
      case BinaryOp::kMul: return run([](C x, C y) { return x * y; });
      case BinaryOp::kDiv: return run([](C x, C y) { return x / y; });
      case BinaryOp::kPow: return run([](C x, C y) { return std::pow(x, y); });
      case BinaryOp::kMaximum: return run([](C x, C y) { return (x > y || std::isnan(x)) ? x : y; });
      case BinaryOp::kMinimum: return run([](C x, C y) { return (x < y || std::isnan(x)) ? x : y; });
      case BinaryOp::kReluGrad: return run([](C dy, C x) { return x > C(0) ? dy : C(0); });
      case BinaryOp::kSigmoidGrad: return run([](C dy, C y) { return dy * y * (C(1) - y); });
      case BinaryOp::kTanhGrad: return run([](C dy, C y) { return dy * (C(1) - y * y); });
      case BinaryOp::kGeluGrad: return run([](C dy, C x) { return dy * gelu_grad(x); });
      case BinaryOp::kSiluGrad: return run([](C dy, C x) { return dy * silu_grad(x); });
      case BinaryOp::kLeakyReluGrad: {
        const C alpha = static_cast<C>(alpha_in);
        return run([alpha](C dy, C x) { return x > C(0) ? dy : dy * alpha; });
      }
      case BinaryOp::kEluGrad: return run([](C dy, C y) { return y < C(0) ? dy * (y + C(1)) : dy; });
      case BinaryOp::kSoftplusGrad: return run([](C dy, C x) { return dy / (std::exp(-x) + C(1)); });
      case BinaryOp::kSqrtGrad: return run([](C dy, C y) { return dy == C(0) ? C(0) : dy * C(0.5) / y; });
      case BinaryOp::kRsqrtGrad: return run([](C dy, C y) { return dy == C(0) ? C(0) : C(-0.5) * dy * (y * y * y); });
      case BinaryOp::kReciprocalGrad: return run([](C dy, C y) { return dy == C(0) ? C(0) : -dy * (y * y); });
      default: break;
    }
    throw InvalidArgumentError("logical ops need bool tensors");
  }
}

}  // namespace

void unary(UnaryOp op, DType dtype, const void* x, void* y, std::int64_t n, double alpha) {
  dispatch_dtype(dtype, "unary", [&](auto t) {
    using T = decltype(t);
    unary_typed<T>(op, static_cast<const T*>(x), static_cast<T*>(y), n, alpha);
  });
}

void binary(BinaryOp op, DType dtype, const StridedLayout& layout, const void* a, const void* b, void* out,
            double alpha) {
  dispatch_dtype(dtype, "binary", [&](auto t) {
    using T = decltype(t);
    binary_typed<T>(op, layout, static_cast<const T*>(a), static_cast<const T*>(b), out, alpha);
  });
}

namespace {
template <typename E>
void where_typed(const StridedLayout& L, const std::uint8_t* c, const E* x, const E* y, E* out) {
  walk<3>(L, [&](std::int64_t o, std::int64_t count, const std::int64_t* off, const std::int64_t* st) {
    for (std::int64_t i = 0; i < count; ++i)
      out[o + i] = c[off[0] + i * st[0]] ? x[off[1] + i * st[1]] : y[off[2] + i * st[2]];
  });
}
template <typename E>
void copy_typed(const CopyLayout& L, const E* src, E* dst) {
  // The destination is walked densely only when its strides say so; use both strides.
  walk<2>(L, [&](std::int64_t, std::int64_t count, const std::int64_t* off, const std::int64_t* st) {
    const E* s = src + off[0];
    E* d = dst + off[1];
    if (st[0] == 1 && st[1] == 1) {
      std::memcpy(d, s, static_cast<std::size_t>(count) * sizeof(E));
    } else {
      for (std::int64_t i = 0; i < count; ++i) d[i * st[1]] = s[i * st[0]];
    }
  });
}
template <typename F>
void by_size(std::size_t bytes, F f) {
  switch (bytes) {
    case 1: return f(std::uint8_t{});
    case 2: return f(std::uint16_t{});
    case 4: return f(std::uint32_t{});
    case 8: return f(std::uint64_t{});
  }
  throw InvalidArgumentError(str_cat("copy: element size ", bytes, " is not 1, 2, 4 or 8"));
}
}  // namespace

void where(DType dtype, const StridedLayout& layout, const void* cond, const void* x, const void* y, void* out) {
  by_size(dtype_size(dtype), [&](auto e) {
    using E = decltype(e);
    where_typed<E>(layout, static_cast<const std::uint8_t*>(cond), static_cast<const E*>(x), static_cast<const E*>(y),
                   static_cast<E*>(out));
  });
}

void cast(DType from, DType to, const void* x, void* y, std::int64_t n) {
  // Split over the device's threads: mixed precision casts every weight and gradient each step.
  const std::size_t in = dtype_size(from), out = dtype_size(to);
  parallel_range(n, [&](std::int64_t b, std::int64_t e) {
    convert(static_cast<const unsigned char*>(x) + b * static_cast<std::int64_t>(in), from,
            static_cast<unsigned char*>(y) + b * static_cast<std::int64_t>(out), to, static_cast<std::size_t>(e - b));
  });
}

void copy_strided(std::size_t elem_bytes, const CopyLayout& layout, const void* src, void* dst) {
  by_size(elem_bytes, [&](auto e) {
    using E = decltype(e);
    copy_typed<E>(layout, static_cast<const E*>(src), static_cast<E*>(dst));
  });
}

}  // namespace chorus::ops::cpu
