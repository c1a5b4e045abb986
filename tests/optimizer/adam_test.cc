// Adam (plain and AMSGrad) and AdamW against a float64 reference of Keras's formulas.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/optimizer/test_util.h"
#include <chorus/optimizer/adam.h>
#include <chorus/optimizer/learning_rate_schedule.h>

namespace chorus::optimizers {
namespace {

using testing::f64;
using testing::gradient_at;
using testing::host;
using testing::OptimizerTest;

// Keras 3 adam.py, with AdamW's decoupled decay (BaseOptimizer._apply_weight_decay) first.
struct Reference {
  double lr, b1 = 0.9, b2 = 0.999, eps = 1e-7;
  bool amsgrad = false;
  double wd = 0.0;
  std::vector<double> w, m, v, vhat;
  int t = 0;
  void step(const std::vector<double>& g) {
    if (m.empty()) m.assign(w.size(), 0.0), v.assign(w.size(), 0.0), vhat.assign(w.size(), 0.0);
    ++t;
    const double lr_t = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    for (std::size_t i = 0; i < w.size(); ++i) {
      w[i] -= w[i] * wd * lr;
      m[i] += (g[i] - m[i]) * (1 - b1);
      v[i] += (g[i] * g[i] - v[i]) * (1 - b2);
      double denom = v[i];
      if (amsgrad) denom = vhat[i] = std::max(vhat[i], v[i]);
      w[i] -= lr_t * m[i] / (std::sqrt(denom) + eps);
    }
  }
};

// Gradients that shrink over the steps, so that AMSGrad's max(v̂, v) differs from v.
std::vector<double> shrinking(int k, std::size_t n) {
  std::vector<double> g = gradient_at(k, n);
  for (double& x : g) x *= std::pow(0.5, k);
  return g;
}

void run_against_reference(Optimizer& opt, Reference ref, int steps, DType dtype, double tol,
                           std::vector<double> (*grad)(int, std::size_t) = gradient_at) {
  Variable w = make_variable({.initial_value = ops::cast(f64(ref.w), dtype), .name = "w"});
  for (int k = 0; k < steps; ++k) {
    const std::vector<double> g = grad(k, ref.w.size());
    opt.apply_gradients({{ops::cast(f64(g), dtype), w}});
    ref.step(g);
    testing::expect_near_all(host(w), ref.w, tol, "w at step " + std::to_string(k));
    testing::expect_near_all(host(opt.get_slot(w, "m")), ref.m, tol, "m at step " + std::to_string(k));
    testing::expect_near_all(host(opt.get_slot(w, "v")), ref.v, tol, "v at step " + std::to_string(k));
  }
}

TEST_F(OptimizerTest, AdamFollowsTheReference) {
  Adam adam({.learning_rate = 0.01});
  run_against_reference(adam, {.lr = 0.01, .w = {1.0, -2.0, 3.0, 0.5, 0.0}}, 10, DType::kFloat64, 1e-13);
  EXPECT_EQ(adam.slot_names(), (std::vector<std::string>{"m", "v"}));
  EXPECT_EQ(adam.iterations().read_value().item<std::int64_t>(), 10);
}

TEST_F(OptimizerTest, AdamHyperparametersFollowTheReference) {
  Adam adam({.learning_rate = 0.2, .beta_1 = 0.5, .beta_2 = 0.75, .epsilon = 0.1});
  run_against_reference(adam, {.lr = 0.2, .b1 = 0.5, .b2 = 0.75, .eps = 0.1, .w = {1.0, -2.0, 3.0}}, 6, DType::kFloat64,
                        1e-13);
}

TEST_F(OptimizerTest, AmsgradFollowsTheReference) {
  Adam adam({.learning_rate = 0.01, .amsgrad = true});
  Reference ref{.lr = 0.01, .amsgrad = true, .w = {1.0, -2.0, 3.0, 0.5}};
  run_against_reference(adam, ref, 8, DType::kFloat64, 1e-13, shrinking);
  EXPECT_EQ(adam.slot_names(), (std::vector<std::string>{"m", "v", "vhat"}));
  // With shrinking gradients v̂ > v somewhere: AMSGrad actually differs from Adam here.
  Reference plain{.lr = 0.01, .amsgrad = false, .w = {1.0, -2.0, 3.0, 0.5}};
  Reference ams = ref;
  for (int k = 0; k < 8; ++k) plain.step(shrinking(k, 4)), ams.step(shrinking(k, 4));
  EXPECT_GT(std::abs(plain.w[0] - ams.w[0]), 1e-6);
}

TEST_F(OptimizerTest, Float32AdamFollowsTheReference) {
  Adam adam({.learning_rate = 0.01, .amsgrad = true});
  run_against_reference(adam, {.lr = 0.01, .amsgrad = true, .w = {1.0, -2.0, 3.0, 0.5}}, 10, DType::kFloat32, 2e-6,
                        shrinking);
}

TEST_F(OptimizerTest, AdamWDecaysWeightsBeforeTheAdamStep) {
  AdamW adamw({.learning_rate = 0.01, .weight_decay = 0.1});
  run_against_reference(adamw, {.lr = 0.01, .wd = 0.1, .w = {1.0, -2.0, 3.0, 0.5}}, 10, DType::kFloat64, 1e-13);
  EXPECT_EQ(adamw.name(), "AdamW");
}

TEST_F(OptimizerTest, AdamWWithZeroGradientOnlyDecays) {
  AdamW adamw({.learning_rate = 0.5, .weight_decay = 0.2});
  Variable w = make_variable({.initial_value = f64({2.0, -4.0}), .name = "w"});
  adamw.apply_gradients({{f64({0.0, 0.0}), w}});
  // m = v = 0 → the Adam step is 0; decay: w·(1 − 0.2·0.5) = 0.9·w.
  testing::expect_near_all(host(w), {1.8, -3.6}, 1e-15, "w");
}

TEST_F(OptimizerTest, AdamWExcludedVariablesAreNotDecayed) {
  AdamW adamw({.learning_rate = 0.5, .weight_decay = 0.2});
  Variable kernel = make_variable({.initial_value = f64({2.0}), .name = "dense/kernel"});
  Variable bias = make_variable({.initial_value = f64({2.0}), .name = "dense/bias"});
  Variable other = make_variable({.initial_value = f64({2.0}), .name = "other"});
  adamw.exclude_from_weight_decay({other}, {"bias"});
  adamw.apply_gradients({{f64({0.0}), kernel}, {f64({0.0}), bias}, {f64({0.0}), other}});
  EXPECT_DOUBLE_EQ(host(kernel)[0], 1.8);
  EXPECT_DOUBLE_EQ(host(bias)[0], 2.0);
  EXPECT_DOUBLE_EQ(host(other)[0], 2.0);
  EXPECT_THROW_WITH(adamw.exclude_from_weight_decay({}, {"x"}), FailedPreconditionError,
                    "before the optimizer is built");
}

TEST_F(OptimizerTest, AdamWithScheduleUsesTheRateAtEachStep) {
  // Bias correction uses t = iterations + 1, the schedule uses iterations.
  Adam adam({.learning_rate = schedules::PiecewiseConstantDecay({1, 3}, {0.1, 0.01, 0.001})});
  Variable w = make_variable({.initial_value = f64({1.0, 2.0}), .name = "w"});
  Reference ref{.lr = 0.0, .w = {1.0, 2.0}};
  const double rates[] = {0.1, 0.1, 0.01, 0.01, 0.001};
  for (int k = 0; k < 5; ++k) {
    EXPECT_DOUBLE_EQ(adam.learning_rate(), rates[k]);
    ref.lr = rates[k];
    const auto g = gradient_at(k, 2);
    adam.apply_gradients({{f64(g), w}});
    ref.step(g);
    testing::expect_near_all(host(w), ref.w, 1e-13, "w at step " + std::to_string(k));
  }
}

TEST_F(OptimizerTest, AdamConfigAndErrors) {
  EXPECT_EQ(
      AdamW().get_config(),
      "{\"name\": \"AdamW\", \"learning_rate\": 0.001, \"weight_decay\": 0.004, \"clipnorm\": null, "
      "\"global_clipnorm\": null, \"clipvalue\": null, \"gradient_accumulation_steps\": null, \"beta_1\": 0.9, \"beta_2\": 0.999, \"epsilon\": 1e-07, "
      "\"amsgrad\": false}");
  EXPECT_THROW_WITH(Adam({.beta_1 = 1.0}), InvalidArgumentError, "beta_1", "[0, 1)");
  EXPECT_THROW_WITH(Adam({.beta_2 = -0.1}), InvalidArgumentError, "beta_2");
  EXPECT_THROW_WITH(Adam({.epsilon = -1.0}), InvalidArgumentError, "epsilon");
  EXPECT_THROW_WITH(AdamW({.weight_decay = -0.5}), InvalidArgumentError, "weight_decay", "-0.5");
}

}  // namespace
}  // namespace chorus::optimizers
