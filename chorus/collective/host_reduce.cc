#include <chorus/collective/host_reduce.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <chorus/core/error.h>

namespace chorus::collective {
namespace {

// Elements per tile: 2048 accumulators of up to 8 bytes = 16 KiB, well inside L1+L2.
constexpr std::size_t kTile = 2048;

template <typename T>
struct Acc {
  using type = T;
};
template <>
struct Acc<float16> {
  using type = float;
};
template <>
struct Acc<bfloat16> {
  using type = float;
};

template <typename T, typename A>
inline A load(const T& v) {
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>)
    return static_cast<float>(v);
  else
    return v;
}
template <typename T, typename A>
inline T store(A v) {
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>)
    return T(v);
  else
    return v;
}

// One combine loop per op so the compiler vectorizes each without a branch in the loop.
template <typename A, typename T>
void combine(ReduceOp op, A* acc, const T* in, std::size_t n) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:
      for (std::size_t i = 0; i < n; ++i) acc[i] += load<T, A>(in[i]);
      break;
    case ReduceOp::kProd:
      for (std::size_t i = 0; i < n; ++i) acc[i] *= load<T, A>(in[i]);
      break;
    case ReduceOp::kMin:
      for (std::size_t i = 0; i < n; ++i) acc[i] = std::min(acc[i], load<T, A>(in[i]));
      break;
    case ReduceOp::kMax:
      for (std::size_t i = 0; i < n; ++i) acc[i] = std::max(acc[i], load<T, A>(in[i]));
      break;
  }
}

template <typename T>
void reduce_typed(ReduceOp op, const void* const* inputs, int k, void* const* outputs, int num_out, std::size_t begin,
                  std::size_t end, int divisor) {
  using A = typename Acc<T>::type;
  A acc[kTile];
  for (std::size_t t = begin; t < end; t += kTile) {
    const std::size_t n = std::min(kTile, end - t);
    const T* in0 = static_cast<const T*>(inputs[0]) + t;
    for (std::size_t i = 0; i < n; ++i) acc[i] = load<T, A>(in0[i]);
    for (int j = 1; j < k; ++j) combine<A, T>(op, acc, static_cast<const T*>(inputs[j]) + t, n);
    if (op == ReduceOp::kMean && divisor > 1)
      for (std::size_t i = 0; i < n; ++i) acc[i] = static_cast<A>(acc[i] / static_cast<A>(divisor));
    for (int o = 0; o < num_out; ++o) {
      T* out = static_cast<T*>(outputs[o]) + t;
      if constexpr (std::is_same_v<T, A>) {
        std::memcpy(out, acc, n * sizeof(T));
      } else {
        for (std::size_t i = 0; i < n; ++i) out[i] = store<T, A>(acc[i]);
      }
    }
  }
}

// The path for types reduced in their own type (float32/64, int32/64): no accumulator tile. Each
// step loads one cache line (4 vectors) from every input, combines them in registers and stores
// the result into every output, so an output that is one of the inputs (in place) is written only
// after all inputs at those elements were read. Written with vector types rather than left to the
// auto-vectorizer: outputs alias inputs, so an auto-vectorized loop would take its scalar fallback
// after the runtime overlap check. 16-byte vectors are what every x86-64 has (SSE2); wider ones
// without -mavx get spilled to the stack.
template <typename T>
struct VecOf;
template <>
struct VecOf<float> {
  typedef float type __attribute__((vector_size(16)));
};
template <>
struct VecOf<double> {
  typedef double type __attribute__((vector_size(16)));
};
template <>
struct VecOf<std::int32_t> {
  typedef std::int32_t type __attribute__((vector_size(16)));
};
template <>
struct VecOf<std::int64_t> {
  typedef std::int64_t type __attribute__((vector_size(16)));
};
template <typename T>
using Vec = typename VecOf<T>::type;

template <typename T>
inline Vec<T> vload(const T* p) {
  Vec<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <ReduceOp Op, typename V>
inline V vcombine(V a, V b) {
  if constexpr (Op == ReduceOp::kSum || Op == ReduceOp::kMean)
    return a + b;
  else if constexpr (Op == ReduceOp::kProd)
    return a * b;
  else if constexpr (Op == ReduceOp::kMin)
    return b < a ? b : a;  // std::min(a, b), NaNs included
  else
    return a < b ? b : a;  // std::max(a, b)
}

template <typename T, ReduceOp Op>
void reduce_direct_op(const void* const* inputs, int k, void* const* outputs, int num_out, std::size_t begin,
                      std::size_t end, int divisor) {
  using V = Vec<T>;
  constexpr std::size_t kW = sizeof(V) / sizeof(T);
  const bool divide = Op == ReduceOp::kMean && divisor > 1;
  const T d = static_cast<T>(divisor);
  const T* const* in = reinterpret_cast<const T* const*>(inputs);
  T* const* out = reinterpret_cast<T* const*>(outputs);
  std::size_t i = begin;
  for (; i + 4 * kW <= end; i += 4 * kW) {
    const T* p = in[0] + i;
    V v0 = vload(p), v1 = vload(p + kW), v2 = vload(p + 2 * kW), v3 = vload(p + 3 * kW);
    for (int j = 1; j < k; ++j) {
      p = in[j] + i;
      v0 = vcombine<Op>(v0, vload(p));
      v1 = vcombine<Op>(v1, vload(p + kW));
      v2 = vcombine<Op>(v2, vload(p + 2 * kW));
      v3 = vcombine<Op>(v3, vload(p + 3 * kW));
    }
    if (divide) v0 = v0 / d, v1 = v1 / d, v2 = v2 / d, v3 = v3 / d;
    for (int o = 0; o < num_out; ++o) {
      T* q = out[o] + i;
      std::memcpy(q, &v0, sizeof(V));
      std::memcpy(q + kW, &v1, sizeof(V));
      std::memcpy(q + 2 * kW, &v2, sizeof(V));
      std::memcpy(q + 3 * kW, &v3, sizeof(V));
    }
  }
  for (; i < end; ++i) {  // the tail, same arithmetic in scalars
    T v = in[0][i];
    for (int j = 1; j < k; ++j) {
      const T x = in[j][i];
      if constexpr (Op == ReduceOp::kSum || Op == ReduceOp::kMean)
        v = v + x;
      else if constexpr (Op == ReduceOp::kProd)
        v = v * x;
      else if constexpr (Op == ReduceOp::kMin)
        v = std::min(v, x);
      else
        v = std::max(v, x);
    }
    if (divide) v = static_cast<T>(v / d);
    for (int o = 0; o < num_out; ++o) out[o][i] = v;
  }
}

template <typename T>
void reduce_direct(ReduceOp op, const void* const* inputs, int k, void* const* outputs, int num_out, std::size_t begin,
                   std::size_t end, int divisor) {
  switch (op) {
    case ReduceOp::kSum: return reduce_direct_op<T, ReduceOp::kSum>(inputs, k, outputs, num_out, begin, end, divisor);
    case ReduceOp::kMean: return reduce_direct_op<T, ReduceOp::kMean>(inputs, k, outputs, num_out, begin, end, divisor);
    case ReduceOp::kProd: return reduce_direct_op<T, ReduceOp::kProd>(inputs, k, outputs, num_out, begin, end, divisor);
    case ReduceOp::kMin: return reduce_direct_op<T, ReduceOp::kMin>(inputs, k, outputs, num_out, begin, end, divisor);
    case ReduceOp::kMax: return reduce_direct_op<T, ReduceOp::kMax>(inputs, k, outputs, num_out, begin, end, divisor);
  }
}

}  // namespace

void check_collective_dtype(DType dtype, const char* what) {
  CHORUS_REQUIRE(dtype != DType::kUInt8 && dtype != DType::kUInt16 && dtype != DType::kBool && dtype != DType::kString,
                 InvalidArgumentError, what, ": dtype ", dtype_name(dtype),
                 " is not supported by collectives; use float32, float64, float16, bfloat16, "
                 "int32 or int64");
}

void reduce_range(DType dtype, ReduceOp op, const void* const* inputs, int k, void* const* outputs, int num_out,
                  std::size_t begin, std::size_t end, int divisor) {
  if (begin >= end) return;
  switch (dtype) {
    case DType::kFloat32: return reduce_direct<float>(op, inputs, k, outputs, num_out, begin, end, divisor);
    case DType::kFloat64: return reduce_direct<double>(op, inputs, k, outputs, num_out, begin, end, divisor);
    case DType::kFloat16: return reduce_typed<float16>(op, inputs, k, outputs, num_out, begin, end, divisor);
    case DType::kBFloat16: return reduce_typed<bfloat16>(op, inputs, k, outputs, num_out, begin, end, divisor);
    case DType::kInt32: return reduce_direct<std::int32_t>(op, inputs, k, outputs, num_out, begin, end, divisor);
    case DType::kInt64: return reduce_direct<std::int64_t>(op, inputs, k, outputs, num_out, begin, end, divisor);
    case DType::kUInt8:
    case DType::kUInt16:
    case DType::kBool:
    case DType::kString: break;
  }
  check_collective_dtype(dtype, "reduce");
}

}  // namespace chorus::collective
