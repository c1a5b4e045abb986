// Elementwise kernels: unary, binary with broadcasting (StridedLayout), where, cast.
//
// Semantics match ops/cpu/elementwise.cc except where the data would make the CPU kernel throw,
// which a kernel cannot: integer division by zero gives 0, and an integer raised to a negative
// integer power gives the truncated real result (1 for base 1, ±1 for base -1, else 0).
// Integer arithmetic wraps modulo 2^bits (computed in unsigned, so it is defined).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include <chorus/core/cuda/check.h>
#include <chorus/ops/cuda/common.cuh>
#include <chorus/ops/cuda/kernels.h>

namespace chorus::ops::cuda {
namespace {

using namespace detail;  // NOLINT: the .cu files' shared vocabulary
using ::chorus::internal::str_cat;

// ---- Index arithmetic ------------------------------------------------------------------------

// Element offsets of operands 0..N-1 for output index i (row-major over L.dims). The loop runs
// over the fixed kMaxRank so the layout's arrays are indexed by constants (kept in registers or
// read from the parameter space, never copied to local memory).
template <int N>
__device__ __forceinline__ void offsets_of(const StridedLayout& L, i64 i, i64 (&off)[N]) {
#pragma unroll
  for (int o = 0; o < N; ++o) off[o] = L.offsets[o];
#pragma unroll
  for (int d = kMaxRank - 1; d >= 0; --d) {
    if (d < L.rank) {
      const i64 dim = L.dims[d];
      const i64 c = i % dim;
      i /= dim;
#pragma unroll
      for (int o = 0; o < N; ++o) off[o] += c * L.strides[o][d];
    }
  }
}

// True when every one of the first n operands is dense in output order (rank <= 1, stride 1):
// the kernels then index with i + offset and skip the divisions.
bool dense(const StridedLayout& L, int n) {
  if (L.rank == 0) return true;
  if (L.rank != 1) return false;
  for (int o = 0; o < n; ++o)
    if (L.strides[o][0] != 1) return false;
  return true;
}

// ---- Wrapping integer arithmetic -------------------------------------------------------------

template <typename T>
using unsigned_t = std::make_unsigned_t<T>;
template <typename T>
__device__ __forceinline__ T wrap_add(T a, T b) {
  return static_cast<T>(static_cast<unsigned_t<T>>(a) + static_cast<unsigned_t<T>>(b));
}
template <typename T>
__device__ __forceinline__ T wrap_sub(T a, T b) {
  return static_cast<T>(static_cast<unsigned_t<T>>(a) - static_cast<unsigned_t<T>>(b));
}
template <typename T>
__device__ __forceinline__ T wrap_mul(T a, T b) {
  return static_cast<T>(static_cast<unsigned_t<T>>(a) * static_cast<unsigned_t<T>>(b));
}
template <typename T>
__device__ __forceinline__ T wrap_neg(T v) {
  return wrap_sub<T>(T(0), v);
}

// ---- Unary -----------------------------------------------------------------------------------

template <typename A>
__device__ __forceinline__ A sigmoid(A x) {
  if (x >= A(0)) return A(1) / (A(1) + d_exp(-x));
  const A e = d_exp(x);
  return e / (A(1) + e);
}
template <typename A>
__device__ __forceinline__ A gelu(A x) {
  return A(0.5) * x * (A(1) + d_erf(x * A(0.70710678118654752440)));
}
template <typename A>
__device__ __forceinline__ A gelu_grad(A x) {
  const A cdf = A(0.5) * (A(1) + d_erf(x * A(0.70710678118654752440)));
  const A pdf = d_exp(A(-0.5) * x * x) * A(0.39894228040143267794);
  return cdf + x * pdf;
}

__device__ __forceinline__ float d_expm1(float x) { return expm1f(x); }
__device__ __forceinline__ double d_expm1(double x) { return expm1(x); }
__device__ __forceinline__ float d_log1p(float x) { return log1pf(x); }
__device__ __forceinline__ double d_log1p(double x) { return log1p(x); }

template <typename A>
__device__ __forceinline__ A silu_grad(A x) {
  const A s = sigmoid(x);
  return s * (A(1) + x * (A(1) - s));
}

// TF's thresholds of Softplus in the storage type T (see ops/cpu/elementwise.cc): log(epsilon) + 2
// of float32 for float32 and float16, of float64, and bfloat16's -2.84375.
template <typename T>
__device__ __forceinline__ acc_t<T> softplus_threshold() {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return -2.84375f;
  if constexpr (std::is_same_v<T, double>) return -34.043653389117154;  // log(2^-52) + 2
  return -13.942384719848633f;                                          // float(log(2^-23)) + 2
}

template <typename T, typename A>
__device__ __forceinline__ A softplus(A x) {
  const A threshold = softplus_threshold<T>();
  if (x > -threshold) return x;
  if (x < threshold) return d_exp(x);
  return d_log1p(d_exp(x));  // NaN falls through both tests and stays NaN
}

// T: the storage type (Softplus's thresholds depend on it); alpha: kLeakyRelu's slope.
template <typename T, typename A>
__device__ __forceinline__ A unary_float(UnaryOp op, A v, A alpha) {
  switch (op) {
    case UnaryOp::kNeg: return -v;
    case UnaryOp::kExp: return d_exp(v);
    case UnaryOp::kLog: return d_log(v);
    case UnaryOp::kSqrt: return d_sqrt(v);
    case UnaryOp::kRsqrt: return A(1) / d_sqrt(v);
    case UnaryOp::kSquare: return v * v;
    case UnaryOp::kAbs: return d_abs(v);
    case UnaryOp::kSign: return v > A(0) ? A(1) : (v < A(0) ? A(-1) : v);  // keeps ±0 and NaN
    case UnaryOp::kReciprocal: return A(1) / v;
    case UnaryOp::kRelu: return v <= A(0) ? A(0) : v;  // NaN stays NaN, as TF (and the CPU)
    case UnaryOp::kSigmoid: return sigmoid(v);
    case UnaryOp::kTanh: return d_tanh(v);
    case UnaryOp::kGelu: return gelu(v);
    case UnaryOp::kSilu: return v * sigmoid(v);  // -inf * 0: NaN, as TF
    case UnaryOp::kLeakyRelu: return v > A(0) ? v : v * alpha;
    case UnaryOp::kElu: return v < A(0) ? d_expm1(v) : v;
    case UnaryOp::kSoftplus: return softplus<T>(v);
    case UnaryOp::kLogicalNot: break;  // rejected on the host
  }
  return v;
}

template <typename T>
__device__ __forceinline__ T unary_int(UnaryOp op, T v) {
  switch (op) {
    case UnaryOp::kNeg: return wrap_neg(v);
    case UnaryOp::kSquare: return wrap_mul(v, v);
    case UnaryOp::kAbs:
      if constexpr (std::is_signed_v<T>) return v < 0 ? wrap_neg(v) : v;
      return v;
    case UnaryOp::kSign:
      if constexpr (std::is_signed_v<T>) return static_cast<T>((v > 0) - (v < 0));
      return static_cast<T>(v > 0 ? 1 : 0);
    case UnaryOp::kRelu: return v > 0 ? v : T(0);
    default: break;  // rejected on the host
  }
  return v;
}

template <typename T>
__global__ void unary_kernel(UnaryOp op, const T* x, T* y, i64 n, double alpha) {
  const i64 stride = static_cast<i64>(blockDim.x) * gridDim.x;
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    if constexpr (is_float_v<T>) {
      y[i] = store<T>(unary_float<T>(op, load(x[i]), static_cast<acc_t<T>>(alpha)));
    } else {
      y[i] = unary_int<T>(op, x[i]);
    }
  }
}

__global__ void logical_not_kernel(const std::uint8_t* x, std::uint8_t* y, i64 n) {
  const i64 stride = static_cast<i64>(blockDim.x) * gridDim.x;
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += stride) y[i] = x[i] ? 0 : 1;
}

bool int_unary_ok(UnaryOp op) {
  return op == UnaryOp::kNeg || op == UnaryOp::kSquare || op == UnaryOp::kAbs || op == UnaryOp::kSign ||
         op == UnaryOp::kRelu;
}

// ---- Binary ----------------------------------------------------------------------------------

template <typename A>
__device__ __forceinline__ A binary_float(BinaryOp op, A x, A y, A alpha) {
  switch (op) {
    case BinaryOp::kAdd: return x + y;
    case BinaryOp::kSub: return x - y;
    case BinaryOp::kMul: return x * y;
    case BinaryOp::kDiv: return x / y;
    case BinaryOp::kPow: return d_pow(x, y);
    case BinaryOp::kMaximum: return (x > y || d_isnan(x)) ? x : y;
    case BinaryOp::kMinimum: return (x < y || d_isnan(x)) ? x : y;
    case BinaryOp::kReluGrad: return y > A(0) ? x : A(0);                            // (dy, x)
    case BinaryOp::kSigmoidGrad: return x * y * (A(1) - y);                          // (dy, y)
    case BinaryOp::kTanhGrad: return x * (A(1) - y * y);                             // (dy, y)
    case BinaryOp::kGeluGrad: return x * gelu_grad(y);                               // (dy, x)
    case BinaryOp::kSiluGrad: return x * silu_grad(y);                               // (dy, x)
    case BinaryOp::kLeakyReluGrad: return y > A(0) ? x : x * alpha;                  // (dy, x)
    case BinaryOp::kEluGrad: return y < A(0) ? x * (y + A(1)) : x;                   // (dy, y)
    case BinaryOp::kSoftplusGrad: return x / (d_exp(-y) + A(1));                     // (dy, x)
    case BinaryOp::kSqrtGrad: return x == A(0) ? A(0) : x * A(0.5) / y;              // (dy, y)
    case BinaryOp::kRsqrtGrad: return x == A(0) ? A(0) : A(-0.5) * x * (y * y * y);  // (dy, y)
    case BinaryOp::kReciprocalGrad: return x == A(0) ? A(0) : -x * (y * y);          // (dy, y)
    default: break;  // comparisons and logical ops take the bool path
  }
  return x;
}

template <typename T>
__device__ __forceinline__ T int_pow(T x, T y) {
  if constexpr (std::is_signed_v<T>) {
    if (y < 0) {
      // Truncated real result of x^y with y < 0 (the CPU kernel raises instead).
      if (x == 1) return T(1);
      if (x == -1) return (y & 1) ? T(-1) : T(1);
      return T(0);
    }
  }
  T r = 1;
  T base = x;
  for (T e = y; e > 0; e >>= 1) {
    if (e & 1) r = wrap_mul(r, base);
    base = wrap_mul(base, base);
  }
  return r;
}

template <typename T>
__device__ __forceinline__ T binary_int(BinaryOp op, T x, T y) {
  switch (op) {
    case BinaryOp::kAdd: return wrap_add(x, y);
    case BinaryOp::kSub: return wrap_sub(x, y);
    case BinaryOp::kMul: return wrap_mul(x, y);
    case BinaryOp::kDiv:
      if (y == 0) return T(0);  // the CPU kernel raises "Integer division by zero"
      if constexpr (std::is_signed_v<T>) {
        if (x == Limits<T>::lowest && y == T(-1)) return x;  // wraps, as TF's kernels do
      }
      return static_cast<T>(x / y);
    case BinaryOp::kPow: return int_pow(x, y);
    case BinaryOp::kMaximum: return x > y ? x : y;
    case BinaryOp::kMinimum: return x < y ? x : y;
    case BinaryOp::kReluGrad: return y > 0 ? x : T(0);
    default: break;  // rejected on the host
  }
  return x;
}

// Comparisons and logical ops on the arithmetic values (bool elements are read as 0/1).
template <typename A>
__device__ __forceinline__ std::uint8_t binary_bool(BinaryOp op, A x, A y) {
  switch (op) {
    case BinaryOp::kEqual: return x == y;
    case BinaryOp::kNotEqual: return x != y;
    case BinaryOp::kLess: return x < y;
    case BinaryOp::kLessEqual: return x <= y;
    case BinaryOp::kGreater: return x > y;
    case BinaryOp::kGreaterEqual: return x >= y;
    case BinaryOp::kLogicalAnd: return (x != A(0)) && (y != A(0));
    case BinaryOp::kLogicalOr: return (x != A(0)) || (y != A(0));
    default: break;
  }
  return 0;
}

// Storage type S of the operands; bool is stored as uint8 and read as 0/1.
template <typename S>
__device__ __forceinline__ acc_t<S> value(S v) {
  return load(v);
}

template <typename S, bool kDense>
__global__ void binary_kernel(BinaryOp op, StridedLayout L, const S* a, const S* b, void* out_raw, i64 n, bool to_bool,
                              double alpha) {
  const i64 stride = static_cast<i64>(blockDim.x) * gridDim.x;
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    i64 off[2];
    if constexpr (kDense) {
      off[0] = L.offsets[0] + i;
      off[1] = L.offsets[1] + i;
    } else {
      offsets_of<2>(L, i, off);
    }
    const auto x = value(a[off[0]]);
    const auto y = value(b[off[1]]);
    if (to_bool) {
      static_cast<std::uint8_t*>(out_raw)[i] = binary_bool(op, x, y);
    } else if constexpr (is_float_v<S>) {
      static_cast<S*>(out_raw)[i] = store<S>(binary_float(op, x, y, static_cast<acc_t<S>>(alpha)));
    } else {
      static_cast<S*>(out_raw)[i] = binary_int<S>(op, x, y);
    }
  }
}

// Bool operands: only comparisons and logical ops (checked on the host).
template <bool kDense>
__global__ void binary_bool_kernel(BinaryOp op, StridedLayout L, const std::uint8_t* a, const std::uint8_t* b,
                                   std::uint8_t* out, i64 n) {
  const i64 stride = static_cast<i64>(blockDim.x) * gridDim.x;
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    i64 off[2];
    if constexpr (kDense) {
      off[0] = L.offsets[0] + i;
      off[1] = L.offsets[1] + i;
    } else {
      offsets_of<2>(L, i, off);
    }
    const int x = a[off[0]] != 0;
    const int y = b[off[1]] != 0;
    out[i] = binary_bool(op, x, y);
  }
}

// ---- Where -----------------------------------------------------------------------------------

template <typename E, bool kDense>
__global__ void where_kernel(StridedLayout L, const std::uint8_t* cond, const E* x, const E* y, E* out, i64 n) {
  const i64 stride = static_cast<i64>(blockDim.x) * gridDim.x;
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    i64 off[3];
    if constexpr (kDense) {
      off[0] = L.offsets[0] + i;
      off[1] = L.offsets[1] + i;
      off[2] = L.offsets[2] + i;
    } else {
      offsets_of<3>(L, i, off);
    }
    out[i] = cond[off[0]] ? x[off[1]] : y[off[2]];
  }
}

// ---- Cast ------------------------------------------------------------------------------------
// core/dtype.h's rules: every element is read into an exact value type (float, double, int,
// long long, uint8 with bool as 0/1) and stored with the destination's rules, rounding once.

template <typename S>
__device__ __forceinline__ auto cast_load(S v) {
  return load(v);
}
__device__ __forceinline__ std::uint8_t cast_load_bool(std::uint8_t v) { return v != 0 ? 1 : 0; }

template <typename I, typename V>
__device__ __forceinline__ I float_to_int(V f) {
  const double v = static_cast<double>(f);  // exact for float
  if (v != v) return I(0);
  // max + 1 is a power of two, exact in double; min - 1 rounds to -2^63 for int64, where
  // v == -2^63 then saturates to -2^63, the value it converts to anyway (as core/dtype.cc).
  constexpr double hi = static_cast<double>(Limits<I>::max) + 1.0;
  constexpr double lo_minus_one = static_cast<double>(Limits<I>::lowest) - 1.0;
  if (v >= hi) return Limits<I>::max;
  if (v <= lo_minus_one) return Limits<I>::lowest;
  return static_cast<I>(v);  // in range: truncates toward zero
}

template <typename D, typename V>
__device__ __forceinline__ D cast_store(V v) {
  if constexpr (std::is_same_v<D, __half>) {
    if constexpr (std::is_same_v<V, float>)
      return __float2half_rn(v);
    else if constexpr (std::is_same_v<V, double>)
      return __double2half(v);
    else if constexpr (std::is_same_v<V, i64>)
      return __ll2half_rn(v);
    else if constexpr (std::is_same_v<V, int>)
      return __int2half_rn(v);
    else
      return __uint2half_rn(static_cast<unsigned>(v));
  } else if constexpr (std::is_same_v<D, __nv_bfloat16>) {
    if constexpr (std::is_same_v<V, float>)
      return __float2bfloat16_rn(v);
    else if constexpr (std::is_same_v<V, double>)
      return __double2bfloat16(v);
    else if constexpr (std::is_same_v<V, i64>)
      return __ll2bfloat16_rn(v);
    else if constexpr (std::is_same_v<V, int>)
      return __int2bfloat16_rn(v);
    else
      return __uint2bfloat16_rn(static_cast<unsigned>(v));
  } else if constexpr (std::is_floating_point_v<D>) {
    return static_cast<D>(v);  // round to nearest; double → float overflows to ±inf (IEEE)
  } else if constexpr (std::is_floating_point_v<V>) {
    return float_to_int<D>(v);
  } else {
    return static_cast<D>(v);  // integer → integer wraps modulo 2^bits
  }
}

// S, D: device storage types; bool (bool_tag) is stored as uint8.
template <typename S>
using storage_t = std::conditional_t<std::is_same_v<S, bool_tag>, std::uint8_t, S>;

template <typename S, typename D>
__global__ void cast_kernel(const storage_t<S>* x, storage_t<D>* y, i64 n) {
  const i64 stride = static_cast<i64>(blockDim.x) * gridDim.x;
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    auto v = [&] {
      if constexpr (std::is_same_v<S, bool_tag>)
        return cast_load_bool(x[i]);
      else
        return cast_load(x[i]);
    }();
    if constexpr (std::is_same_v<D, bool_tag>) {
      y[i] = (v != decltype(v)(0)) ? 1 : 0;  // NaN != 0: true
    } else {
      y[i] = cast_store<D>(v);
    }
  }
}

}  // namespace

void unary(int ordinal, StreamHandle stream, UnaryOp op, DType dtype, const void* x, void* y, std::int64_t n,
           double alpha) {
  dispatch_all(dtype, "unary", [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, bool_tag>) {
      CHORUS_REQUIRE(op == UnaryOp::kLogicalNot, InvalidArgumentError, "unary op on bool: only logical_not is defined");
    } else if constexpr (is_float_v<T>) {
      CHORUS_REQUIRE(op != UnaryOp::kLogicalNot, InvalidArgumentError, "logical_not needs a bool tensor, got ",
                     dtype_name(dtype));
    } else {
      CHORUS_REQUIRE(int_unary_ok(op), InvalidArgumentError, "this unary op needs a floating dtype, got ",
                     dtype_name(dtype));
    }
  });
  if (n <= 0) return;
  gpu::internal::DeviceGuard guard(ordinal);
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_all(dtype, "unary", [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, bool_tag>) {
      logical_not_kernel<<<grid_for(n), kThreads, 0, s>>>(static_cast<const std::uint8_t*>(x),
                                                          static_cast<std::uint8_t*>(y), n);
    } else {
      unary_kernel<T><<<grid_for(n), kThreads, 0, s>>>(op, static_cast<const T*>(x), static_cast<T*>(y), n, alpha);
    }
  });
  CHORUS_CUDA_CHECK(cudaGetLastError());
}

void binary(int ordinal, StreamHandle stream, BinaryOp op, DType dtype, const StridedLayout& layout, const void* a,
            const void* b, void* out, double alpha) {
  CHORUS_REQUIRE(layout.rank >= 0 && layout.rank <= kMaxRank, InvalidArgumentError, "binary: rank ", layout.rank,
                 " is not in [0, ", kMaxRank, "]");
  const bool to_bool = is_comparison(op) || is_logical(op);
  if (!to_bool) {
    CHORUS_REQUIRE(dtype != DType::kBool, InvalidArgumentError,
                   "arithmetic on bool tensors is not defined (cast them first)");
    const bool float_only = op == BinaryOp::kSigmoidGrad || op == BinaryOp::kTanhGrad || op == BinaryOp::kGeluGrad ||
                            op == BinaryOp::kSiluGrad || op == BinaryOp::kLeakyReluGrad || op == BinaryOp::kEluGrad ||
                            op == BinaryOp::kSoftplusGrad || op == BinaryOp::kSqrtGrad || op == BinaryOp::kRsqrtGrad ||
                            op == BinaryOp::kReciprocalGrad;
    CHORUS_REQUIRE(is_floating(dtype) || !float_only, InvalidArgumentError,
                   "this binary op needs a floating dtype, got ", dtype_name(dtype));
  }
  const std::int64_t n = layout.num_elements();
  if (n <= 0) return;
  gpu::internal::DeviceGuard guard(ordinal);
  auto s = static_cast<cudaStream_t>(stream);
  const bool is_dense = dense(layout, 2);
  dispatch_all(dtype, "binary", [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, bool_tag>) {
      const auto* pa = static_cast<const std::uint8_t*>(a);
      const auto* pb = static_cast<const std::uint8_t*>(b);
      auto* po = static_cast<std::uint8_t*>(out);
      if (is_dense)
        binary_bool_kernel<true><<<grid_for(n), kThreads, 0, s>>>(op, layout, pa, pb, po, n);
      else
        binary_bool_kernel<false><<<grid_for(n), kThreads, 0, s>>>(op, layout, pa, pb, po, n);
    } else {
      const auto* pa = static_cast<const T*>(a);
      const auto* pb = static_cast<const T*>(b);
      if (is_dense)
        binary_kernel<T, true><<<grid_for(n), kThreads, 0, s>>>(op, layout, pa, pb, out, n, to_bool, alpha);
      else
        binary_kernel<T, false><<<grid_for(n), kThreads, 0, s>>>(op, layout, pa, pb, out, n, to_bool, alpha);
    }
  });
  CHORUS_CUDA_CHECK(cudaGetLastError());
}

void where(int ordinal, StreamHandle stream, DType dtype, const StridedLayout& layout, const void* cond, const void* x,
           const void* y, void* out) {
  CHORUS_REQUIRE(layout.rank >= 0 && layout.rank <= kMaxRank, InvalidArgumentError, "where: rank ", layout.rank,
                 " is not in [0, ", kMaxRank, "]");
  const std::int64_t n = layout.num_elements();
  const std::size_t bytes = dtype_size(dtype);
  dispatch_bytes(bytes, "where", [](auto) {});
  if (n <= 0) return;
  gpu::internal::DeviceGuard guard(ordinal);
  auto s = static_cast<cudaStream_t>(stream);
  const bool is_dense = dense(layout, 3);
  const auto* c = static_cast<const std::uint8_t*>(cond);
  dispatch_bytes(bytes, "where", [&](auto e) {
    using E = decltype(e);
    const auto* px = static_cast<const E*>(x);
    const auto* py = static_cast<const E*>(y);
    auto* po = static_cast<E*>(out);
    if (is_dense)
      where_kernel<E, true><<<grid_for(n), kThreads, 0, s>>>(layout, c, px, py, po, n);
    else
      where_kernel<E, false><<<grid_for(n), kThreads, 0, s>>>(layout, c, px, py, po, n);
  });
  CHORUS_CUDA_CHECK(cudaGetLastError());
}

void cast(int ordinal, StreamHandle stream, DType from, DType to, const void* x, void* y, std::int64_t n) {
  dispatch_all(from, "cast", [](auto) {});
  dispatch_all(to, "cast", [](auto) {});
  if (n <= 0) return;
  gpu::internal::DeviceGuard guard(ordinal);
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_all(from, "cast", [&](auto sf) {
    using S = decltype(sf);
    dispatch_all(to, "cast", [&](auto df) {
      using D = decltype(df);
      cast_kernel<S, D>
          <<<grid_for(n), kThreads, 0, s>>>(static_cast<const storage_t<S>*>(x), static_cast<storage_t<D>*>(y), n);
    });
  });
  CHORUS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace chorus::ops::cuda
