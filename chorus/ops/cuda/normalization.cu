// Layer / RMS normalization kernels (ops/cuda/normalization.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include <chorus/core/cuda/check.h>
#include <chorus/ops/cuda/common.cuh>
#include <chorus/ops/cuda/normalization.h>

namespace chorus::ops::cuda {
namespace {

using namespace detail;  // NOLINT: the .cu files' shared vocabulary

// Up to this many columns a row is one warp's (8 rows per block); above, one block's.
constexpr std::int64_t kWarpRowCols = 1024;
// Column sums of the backward: a block is 32 columns x 8 row lanes; each split of the rows is one
// grid row, at least kSplitRows rows long, at most kMaxSplits splits.
constexpr int kColTile = 32;
constexpr int kRowLanes = kThreads / kColTile;
constexpr std::int64_t kSplitRows = 256;
constexpr std::int64_t kMaxSplits = 32;

std::int64_t splits_for(std::int64_t rows) {
  return std::max<std::int64_t>(1, std::min(kMaxSplits, (rows + kSplitRows - 1) / kSplitRows));
}

struct Plus {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    return a + b;
  }
};

// The sum of v over the TPR threads of a row, in every one of them (fixed order).
template <int TPR, typename A>
__device__ __forceinline__ A row_reduce(A v, A* smem) {
  if constexpr (TPR == 32) {
    v = warp_reduce(v, Plus{});
    return __shfl_sync(0xffffffffu, v, 0);
  } else {
    return block_reduce(v, Plus{}, smem);
  }
}

// TPR threads per row: 32 (a warp, kThreads / 32 rows per block) or kThreads (a block). The row
// loop's condition is the same for all threads of a row, so the reductions see them all.
template <typename T, int TPR>
__global__ void norm_forward_kernel(bool layer, const T* x, const acc_t<T>* gamma, const acc_t<T>* beta, T* y,
                                    acc_t<T>* mean, acc_t<T>* rstd, i64 rows, i64 cols, acc_t<T> eps) {
  using A = acc_t<T>;
  constexpr int kRowsPerBlock = kThreads / TPR;
  __shared__ A smem[kWarps + 1];
  const int lane = static_cast<int>(threadIdx.x) % TPR;
  const A inv_n = A(1) / static_cast<A>(cols);
  for (i64 row = static_cast<i64>(blockIdx.x) * kRowsPerBlock + threadIdx.x / TPR; row < rows;
       row += static_cast<i64>(gridDim.x) * kRowsPerBlock) {
    const T* xr = x + row * cols;
    A m = 0;
    if (layer) {
      A s = 0;
      for (i64 c = lane; c < cols; c += TPR) s += load(xr[c]);
      m = row_reduce<TPR>(s, smem) * inv_n;
    }
    A q = 0;
    for (i64 c = lane; c < cols; c += TPR) {
      const A d = load(xr[c]) - m;
      q += d * d;
    }
    const A inv = A(1) / d_sqrt(row_reduce<TPR>(q, smem) * inv_n + eps);
    T* yr = y + row * cols;
    for (i64 c = lane; c < cols; c += TPR) {
      A v = (load(xr[c]) - m) * inv;
      if (gamma != nullptr) v *= gamma[c];
      if (layer && beta != nullptr) v += beta[c];
      yr[c] = store<T>(v);
    }
    if (lane == 0) {
      if (mean != nullptr) mean[row] = m;
      if (rstd != nullptr) rstd[row] = inv;
    }
  }
}

// dx = rstd·(g − mean(g) − xhat·mean(g·xhat)), g = dy·gamma (RMS: without mean(g)).
template <typename T, int TPR>
__global__ void norm_dx_kernel(bool layer, const T* x, const T* dy, const acc_t<T>* gamma, const acc_t<T>* mean,
                               const acc_t<T>* rstd, T* dx, i64 rows, i64 cols) {
  using A = acc_t<T>;
  constexpr int kRowsPerBlock = kThreads / TPR;
  __shared__ A smem[kWarps + 1];
  const int lane = static_cast<int>(threadIdx.x) % TPR;
  const A inv_n = A(1) / static_cast<A>(cols);
  for (i64 row = static_cast<i64>(blockIdx.x) * kRowsPerBlock + threadIdx.x / TPR; row < rows;
       row += static_cast<i64>(gridDim.x) * kRowsPerBlock) {
    const T* xr = x + row * cols;
    const T* dyr = dy + row * cols;
    const A m = layer ? mean[row] : A(0), inv = rstd[row];
    A sg = 0, sgx = 0;
    for (i64 c = lane; c < cols; c += TPR) {
      const A g = gamma != nullptr ? load(dyr[c]) * gamma[c] : load(dyr[c]);
      sg += g;
      sgx += g * ((load(xr[c]) - m) * inv);
    }
    const A mg = layer ? row_reduce<TPR>(sg, smem) * inv_n : A(0);
    const A mgx = row_reduce<TPR>(sgx, smem) * inv_n;
    T* dxr = dx + row * cols;
    for (i64 c = lane; c < cols; c += TPR) {
      const A g = gamma != nullptr ? load(dyr[c]) * gamma[c] : load(dyr[c]);
      const A xhat = (load(xr[c]) - m) * inv;
      dxr[c] = store<T>(inv * (g - mg - xhat * mgx));
    }
  }
}

// Block (kColTile, kRowLanes), grid (column tiles, splits): the sums of dy·xhat and dy over one
// split's rows for 32 columns, written to pg / pb [split, cols] (either may be nullptr).
template <typename T>
__global__ void norm_columns_kernel(bool layer, const T* x, const T* dy, const acc_t<T>* mean, const acc_t<T>* rstd,
                                    acc_t<T>* pg, acc_t<T>* pb, i64 rows, i64 cols, i64 split_rows) {
  using A = acc_t<T>;
  __shared__ A sg[kRowLanes][kColTile + 1], sb[kRowLanes][kColTile + 1];
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const i64 col = static_cast<i64>(blockIdx.x) * kColTile + tx;
  const i64 r0 = static_cast<i64>(blockIdx.y) * split_rows;
  const i64 r1 = r0 + split_rows < rows ? r0 + split_rows : rows;
  A g = 0, b = 0;
  if (col < cols) {
    for (i64 r = r0 + ty; r < r1; r += kRowLanes) {
      const A d = load(dy[r * cols + col]);
      const A m = layer ? mean[r] : A(0);
      g += d * ((load(x[r * cols + col]) - m) * rstd[r]);
      b += d;
    }
  }
  sg[ty][tx] = g;
  sb[ty][tx] = b;
  __syncthreads();
  if (ty == 0 && col < cols) {
    for (int k = 1; k < kRowLanes; ++k) {
      g += sg[k][tx];
      b += sb[k][tx];
    }
    const i64 at = static_cast<i64>(blockIdx.y) * cols + col;
    if (pg != nullptr) pg[at] = g;
    if (pb != nullptr) pb[at] = b;
  }
}

// out[c] = Σ_s part[s, c] in split order.
template <typename A>
__global__ void sum_splits_kernel(const A* part, A* out, i64 splits, i64 cols) {
  const i64 stride = static_cast<i64>(blockDim.x) * gridDim.x;
  for (i64 c = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; c < cols; c += stride) {
    A s = 0;
    for (i64 k = 0; k < splits; ++k) s += part[k * cols + c];
    out[c] = s;
  }
}

template <typename F>
void dispatch_norm(DType dtype, const char* what, F&& f) {
  dispatch_float(dtype, what, std::forward<F>(f));
}

// Blocks for `rows` rows at TPR threads per row (the kernels loop over the rest).
unsigned row_blocks(std::int64_t rows, bool warp_rows) { return grid_for(rows, warp_rows ? kThreads / 32 : 1); }

}  // namespace

void norm_forward(int ordinal, gpu::StreamHandle stream, NormKind kind, DType dtype, const void* x, const void* gamma,
                  const void* beta, void* y, void* mean, void* rstd, std::int64_t rows, std::int64_t cols,
                  double epsilon) {
  dispatch_norm(dtype, "layer_norm", [](auto) {});
  if (rows <= 0 || cols <= 0) return;
  gpu::internal::DeviceGuard guard(ordinal);
  auto s = static_cast<cudaStream_t>(stream);
  const bool layer = kind == NormKind::kLayer;
  const bool warp_rows = cols <= kWarpRowCols;
  dispatch_norm(dtype, "layer_norm", [&](auto t) {
    using T = decltype(t);
    using A = acc_t<T>;
    const auto* px = static_cast<const T*>(x);
    const auto* pg = static_cast<const A*>(gamma);
    const auto* pb = static_cast<const A*>(beta);
    auto* py = static_cast<T*>(y);
    auto* pm = static_cast<A*>(mean);
    auto* pr = static_cast<A*>(rstd);
    const A eps = static_cast<A>(epsilon);
    if (warp_rows)
      norm_forward_kernel<T, 32>
          <<<row_blocks(rows, true), kThreads, 0, s>>>(layer, px, pg, pb, py, pm, pr, rows, cols, eps);
    else
      norm_forward_kernel<T, kThreads>
          <<<row_blocks(rows, false), kThreads, 0, s>>>(layer, px, pg, pb, py, pm, pr, rows, cols, eps);
  });
  CHORUS_CUDA_CHECK(cudaGetLastError());
}

std::size_t norm_backward_workspace_bytes(DType dtype, std::int64_t rows, std::int64_t cols) {
  const std::int64_t splits = splits_for(rows);
  if (splits <= 1 || cols <= 0) return 0;
  const std::size_t elem = dtype == DType::kFloat64 ? sizeof(double) : sizeof(float);
  return 2 * static_cast<std::size_t>(splits) * static_cast<std::size_t>(cols) * elem;
}

void norm_backward(int ordinal, gpu::StreamHandle stream, NormKind kind, DType dtype, const void* x, const void* dy,
                   const void* gamma, const void* mean, const void* rstd, void* dx, void* dgamma, void* dbeta,
                   std::int64_t rows, std::int64_t cols, void* workspace) {
  dispatch_norm(dtype, "layer_norm_grad", [](auto) {});
  if (cols <= 0) return;
  const bool layer = kind == NormKind::kLayer;
  if (!layer) dbeta = nullptr;
  gpu::internal::DeviceGuard guard(ordinal);
  auto s = static_cast<cudaStream_t>(stream);
  const std::int64_t splits = splits_for(rows);
  CHORUS_REQUIRE(splits <= 1 || workspace != nullptr || (dgamma == nullptr && dbeta == nullptr), InvalidArgumentError,
                 "layer_norm_grad: ", rows, " rows need a workspace of ",
                 norm_backward_workspace_bytes(dtype, rows, cols), " bytes");
  dispatch_norm(dtype, "layer_norm_grad", [&](auto t) {
    using T = decltype(t);
    using A = acc_t<T>;
    const auto* px = static_cast<const T*>(x);
    const auto* pdy = static_cast<const T*>(dy);
    const auto* pm = static_cast<const A*>(mean);
    const auto* pr = static_cast<const A*>(rstd);
    auto* dg = static_cast<A*>(dgamma);
    auto* db = static_cast<A*>(dbeta);
    if (rows <= 0) {  // no rows: zero parameter gradients
      if (dg != nullptr) CHORUS_CUDA_CHECK(cudaMemsetAsync(dg, 0, static_cast<std::size_t>(cols) * sizeof(A), s));
      if (db != nullptr) CHORUS_CUDA_CHECK(cudaMemsetAsync(db, 0, static_cast<std::size_t>(cols) * sizeof(A), s));
      return;
    }
    if (dx != nullptr) {
      const auto* pgam = static_cast<const A*>(gamma);
      auto* pdx = static_cast<T*>(dx);
      if (cols <= kWarpRowCols)
        norm_dx_kernel<T, 32>
            <<<row_blocks(rows, true), kThreads, 0, s>>>(layer, px, pdy, pgam, pm, pr, pdx, rows, cols);
      else
        norm_dx_kernel<T, kThreads>
            <<<row_blocks(rows, false), kThreads, 0, s>>>(layer, px, pdy, pgam, pm, pr, pdx, rows, cols);
    }
    if (dg == nullptr && db == nullptr) return;
    const std::int64_t split_rows = (rows + splits - 1) / splits;
    const dim3 grid(static_cast<unsigned>((cols + kColTile - 1) / kColTile), static_cast<unsigned>(splits));
    const dim3 block(kColTile, kRowLanes);
    if (splits == 1) {
      norm_columns_kernel<T><<<grid, block, 0, s>>>(layer, px, pdy, pm, pr, dg, db, rows, cols, split_rows);
      return;
    }
    auto* part_g = static_cast<A*>(workspace);
    auto* part_b = part_g + splits * cols;
    norm_columns_kernel<T><<<grid, block, 0, s>>>(layer, px, pdy, pm, pr, dg != nullptr ? part_g : nullptr,
                                                  db != nullptr ? part_b : nullptr, rows, cols, split_rows);
    if (dg != nullptr) sum_splits_kernel<A><<<grid_for(cols), kThreads, 0, s>>>(part_g, dg, splits, cols);
    if (db != nullptr) sum_splits_kernel<A><<<grid_for(cols), kThreads, 0, s>>>(part_b, db, splits, cols);
  });
  CHORUS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace chorus::ops::cuda
