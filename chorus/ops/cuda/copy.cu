// Strided copies (transpose, slice, pad, concat, broadcast materialization): one thread per
// element of the shared dims, source and destination each at their own strides.
#include <cuda_runtime.h>

#include <cstdint>

#include <chorus/core/cuda/check.h>
#include <chorus/ops/cuda/common.cuh>
#include <chorus/ops/cuda/kernels.h>

namespace chorus::ops::cuda {
namespace {

using namespace detail;  // NOLINT: the .cu files' shared vocabulary

// Element i of the row-major walk over L.dims sits at src + off[0] and dst + off[1]. The loop
// runs over the fixed kMaxRank so the layout's arrays are indexed by constants.
template <typename E>
__global__ void copy_strided_kernel(CopyLayout L, const E* src, E* dst, i64 n) {
  const i64 stride = static_cast<i64>(blockDim.x) * gridDim.x;
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    i64 s = L.offsets[0], d = L.offsets[1], rest = i;
#pragma unroll
    for (int k = kMaxRank - 1; k >= 0; --k) {
      if (k < L.rank) {
        const i64 dim = L.dims[k];
        const i64 c = rest % dim;
        rest /= dim;
        s += c * L.strides[0][k];
        d += c * L.strides[1][k];
      }
    }
    dst[d] = src[s];
  }
}

// Both sides dense (rank <= 1, stride 1): a plain copy at the two offsets.
template <typename E>
__global__ void copy_dense_kernel(const E* src, E* dst, i64 n) {
  const i64 stride = static_cast<i64>(blockDim.x) * gridDim.x;
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += stride) dst[i] = src[i];
}

}  // namespace

void copy_strided(int ordinal, StreamHandle stream, std::size_t elem_bytes, const CopyLayout& layout, const void* src,
                  void* dst) {
  CHORUS_REQUIRE(layout.rank >= 0 && layout.rank <= kMaxRank, InvalidArgumentError, "copy_strided: rank ", layout.rank,
                 " is not in [0, ", kMaxRank, "]");
  dispatch_bytes(elem_bytes, "copy_strided", [](auto) {});
  const std::int64_t n = layout.num_elements();
  if (n <= 0) return;
  gpu::internal::DeviceGuard guard(ordinal);
  auto s = static_cast<cudaStream_t>(stream);
  const bool dense = layout.rank == 0 || (layout.rank == 1 && layout.strides[0][0] == 1 && layout.strides[1][0] == 1);
  dispatch_bytes(elem_bytes, "copy_strided", [&](auto e) {
    using E = decltype(e);
    const E* from = static_cast<const E*>(src);
    E* to = static_cast<E*>(dst);
    if (dense) {
      copy_dense_kernel<E><<<grid_for(n), kThreads, 0, s>>>(from + layout.offsets[0], to + layout.offsets[1], n);
    } else {
      copy_strided_kernel<E><<<grid_for(n), kThreads, 0, s>>>(layout, from, to, n);
    }
  });
  CHORUS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace chorus::ops::cuda
