// Random-number kernel: one thread per Philox block, sampling with ops/philox.h's shared
// functions so that the GPU draws what the CPU loop in ops/random.cc draws.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include <chorus/core/cuda/check.h>
#include <chorus/core/cuda/float16.cuh>
#include <chorus/core/dtype.h>
#include <chorus/core/gpu.h>
#include <chorus/ops/cuda/random.h>
#include <chorus/ops/philox.h>

namespace chorus::ops::cuda {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(std::uint64_t items) {
  std::uint64_t blocks = (items + kThreads - 1) / kThreads;
  if (blocks < 1) blocks = 1;
  if (blocks > 16384) blocks = 16384;  // the grid-stride loop covers the rest
  return static_cast<unsigned>(blocks);
}

// Store of a float32 result; 16-bit types round to nearest even, as core/dtype.h does on the CPU.
using ::chorus::gpu::store;  // core/cuda/float16.cuh

// float32, float16, bfloat16 outputs: 4 elements per Philox block.
template <typename T>
__global__ void random_f32_kernel(Distribution dist, PhiloxKey key, PhiloxCounter base, SampleParams p, T* out,
                                  long long n, unsigned long long blocks) {
  const unsigned long long stride = static_cast<unsigned long long>(blockDim.x) * gridDim.x;
  for (unsigned long long g = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x; g < blocks;
       g += stride) {
    float v[4];
    sample_block_f32(dist, key, base, g, p, v);
    const long long first = static_cast<long long>(g) * 4;
    for (int j = 0; j < 4 && first + j < n; ++j) out[first + j] = store<T>(v[j]);
  }
}

__global__ void random_f64_kernel(Distribution dist, PhiloxKey key, PhiloxCounter base, SampleParams p, double* out,
                                  long long n, unsigned long long blocks) {
  const unsigned long long stride = static_cast<unsigned long long>(blockDim.x) * gridDim.x;
  for (unsigned long long g = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x; g < blocks;
       g += stride) {
    double v[2];
    sample_block_f64(dist, key, base, g, p, v);
    const long long first = static_cast<long long>(g) * 2;
    for (int j = 0; j < 2 && first + j < n; ++j) out[first + j] = v[j];
  }
}

__global__ void random_i32_kernel(PhiloxKey key, PhiloxCounter base, SampleParams p, std::int32_t* out, long long n,
                                  unsigned long long blocks) {
  const unsigned long long stride = static_cast<unsigned long long>(blockDim.x) * gridDim.x;
  for (unsigned long long g = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x; g < blocks;
       g += stride) {
    std::int32_t v[4];
    sample_block_i32(key, base, g, p, v);
    const long long first = static_cast<long long>(g) * 4;
    for (int j = 0; j < 4 && first + j < n; ++j) out[first + j] = v[j];
  }
}

__global__ void random_i64_kernel(PhiloxKey key, PhiloxCounter base, SampleParams p, std::int64_t* out, long long n,
                                  unsigned long long blocks) {
  const unsigned long long stride = static_cast<unsigned long long>(blockDim.x) * gridDim.x;
  for (unsigned long long g = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x; g < blocks;
       g += stride) {
    std::int64_t v[2];
    sample_block_i64(key, base, g, p, v);
    const long long first = static_cast<long long>(g) * 2;
    for (int j = 0; j < 2 && first + j < n; ++j) out[first + j] = v[j];
  }
}

}  // namespace

void fill_random(int ordinal, gpu::StreamHandle stream, Distribution dist, DType dtype, PhiloxKey key,
                 PhiloxCounter counter, double a, double b, void* out, std::int64_t n) {
  const bool is_int = dtype == DType::kInt32 || dtype == DType::kInt64;
  const bool is_float =
      dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kFloat16 || dtype == DType::kBFloat16;
  if (!(is_float || (is_int && dist == Distribution::kUniform)))
    throw InvalidArgumentError(::chorus::internal::str_cat(
        "fill_random: dtype ", dtype_name(dtype), " is not supported for this distribution: use float32, float64, ",
        "float16 or bfloat16 (and int32/int64 for uniform)"));
  if (n <= 0) return;
  const SampleParams p = make_sample_params(dist, dtype, a, b);
  const unsigned long long blocks = philox_blocks(dtype, n);
  gpu::internal::DeviceGuard guard(ordinal);
  auto s = static_cast<cudaStream_t>(stream);
  const unsigned grid = grid_for(blocks);
  const long long count = n;
  switch (dtype) {
    case DType::kFloat32:
      random_f32_kernel<<<grid, kThreads, 0, s>>>(dist, key, counter, p, static_cast<float*>(out), count, blocks);
      break;
    case DType::kFloat16:
      random_f32_kernel<<<grid, kThreads, 0, s>>>(dist, key, counter, p, static_cast<__half*>(out), count, blocks);
      break;
    case DType::kBFloat16:
      random_f32_kernel<<<grid, kThreads, 0, s>>>(dist, key, counter, p, static_cast<__nv_bfloat16*>(out), count,
                                                  blocks);
      break;
    case DType::kFloat64:
      random_f64_kernel<<<grid, kThreads, 0, s>>>(dist, key, counter, p, static_cast<double*>(out), count, blocks);
      break;
    case DType::kInt32:
      random_i32_kernel<<<grid, kThreads, 0, s>>>(key, counter, p, static_cast<std::int32_t*>(out), count, blocks);
      break;
    case DType::kInt64:
      random_i64_kernel<<<grid, kThreads, 0, s>>>(key, counter, p, static_cast<std::int64_t*>(out), count, blocks);
      break;
    default: break;  // rejected above
  }
  CHORUS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace chorus::ops::cuda
