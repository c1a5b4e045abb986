// Device-side helpers shared by ops/cuda/*.cu (never included by host code): element types and
// their arithmetic types, dtype dispatch, launch geometry, and fixed-order block/warp reductions.
// C++17 (nvcc compiles the .cu files as C++17).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include <chorus/core/cuda/check.h>
#include <chorus/core/cuda/float16.cuh>
#include <chorus/core/dtype.h>
#include <chorus/core/error.h>

namespace chorus::ops::cuda::detail {

// 64-bit integers as CUDA's intrinsics spell them (shuffles and atomics take long long).
using i64 = long long;
static_assert(sizeof(i64) == sizeof(std::int64_t), "int64 is long long on the device");

// Threads per block of every 1-D launch here; the block reductions assume it (8 full warps).
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
static_assert(kWarps == 8, "block_reduce's cross-warp tree is written for 8 warps");

// Blocks for a grid-stride loop over n items (at least 1: a 0-block grid is a launch error;
// callers return before launching for n == 0 anyway).
inline unsigned grid_for(std::int64_t n, std::int64_t per_block = kThreads) {
  std::int64_t blocks = (n + per_block - 1) / per_block;
  if (blocks < 1) blocks = 1;
  if (blocks > 16384) blocks = 16384;  // the loops stride over the rest
  return static_cast<unsigned>(blocks);
}

// Arithmetic type (16-bit floats compute in float and round once on store) and the conversions
// in and out of it: core/cuda/float16.cuh, shared with core/ and collective/ kernels.
using ::chorus::gpu::Acc;
using ::chorus::gpu::acc_t;
using ::chorus::gpu::load;
using ::chorus::gpu::store;

// Integer limits usable in device code (std::numeric_limits is host-only without
// --expt-relaxed-constexpr).
template <typename T>
struct Limits;
template <>
struct Limits<int> {
  static constexpr int lowest = -2147483647 - 1, max = 2147483647;
};
template <>
struct Limits<i64> {
  static constexpr i64 lowest = -9223372036854775807LL - 1, max = 9223372036854775807LL;
};
template <>
struct Limits<std::uint8_t> {
  static constexpr std::uint8_t lowest = 0, max = 255;
};
template <>
struct Limits<std::uint16_t> {
  static constexpr std::uint16_t lowest = 0, max = 65535;
};

template <typename T>
constexpr bool is_float_v =
    std::is_floating_point_v<T> || std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

// Float math with the precision of the argument type.
__device__ __forceinline__ float d_exp(float x) { return expf(x); }
__device__ __forceinline__ double d_exp(double x) { return exp(x); }
__device__ __forceinline__ float d_log(float x) { return logf(x); }
__device__ __forceinline__ double d_log(double x) { return log(x); }
__device__ __forceinline__ float d_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double d_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float d_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double d_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float d_erf(float x) { return erff(x); }
__device__ __forceinline__ double d_erf(double x) { return erf(x); }
__device__ __forceinline__ float d_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double d_pow(double x, double y) { return pow(x, y); }
__device__ __forceinline__ float d_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double d_abs(double x) { return fabs(x); }
template <typename A>
__device__ __forceinline__ bool d_isnan(A x) {
  return x != x;
}

// Calls f(T{}) with T the device storage type of `dtype`; bool is passed as bool_tag (stored as
// one byte, read as nonzero = true). Unsupported → InvalidArgumentError naming `what`.
struct bool_tag {};
template <typename F>
void dispatch_all(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat64: return f(double{});
    case DType::kFloat16: return f(__half{});
    case DType::kBFloat16: return f(__nv_bfloat16{});
    case DType::kInt32: return f(int{});
    case DType::kInt64: return f(i64{});
    case DType::kUInt8: return f(std::uint8_t{});
    case DType::kUInt16: return f(std::uint16_t{});
    case DType::kBool: return f(bool_tag{});
    case DType::kString: break;  // host-only objects: no device kernel reads them
  }
  throw InvalidArgumentError(::chorus::internal::str_cat(what, ": unsupported dtype ", dtype_name(dtype)));
}

template <typename F>
void dispatch_float(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat64: return f(double{});
    case DType::kFloat16: return f(__half{});
    case DType::kBFloat16: return f(__nv_bfloat16{});
    default: break;
  }
  throw InvalidArgumentError(::chorus::internal::str_cat(
      what, ": needs a floating dtype (float32, float64, float16, bfloat16), got ", dtype_name(dtype)));
}

template <typename F>
void dispatch_index(DType dtype, const char* what, F&& f) {
  if (dtype == DType::kInt32) return f(int{});
  if (dtype == DType::kInt64) return f(i64{});
  throw InvalidArgumentError(
      ::chorus::internal::str_cat(what, ": indices must be int32 or int64, got ", dtype_name(dtype)));
}

// Unsigned twin of an element size, for byte-pattern copies.
template <typename F>
void dispatch_bytes(std::size_t bytes, const char* what, F&& f) {
  switch (bytes) {
    case 1: return f(std::uint8_t{});
    case 2: return f(std::uint16_t{});
    case 4: return f(std::uint32_t{});
    case 8: return f(std::uint64_t{});
  }
  throw InvalidArgumentError(::chorus::internal::str_cat(what, ": element size ", bytes, " is not 1, 2, 4 or 8"));
}

// ---- Fixed-order reductions ------------------------------------------------------------------
// Deterministic by construction: every element is assigned to a thread by its index alone, each
// thread folds its elements in increasing index order, and the combining tree (shuffle-down
// offsets 16, 8, 4, 2, 1 inside a warp, then 4, 2, 1 across the 8 warps) depends on nothing but
// the block size. Same inputs and shapes → bitwise-same outputs.

template <typename A>
__device__ __forceinline__ A shfl_down(A v, int offset) {
  return __shfl_down_sync(0xffffffffu, v, offset);
}

// Value and index, for arg-max/arg-min.
template <typename A>
struct ValIdx {
  A v;
  i64 i;
};
template <typename A>
__device__ __forceinline__ ValIdx<A> shfl_down(ValIdx<A> p, int offset) {
  return ValIdx<A>{__shfl_down_sync(0xffffffffu, p.v, offset), __shfl_down_sync(0xffffffffu, p.i, offset)};
}

// Lane 0 of each warp ends with op over the warp's 32 values. All 32 lanes must call it.
template <typename A, typename Op>
__device__ __forceinline__ A warp_reduce(A v, Op op) {
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, shfl_down(v, offset));
  return v;
}

// op over the kThreads values of the block; every thread gets the result. Every thread of the
// block must call it (it synchronizes); `smem` holds at least kWarps + 1 values and may be reused
// by the next call (the leading barrier protects it).
template <typename A, typename Op>
__device__ A block_reduce(A v, Op op, A* smem) {
  v = warp_reduce(v, op);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  __syncthreads();  // a previous call's readers of smem are done
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  if (warp == 0) {
    // Lanes 0..7 hold the warp results; lanes 8..31 read a copy of smem[0] that only ever flows
    // into lanes the result does not come from (lane 0 combines lanes 0..7 only).
    A w = smem[lane < kWarps ? lane : 0];
    for (int offset = kWarps / 2; offset > 0; offset >>= 1) w = op(w, shfl_down(w, offset));
    if (lane == 0) smem[kWarps] = w;
  }
  __syncthreads();
  return smem[kWarps];
}

}  // namespace chorus::ops::cuda::detail
