// Fused, numerically stable softmax cross-entropy (forward + gradient in one pass per row).
#include <cmath>
#include <vector>

#include <chorus/ops/cpu/loops.h>
#include <chorus/ops/cpu/numeric.h>

namespace chorus::ops::cpu {
namespace {
using chorus::internal::str_cat;

// For one row: writes log-softmax into lsm (size cols) and returns nothing; compute in double.
template <typename T>
void log_softmax_row(const T* x, std::int64_t cols, std::vector<double>& lsm) {
  using N = Num<T>;
  double mx = -INFINITY;
  for (std::int64_t c = 0; c < cols; ++c) mx = std::max(mx, static_cast<double>(N::load(x[c])));
  double sum = 0;
  for (std::int64_t c = 0; c < cols; ++c) sum += std::exp(static_cast<double>(N::load(x[c])) - mx);
  const double lse = mx + std::log(sum);
  for (std::int64_t c = 0; c < cols; ++c) lsm[static_cast<std::size_t>(c)] = static_cast<double>(N::load(x[c])) - lse;
}
}  // namespace

void sparse_softmax_xent(DType dtype, const void* logits, DType label_dtype, const void* labels, void* loss, void* grad,
                         std::int64_t rows, std::int64_t cols) {
  dispatch_float(dtype, "sparse_softmax_cross_entropy_with_logits", [&](auto t) {
    using T = decltype(t);
    using N = Num<T>;
    using C = typename N::C;
    dispatch_index(label_dtype, "sparse_softmax_cross_entropy_with_logits", [&](auto it) {
      using I = decltype(it);
      const auto* x = static_cast<const T*>(logits);
      const auto* lab = static_cast<const I*>(labels);
      auto* l = static_cast<T*>(loss);
      auto* g = static_cast<T*>(grad);
      std::vector<double> lsm(static_cast<std::size_t>(cols));
      for (std::int64_t r = 0; r < rows; ++r) {
        const auto label = static_cast<std::int64_t>(lab[r]);
        if (label < 0 || label >= cols)
          throw InvalidArgumentError(
              str_cat("Received a label value of ", label, " which is outside the valid range of [0, ", cols, ")"));
        log_softmax_row(x + r * cols, cols, lsm);
        l[r] = N::store(static_cast<C>(-lsm[static_cast<std::size_t>(label)]));
        if (g)
          for (std::int64_t c = 0; c < cols; ++c)
            g[r * cols + c] =
                N::store(static_cast<C>(std::exp(lsm[static_cast<std::size_t>(c)]) - (c == label ? 1.0 : 0.0)));
      }
    });
  });
}

void softmax_xent(DType dtype, const void* logits, const void* labels, void* loss, void* grad, std::int64_t rows,
                  std::int64_t cols) {
  dispatch_float(dtype, "softmax_cross_entropy_with_logits", [&](auto t) {
    using T = decltype(t);
    using N = Num<T>;
    using C = typename N::C;
    const auto* x = static_cast<const T*>(logits);
    const auto* p = static_cast<const T*>(labels);
    auto* l = static_cast<T*>(loss);
    auto* g = static_cast<T*>(grad);
    std::vector<double> lsm(static_cast<std::size_t>(cols));
    for (std::int64_t r = 0; r < rows; ++r) {
      log_softmax_row(x + r * cols, cols, lsm);
      double total = 0, psum = 0;
      for (std::int64_t c = 0; c < cols; ++c) {
        const double pc = static_cast<double>(N::load(p[r * cols + c]));
        total -= pc * lsm[static_cast<std::size_t>(c)];
        psum += pc;
      }
      l[r] = N::store(static_cast<C>(total));
      // d/dx of -sum p log softmax(x) = softmax(x) * sum(p) - p (sum(p) is 1 for a distribution).
      if (g)
        for (std::int64_t c = 0; c < cols; ++c)
          g[r * cols + c] = N::store(static_cast<C>(std::exp(lsm[static_cast<std::size_t>(c)]) * psum -
                                                    static_cast<double>(N::load(p[r * cols + c]))));
    }
  });
}

}  // namespace chorus::ops::cpu
