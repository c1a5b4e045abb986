// Fused softmax cross-entropy (sparse and dense labels): one block per row computes the row's
// max, the sum of exp(x - max) and the loss in fixed-order block reductions (deterministic), then
// writes the gradient softmax(x) · sum(p) - p in the same launch. 16-bit logits compute in float,
// float32 in float (as TF's GPU kernels), float64 in double.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include <chorus/core/cuda/check.h>
#include <chorus/ops/cuda/common.cuh>
#include <chorus/ops/cuda/kernels.h>

namespace chorus::ops::cuda {
namespace {

using namespace detail;  // NOLINT: the .cu files' shared vocabulary

template <typename A>
__device__ __forceinline__ A quiet_nan() {
  if constexpr (std::is_same_v<A, float>)
    return __int_as_float(0x7fc00000);
  else
    return __longlong_as_double(0x7ff8000000000000LL);
}
template <typename A>
__device__ __forceinline__ A infinity() {
  if constexpr (std::is_same_v<A, float>)
    return __int_as_float(0x7f800000);
  else
    return __longlong_as_double(0x7ff0000000000000LL);
}

// NaN-propagating max and plain sum, for block_reduce.
struct MaxOp {
  template <typename A>
  __device__ __forceinline__ A operator()(A a, A b) const {
    return (b > a || d_isnan(b)) ? b : a;
  }
};
struct AddOp {
  template <typename A>
  __device__ __forceinline__ A operator()(A a, A b) const {
    return a + b;
  }
};

// Row max and sum of exp(x - max) over the block; every thread gets both.
template <typename T, typename A>
__device__ __forceinline__ void row_stats(const T* x, i64 cols, A* smem, A& mx, A& sum) {
  A m = -infinity<A>();
  for (i64 c = threadIdx.x; c < cols; c += blockDim.x) m = MaxOp{}(m, load(x[c]));
  mx = block_reduce(m, MaxOp{}, smem);
  A s = A(0);
  for (i64 c = threadIdx.x; c < cols; c += blockDim.x) s += d_exp(static_cast<A>(load(x[c])) - mx);
  sum = block_reduce(s, AddOp{}, smem);
}

// loss[row] = log(sum) - (x[label] - max); grad = exp(x - max) / sum - one_hot(label).
// A label outside [0, cols) gives NaN loss and NaN gradient for its row (TF's GPU behaviour).
template <typename T, typename I>
__global__ void sparse_xent_kernel(const T* logits, const I* labels, T* loss, T* grad, i64 rows, i64 cols) {
  using A = acc_t<T>;
  __shared__ A smem[kWarps + 1];
  for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* x = logits + row * cols;
    const i64 label = static_cast<i64>(labels[row]);
    const bool valid = label >= 0 && label < cols;
    A mx, sum;
    row_stats(x, cols, smem, mx, sum);
    const A log_sum = d_log(sum);
    if (threadIdx.x == 0)
      loss[row] = store<T>(valid ? log_sum - (static_cast<A>(load(x[label])) - mx) : quiet_nan<A>());
    if (grad != nullptr) {
      T* g = grad + row * cols;
      for (i64 c = threadIdx.x; c < cols; c += blockDim.x) {
        const A p = d_exp(static_cast<A>(load(x[c])) - mx) / sum;
        g[c] = store<T>(valid ? p - (c == label ? A(1) : A(0)) : quiet_nan<A>());
      }
    }
  }
}

// loss[row] = sum_c p_c (log(sum) - (x_c - max)); grad = softmax(x) · sum(p) - p (the derivative
// of -sum p log softmax(x); sum(p) is 1 for a distribution).
template <typename T>
__global__ void dense_xent_kernel(const T* logits, const T* labels, T* loss, T* grad, i64 rows, i64 cols) {
  using A = acc_t<T>;
  __shared__ A smem[kWarps + 1];
  for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* x = logits + row * cols;
    const T* p = labels + row * cols;
    A mx, sum;
    row_stats(x, cols, smem, mx, sum);
    const A log_sum = d_log(sum);
    A total = A(0), psum = A(0);
    for (i64 c = threadIdx.x; c < cols; c += blockDim.x) {
      const A pc = load(p[c]);
      total += pc * (log_sum - (static_cast<A>(load(x[c])) - mx));
      psum += pc;
    }
    total = block_reduce(total, AddOp{}, smem);
    psum = block_reduce(psum, AddOp{}, smem);
    if (threadIdx.x == 0) loss[row] = store<T>(total);
    if (grad != nullptr) {
      T* g = grad + row * cols;
      for (i64 c = threadIdx.x; c < cols; c += blockDim.x)
        g[c] = store<T>(d_exp(static_cast<A>(load(x[c])) - mx) / sum * psum - static_cast<A>(load(p[c])));
    }
  }
}

}  // namespace

void sparse_softmax_xent(int ordinal, StreamHandle stream, DType dtype, const void* logits, DType label_dtype,
                         const void* labels, void* loss, void* grad, std::int64_t rows, std::int64_t cols) {
  const char* what = "sparse_softmax_cross_entropy_with_logits";
  dispatch_float(dtype, what, [](auto) {});
  dispatch_index(label_dtype, what, [](auto) {});
  CHORUS_REQUIRE(rows >= 0 && cols >= 0, InvalidArgumentError, what, ": negative shape [", rows, ", ", cols, "]");
  if (rows == 0) return;
  gpu::internal::DeviceGuard guard(ordinal);
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_float(dtype, what, [&](auto t) {
    using T = decltype(t);
    dispatch_index(label_dtype, what, [&](auto it) {
      using I = decltype(it);
      sparse_xent_kernel<T, I>
          <<<grid_for(rows, 1), kThreads, 0, s>>>(static_cast<const T*>(logits), static_cast<const I*>(labels),
                                                  static_cast<T*>(loss), static_cast<T*>(grad), rows, cols);
    });
  });
  CHORUS_CUDA_CHECK(cudaGetLastError());
}

void softmax_xent(int ordinal, StreamHandle stream, DType dtype, const void* logits, const void* labels, void* loss,
                  void* grad, std::int64_t rows, std::int64_t cols) {
  const char* what = "softmax_cross_entropy_with_logits";
  dispatch_float(dtype, what, [](auto) {});
  CHORUS_REQUIRE(rows >= 0 && cols >= 0, InvalidArgumentError, what, ": negative shape [", rows, ", ", cols, "]");
  if (rows == 0) return;
  gpu::internal::DeviceGuard guard(ordinal);
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_float(dtype, what, [&](auto t) {
    using T = decltype(t);
    dense_xent_kernel<T><<<grid_for(rows, 1), kThreads, 0, s>>>(static_cast<const T*>(logits),
                                                                static_cast<const T*>(labels), static_cast<T*>(loss),
                                                                static_cast<T*>(grad), rows, cols);
  });
  CHORUS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace chorus::ops::cuda
