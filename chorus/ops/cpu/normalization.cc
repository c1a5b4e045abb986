// Layer / RMS normalization over rows, forward and backward (ops/cpu/normalization.h).
#include <chorus/ops/cpu/normalization.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include <chorus/ops/cpu/numeric.h>

namespace chorus::ops::cpu {
namespace {

// Below this many elements one thread does the pass.
constexpr std::int64_t kParallelElements = 1 << 15;
// Rows per block of the backward's column sums: the blocks (not the threads) fix the order.
constexpr std::int64_t kBlockRows = 128;
// Interleaved partial sums of a row: independent lanes the compiler keeps in SIMD registers
// (without reassociating anything), combined in a fixed tree.
constexpr int kLanes = 16;

// Σ f(x[i]) over a row of n elements in the compute type P.
template <typename T, typename P, typename F>
P row_sum(const T* x, std::int64_t n, F f) {
  using N = Num<T>;
  P acc[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += f(static_cast<P>(N::load(x[i + j])), i + j);
  P tail = 0;
  for (; i < n; ++i) tail += f(static_cast<P>(N::load(x[i])), i);
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0] + tail;
}

template <typename T, typename P>
void forward_typed(NormKind kind, const T* x, const P* gamma, const P* beta, T* y, P* mean, P* rstd, std::int64_t rows,
                   std::int64_t cols, P eps) {
  using N = Num<T>;
  const P inv_n = P(1) / static_cast<P>(cols);
  const bool layer = kind == NormKind::kLayer;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    // Two passes over the row (it is in cache by the second): no E[x²] − mean² cancellation.
    const P m = layer ? row_sum<T, P>(xr, cols, [](P v, std::int64_t) { return v; }) * inv_n : P(0);
    const P var = row_sum<T, P>(xr, cols, [m](P v, std::int64_t) { return (v - m) * (v - m); }) * inv_n;
    const P inv = P(1) / std::sqrt(var + eps);
    T* yr = y + r * cols;
    for (std::int64_t c = 0; c < cols; ++c) {
      P v = (static_cast<P>(N::load(xr[c])) - m) * inv;
      if (gamma != nullptr) v *= gamma[c];
      if (layer && beta != nullptr) v += beta[c];
      yr[c] = N::store(static_cast<typename N::C>(v));
    }
    if (mean != nullptr) mean[r] = m;
    if (rstd != nullptr) rstd[r] = inv;
  }
}

// dx for the rows [r0, r1), and their sums of dy·xhat and dy per column into pg / pb (when set).
template <typename T, typename P>
void backward_rows(bool layer, const T* x, const T* dy, const P* gamma, const P* mean, const P* rstd, T* dx, P* pg,
                   P* pb, std::int64_t r0, std::int64_t r1, std::int64_t cols) {
  using N = Num<T>;
  const P inv_n = P(1) / static_cast<P>(cols);
  for (std::int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * cols;
    const T* dyr = dy + r * cols;
    const P m = layer ? mean[r] : P(0), inv = rstd[r];
    if (dx != nullptr) {
      // g = dy·gamma; dx = rstd·(g − mean(g) − xhat·mean(g·xhat)) (RMS: without mean(g)).
      auto g_at = [&](std::int64_t c) {
        const P d = static_cast<P>(N::load(dyr[c]));
        return gamma != nullptr ? d * gamma[c] : d;
      };
      const P mg = layer ? row_sum<T, P>(dyr, cols, [&](P, std::int64_t c) { return g_at(c); }) * inv_n : P(0);
      const P mgx = row_sum<T, P>(xr, cols, [&](P v, std::int64_t c) { return g_at(c) * ((v - m) * inv); }) * inv_n;
      T* dxr = dx + r * cols;
      for (std::int64_t c = 0; c < cols; ++c) {
        const P xhat = (static_cast<P>(N::load(xr[c])) - m) * inv;
        dxr[c] = N::store(static_cast<typename N::C>(inv * (g_at(c) - mg - xhat * mgx)));
      }
    }
    for (std::int64_t c = 0; c < cols && (pg != nullptr || pb != nullptr); ++c) {
      const P d = static_cast<P>(N::load(dyr[c]));
      if (pg != nullptr) pg[c] += d * ((static_cast<P>(N::load(xr[c])) - m) * inv);
      if (pb != nullptr) pb[c] += d;
    }
  }
}

// out[c] = Σ_b part[b, c] in block order (nothing when out is nullptr).
template <typename P>
void sum_blocks(P* out, const std::vector<P>& part, std::int64_t blocks, std::int64_t cols) {
  if (out == nullptr) return;
#pragma omp parallel for schedule(static) if (blocks * cols >= kParallelElements)
  for (std::int64_t c = 0; c < cols; ++c) {
    P s = 0;
    for (std::int64_t b = 0; b < blocks; ++b) s += part[static_cast<std::size_t>(b * cols + c)];
    out[c] = s;
  }
}

template <typename T, typename P>
void backward_typed(NormKind kind, const T* x, const T* dy, const P* gamma, const P* mean, const P* rstd, T* dx,
                    P* dgamma, P* dbeta, std::int64_t rows, std::int64_t cols) {
  const bool layer = kind == NormKind::kLayer;
  if (!layer) dbeta = nullptr;
  const std::int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  const auto ucols = static_cast<std::size_t>(cols);
  // Per block column partials (only when a parameter gradient is wanted), summed in block order.
  std::vector<P> pg(dgamma != nullptr ? static_cast<std::size_t>(blocks) * ucols : 0, P(0));
  std::vector<P> pb(dbeta != nullptr ? static_cast<std::size_t>(blocks) * ucols : 0, P(0));
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelElements)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const auto off = static_cast<std::size_t>(b) * ucols;
    backward_rows<T, P>(layer, x, dy, gamma, mean, rstd, dx, pg.empty() ? nullptr : pg.data() + off,
                        pb.empty() ? nullptr : pb.data() + off, b * kBlockRows, std::min(rows, (b + 1) * kBlockRows),
                        cols);
  }
  sum_blocks(dgamma, pg, blocks, cols);
  sum_blocks(dbeta, pb, blocks, cols);
}

// The parameter / accumulation type of x's element type.
template <typename T>
using param_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

}  // namespace

void norm_forward(NormKind kind, DType dtype, const void* x, const void* gamma, const void* beta, void* y, void* mean,
                  void* rstd, std::int64_t rows, std::int64_t cols, double epsilon) {
  if (rows <= 0 || cols <= 0) return;
  dispatch_float(dtype, "layer_norm", [&](auto t) {
    using T = decltype(t);
    using P = param_t<T>;
    forward_typed<T, P>(kind, static_cast<const T*>(x), static_cast<const P*>(gamma), static_cast<const P*>(beta),
                        static_cast<T*>(y), static_cast<P*>(mean), static_cast<P*>(rstd), rows, cols,
                        static_cast<P>(epsilon));
  });
}

void norm_backward(NormKind kind, DType dtype, const void* x, const void* dy, const void* gamma, const void* mean,
                   const void* rstd, void* dx, void* dgamma, void* dbeta, std::int64_t rows, std::int64_t cols) {
  if (cols <= 0) return;
  dispatch_float(dtype, "layer_norm_grad", [&](auto t) {
    using T = decltype(t);
    using P = param_t<T>;
    if (rows <= 0) {  // no rows: zero parameter gradients
      if (dgamma != nullptr) std::fill_n(static_cast<P*>(dgamma), cols, P(0));
      if (dbeta != nullptr) std::fill_n(static_cast<P*>(dbeta), cols, P(0));
      return;
    }
    backward_typed<T, P>(kind, static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<const P*>(gamma),
                         static_cast<const P*>(mean), static_cast<const P*>(rstd), static_cast<T*>(dx),
                         static_cast<P*>(dgamma), static_cast<P*>(dbeta), rows, cols);
  });
}

}  // namespace chorus::ops::cpu
