// ops::dropout: keep probability, scaling, reproducible masks, gradient through the same mask.
#include <gtest/gtest.h>

#include "tests/core/test_util.h"
#include <chorus/ops/ops.h>

namespace chorus::ops {
namespace {

TEST(Dropout, KeepsAboutOneMinusRateAndScales) {
  Tensor x = Tensor::ones({100, 100});
  auto y = dropout(x, 0.25, {{3, 4}}).to_vector<float>();
  int kept = 0;
  for (float v : y) {
    ASSERT_TRUE(v == 0.0f || std::abs(v - 1.0f / 0.75f) < 1e-6f) << v;
    kept += v != 0.0f;
  }
  EXPECT_NEAR(kept / 10000.0, 0.75, 0.02);
  EXPECT_EQ(dropout(x, 0.25, {{3, 4}}).to_vector<float>(), y);  // same seed, same mask
  EXPECT_NE(dropout(x, 0.25, {{3, 5}}).to_vector<float>(), y);
  EXPECT_EQ(dropout(x, 0.0).to_vector<float>(), x.to_vector<float>());
}

TEST(Dropout, GeneratorAdvancesAndGradientUsesTheMask) {
  auto gen = Generator::from_seed(7);
  Variable v = make_variable({.initial_value = Tensor::full({64}, 2.0, DType::kFloat64), .name = "v"});
  GradientTape tape;
  Tensor y = dropout(v.value(), 0.5, gen);
  Tensor g = tape.gradient(reduce_sum(y), std::vector<Variable>{v})[0];
  auto yv = y.to_vector<double>();
  auto gv = g.to_vector<double>();
  for (std::size_t i = 0; i < yv.size(); ++i) EXPECT_DOUBLE_EQ(gv[i], yv[i] == 0 ? 0.0 : 2.0);  // mask / (1 - rate)
  EXPECT_NE(dropout(v.value(), 0.5, gen).to_vector<double>(), yv);  // the generator moved on
}

TEST(Dropout, RejectsBadRatesAndIntegerInputs) {
  EXPECT_THROW_WITH(dropout(Tensor::ones({2}), 1.0), InvalidArgumentError, "rate must be in [0, 1)");
  EXPECT_THROW_WITH(dropout(Tensor::ones({2}), -0.1), InvalidArgumentError, "rate must be in [0, 1)");
  EXPECT_THROW_WITH(dropout(Tensor::ones({2}, DType::kInt32), 0.5), InvalidArgumentError, "int32");
}

}  // namespace
}  // namespace chorus::ops
