// Learning-rate schedules at chosen steps (values worked out by hand from Keras's formulas), and
// their use by an optimizer at its iterations.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "tests/optimizer/test_util.h"
#include <chorus/optimizer/learning_rate_schedule.h>
#include <chorus/optimizer/sgd.h>

namespace chorus::optimizers {
namespace {

using schedules::CosineDecay;
using schedules::ExponentialDecay;
using schedules::PiecewiseConstantDecay;
using testing::f64;
using testing::host;
using testing::OptimizerTest;

TEST(Schedules, ExponentialDecay) {
  ExponentialDecay s(0.1, 10, 0.5);
  EXPECT_DOUBLE_EQ(s(0), 0.1);
  EXPECT_DOUBLE_EQ(s(5), 0.1 / std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(s(10), 0.05);
  EXPECT_DOUBLE_EQ(s(25), 0.1 * std::pow(0.5, 2.5));
}

TEST(Schedules, ExponentialDecayStaircase) {
  ExponentialDecay s(0.1, 10, 0.5, /*staircase=*/true);
  EXPECT_DOUBLE_EQ(s(0), 0.1);
  EXPECT_DOUBLE_EQ(s(9), 0.1);
  EXPECT_DOUBLE_EQ(s(10), 0.05);
  EXPECT_DOUBLE_EQ(s(19), 0.05);
  EXPECT_DOUBLE_EQ(s(20), 0.025);
}

TEST(Schedules, CosineDecay) {
  CosineDecay s(1.0, 10, /*alpha=*/0.1);
  EXPECT_DOUBLE_EQ(s(0), 1.0);
  EXPECT_NEAR(s(5), 0.9 * 0.5 + 0.1, 1e-15);  // cos(π/2) = 0
  EXPECT_NEAR(s(2), 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 0.2)) + 0.1, 1e-15);
  EXPECT_NEAR(s(10), 0.1, 1e-15);
  EXPECT_NEAR(s(1000), 0.1, 1e-15);  // clamped at decay_steps
}

TEST(Schedules, CosineDecayWithWarmup) {
  CosineDecay s(0.0, 10, 0.0, /*warmup_target=*/1.0, /*warmup_steps=*/4);
  EXPECT_DOUBLE_EQ(s(0), 0.0);
  EXPECT_DOUBLE_EQ(s(1), 0.25);  // linear warmup 0 → 1 over 4 steps
  EXPECT_DOUBLE_EQ(s(2), 0.5);
  EXPECT_DOUBLE_EQ(s(4), 1.0);    // decay from the target starts
  EXPECT_NEAR(s(9), 0.5, 1e-15);  // halfway through the 10 decay steps
  EXPECT_NEAR(s(14), 0.0, 1e-15);
  EXPECT_NEAR(s(100), 0.0, 1e-15);
}

TEST(Schedules, PiecewiseConstantDecay) {
  PiecewiseConstantDecay s({10, 20}, {1.0, 0.5, 0.1});
  EXPECT_EQ(s(0), 1.0);
  EXPECT_EQ(s(10), 1.0);  // x <= boundaries[0]
  EXPECT_EQ(s(11), 0.5);
  EXPECT_EQ(s(20), 0.5);
  EXPECT_EQ(s(21), 0.1);
  EXPECT_EQ(s(1000000), 0.1);
}

TEST(Schedules, Errors) {
  EXPECT_THROW_WITH(ExponentialDecay(0.1, 0, 0.5), InvalidArgumentError, "decay_steps", "> 0", "0");
  EXPECT_THROW_WITH(CosineDecay(0.1, -3), InvalidArgumentError, "decay_steps", "-3");
  EXPECT_THROW_WITH(CosineDecay(0.1, 10, 1.5), InvalidArgumentError, "alpha", "1.5");
  EXPECT_THROW_WITH(CosineDecay(0.1, 10, 0.0, std::nullopt, 5), InvalidArgumentError, "warmup_target");
  EXPECT_THROW_WITH(PiecewiseConstantDecay({10, 20}, {1.0, 0.5}), InvalidArgumentError,
                    "The length of boundaries should be 1 less than the length of values", "[10, 20]", "[1.0, 0.5]");
  EXPECT_THROW_WITH(PiecewiseConstantDecay({20, 10}, {1.0, 0.5, 0.1}), InvalidArgumentError, "strictly increasing");
  EXPECT_THROW_WITH(ExponentialDecay(0.1, 10, 0.5)(-1), InvalidArgumentError, "step", "-1");
}

TEST(Schedules, Config) {
  EXPECT_EQ(ExponentialDecay(0.1, 100, 0.96, true).get_config(),
            "{\"class_name\": \"ExponentialDecay\", \"config\": {\"initial_learning_rate\": 0.1, \"decay_steps\": 100, "
            "\"decay_rate\": 0.96, \"staircase\": true}}");
  EXPECT_EQ(PiecewiseConstantDecay({5}, {1.0, 0.5}).get_config(),
            "{\"class_name\": \"PiecewiseConstantDecay\", \"config\": {\"boundaries\": [5], \"values\": [1.0, 0.5]}}");
}

// The optimizer evaluates the schedule at `iterations` (0 for the first update), so the k-th
// update uses schedule(k); learning_rate() reports the rate the next update will use.
TEST_F(OptimizerTest, SgdUsesTheScheduleAtItsIterations) {
  ExponentialDecay schedule(0.5, 2, 0.5, /*staircase=*/true);
  SGD sgd({.learning_rate = schedule});
  EXPECT_NE(sgd.get_config().find("\"class_name\": \"ExponentialDecay\""), std::string::npos);
  Variable w = make_variable({.initial_value = f64({1.0}), .name = "w"});
  double want = 1.0;
  for (int k = 0; k < 6; ++k) {
    EXPECT_DOUBLE_EQ(sgd.learning_rate(), schedule(k)) << "step " << k;
    const double g = 0.25 * (k + 1);
    sgd.apply_gradients({{f64({g}), w}});
    want -= schedule(k) * g;
    EXPECT_NEAR(host(w)[0], want, 1e-15) << "step " << k;
  }
  // set_learning_rate replaces the schedule from the next step on.
  sgd.set_learning_rate(0.125);
  EXPECT_EQ(sgd.learning_rate(), 0.125);
}

TEST_F(OptimizerTest, CosineWarmupDrivesSgd) {
  CosineDecay schedule(0.0, 4, 0.0, 1.0, 2);
  SGD sgd({.learning_rate = schedule});
  Variable w = make_variable({.initial_value = f64({0.0}), .name = "w"});
  // Rates: 0, 0.5, 1, cos-decay(1/4) = 0.5(1+cos(π/4)), 0.5, ...
  double want = 0.0;
  for (int k = 0; k < 7; ++k) {
    sgd.apply_gradients({{f64({-1.0}), w}});
    want += schedule(k);
    EXPECT_NEAR(host(w)[0], want, 1e-15) << "step " << k;
  }
  EXPECT_NEAR(schedule(3), 0.5 * (1 + std::cos(std::numbers::pi / 4)), 1e-15);
}

}  // namespace
}  // namespace chorus::optimizers
