// LossScaleOptimizer: Keras's dynamic loss scaling (scale, unscale, skip on Inf/NaN, halve, grow),
// one decision for every replica under MirroredStrategy, the checkpoint keys of TensorFlow's
// LossScaleOptimizerV3 (checked against the keys tf_keras writes: optimizer/loss_scale/...), and
// the argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

#include "tests/optimizer/test_util.h"
#include <chorus/checkpoint/bundle.h>
#include <chorus/checkpoint/checkpoint.h>
#include <chorus/core/distribution.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/distribute/mirrored_variable.h>
#include <chorus/optimizer/optimizers.h>

namespace chorus::optimizers {
namespace {

using chorus::testing::TempDir;
using distribute::MirroredStrategy;
using distribute::MirroredVariable;
using testing::f64;
using testing::host;
using testing::OptimizerTest;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST_F(OptimizerTest, LossScaleDefaultsAreKeras) {
  LossScaleOptimizer opt(std::make_shared<SGD>(0.1));
  EXPECT_EQ(opt.loss_scale(), 32768.0);
  EXPECT_EQ(opt.dynamic_counter(), 0);
  EXPECT_TRUE(opt.dynamic());
  EXPECT_EQ(opt.dynamic_growth_steps(), 2000);
  EXPECT_EQ(opt.learning_rate(), 0.1);
  EXPECT_EQ(opt.get_config(), "{\"inner_optimizer\": " + opt.inner_optimizer().get_config() +
                                  ", \"dynamic\": true, \"initial_scale\": 32768.0, \"dynamic_growth_steps\": 2000}");
  // The inner optimizer's iterations, then the loss scale and its counter.
  const std::vector<Variable> vars = opt.variables();
  ASSERT_EQ(vars.size(), 3u);
  EXPECT_EQ(vars[0].impl(), opt.inner_optimizer().iterations().impl());
  EXPECT_EQ(vars[1].name(), "current_loss_scale");
  EXPECT_EQ(vars[2].name(), "good_steps");
  opt.set_learning_rate(0.5);  // LearningRateScheduler's way: reaches the inner optimizer
  EXPECT_EQ(opt.inner_optimizer().learning_rate(), 0.5);
}

TEST_F(OptimizerTest, LossIsScaledAndGradientsUnscaled) {
  LossScaleOptimizer opt(std::make_shared<SGD>(0.1), {.initial_scale = 1024.0});
  const Tensor loss = f64({3.0});
  EXPECT_EQ(opt.get_scaled_loss(loss).to_vector<double>(), std::vector<double>{3072.0});
  const std::vector<Tensor> g = opt.get_unscaled_gradients({f64({2048.0, -512.0}), Tensor()});
  EXPECT_EQ(g[0].to_vector<double>(), (std::vector<double>{2.0, -0.5}));
  EXPECT_FALSE(g[1].defined());  // a missing gradient stays missing
  // A float32 loss is scaled in float32.
  EXPECT_EQ(opt.get_scaled_loss(Tensor::scalar<float>(0.5f)).dtype(), DType::kFloat32);
}

TEST_F(OptimizerTest, MinimizeWithLossScalingMatchesPlainSgd) {
  Variable w = make_variable({.initial_value = f64({1.0, -2.0}), .name = "w"});
  Variable w_ref = make_variable({.initial_value = f64({1.0, -2.0}), .name = "w_ref"});
  LossScaleOptimizer opt(std::make_shared<SGD>(0.1));
  SGD ref(0.1);
  for (int k = 0; k < 3; ++k) {
    // loss = sum(w^2): the scaled gradient 2·w·32768 is exact in float64, and so is its unscaling.
    opt.minimize([&] { return ops::reduce_sum(ops::square(w.value())); }, {w});
    ref.minimize([&] { return ops::reduce_sum(ops::square(w_ref.value())); }, {w_ref});
    EXPECT_EQ(host(w), host(w_ref)) << "step " << k;
  }
  EXPECT_EQ(opt.iterations().read_value().item<std::int64_t>(), 3);
  EXPECT_EQ(opt.dynamic_counter(), 3);
}

TEST_F(OptimizerTest, NonFiniteGradientsSkipTheStepAndHalveTheScale) {
  Variable w = make_variable({.initial_value = f64({1.0, 2.0}), .name = "w"});
  LossScaleOptimizer opt(std::make_shared<Adam>(AdamOptions{.learning_rate = 0.1}), {.initial_scale = 4.0});
  opt.apply_gradients({{f64({0.5, 0.5}), w}});
  EXPECT_EQ(opt.dynamic_counter(), 1);
  const std::vector<double> after_one = host(w);
  for (double bad : {kInf, -kInf, kNaN}) {
    opt.apply_gradients({{f64({0.5, bad}), w}});
    EXPECT_EQ(host(w), after_one) << bad;  // nothing applied, not even to the finite element
    EXPECT_EQ(opt.dynamic_counter(), 0) << bad;
  }
  EXPECT_EQ(opt.loss_scale(), 1.0);                                  // 4 → 2 → 1 → 1: never below 1
  EXPECT_EQ(opt.iterations().read_value().item<std::int64_t>(), 4);  // skipped steps count (Keras)
  // Adam's moments were not touched by the skipped steps either.
  const std::vector<double> m = host(opt.get_slot(w, "m"));
  EXPECT_NEAR(m[0], 0.05, 1e-15);
  EXPECT_NEAR(m[1], 0.05, 1e-15);
  opt.apply_gradients({{f64({0.5, 0.5}), w}});
  EXPECT_NE(host(w), after_one);
}

TEST_F(OptimizerTest, TheScaleDoublesAfterGrowthStepsFiniteSteps) {
  Variable w = make_variable({.initial_value = f64({1.0}), .name = "w"});
  LossScaleOptimizer opt(std::make_shared<SGD>(0.01), {.initial_scale = 8.0, .dynamic_growth_steps = 3});
  for (int k = 1; k <= 7; ++k) {
    opt.apply_gradients({{f64({1.0}), w}});
    const double want_scale = k < 3 ? 8.0 : k < 6 ? 16.0 : 32.0;
    EXPECT_EQ(opt.loss_scale(), want_scale) << "after step " << k;
    EXPECT_EQ(opt.dynamic_counter(), k % 3) << "after step " << k;
  }
  opt.apply_gradients({{f64({kNaN}), w}});
  EXPECT_EQ(opt.loss_scale(), 16.0);
  EXPECT_EQ(opt.dynamic_counter(), 0);
}

TEST_F(OptimizerTest, AFixedScaleStaysButNonFiniteStepsAreStillSkipped) {
  Variable w = make_variable({.initial_value = f64({1.0}), .name = "w"});
  LossScaleOptimizer opt(std::make_shared<SGD>(0.5),
                         {.dynamic = false, .initial_scale = 128.0, .dynamic_growth_steps = 1});
  opt.apply_gradients({{f64({1.0}), w}});
  opt.apply_gradients({{f64({kInf}), w}});
  EXPECT_EQ(host(w), std::vector<double>{0.5});
  EXPECT_EQ(opt.loss_scale(), 128.0);
  EXPECT_EQ(opt.dynamic_counter(), 0);
}

TEST_F(OptimizerTest, LossScaleArgumentErrors) {
  EXPECT_THROW_WITH(LossScaleOptimizer(nullptr), InvalidArgumentError, "inner optimizer is null");
  auto inner = std::make_shared<LossScaleOptimizer>(std::make_shared<SGD>(0.1));
  EXPECT_THROW_WITH(LossScaleOptimizer{inner}, InvalidArgumentError, "cannot wrap another LossScaleOptimizer");
  for (double s : {0.0, -1.0, kInf, kNaN})
    EXPECT_THROW_WITH(LossScaleOptimizer(std::make_shared<SGD>(0.1), {.initial_scale = s}), InvalidArgumentError,
                      "initial_scale must be a finite number > 0");
  EXPECT_THROW_WITH(LossScaleOptimizer(std::make_shared<SGD>(0.1), {.dynamic_growth_steps = 0}), InvalidArgumentError,
                    "dynamic_growth_steps must be a positive integer, got 0");
}

// A step whose gradient is Inf on one replica only is skipped by every replica: the check reads
// the all-reduced gradients, which carry the Inf to all of them.
class TwoReplicasLossScale : public ::testing::Test {
 protected:
  void SetUp() override { testing::make_cpus(2); }
  void TearDown() override { chorus::internal::reset_runtime_for_testing(); }
};

TEST_F(TwoReplicasLossScale, OneReplicasInfSkipsTheStepOnEveryReplica) {
  MirroredStrategy strategy(testing::cpus(2));
  Variable w;
  std::shared_ptr<LossScaleOptimizer> opt;
  {
    auto scope = strategy.scope();
    w = make_variable({.initial_value = f64({1.0, 2.0}), .name = "w"});
    opt = std::make_shared<LossScaleOptimizer>(std::make_shared<SGD>(0.5), LossScaleOptions{.initial_scale = 64.0});
  }
  const auto step = [&](int bad_replica) {
    strategy.run([&] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      opt->apply_gradients({{f64({0.25, r == bad_replica ? kInf : 0.25}), w}});
    });
  };
  step(-1);  // finite everywhere: w ← w − 0.5·(0.25 + 0.25)
  EXPECT_EQ(host(w), (std::vector<double>{0.75, 1.75}));
  step(1);  // replica 1 alone sees an Inf
  for (const Variable& v : {w, opt->variables()[1], opt->variables()[2], opt->iterations()}) {
    const auto* mv = dynamic_cast<const MirroredVariable*>(v.impl().get());
    ASSERT_NE(mv, nullptr) << v.name();
    const auto bytes = testing::component_bytes(v);
    ASSERT_EQ(bytes.size(), 2u);
    EXPECT_EQ(bytes[0], bytes[1]) << v.name() << ": the replicas disagree";
  }
  EXPECT_EQ(host(w), (std::vector<double>{0.75, 1.75}));  // skipped on both replicas
  EXPECT_EQ(opt->loss_scale(), 32.0);
  EXPECT_EQ(opt->dynamic_counter(), 0);
  EXPECT_EQ(opt->iterations().read_value().item<std::int64_t>(), 2);
  step(-1);
  EXPECT_EQ(host(w), (std::vector<double>{0.5, 1.5}));
  EXPECT_EQ(opt->dynamic_counter(), 1);
}

// The keys are TensorFlow's (LossScaleOptimizerV3 delegates to the inner optimizer, so its iter and
// slots sit under "optimizer", the scale under "optimizer/loss_scale"), and a restore before the
// first step brings back the scale, the counter and — once the step creates them — the slots.
TEST_F(OptimizerTest, LossScaleCheckpointKeysAndRestore) {
  TempDir dir;
  Variable w = make_variable({.initial_value = f64({1.0, 2.0}), .name = "w"});
  auto opt = std::make_shared<LossScaleOptimizer>(std::make_shared<Adam>(AdamOptions{.learning_rate = 0.1}),
                                                  LossScaleOptions{.initial_scale = 16.0, .dynamic_growth_steps = 2});
  opt->apply_gradients({{f64({1.0, 1.0}), w}});
  opt->apply_gradients({{f64({1.0, kNaN}), w}});  // scale 8, counter 0
  opt->apply_gradients({{f64({1.0, 1.0}), w}});   // counter 1
  const std::string path = train::Checkpoint({{"optimizer", opt}, {"w", w}}).write(dir / "ckpt");
  const std::vector<std::string> keys = train::BundleReader(path).keys();
  for (const char* key : {"optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE",
                          "optimizer/loss_scale/current_loss_scale/.ATTRIBUTES/VARIABLE_VALUE",
                          "optimizer/loss_scale/good_steps/.ATTRIBUTES/VARIABLE_VALUE",
                          "w/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE",
                          "w/.OPTIMIZER_SLOT/optimizer/v/.ATTRIBUTES/VARIABLE_VALUE"})
    EXPECT_NE(std::find(keys.begin(), keys.end(), key), keys.end()) << key;

  Variable w2 = make_variable({.initial_value = f64({0.0, 0.0}), .name = "w"});
  auto opt2 = std::make_shared<LossScaleOptimizer>(std::make_shared<Adam>(AdamOptions{.learning_rate = 0.1}),
                                                   LossScaleOptions{.initial_scale = 16.0, .dynamic_growth_steps = 2});
  train::Checkpoint restored({{"optimizer", opt2}, {"w", w2}});
  restored.read(path).assert_existing_objects_matched();
  EXPECT_EQ(opt2->loss_scale(), 8.0);
  EXPECT_EQ(opt2->dynamic_counter(), 1);
  EXPECT_EQ(opt2->iterations().read_value().item<std::int64_t>(), 3);
  opt2->build({w2});  // the slots are created now and take their saved values
  EXPECT_EQ(host(opt2->get_slot(w2, "m")), host(opt->get_slot(w, "m")));
  EXPECT_EQ(host(opt2->get_slot(w2, "v")), host(opt->get_slot(w, "v")));
  // One more step on each gives the same weights and the same scale (16: the counter reached 2).
  opt->apply_gradients({{f64({0.5, -0.5}), w}});
  opt2->apply_gradients({{f64({0.5, -0.5}), w2}});
  EXPECT_EQ(host(w2), host(w));
  EXPECT_EQ(opt2->loss_scale(), 16.0);
}

}  // namespace
}  // namespace chorus::optimizers
