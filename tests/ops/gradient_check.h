// Finite-difference gradient checking for the op layer's tests.
//
//   EXPECT_TRUE(check_gradients([](const std::vector<Tensor>& in) { return ops::exp(in[0]); },
//                               {random_tensor({2, 3}, 1)}));
//
// f maps float64 CPU tensors to a tensor of any shape. A fixed random weighting w of f's output
// (seeded, so a failure reproduces) turns it into the scalar L = sum(w * f(inputs)); the
// GradientTape gradient of L with respect to every input is compared, element by element, with
// the central difference (L(x + eps) - L(x - eps)) / (2 eps), which perturbs each element of each
// input in turn. An element passes when |analytic - numeric| <= tol * (1 + |numeric|).
//
// The inputs must be float64 (the differences need the precision); integer arguments of the op
// (indices, labels) are captured by f. f must be deterministic and smooth near the inputs: keep
// inputs away from kinks (relu, abs at 0) and ties (max, maximum), and shapes small (f runs
// 2 * elements + 1 times).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <chorus/core/tensor.h>
#include <chorus/ops/ops.h>

namespace chorus::testing {

using TensorFn = std::function<Tensor(const std::vector<Tensor>&)>;

struct GradCheckOptions {
  double eps = 1e-6;
  double tol = 1e-6;
  std::uint32_t seed = 20240611;  // of the output weighting
};

// Uniform values in [lo, hi] (float64, CPU:0), from `seed`.
inline std::vector<double> random_values(std::int64_t n, std::uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& x : v) x = dist(gen);
  return v;
}

inline Tensor random_tensor(const Shape& shape, std::uint32_t seed, double lo = -1.0, double hi = 1.0) {
  return Tensor::from_vector(random_values(shape.num_elements(), seed, lo, hi), shape, "/CPU:0");
}

// Values with magnitude in [lo, hi] and a random sign: away from 0 (kinks of relu, abs, sign).
inline Tensor random_away_from_zero(const Shape& shape, std::uint32_t seed, double lo = 0.2, double hi = 1.0) {
  std::vector<double> v = random_values(shape.num_elements(), seed, lo, hi);
  std::mt19937 gen(seed ^ 0x5bd1e995u);
  for (double& x : v)
    if (gen() & 1u) x = -x;
  return Tensor::from_vector(v, shape, "/CPU:0");
}

inline ::testing::AssertionResult check_gradients(const TensorFn& f, const std::vector<Tensor>& inputs,
                                                  const GradCheckOptions& options = {}) {
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].defined() || inputs[i].dtype() != DType::kFloat64)
      return ::testing::AssertionFailure() << "input " << i << " must be a defined float64 tensor";

  // The output's shape fixes the weighting.
  const Tensor y0 = f(inputs);
  if (!is_floating(y0.dtype())) return ::testing::AssertionFailure() << "f returns " << dtype_name(y0.dtype());
  const std::vector<double> w = random_values(y0.num_elements(), options.seed, -1.0, 1.0);
  auto weighted = [&w](const Tensor& y) {
    const std::vector<double> v = y.to_vector<double>();
    double s = 0;
    for (std::size_t k = 0; k < v.size(); ++k) s += w[k] * v[k];
    return s;
  };

  // Analytic: L = reduce_sum(w * f(x)) through the ops, under a tape watching every input.
  std::vector<Tensor> analytic;
  {
    ops::GradientTape tape;
    for (const Tensor& x : inputs) tape.watch(x);
    const Tensor y = f(inputs);
    const Tensor loss = ops::reduce_sum(ops::mul(y, Tensor::from_vector(w, y.shape(), y.device_name())));
    analytic = tape.gradient(loss, inputs);
  }

  std::ostringstream failures;
  int bad = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<double> x = inputs[i].to_vector<double>();
    if (!analytic[i].defined()) {
      failures << "\n  input " << i << ": no gradient (undefined)";
      ++bad;
      continue;
    }
    if (analytic[i].shape() != inputs[i].shape()) {
      failures << "\n  input " << i << ": gradient shape " << analytic[i].shape().to_string() << " != input shape "
               << inputs[i].shape().to_string();
      ++bad;
      continue;
    }
    const std::vector<double> g = analytic[i].to_vector<double>();
    for (std::size_t k = 0; k < x.size(); ++k) {
      auto at = [&](double delta) {
        std::vector<double> xp = x;
        xp[k] += delta;
        std::vector<Tensor> in = inputs;
        in[i] = Tensor::from_vector(xp, inputs[i].shape(), inputs[i].device_name());
        return weighted(f(in));
      };
      const double numeric = (at(options.eps) - at(-options.eps)) / (2 * options.eps);
      const double err = std::abs(g[k] - numeric);
      if (!(err <= options.tol * (1.0 + std::abs(numeric)))) {
        if (bad < 20)
          failures << "\n  input " << i << " element " << k << ": tape " << g[k] << " vs numeric " << numeric
                   << " (|diff| " << err << ")";
        ++bad;
      }
    }
  }
  if (bad > 0) return ::testing::AssertionFailure() << bad << " gradient mismatches:" << failures.str();
  return ::testing::AssertionSuccess();
}

}  // namespace chorus::testing
