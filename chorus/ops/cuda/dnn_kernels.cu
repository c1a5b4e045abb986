// Kernels around the cuDNN calls: exact average pooling for asymmetric padding, batch-norm
// inverse standard deviation.
#include <cuda_runtime.h>

#include <cstdint>

#include <chorus/core/cuda/check.h>
#include <chorus/ops/cuda/common.cuh>
#include <chorus/ops/cuda/dnn_kernels.h>

namespace chorus::ops::cuda {
namespace {

using namespace detail;  // NOLINT: the .cu files' shared vocabulary

// Geometry as plain 64-bit fields for the kernels.
struct PoolDims {
  i64 n, in_h, in_w, c, k_h, k_w, stride_h, stride_w, pad_top, pad_left, out_h, out_w;
};

PoolDims dims_of(const Conv2dGeometry& g) {
  return PoolDims{g.n,        g.in_h,     g.in_w,    g.in_c,     g.k_h,   g.k_w,
                  g.stride_h, g.stride_w, g.pad_top, g.pad_left, g.out_h, g.out_w};
}

// In-bounds extent [lo, hi) of window `o` along one axis.
__device__ __forceinline__ void window(i64 o, i64 stride, i64 pad, i64 k, i64 in, i64& lo, i64& hi) {
  const i64 start = o * stride - pad;
  lo = start < 0 ? 0 : start;
  hi = start + k < in ? start + k : in;
}

// One thread per output element (n, oh, ow, c), NHWC. 16-bit dtypes sum in float (acc_t).
template <typename T>
__global__ void avg_pool_forward_kernel(PoolDims d, const T* x, T* y, i64 total) {
  const i64 stride = static_cast<i64>(blockDim.x) * gridDim.x;
  for (i64 t = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; t < total; t += stride) {
    const i64 c = t % d.c;
    i64 rest = t / d.c;
    const i64 ow = rest % d.out_w;
    rest /= d.out_w;
    const i64 oh = rest % d.out_h;
    const i64 n = rest / d.out_h;
    i64 h0, h1, w0, w1;
    window(oh, d.stride_h, d.pad_top, d.k_h, d.in_h, h0, h1);
    window(ow, d.stride_w, d.pad_left, d.k_w, d.in_w, w0, w1);
    acc_t<T> sum = 0;
    for (i64 h = h0; h < h1; ++h)
      for (i64 w = w0; w < w1; ++w) sum += load(x[((n * d.in_h + h) * d.in_w + w) * d.c + c]);
    const i64 count = (h1 - h0) * (w1 - w0);
    y[t] = store<T>(count > 0 ? sum / static_cast<acc_t<T>>(count) : acc_t<T>(0));
  }
}

// Windows along one axis that cover input position `i`: o in [lo, hi).
__device__ __forceinline__ void covering(i64 i, i64 stride, i64 pad, i64 k, i64 out, i64& lo, i64& hi) {
  const i64 first = i + pad - k + 1;  // o * stride >= first
  lo = first <= 0 ? 0 : (first + stride - 1) / stride;
  const i64 last = (i + pad) / stride;  // o * stride <= i + pad (i + pad >= 0)
  hi = last + 1 < out ? last + 1 : out;
}

// One thread per input element (n, h, w, c): the sum of dy / count over the windows covering it.
template <typename T>
__global__ void avg_pool_backward_kernel(PoolDims d, const T* dy, T* dx, i64 total) {
  const i64 stride = static_cast<i64>(blockDim.x) * gridDim.x;
  for (i64 t = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; t < total; t += stride) {
    const i64 c = t % d.c;
    i64 rest = t / d.c;
    const i64 w = rest % d.in_w;
    rest /= d.in_w;
    const i64 h = rest % d.in_h;
    const i64 n = rest / d.in_h;
    i64 oh0, oh1, ow0, ow1;
    covering(h, d.stride_h, d.pad_top, d.k_h, d.out_h, oh0, oh1);
    covering(w, d.stride_w, d.pad_left, d.k_w, d.out_w, ow0, ow1);
    acc_t<T> sum = 0;
    for (i64 oh = oh0; oh < oh1; ++oh) {
      i64 h0, h1;
      window(oh, d.stride_h, d.pad_top, d.k_h, d.in_h, h0, h1);
      for (i64 ow = ow0; ow < ow1; ++ow) {
        i64 w0, w1;
        window(ow, d.stride_w, d.pad_left, d.k_w, d.in_w, w0, w1);
        const i64 count = (h1 - h0) * (w1 - w0);
        sum += load(dy[((n * d.out_h + oh) * d.out_w + ow) * d.c + c]) / static_cast<acc_t<T>>(count);
      }
    }
    dx[t] = store<T>(sum);
  }
}

template <typename T>
__global__ void inv_std_kernel(const T* var, T eps, T* out, i64 n) {
  const i64 stride = static_cast<i64>(blockDim.x) * gridDim.x;
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += stride)
    out[i] = T(1) / d_sqrt(var[i] + eps);
}

template <typename F>
void dispatch_f32_f64(DType dtype, const char* what, F&& f) {
  if (dtype == DType::kFloat32) return f(float{});
  if (dtype == DType::kFloat64) return f(double{});
  throw InvalidArgumentError(::chorus::internal::str_cat(what, ": needs float32 or float64, got ", dtype_name(dtype)));
}

}  // namespace

void avg_pool_forward(int ordinal, gpu::StreamHandle stream, DType dtype, const Conv2dGeometry& g, const void* x,
                      void* y) {
  dispatch_float(dtype, "avg_pool", [](auto) {});
  const std::int64_t total = g.output_elements();
  if (total <= 0) return;
  gpu::internal::DeviceGuard guard(ordinal);
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_float(dtype, "avg_pool", [&](auto t) {
    using T = decltype(t);
    avg_pool_forward_kernel<T>
        <<<grid_for(total), kThreads, 0, s>>>(dims_of(g), static_cast<const T*>(x), static_cast<T*>(y), total);
  });
  CHORUS_CUDA_CHECK(cudaGetLastError());
}

void avg_pool_backward(int ordinal, gpu::StreamHandle stream, DType dtype, const Conv2dGeometry& g, const void* dy,
                       void* dx) {
  dispatch_float(dtype, "avg_pool_grad", [](auto) {});
  const std::int64_t total = g.input_elements();
  if (total <= 0) return;
  gpu::internal::DeviceGuard guard(ordinal);
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_float(dtype, "avg_pool_grad", [&](auto t) {
    using T = decltype(t);
    avg_pool_backward_kernel<T>
        <<<grid_for(total), kThreads, 0, s>>>(dims_of(g), static_cast<const T*>(dy), static_cast<T*>(dx), total);
  });
  CHORUS_CUDA_CHECK(cudaGetLastError());
}

void batch_norm_inv_std(int ordinal, gpu::StreamHandle stream, DType dtype, const void* var, double epsilon,
                        void* inv_std, std::int64_t channels) {
  dispatch_f32_f64(dtype, "batch_norm", [](auto) {});
  if (channels <= 0) return;
  gpu::internal::DeviceGuard guard(ordinal);
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_f32_f64(dtype, "batch_norm", [&](auto t) {
    using T = decltype(t);
    inv_std_kernel<T><<<grid_for(channels), kThreads, 0, s>>>(static_cast<const T*>(var), static_cast<T>(epsilon),
                                                              static_cast<T*>(inv_std), channels);
  });
  CHORUS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace chorus::ops::cuda
