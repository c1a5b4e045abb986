// SGD: plain, momentum and Nesterov updates against a float64 reference of Keras's formulas.
#include <gtest/gtest.h>

#include "tests/optimizer/test_util.h"
#include <chorus/optimizer/sgd.h>

namespace chorus::optimizers {
namespace {

using testing::f64;
using testing::gradient_at;
using testing::host;
using testing::OptimizerTest;

struct Reference {
  double lr, momentum;
  bool nesterov;
  std::vector<double> w, v;
  void step(const std::vector<double>& g) {
    if (v.empty()) v.assign(w.size(), 0.0);
    for (std::size_t i = 0; i < w.size(); ++i) {
      if (momentum == 0.0) {
        w[i] -= lr * g[i];
        continue;
      }
      v[i] = momentum * v[i] - lr * g[i];
      w[i] += nesterov ? momentum * v[i] - lr * g[i] : v[i];
    }
  }
};

void run_against_reference(SGD& sgd, Reference ref, int steps, DType dtype, double tol) {
  Variable w = make_variable({.initial_value = ops::cast(f64(ref.w), dtype), .name = "w"});
  for (int k = 0; k < steps; ++k) {
    const std::vector<double> g = gradient_at(k, ref.w.size());
    sgd.apply_gradients({{ops::cast(f64(g), dtype), w}});
    ref.step(g);
    testing::expect_near_all(host(w), ref.w, tol, "step " + std::to_string(k));
  }
  EXPECT_EQ(sgd.iterations().read_value().item<std::int64_t>(), steps);
}

TEST_F(OptimizerTest, PlainSgdFollowsTheReference) {
  SGD sgd(0.1);
  run_against_reference(sgd, {.lr = 0.1, .momentum = 0.0, .nesterov = false, .w = {1.0, -2.0, 3.0, 0.5}}, 6,
                        DType::kFloat64, 1e-14);
  EXPECT_TRUE(sgd.slot_names().empty());
  EXPECT_EQ(sgd.variables().size(), 1u);  // iterations only
}

TEST_F(OptimizerTest, MomentumFollowsTheReference) {
  SGD sgd({.learning_rate = 0.05, .momentum = 0.9});
  run_against_reference(sgd, {.lr = 0.05, .momentum = 0.9, .nesterov = false, .w = {1.0, -2.0, 3.0, 0.5}}, 8,
                        DType::kFloat64, 1e-14);
  ASSERT_EQ(sgd.variables().size(), 2u);
  EXPECT_EQ(sgd.variables()[1].name(), "w/momentum");
  EXPECT_FALSE(sgd.variables()[1].trainable());
}

TEST_F(OptimizerTest, NesterovFollowsTheReference) {
  SGD sgd({.learning_rate = 0.05, .momentum = 0.8, .nesterov = true});
  run_against_reference(sgd, {.lr = 0.05, .momentum = 0.8, .nesterov = true, .w = {1.0, -2.0, 3.0, 0.5}}, 8,
                        DType::kFloat64, 1e-14);
}

TEST_F(OptimizerTest, Float32MomentumFollowsTheReference) {
  SGD sgd({.learning_rate = 0.05, .momentum = 0.9, .nesterov = true});
  run_against_reference(sgd, {.lr = 0.05, .momentum = 0.9, .nesterov = true, .w = {1.0, -2.0, 3.0, 0.5}}, 8,
                        DType::kFloat32, 1e-5);
}

TEST_F(OptimizerTest, MomentumSlotHoldsTheVelocity) {
  SGD sgd({.learning_rate = 0.5, .momentum = 0.9});
  Variable w = make_variable({.initial_value = f64({0.0, 0.0}), .name = "dense/kernel"});
  sgd.apply_gradients({{f64({1.0, -2.0}), w}});
  sgd.apply_gradients({{f64({1.0, -2.0}), w}});
  // v1 = −0.5·g; v2 = 0.9·v1 − 0.5·g = −0.95·g.
  testing::expect_near_all(host(sgd.get_slot(w, "momentum")), {-0.95, 1.9}, 1e-15, "momentum");
  EXPECT_EQ(sgd.get_slot(w, "momentum").name(), "dense/kernel/momentum");
}

TEST_F(OptimizerTest, SgdConfigAndErrors) {
  SGD sgd({.learning_rate = 0.01, .momentum = 0.9, .nesterov = true});
  EXPECT_EQ(
      sgd.get_config(),
      "{\"name\": \"SGD\", \"learning_rate\": 0.01, \"weight_decay\": null, \"clipnorm\": null, "
      "\"global_clipnorm\": null, \"clipvalue\": null, \"gradient_accumulation_steps\": null, \"momentum\": 0.9, \"nesterov\": true}");
  EXPECT_THROW_WITH(SGD({.momentum = 1.5}), InvalidArgumentError, "momentum", "[0, 1]", "1.5");
  EXPECT_THROW_WITH(SGD(-0.1), InvalidArgumentError, "learning_rate", "-0.1");
}

// An optimizer written outside chorus returns its own get_config fields; get_config reads them as
// JSON, so a fragment that is not JSON is a clear error, not a broken config text.
class HandWritten final : public Optimizer {
 public:
  explicit HandWritten(std::string fields) : Optimizer("HandWritten", 0.5, {}), fields_(std::move(fields)) {}

 private:
  std::vector<std::string> slot_names_impl() const override { return {}; }
  void update_step(const Tensor&, Tensor&, std::vector<Tensor>&, const Step&) override {}
  std::string config_fields() const override { return fields_; }
  std::string fields_;
};

TEST_F(OptimizerTest, ConfigFieldsOfAnOutsideOptimizerAreCheckedAsJson) {
  EXPECT_EQ(HandWritten("\"k\": [1, 2.5, \"x\"], \"tiny\": 1e-07").get_config(),
            "{\"name\": \"HandWritten\", \"learning_rate\": 0.5, \"weight_decay\": null, \"clipnorm\": null, "
            "\"global_clipnorm\": null, \"clipvalue\": null, \"gradient_accumulation_steps\": null, "
            "\"k\": [1, 2.5, \"x\"], \"tiny\": 1e-07}");
  EXPECT_EQ(HandWritten("").get_config().back(), '}');
  EXPECT_THROW_WITH(HandWritten("\"k\": 1,").get_config(), InvalidArgumentError, "HandWritten's config_fields()",
                    "is not valid JSON");
  EXPECT_THROW_WITH(HandWritten("\"k\": 1, \"k\": 2").get_config(), InvalidArgumentError, "appears twice");
}

}  // namespace
}  // namespace chorus::optimizers
