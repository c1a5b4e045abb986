// 16-bit floats in device code: the arithmetic type of each element type and the conversions into
// and out of it, shared by every kernel that reduces, accumulates or rounds a float result
// (core/cuda/fill.cu, collective/cuda/fused_reduce.cu, ops/cuda/common.cuh, ops/cuda/random.cu).
// float16 and bfloat16 compute in float and round once, to nearest even, on store, as TF's GPU
// kernels do; every other type computes in itself (load and store are the identity). Device code
// only: included by .cu files, never by host code. C++17 (nvcc compiles the .cu files as C++17).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace chorus::gpu {

// Acc<T>::type (acc_t<T>): the type arithmetic on T is done in.
template <typename T>
struct Acc {
  using type = T;
};
template <>
struct Acc<__half> {
  using type = float;
};
template <>
struct Acc<__nv_bfloat16> {
  using type = float;
};
template <typename T>
using acc_t = typename Acc<T>::type;

// An element, widened to its arithmetic type (exact).
template <typename T>
__device__ __forceinline__ acc_t<T> load(T v) {
  return v;
}
template <>
__device__ __forceinline__ float load<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float load<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

// A result, rounded back to the element type (to nearest even for the 16-bit floats).
template <typename T>
__device__ __forceinline__ T store(acc_t<T> v) {
  return static_cast<T>(v);
}
template <>
__device__ __forceinline__ __half store<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 store<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

}  // namespace chorus::gpu
