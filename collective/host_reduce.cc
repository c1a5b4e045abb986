#include "collective/host_reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/error.h"

namespace chorus::collective {
namespace {

// Elements per tile: 2048 accumulators of up to 8 bytes = 16 KiB, well inside L1+L2.
constexpr std::size_t kTile = 2048;

template <typename T> struct Acc { using type = T; };
template <> struct Acc<float16> { using type = float; };
template <> struct Acc<bfloat16> { using type = float; };

template <typename T, typename A>
inline A load(const T& v) {
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) return static_cast<float>(v);
  else return v;
}
template <typename T, typename A>
inline T store(A v) {
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) return T(v);
  else return v;
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

}  // namespace

void check_collective_dtype(DType dtype, const char* what) {
  CHORUS_REQUIRE(dtype != DType::kUInt8 && dtype != DType::kBool, InvalidArgumentError, what, ": dtype ",
                 dtype_name(dtype), " is not supported by collectives; use float32, float64, float16, bfloat16, "
                 "int32 or int64");
}

void reduce_range(DType dtype, ReduceOp op, const void* const* inputs, int k, void* const* outputs, int num_out,
                  std::size_t begin, std::size_t end, int divisor) {
  if (begin >= end) return;
  switch (dtype) {
    case DType::kFloat32: return reduce_typed<float>(op, inputs, k, outputs, num_out, begin, end, divisor);
    case DType::kFloat64: return reduce_typed<double>(op, inputs, k, outputs, num_out, begin, end, divisor);
    case DType::kFloat16: return reduce_typed<float16>(op, inputs, k, outputs, num_out, begin, end, divisor);
    case DType::kBFloat16: return reduce_typed<bfloat16>(op, inputs, k, outputs, num_out, begin, end, divisor);
    case DType::kInt32: return reduce_typed<std::int32_t>(op, inputs, k, outputs, num_out, begin, end, divisor);
    case DType::kInt64: return reduce_typed<std::int64_t>(op, inputs, k, outputs, num_out, begin, end, divisor);
    case DType::kUInt8:
    case DType::kBool: break;
  }
  check_collective_dtype(dtype, "reduce");
}

}  // namespace chorus::collective
