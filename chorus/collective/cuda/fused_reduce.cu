// The virtual-GPU backend's fused reduction: k inputs in, m outputs out, one pass over memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include <chorus/collective/cuda/fused_reduce.h>
#include <chorus/core/cuda/check.h>
#include <chorus/core/cuda/float16.cuh>

namespace chorus::collective::cuda {
namespace {

struct Pointers {
  const void* in[kMaxFused];
  void* out[kMaxFused];
};

using gpu::acc_t;  // core/cuda/float16.cuh: 16-bit floats reduce in float, rounded once
using gpu::load;
using gpu::store;

template <typename A>
__device__ __forceinline__ A combine(int op, A a, A b) {
  switch (op) {
    case 2: return a < b ? a : b;  // min
    case 3: return a > b ? a : b;  // max
    case 4: return a * b;          // prod
    default: return a + b;         // sum, mean
  }
}

// Grid-stride over elements; each thread reads element i of every input, then writes it to every
// output. Loads and stores of consecutive threads are consecutive: fully coalesced.
template <typename T>
__global__ void fused_reduce_kernel(Pointers p, int k, int m, std::size_t n, int op, int divisor) {
  using A = acc_t<T>;
  const std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    A acc = load<T>(static_cast<const T*>(p.in[0])[i]);
    for (int j = 1; j < k; ++j) acc = combine<A>(op, acc, load<T>(static_cast<const T*>(p.in[j])[i]));
    if (op == 1 && divisor > 1) acc = acc / static_cast<A>(divisor);
    const T r = store<T>(acc);
    for (int o = 0; o < m; ++o) static_cast<T*>(p.out[o])[i] = r;
  }
}

// The same over 16-byte vectors (4 floats, 8 halves, ...): a quarter of the memory instructions
// of the scalar kernel and more bytes in flight per thread, which is what a bandwidth-bound pass
// needs to approach the copy engine's rate. Every pointer must be 16-byte aligned; `nv` counts
// vectors. Each thread still reads a vector from every input before writing it to any output.
template <typename T>
__global__ void fused_reduce_vec_kernel(Pointers p, int k, int m, std::size_t nv, int op, int divisor) {
  using A = acc_t<T>;
  constexpr int E = 16 / sizeof(T);
  const std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < nv; i += stride) {
    A acc[E];
    uint4 v = static_cast<const uint4*>(p.in[0])[i];
    const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
    for (int q = 0; q < E; ++q) acc[q] = load<T>(e[q]);
    for (int j = 1; j < k; ++j) {
      v = static_cast<const uint4*>(p.in[j])[i];
#pragma unroll
      for (int q = 0; q < E; ++q) acc[q] = combine<A>(op, acc[q], load<T>(e[q]));
    }
    uint4 r;
    T* re = reinterpret_cast<T*>(&r);
#pragma unroll
    for (int q = 0; q < E; ++q) {
      if (op == 1 && divisor > 1) acc[q] = acc[q] / static_cast<A>(divisor);
      re[q] = store<T>(acc[q]);
    }
    for (int o = 0; o < m; ++o) static_cast<uint4*>(p.out[o])[i] = r;
  }
}

unsigned grid_for(std::size_t items, int sms) {
  const std::size_t blocks = (items + 255) / 256;
  const std::size_t cap = static_cast<std::size_t>(sms) * 8;
  return static_cast<unsigned>(blocks == 0 ? 1 : blocks < cap ? blocks : cap);
}

bool aligned16(const Pointers& p, int k, int m) {
  for (int j = 0; j < k; ++j)
    if (reinterpret_cast<std::uintptr_t>(p.in[j]) % 16 != 0) return false;
  for (int o = 0; o < m; ++o)
    if (reinterpret_cast<std::uintptr_t>(p.out[o]) % 16 != 0) return false;
  return true;
}

template <typename T>
void launch(cudaStream_t s, const Pointers& p, int k, int m, std::size_t n, int op, int divisor, int sms) {
  constexpr std::size_t E = 16 / sizeof(T);
  const std::size_t nv = aligned16(p, k, m) ? n / E : 0;
  if (nv > 0) fused_reduce_vec_kernel<T><<<grid_for(nv, sms), 256, 0, s>>>(p, k, m, nv, op, divisor);
  const std::size_t done = nv * E;
  if (done == n) return;
  // The tail (or everything, for unaligned pointers) element by element.
  Pointers tail = p;
  for (int j = 0; j < k; ++j) tail.in[j] = static_cast<const T*>(p.in[j]) + done;
  for (int o = 0; o < m; ++o) tail.out[o] = static_cast<T*>(p.out[o]) + done;
  fused_reduce_kernel<T><<<grid_for(n - done, sms), 256, 0, s>>>(tail, k, m, n - done, op, divisor);
}

}  // namespace

void fused_reduce_async(int ordinal, gpu::StreamHandle stream, DType dtype, int op, const void* const* inputs,
                        int num_inputs, void* const* outputs, int num_outputs, std::size_t n, int divisor) {
  CHORUS_REQUIRE(num_inputs >= 1 && num_inputs <= kMaxFused && num_outputs >= 1 && num_outputs <= kMaxFused,
                 InvalidArgumentError, "fused_reduce: ", num_inputs, " inputs and ", num_outputs,
                 " outputs; one launch takes 1..", kMaxFused, " of each");
  if (n == 0) return;
  gpu::internal::DeviceGuard guard(ordinal);
  int sms = 0;
  CHORUS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, ordinal));
  Pointers p{};
  for (int j = 0; j < num_inputs; ++j) p.in[j] = inputs[j];
  for (int o = 0; o < num_outputs; ++o) p.out[o] = outputs[o];
  auto s = static_cast<cudaStream_t>(stream);
  const int code = op;  // ReduceOp: kSum=0, kMean=1, kMin=2, kMax=3, kProd=4 (communicator.h)
  switch (dtype) {
    case DType::kFloat32: launch<float>(s, p, num_inputs, num_outputs, n, code, divisor, sms); break;
    case DType::kFloat64: launch<double>(s, p, num_inputs, num_outputs, n, code, divisor, sms); break;
    case DType::kFloat16: launch<__half>(s, p, num_inputs, num_outputs, n, code, divisor, sms); break;
    case DType::kBFloat16: launch<__nv_bfloat16>(s, p, num_inputs, num_outputs, n, code, divisor, sms); break;
    case DType::kInt32: launch<std::int32_t>(s, p, num_inputs, num_outputs, n, code, divisor, sms); break;
    case DType::kInt64: launch<long long>(s, p, num_inputs, num_outputs, n, code, divisor, sms); break;
    default:
      throw InvalidArgumentError(std::string("fused_reduce: dtype ") + std::string(dtype_name(dtype)) +
                                 " is not supported by collectives");
  }
  CHORUS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace chorus::collective::cuda
