// The epilogue of a convolution or matmul and its gradient (ops/cpu/dnn.h): y = act(y + bias) per
// channel, and dz = act'(dy) with the bias gradient sum_r dz[r, :] in the same pass.
#include <omp.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include <chorus/ops/cpu/clones.h>
#include <chorus/ops/cpu/dnn.h>
#include <chorus/ops/cpu/numeric.h>

namespace chorus::ops::cpu {
namespace {

// Rows per block of the backward's bias sums: the blocks (not the threads) fix the summation
// order, so db is the same for any thread count.
constexpr std::int64_t kBlockRows = 256;
// Below this many elements one thread does the pass.
constexpr std::int64_t kParallelElements = 1 << 15;

template <typename T>
void forward_typed(bool relu, T* y, const T* bias, std::int64_t rows, std::int64_t channels) {
  using N = Num<T>;
  using C = typename N::C;
#pragma omp parallel for schedule(static) if (rows * channels >= kParallelElements)
  for (std::int64_t r = 0; r < rows; ++r) {
    T* row = y + r * channels;
    for (std::int64_t c = 0; c < channels; ++c) {
      C v = N::load(row[c]);
      if (bias != nullptr) v += N::load(bias[c]);
      if (relu) v = v <= C(0) ? C(0) : v;  // NaN stays NaN, as TF's relu
      row[c] = N::store(v);
    }
  }
}

// The row function below is compiled for AVX-512, AVX2 and the baseline (clones.h; the baseline's
// SSE2 widens and sums two doubles at a time: this pass was 11% of the seed CNN's step on a 2-vCPU
// Xeon). It selects and adds only, and each channel's sum runs over the rows in order in every
// clone, so all give the same bits.

// Rows [r0, r1): dz, and each channel's sum of dz over these rows added to sum (when not null).
template <typename T>
CHORUS_CPU_CLONES void backward_rows(bool relu, const T* dy, const T* y, T* dz, double* sum, std::int64_t r0,
                                     std::int64_t r1, std::int64_t channels) {
  using N = Num<T>;
  using C = typename N::C;
  for (std::int64_t r = r0; r < r1; ++r) {
    const T* g = dy + r * channels;
    const T* out = y + r * channels;
    T* d = dz + r * channels;
    // Channels in runs of 16 with a fixed trip count (what lets -O2's cheap vectorizer turn the
    // loads, the select, the widening and the sums into SIMD code), then the tail one by one.
    const auto run = [&](std::int64_t c0, auto k) {
      constexpr std::int64_t K = decltype(k)::value;
      C v[K];
      for (std::int64_t j = 0; j < K; ++j) v[j] = N::load(g[c0 + j]);
      if (relu) {
        for (std::int64_t j = 0; j < K; ++j) v[j] = N::load(out[c0 + j]) > C(0) ? v[j] : C(0);
        for (std::int64_t j = 0; j < K; ++j) d[c0 + j] = N::store(v[j]);
      } else if (d != g) {
        for (std::int64_t j = 0; j < K; ++j) d[c0 + j] = g[c0 + j];
      }
      if (sum != nullptr)
        for (std::int64_t j = 0; j < K; ++j) sum[c0 + j] += static_cast<double>(v[j]);
    };
    std::int64_t c = 0;
    for (; c + 16 <= channels; c += 16) run(c, std::integral_constant<std::int64_t, 16>{});
    for (; c < channels; ++c) run(c, std::integral_constant<std::int64_t, 1>{});
  }
}

template <typename T>
void backward_typed(bool relu, const T* dy, const T* y, T* dz, T* db, std::int64_t rows, std::int64_t channels) {
  using N = Num<T>;
  using C = typename N::C;
  const std::int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  std::vector<double> partial(db != nullptr ? static_cast<std::size_t>(blocks * channels) : 0);
#pragma omp parallel for schedule(static) if (rows * channels >= kParallelElements)
  for (std::int64_t b = 0; b < blocks; ++b) {
    double* sum = db != nullptr ? partial.data() + b * channels : nullptr;
    backward_rows<T>(relu, dy, y, dz, sum, b * kBlockRows, std::min(rows, (b + 1) * kBlockRows), channels);
  }
  if (db == nullptr) return;
  for (std::int64_t c = 0; c < channels; ++c) {
    double total = 0;
    for (std::int64_t b = 0; b < blocks; ++b) total += partial[static_cast<std::size_t>(b * channels + c)];
    db[c] = N::store(static_cast<C>(total));
  }
}

}  // namespace

void bias_activation_forward(DType dtype, bool relu, void* y, const void* bias, std::int64_t rows,
                             std::int64_t channels) {
  dispatch_float(dtype, "bias_activation_forward", [&](auto t) {
    using T = decltype(t);
    forward_typed<T>(relu, static_cast<T*>(y), static_cast<const T*>(bias), rows, channels);
  });
}

void bias_activation_backward(DType dtype, bool relu, const void* dy, const void* y, void* dz, void* db,
                              std::int64_t rows, std::int64_t channels) {
  dispatch_float(dtype, "bias_activation_backward", [&](auto t) {
    using T = decltype(t);
    backward_typed<T>(relu, static_cast<const T*>(dy), static_cast<const T*>(y), static_cast<T*>(dz),
                      static_cast<T*>(db), rows, channels);
  });
}

}  // namespace chorus::ops::cpu
