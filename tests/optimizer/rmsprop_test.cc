// RMSprop (plain, momentum, centered, both) against a float64 reference of Keras's formulas.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/optimizer/test_util.h"
#include <chorus/optimizer/rmsprop.h>

namespace chorus::optimizers {
namespace {

using testing::f64;
using testing::gradient_at;
using testing::host;
using testing::OptimizerTest;

// Keras 3 rmsprop.py.
struct Reference {
  double lr, rho = 0.9, momentum = 0.0, eps = 1e-7;
  bool centered = false;
  std::vector<double> w, s, mom, avg;
  void step(const std::vector<double>& g) {
    if (s.empty()) s.assign(w.size(), 0.0), mom.assign(w.size(), 0.0), avg.assign(w.size(), 0.0);
    for (std::size_t i = 0; i < w.size(); ++i) {
      s[i] = rho * s[i] + (1 - rho) * g[i] * g[i];
      double d = s[i] + eps;
      if (centered) {
        avg[i] = rho * avg[i] + (1 - rho) * g[i];
        d = s[i] - avg[i] * avg[i] + eps;
      }
      const double inc = lr * g[i] / std::sqrt(d);
      if (momentum > 0) {
        mom[i] = momentum * mom[i] + inc;
        w[i] -= mom[i];
      } else {
        w[i] -= inc;
      }
    }
  }
};

void run_against_reference(RMSprop& opt, Reference ref, int steps, DType dtype, double tol) {
  Variable w = make_variable({.initial_value = ops::cast(f64(ref.w), dtype), .name = "w"});
  for (int k = 0; k < steps; ++k) {
    const std::vector<double> g = gradient_at(k, ref.w.size());
    opt.apply_gradients({{ops::cast(f64(g), dtype), w}});
    ref.step(g);
    const std::string at = " at step " + std::to_string(k);
    testing::expect_near_all(host(w), ref.w, tol, "w" + at);
    testing::expect_near_all(host(opt.get_slot(w, "velocity")), ref.s, tol, "velocity" + at);
    if (ref.momentum > 0) testing::expect_near_all(host(opt.get_slot(w, "momentum")), ref.mom, tol, "momentum" + at);
    if (ref.centered) testing::expect_near_all(host(opt.get_slot(w, "average_gradient")), ref.avg, tol, "average" + at);
  }
}

TEST_F(OptimizerTest, RmspropFollowsTheReference) {
  RMSprop opt({.learning_rate = 0.01});
  run_against_reference(opt, {.lr = 0.01, .w = {1.0, -2.0, 3.0, 0.5}}, 8, DType::kFloat64, 1e-13);
  EXPECT_EQ(opt.slot_names(), (std::vector<std::string>{"velocity"}));
}

TEST_F(OptimizerTest, RmspropWithMomentumFollowsTheReference) {
  RMSprop opt({.learning_rate = 0.01, .rho = 0.8, .momentum = 0.9});
  run_against_reference(opt, {.lr = 0.01, .rho = 0.8, .momentum = 0.9, .w = {1.0, -2.0, 3.0, 0.5}}, 8, DType::kFloat64,
                        1e-13);
  EXPECT_EQ(opt.slot_names(), (std::vector<std::string>{"velocity", "momentum"}));
}

TEST_F(OptimizerTest, CenteredRmspropFollowsTheReference) {
  RMSprop opt({.learning_rate = 0.01, .epsilon = 1e-3, .centered = true});
  run_against_reference(opt, {.lr = 0.01, .eps = 1e-3, .centered = true, .w = {1.0, -2.0, 3.0, 0.5}}, 8,
                        DType::kFloat64, 1e-13);
  EXPECT_EQ(opt.slot_names(), (std::vector<std::string>{"velocity", "average_gradient"}));
}

TEST_F(OptimizerTest, CenteredRmspropWithMomentumFollowsTheReference) {
  RMSprop opt({.learning_rate = 0.01, .momentum = 0.5, .epsilon = 1e-3, .centered = true});
  run_against_reference(opt, {.lr = 0.01, .momentum = 0.5, .eps = 1e-3, .centered = true, .w = {1.0, -2.0, 3.0, 0.5}},
                        8, DType::kFloat64, 1e-13);
  EXPECT_EQ(opt.slot_names(), (std::vector<std::string>{"velocity", "momentum", "average_gradient"}));
}

TEST_F(OptimizerTest, Float32CenteredRmspropFollowsTheReference) {
  RMSprop opt({.learning_rate = 0.01, .momentum = 0.5, .epsilon = 1e-3, .centered = true});
  run_against_reference(opt, {.lr = 0.01, .momentum = 0.5, .eps = 1e-3, .centered = true, .w = {1.0, -2.0, 3.0, 0.5}},
                        8, DType::kFloat32, 2e-6);
}

TEST_F(OptimizerTest, RmspropConfigAndErrors) {
  EXPECT_EQ(
      RMSprop().get_config(),
      "{\"name\": \"RMSprop\", \"learning_rate\": 0.001, \"weight_decay\": null, \"clipnorm\": null, "
      "\"global_clipnorm\": null, \"clipvalue\": null, \"gradient_accumulation_steps\": null, \"rho\": 0.9, \"momentum\": 0.0, \"epsilon\": 1e-07, "
      "\"centered\": false}");
  EXPECT_THROW_WITH(RMSprop({.rho = 1.0}), InvalidArgumentError, "rho");
  EXPECT_THROW_WITH(RMSprop({.momentum = 2.0}), InvalidArgumentError, "momentum");
}

}  // namespace
}  // namespace chorus::optimizers
