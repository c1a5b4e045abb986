// Device kernels core/ needs for itself: fill (Tensor::zeros/full) and in-place add
// (Variable::assign_add). Launchers declared in core/gpu.h and core/cuda/kernels.h.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include <chorus/core/cuda/check.h>
#include <chorus/core/cuda/float16.cuh>
#include <chorus/core/cuda/kernels.h>
#include <chorus/core/gpu.h>

namespace chorus::gpu {
namespace {

template <typename T>
__global__ void fill_kernel(T* dst, std::size_t n, T value) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(blockDim.x) * gridDim.x) {
    dst[i] = value;
  }
}

// 16-bit floats are added in float and rounded back once, as TF's GPU kernels do (float16.cuh).
template <typename T>
__global__ void add_inplace_kernel(T* dst, const T* src, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(blockDim.x) * gridDim.x) {
    dst[i] = store<T>(load<T>(dst[i]) + load<T>(src[i]));
  }
}

unsigned grid_for(std::size_t n) {
  std::size_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks < 4096 ? (blocks == 0 ? 1 : blocks) : 4096);
}

}  // namespace

void fill_async(int ordinal, StreamHandle stream, void* dst, std::size_t count, std::size_t element_size,
                std::uint64_t value) {
  if (count == 0) return;
  internal::DeviceGuard guard(ordinal);
  auto s = static_cast<cudaStream_t>(stream);
  switch (element_size) {
    case 1:
      fill_kernel<<<grid_for(count), 256, 0, s>>>(static_cast<std::uint8_t*>(dst), count,
                                                  static_cast<std::uint8_t>(value));
      break;
    case 2:
      fill_kernel<<<grid_for(count), 256, 0, s>>>(static_cast<std::uint16_t*>(dst), count,
                                                  static_cast<std::uint16_t>(value));
      break;
    case 4:
      fill_kernel<<<grid_for(count), 256, 0, s>>>(static_cast<std::uint32_t*>(dst), count,
                                                  static_cast<std::uint32_t>(value));
      break;
    case 8: fill_kernel<<<grid_for(count), 256, 0, s>>>(static_cast<std::uint64_t*>(dst), count, value); break;
    default:
      throw InvalidArgumentError(
          ::chorus::internal::str_cat("fill_async: element size ", element_size, " is not valid: use 1, 2, 4 or 8"));
  }
  CHORUS_CUDA_CHECK(cudaGetLastError());
}

void add_inplace_async(int ordinal, StreamHandle stream, DType dtype, void* dst, const void* src, std::size_t count) {
  if (count == 0) return;
  internal::DeviceGuard guard(ordinal);
  auto s = static_cast<cudaStream_t>(stream);
  const unsigned g = grid_for(count);
  switch (dtype) {
    case DType::kFloat32:
      add_inplace_kernel<<<g, 256, 0, s>>>(static_cast<float*>(dst), static_cast<const float*>(src), count);
      break;
    case DType::kFloat64:
      add_inplace_kernel<<<g, 256, 0, s>>>(static_cast<double*>(dst), static_cast<const double*>(src), count);
      break;
    case DType::kInt32:
      add_inplace_kernel<<<g, 256, 0, s>>>(static_cast<std::int32_t*>(dst), static_cast<const std::int32_t*>(src),
                                           count);
      break;
    case DType::kInt64:
      add_inplace_kernel<<<g, 256, 0, s>>>(static_cast<long long*>(dst), static_cast<const long long*>(src), count);
      break;
    case DType::kUInt8:
      add_inplace_kernel<<<g, 256, 0, s>>>(static_cast<std::uint8_t*>(dst), static_cast<const std::uint8_t*>(src),
                                           count);
      break;
    case DType::kUInt16:
      add_inplace_kernel<<<g, 256, 0, s>>>(static_cast<std::uint16_t*>(dst), static_cast<const std::uint16_t*>(src),
                                           count);
      break;
    case DType::kFloat16:
      add_inplace_kernel<<<g, 256, 0, s>>>(static_cast<__half*>(dst), static_cast<const __half*>(src), count);
      break;
    case DType::kBFloat16:
      add_inplace_kernel<<<g, 256, 0, s>>>(static_cast<__nv_bfloat16*>(dst), static_cast<const __nv_bfloat16*>(src),
                                           count);
      break;
    case DType::kBool: throw InvalidArgumentError("assign_add is not defined for bool variables: use assign");
    case DType::kString: throw InvalidArgumentError("assign_add is not defined for string variables: use assign");
  }
  CHORUS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace chorus::gpu
