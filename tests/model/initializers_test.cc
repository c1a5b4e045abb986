// Weight initializers (model/initializers.h): the statistics of a large draw (200,000 values)
// against Keras's formulas — mean, standard deviation, bounds — and seeded reproducibility.
// Tolerances: 5 standard errors of the estimate (mean: σ/√n; std: ≈ σ/√(2n)).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tests/core/test_util.h"
#include <chorus/model/initializers.h>
#include <chorus/ops/ops.h>

namespace chorus {
namespace {

class InitializersTest : public testing::CoreTest {};

struct Stats {
  double mean, std, min, max;
};

Stats stats(const Tensor& t) {
  const std::vector<double> v = ops::cast(t, DType::kFloat64).to_vector<double>();
  double s = 0, q = 0;
  for (double x : v) s += x;
  const double m = s / static_cast<double>(v.size());
  for (double x : v) q += (x - m) * (x - m);
  return {m, std::sqrt(q / static_cast<double>(v.size())), *std::min_element(v.begin(), v.end()),
          *std::max_element(v.begin(), v.end())};
}

// A unit normal truncated at ±2 has std 0.87962566103423978 (Keras's constant).
constexpr double kTruncStd = 0.87962566103423978;

void expect_stats(const Tensor& t, double mean, double std, double lo, double hi, const std::string& what) {
  const double n = static_cast<double>(t.num_elements());
  const Stats s = stats(t);
  EXPECT_NEAR(s.mean, mean, 5 * std / std::sqrt(n)) << what;
  EXPECT_NEAR(s.std, std, 5 * std / std::sqrt(2 * n)) << what;
  EXPECT_GE(s.min, lo) << what;
  EXPECT_LE(s.max, hi) << what;
  // The draws reach close to their bounds (a wrong, narrower range would not).
  EXPECT_LT(s.min, lo + 0.02 * (hi - lo)) << what;
  EXPECT_GT(s.max, hi - 0.02 * (hi - lo)) << what;
}

TEST_F(InitializersTest, HeUniformIsUniformWithinSqrtSixOverFanIn) {
  const Shape s{500, 400};  // fan_in 500
  const double limit = std::sqrt(6.0 / 500);
  expect_stats(initializers::he_uniform(1)(s, DType::kFloat32), 0, limit / std::sqrt(3.0), -limit, limit, "he_uniform");
  // A filter: fan_in = 3·3·16.
  const Shape f{3, 3, 16, 1400};
  const double lf = std::sqrt(6.0 / 144);
  expect_stats(initializers::he_uniform(2)(f, DType::kFloat32), 0, lf / std::sqrt(3.0), -lf, lf, "he_uniform filter");
}

TEST_F(InitializersTest, GlorotNormalAndHeNormalHaveKerassStd) {
  const Shape s{500, 400};
  // Keras divides the target std by kTruncStd, so the truncated draws have the target std itself.
  const double g = std::sqrt(2.0 / 900);
  expect_stats(initializers::glorot_normal(3)(s, DType::kFloat32), 0, g, -2 * g / kTruncStd, 2 * g / kTruncStd,
               "glorot_normal");
  const double h = std::sqrt(2.0 / 500);
  expect_stats(initializers::he_normal(4)(s, DType::kFloat32), 0, h, -2 * h / kTruncStd, 2 * h / kTruncStd,
               "he_normal");
}

TEST_F(InitializersTest, TruncatedNormalRedrawsBeyondTwoStddev) {
  const Shape s{200000};
  expect_stats(initializers::truncated_normal()(s, DType::kFloat32), 0, 0.05 * kTruncStd, -0.1, 0.1,
               "truncated_normal()");
  expect_stats(initializers::truncated_normal(0.5, 0.2, 5)(s, DType::kFloat64), 0.5, 0.2 * kTruncStd, 0.1, 0.9,
               "truncated_normal(0.5, 0.2)");
  EXPECT_THROW_WITH(initializers::truncated_normal(0, 0), InvalidArgumentError, "stddev must be > 0");
}

TEST_F(InitializersTest, SeedsReproduceAndDiffer) {
  const Shape s{64, 32};
  for (const auto& make : {initializers::he_uniform, initializers::glorot_normal}) {
    const auto a = make(7)(s, DType::kFloat32).to_vector<float>(), b = make(7)(s, DType::kFloat32).to_vector<float>();
    const auto c = make(8)(s, DType::kFloat32).to_vector<float>();
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
  }
  const auto t1 = initializers::truncated_normal(0, 1, 9)(s, DType::kFloat32).to_vector<float>();
  EXPECT_EQ(t1, initializers::truncated_normal(0, 1, 9)(s, DType::kFloat32).to_vector<float>());
}

}  // namespace
}  // namespace chorus
