// Optimizer::set_scalars_on_device (a captured step's way to get the step's scalars, optimizer.h):
// training the same model on the same batches with the scalars read from a block on each replica's
// device (prepare_step before every step) gives bitwise the weights, slots and step counter of the
// scalars passed by value, for Adam with a decaying schedule, Adam and SGD with weight decay, AdamW
// and centered RMSprop with momentum, under MirroredStrategy on 2 logical CPUs (one block per
// replica device). Misuse is a FailedPreconditionError; why_not_capturable names each obstacle.
#include <gtest/gtest.h>

#include "tests/optimizer/sharding_util.h"
#include <chorus/optimizer/learning_rate_schedule.h>
#include <chorus/optimizer/loss_scale_optimizer.h>
#include <chorus/optimizer/rmsprop.h>

namespace chorus::sharding_testing {
namespace {

constexpr int kSteps = 5;

std::shared_ptr<optimizers::Optimizer> make(const std::string& which) {
  if (which == "AdamSchedule")
    return std::make_shared<optimizers::Adam>(
        optimizers::AdamOptions{.learning_rate = optimizers::schedules::ExponentialDecay(0.05, 2, 0.5)});
  if (which == "AdamDecay")
    return std::make_shared<optimizers::Adam>(optimizers::AdamOptions{.learning_rate = 0.05, .weight_decay = 0.1});
  if (which == "AdamW")
    return std::make_shared<optimizers::AdamW>(optimizers::AdamWOptions{
        .learning_rate = optimizers::schedules::ExponentialDecay(0.05, 1, 0.7), .weight_decay = 0.1});
  if (which == "SgdNesterovDecay")
    return std::make_shared<optimizers::SGD>(
        optimizers::SGDOptions{.learning_rate = 0.05, .momentum = 0.9, .nesterov = true, .weight_decay = 0.01});
  return std::make_shared<optimizers::RMSprop>(
      optimizers::RMSpropOptions{.learning_rate = 0.01, .momentum = 0.5, .centered = true});
}

State train(const std::string& which, bool on_device) {
  distribute::MirroredStrategy strategy(cpus(2));
  std::unique_ptr<model::Sequential> m;
  std::shared_ptr<optimizers::Optimizer> opt;
  {
    auto scope = strategy.scope();
    m = make_model();
    opt = make(which);
  }
  EXPECT_EQ(opt->why_not_capturable(m->trainable_variables()), "") << which;
  opt->set_scalars_on_device(on_device);
  for (int s = 0; s < kSteps; ++s) {
    if (on_device) opt->prepare_step();
    train_loop(strategy, *m, *opt, s, 1);
  }
  return snapshot(*m, *opt);
}

class ScalarsOnDevice : public ::testing::TestWithParam<std::string> {};

TEST_P(ScalarsOnDevice, BitwiseTheScalarsByValue) {
  make_cpus(2);
  const State by_value = train(GetParam(), false);
  const State on_device = train(GetParam(), true);
  expect_states_equal(on_device, by_value, 0.0, GetParam());
  EXPECT_EQ(on_device.iterations, kSteps);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, ScalarsOnDevice,
                         ::testing::Values("AdamSchedule", "AdamDecay", "AdamW", "SgdNesterovDecay",
                                           "RMSpropCenteredMomentum"));

TEST(ScalarsOnDeviceMisuse, IsAFailedPreconditionAndNamesWhatCannotBeCaptured) {
  make_cpus(2);
  distribute::MirroredStrategy strategy(cpus(2));
  std::unique_ptr<model::Sequential> m;
  std::shared_ptr<optimizers::Optimizer> adam, amsgrad, accumulating;
  {
    auto scope = strategy.scope();
    m = make_model();
    adam = make("AdamDecay");
    amsgrad = std::make_shared<optimizers::Adam>(optimizers::AdamOptions{.amsgrad = true});
    accumulating = std::make_shared<optimizers::Adam>(optimizers::AdamOptions{.gradient_accumulation_steps = 2});
  }
  const std::vector<Variable> vars = m->trainable_variables();
  EXPECT_THROW(adam->prepare_step(), FailedPreconditionError);  // scalars on the device not asked for
  // On, but no block written for the replicas' devices: the step says so before updating anything.
  adam->set_scalars_on_device(true);
  EXPECT_THROW(train_loop(strategy, *m, *adam, 0, 1), FailedPreconditionError);
  adam->set_scalars_on_device(false);

  EXPECT_NE(amsgrad->why_not_capturable(vars).find("no fused update"), std::string::npos);
  EXPECT_NE(accumulating->why_not_capturable(vars).find("gradient_accumulation_steps"), std::string::npos);
  adam->set_check_numerics(true);
  EXPECT_NE(adam->why_not_capturable(vars).find("check_numerics"), std::string::npos);
  adam->set_check_numerics(false);
  optimizers::LossScaleOptimizer scaled(make("AdamDecay"));
  EXPECT_NE(scaled.why_not_capturable(vars).find("LossScaleOptimizer"), std::string::npos);
  setenv("CHORUS_FUSED_OPTIMIZER", "0", 1);
  EXPECT_NE(adam->why_not_capturable(vars).find("CHORUS_FUSED_OPTIMIZER"), std::string::npos);
  unsetenv("CHORUS_FUSED_OPTIMIZER");
  EXPECT_EQ(adam->why_not_capturable(vars), "");
}

}  // namespace
}  // namespace chorus::sharding_testing
