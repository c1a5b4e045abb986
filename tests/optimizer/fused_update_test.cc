// The built-in optimizers' fused multi-tensor update (Optimizer::fused_update, ops/training.h)
// against their variable-by-variable op sequences (CHORUS_FUSED_OPTIMIZER=0), training the same
// model on the same batches: the weights and slots are bitwise equal for Adam, Adam with weight
// decay, AdamW, SGD with Nesterov momentum and weight decay, centered RMSprop with momentum, under
// MirroredStrategy on 2 logical CPUs at ZeRO stages 0, 2 and 3 (slices and shards) and with
// offload (each variable alone, on the host). The timeline shows the fused path taken — one
// "update / fused" event per replica and step at stage 0 — and none with the switch off; AMSGrad,
// which has no fused rule, leaves no event and still trains.
#include <gtest/gtest.h>

#include <cstdlib>

#include "tests/optimizer/sharding_util.h"
#include <chorus/core/timeline.h>
#include <chorus/optimizer/rmsprop.h>

namespace chorus::sharding_testing {
namespace {

constexpr int kSteps = 4;

std::shared_ptr<optimizers::Optimizer> make(const std::string& which) {
  if (which == "AdamDecay")
    return std::make_shared<optimizers::Adam>(optimizers::AdamOptions{.learning_rate = 0.05, .weight_decay = 0.1});
  if (which == "AdamW")
    return std::make_shared<optimizers::AdamW>(optimizers::AdamWOptions{.learning_rate = 0.05, .weight_decay = 0.1});
  if (which == "AMSGrad")
    return std::make_shared<optimizers::Adam>(optimizers::AdamOptions{.learning_rate = 0.05, .amsgrad = true});
  if (which == "SgdNesterovDecay")
    return std::make_shared<optimizers::SGD>(
        optimizers::SGDOptions{.learning_rate = 0.05, .momentum = 0.9, .nesterov = true, .weight_decay = 0.01});
  if (which == "RMSpropCenteredMomentum")
    return std::make_shared<optimizers::RMSprop>(
        optimizers::RMSpropOptions{.learning_rate = 0.01, .momentum = 0.5, .centered = true});
  return std::make_shared<optimizers::Adam>(optimizers::AdamOptions{.learning_rate = 0.05});
}

struct Trained {
  State state;
  int fused_events = 0;
};

Trained train(const std::string& which, int stage, bool offload, bool fused) {
  setenv("CHORUS_FUSED_OPTIMIZER", fused ? "1" : "0", 1);
  distribute::MirroredStrategy strategy(cpus(2), {.sharding = {.stage = stage, .offload_optimizer_state = offload}});
  std::unique_ptr<model::Sequential> m;
  std::shared_ptr<optimizers::Optimizer> opt;
  {
    auto scope = strategy.scope();
    m = make_model();
    opt = make(which);
  }
  timeline::start_capture();
  train_loop(strategy, *m, *opt, 0, kSteps);
  const std::optional<timeline::Capture> capture = timeline::stop_capture();
  unsetenv("CHORUS_FUSED_OPTIMIZER");
  Trained out;
  out.state = snapshot(*m, *opt);
  for (const timeline::CapturedEvent& e : capture->events)
    if (e.category == "update" && e.name == "fused") ++out.fused_events;
  return out;
}

class FusedUpdate : public ::testing::TestWithParam<std::tuple<std::string, int, bool>> {};

TEST_P(FusedUpdate, BitwiseTheOpSequenceAndTakenWhereItApplies) {
  const auto& [which, stage, offload] = GetParam();
  make_cpus(2);
  const Trained fused = train(which, stage, offload, true);
  const Trained plain = train(which, stage, offload, false);
  expect_states_equal(fused.state, plain.state, 0.0, which + " at stage " + std::to_string(stage));
  EXPECT_EQ(plain.fused_events, 0);
  if (which == "AMSGrad") {
    EXPECT_EQ(fused.fused_events, 0) << "AMSGrad has no fused rule";
  } else if (offload) {
    EXPECT_GT(fused.fused_events, 0);  // each variable alone on its host device
  } else {
    // Every variable of a replica in one group (one device, float32): one event per replica and step.
    EXPECT_EQ(fused.fused_events, 2 * kSteps) << which;
  }
}

std::string name(const ::testing::TestParamInfo<std::tuple<std::string, int, bool>>& info) {
  return std::get<0>(info.param) + "_stage" + std::to_string(std::get<1>(info.param)) +
         (std::get<2>(info.param) ? "_offload" : "");
}

INSTANTIATE_TEST_SUITE_P(Optimizers, FusedUpdate,
                         ::testing::Combine(::testing::Values("Adam", "AdamDecay", "AdamW", "AMSGrad",
                                                              "SgdNesterovDecay", "RMSpropCenteredMomentum"),
                                            ::testing::Values(0, 2, 3), ::testing::Values(false)),
                         name);
INSTANTIATE_TEST_SUITE_P(Offload, FusedUpdate,
                         ::testing::Combine(::testing::Values("Adam", "AdamW", "RMSpropCenteredMomentum"),
                                            ::testing::Values(3), ::testing::Values(true)),
                         name);

}  // namespace
}  // namespace chorus::sharding_testing
