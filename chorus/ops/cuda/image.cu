// Resize kernels (ops/cuda/image.h): one thread per output element, grid-stride, channels fastest
// (neighbouring threads read neighbouring channels). Compiled with --fmad=false (see
// chorus/ops/CMakeLists.txt): the index and weight arithmetic of ops/image_geometry.h and the
// lerps round exactly as on the CPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include <chorus/core/cuda/check.h>
#include <chorus/ops/cuda/common.cuh>
#include <chorus/ops/cuda/image.h>

namespace chorus::ops::cuda {
namespace {

using namespace detail;  // NOLINT: the .cu files' shared vocabulary

template <typename T>
__device__ __forceinline__ float to_float(T v) {
  return static_cast<float>(load(v));
}

template <typename T>
__global__ void bilinear_forward_kernel(const T* x, float* y, ResizeGeometry g) {
  const i64 C = g.channels, total = g.batch * g.out_h * g.out_w * C;
  const i64 stride = static_cast<i64>(blockDim.x) * gridDim.x;
  for (i64 t = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; t < total; t += stride) {
    if (g.in_h == g.out_h && g.in_w == g.out_w) {  // TF's no-op resize: a cast (an Inf stays Inf)
      y[t] = to_float(x[t]);
      continue;
    }
    const i64 c = t % C, ox = (t / C) % g.out_w, oy = (t / (C * g.out_w)) % g.out_h, b = t / (C * g.out_w * g.out_h);
    const BilinearTap ty = bilinear_tap(oy, g.in_h, g.scale_h), tx = bilinear_tap(ox, g.in_w, g.scale_w);
    const T* top = x + (b * g.in_h + ty.lower) * g.in_w * C;
    const T* bot = x + (b * g.in_h + ty.upper) * g.in_w * C;
    const float tl = to_float(top[tx.lower * C + c]), tr = to_float(top[tx.upper * C + c]);
    const float bl = to_float(bot[tx.lower * C + c]), br = to_float(bot[tx.upper * C + c]);
    const float t_ = tl + (tr - tl) * tx.lerp;
    const float b_ = bl + (br - bl) * tx.lerp;
    y[t] = t_ + (b_ - t_) * ty.lerp;
  }
}

template <typename T>
__global__ void bilinear_backward_kernel(const float* dy, T* dx, ResizeGeometry g) {
  using A = acc_t<T>;
  const i64 C = g.channels, total = g.batch * g.in_h * g.in_w * C;
  const i64 stride = static_cast<i64>(blockDim.x) * gridDim.x;
  for (i64 t = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; t < total; t += stride) {
    const i64 c = t % C, ix = (t / C) % g.in_w, iy = (t / (C * g.in_w)) % g.in_h, b = t / (C * g.in_w * g.in_h);
    std::int64_t yb, ye, xb, xe;
    bilinear_readers(iy, g.out_h, g.in_h, g.scale_h, &yb, &ye);
    bilinear_readers(ix, g.out_w, g.in_w, g.scale_w, &xb, &xe);
    A acc = A(0);
    for (i64 oy = yb; oy < ye; ++oy) {
      float wy[2];
      const int ny = bilinear_weights(bilinear_tap(oy, g.in_h, g.scale_h), iy, wy);
      const float* grow = dy + (b * g.out_h + oy) * g.out_w * C;
      for (i64 ox = xb; ox < xe; ++ox) {
        float wx[2];
        const int nx = bilinear_weights(bilinear_tap(ox, g.in_w, g.scale_w), ix, wx);
        const float gv = grow[ox * C + c];
        for (int ky = 0; ky < ny; ++ky)
          for (int kx = 0; kx < nx; ++kx) acc += static_cast<A>(gv * wy[ky] * wx[kx]);
      }
    }
    dx[t] = store<T>(acc);
  }
}

template <typename E>
__global__ void nearest_forward_kernel(const E* x, E* y, ResizeGeometry g) {
  const i64 C = g.channels, total = g.batch * g.out_h * g.out_w * C;
  const i64 stride = static_cast<i64>(blockDim.x) * gridDim.x;
  for (i64 t = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; t < total; t += stride) {
    const i64 c = t % C, ox = (t / C) % g.out_w, oy = (t / (C * g.out_w)) % g.out_h, b = t / (C * g.out_w * g.out_h);
    const i64 sy = nearest_source(oy, g.in_h, g.scale_h), sx = nearest_source(ox, g.in_w, g.scale_w);
    y[t] = x[((b * g.in_h + sy) * g.in_w + sx) * C + c];
  }
}

template <typename T>
__global__ void nearest_backward_kernel(const T* dy, T* dx, ResizeGeometry g) {
  using A = acc_t<T>;
  const i64 C = g.channels, total = g.batch * g.in_h * g.in_w * C;
  const i64 stride = static_cast<i64>(blockDim.x) * gridDim.x;
  for (i64 t = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; t < total; t += stride) {
    const i64 c = t % C, ix = (t / C) % g.in_w, iy = (t / (C * g.in_w)) % g.in_h, b = t / (C * g.in_w * g.in_h);
    std::int64_t yb, ye, xb, xe;
    nearest_readers(iy, g.out_h, g.in_h, g.scale_h, &yb, &ye);
    nearest_readers(ix, g.out_w, g.in_w, g.scale_w, &xb, &xe);
    A acc = A(0);
    for (i64 oy = yb; oy < ye; ++oy)
      for (i64 ox = xb; ox < xe; ++ox) acc += load(dy[((b * g.out_h + oy) * g.out_w + ox) * C + c]);
    dx[t] = store<T>(acc);
  }
}

}  // namespace

void resize_bilinear(int ordinal, gpu::StreamHandle stream, DType dtype, const void* x, float* y,
                     const ResizeGeometry& g) {
  const i64 total = g.batch * g.out_h * g.out_w * g.channels;
  dispatch_all(dtype, "ResizeBilinear", [&](auto v) {
    using T = decltype(v);
    if constexpr (std::is_same_v<T, bool_tag>) {
      throw InvalidArgumentError("ResizeBilinear: unsupported dtype bool");
    } else {
      if (total == 0) return;
      gpu::internal::DeviceGuard guard(ordinal);
      bilinear_forward_kernel<T>
          <<<grid_for(total), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<const T*>(x), y, g);
      CHORUS_CUDA_CHECK(cudaGetLastError());
    }
  });
}

void resize_bilinear_grad(int ordinal, gpu::StreamHandle stream, DType dtype, const float* dy, void* dx,
                          const ResizeGeometry& g) {
  const i64 total = g.batch * g.in_h * g.in_w * g.channels;
  dispatch_float(dtype, "ResizeBilinearGrad", [&](auto v) {
    using T = decltype(v);
    if (total == 0) return;
    gpu::internal::DeviceGuard guard(ordinal);
    bilinear_backward_kernel<T>
        <<<grid_for(total), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(dy, static_cast<T*>(dx), g);
    CHORUS_CUDA_CHECK(cudaGetLastError());
  });
}

void resize_nearest(int ordinal, gpu::StreamHandle stream, std::size_t elem_bytes, const void* x, void* y,
                    const ResizeGeometry& g) {
  const i64 total = g.batch * g.out_h * g.out_w * g.channels;
  dispatch_bytes(elem_bytes, "ResizeNearestNeighbor", [&](auto e) {
    using E = decltype(e);
    if (total == 0) return;
    gpu::internal::DeviceGuard guard(ordinal);
    nearest_forward_kernel<E><<<grid_for(total), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const E*>(x), static_cast<E*>(y), g);
    CHORUS_CUDA_CHECK(cudaGetLastError());
  });
}

void resize_nearest_grad(int ordinal, gpu::StreamHandle stream, DType dtype, const void* dy, void* dx,
                         const ResizeGeometry& g) {
  const i64 total = g.batch * g.in_h * g.in_w * g.channels;
  dispatch_float(dtype, "ResizeNearestNeighborGrad", [&](auto v) {
    using T = decltype(v);
    if (total == 0) return;
    gpu::internal::DeviceGuard guard(ordinal);
    nearest_backward_kernel<T><<<grid_for(total), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(dy), static_cast<T*>(dx), g);
    CHORUS_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace chorus::ops::cuda
