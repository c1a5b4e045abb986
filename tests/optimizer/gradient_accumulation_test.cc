// Gradient accumulation (Keras 3's gradient_accumulation_steps, DDP's no_sync; optimizer.h
// "Gradient accumulation"): N calls on micro-batches of B rows update as one call on N·B rows
// (1e-6 relative, fit and custom loops, 1 and 2 replicas, Adam / SGD with momentum / Adam with
// global_clipnorm, at ZeRO stages 0, 2 and 3); the accumulating calls move nothing between the
// replicas and change no weight; learning-rate schedules and Adam's step count see updates, not
// calls; accumulators are checkpointed and a save between two micro-steps resumes exactly, also on
// another replica count; bad options are refused with Keras's message.
#include <gtest/gtest.h>

#include <limits>

#include "tests/core/test_util.h"
#include "tests/optimizer/sharding_util.h"
#include <chorus/checkpoint/checkpoint.h>
#include <chorus/model/mixed_precision.h>
#include <chorus/optimizer/loss_scale_optimizer.h>

namespace chorus::sharding_testing {
namespace {

using chorus::testing::TempDir;

std::shared_ptr<optimizers::Optimizer> make(Opt o, std::optional<int> steps) {
  switch (o) {
    case Opt::kSgdMomentum:
      return std::make_shared<optimizers::SGD>(
          optimizers::SGDOptions{.learning_rate = 0.1, .momentum = 0.9, .gradient_accumulation_steps = steps});
    case Opt::kAdamGlobalClipnorm:
      return std::make_shared<optimizers::Adam>(optimizers::AdamOptions{
          .learning_rate = 0.05, .global_clipnorm = 0.05, .gradient_accumulation_steps = steps});
    default:
      return std::make_shared<optimizers::Adam>(
          optimizers::AdamOptions{.learning_rate = 0.05, .gradient_accumulation_steps = steps});
  }
}

// Rows [0, 4·kGlobalRows) of steps 0–3's batches, as one dataset in `dtype`.
data::Dataset rows(DType dtype) {
  std::vector<Tensor> xs, ys;
  for (int s = 0; s < 4; ++s) {
    auto [x, y] = batch(s);
    xs.push_back(ops::cast(x, dtype));
    ys.push_back(ops::cast(y, dtype));
  }
  return data::Dataset::from_tensor_slices({ops::concat(xs, 0), ops::concat(ys, 0)});
}

// The model's layers under `policy` ("float64": the identity N·B = N micro-batches holds to
// float64 rounding, so a 1e-6 bound tests the algorithm, not float32's summation order).
struct PolicyScope {
  explicit PolicyScope(const std::string& policy) { mixed_precision::set_global_policy(policy); }
  ~PolicyScope() { mixed_precision::set_global_policy("float32"); }
};

// fit over the same 48 rows: in batches of `batch_rows`, accumulating `steps` calls per update.
std::vector<Tensor> fit_weights(int replicas, int stage, Opt o, std::int64_t batch_rows, std::optional<int> steps,
                                DType dtype = DType::kFloat64) {
  make_cpus(replicas);
  PolicyScope policy(std::string(dtype_name(dtype)));
  distribute::MirroredStrategy strategy(cpus(replicas), {.sharding = {.stage = stage}});
  std::unique_ptr<model::Sequential> m;
  std::shared_ptr<optimizers::Optimizer> opt;
  {
    auto scope = strategy.scope();
    m = make_model();
    opt = make(o, steps);
    m->compile(opt, std::make_shared<losses::MeanSquaredError>());
  }
  m->fit(rows(dtype).batch(batch_rows), {.epochs = 2, .verbose = 0});
  EXPECT_EQ(opt->iterations().read_value().item<std::int64_t>(), 2 * 48 / batch_rows);
  std::vector<Tensor> out;
  for (const Variable& v : m->trainable_variables()) out.push_back(checkpoint_value(v).to("/cpu:0"));
  return out;
}

using Param = std::tuple<int, int, Opt>;  // replicas, ZeRO stage, optimizer

class Accumulation : public ::testing::TestWithParam<Param> {
 protected:
  void TearDown() override { chorus::internal::reset_runtime_for_testing(); }
};

TEST_P(Accumulation, MicroBatchesUpdateAsTheirUnion) {
  const auto [replicas, stage, o] = GetParam();
  // 3 micro-batches of 4 rows per update against batches of 12: 4 updates over 2 epochs each.
  const std::vector<Tensor> big = fit_weights(replicas, 0, o, 12, std::nullopt);
  const std::vector<Tensor> micro = fit_weights(replicas, stage, o, 4, 3);
  const std::vector<Tensor> initial = [&] {
    make_cpus(replicas);
    distribute::MirroredStrategy strategy(cpus(replicas));
    PolicyScope policy("float64");
    auto scope = strategy.scope();
    std::vector<Tensor> w;
    for (const Variable& v : make_model()->trainable_variables()) w.push_back(v.read_value().to("/cpu:0"));
    return w;
  }();
  ASSERT_EQ(big.size(), micro.size());
  for (std::size_t i = 0; i < big.size(); ++i) {
    EXPECT_LE(relative_difference(micro[i], big[i]), 1e-6) << "variable " << i;
    EXPECT_GT(relative_difference(big[i], initial[i]), 1e-3) << "variable " << i << " did not train";
  }
}

// In float32 the two differ by the summation order of the gradients (three sums of 4 rows against
// one of 12), a few float32 roundings per step: within 1e-5 after 4 updates.
TEST(AccumulationFloat32, MicroBatchesUpdateAsTheirUnionToFloat32Rounding) {
  const std::vector<Tensor> big = fit_weights(2, 0, Opt::kAdam, 12, std::nullopt, DType::kFloat32);
  const std::vector<Tensor> micro = fit_weights(2, 0, Opt::kAdam, 4, 3, DType::kFloat32);
  for (std::size_t i = 0; i < big.size(); ++i) EXPECT_LE(relative_difference(micro[i], big[i]), 1e-5) << i;
  chorus::internal::reset_runtime_for_testing();
}

INSTANTIATE_TEST_SUITE_P(All, Accumulation,
                         ::testing::Combine(::testing::Values(1, 2), ::testing::Values(0, 2, 3),
                                            ::testing::Values(Opt::kAdam, Opt::kSgdMomentum, Opt::kAdamGlobalClipnorm)),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "replicas_stage" +
                                  std::to_string(std::get<1>(info.param)) + "_" + opt_name(std::get<2>(info.param));
                         });

TEST(AccumulationSteps, AccumulatingCallsMoveNothingAndChangeNoWeight) {
  make_cpus(2);
  distribute::MirroredStrategy strategy(cpus(2));
  std::unique_ptr<model::Sequential> m;
  std::shared_ptr<optimizers::Optimizer> opt;
  {
    auto scope = strategy.scope();
    m = make_model();
    opt = make(Opt::kAdam, 2);
  }
  const std::vector<unsigned char> before = bytes_of(checkpoint_value(m->trainable_variables()[0]));
  (void)strategy.read_and_reset_all_reduce_counters();
  train_loop(strategy, *m, *opt, 0, 1);  // call 1 of 2: accumulate
  EXPECT_EQ(strategy.read_and_reset_all_reduce_counters().collectives, 0);
  EXPECT_EQ(bytes_of(checkpoint_value(m->trainable_variables()[0])), before);
  EXPECT_EQ(opt->iterations().read_value().item<std::int64_t>(), 1);
  train_loop(strategy, *m, *opt, 1, 1);  // call 2 of 2: one all-reduce, one update
  EXPECT_GT(strategy.read_and_reset_all_reduce_counters().collectives, 0);
  EXPECT_NE(bytes_of(checkpoint_value(m->trainable_variables()[0])), before);
  // Accumulators: one per variable, after its slots, zero again after the update.
  const std::vector<Variable> vars = opt->variables();
  ASSERT_EQ(vars.size(), 1 + 3 * m->trainable_variables().size());
  EXPECT_EQ(vars[3].name(), m->trainable_variables()[0].name() + "/gradient_accumulator");
  for (float f : vars[3].read_value().to_vector<float>()) EXPECT_EQ(f, 0.0f);
}

TEST(AccumulationSteps, SchedulesAndAdamCountUpdatesNotCalls) {
  const optimizers::LearningRate schedule(std::shared_ptr<const optimizers::LearningRateSchedule>(
      std::make_shared<optimizers::schedules::PiecewiseConstantDecay>(std::vector<std::int64_t>{0, 1},
                                                                      std::vector<double>{0.5, 0.25, 0.125})));
  Variable w = make_variable({.initial_value = Tensor::from_vector<float>({1, 2}, {2}), .name = "w"});
  optimizers::SGD sgd({.learning_rate = schedule, .gradient_accumulation_steps = 2});
  const Tensor g = Tensor::from_vector<float>({1, 1}, {2});
  EXPECT_EQ(sgd.learning_rate(), 0.5);
  sgd.apply_gradients({{g, w}});
  EXPECT_EQ(sgd.learning_rate(), 0.5);  // one call, no update yet
  sgd.apply_gradients({{g, w}});
  EXPECT_EQ(sgd.iterations().read_value().item<std::int64_t>(), 2);
  EXPECT_EQ(sgd.learning_rate(), 0.25);                                            // after one update
  EXPECT_EQ(w.read_value().to_vector<float>(), (std::vector<float>{0.5f, 1.5f}));  // lr 0.5 × mean 1
  // Adam's first update with accumulation is Adam's first step (bias correction at t = 1): |Δ| ≈ lr.
  Variable a = make_variable({.initial_value = Tensor::from_vector<float>({0, 0}, {2}), .name = "a"});
  optimizers::Adam adam({.learning_rate = 0.1, .gradient_accumulation_steps = 3});
  for (int i = 0; i < 3; ++i) adam.apply_gradients({{Tensor::from_vector<float>({1, -4}, {2}), a}});
  const std::vector<float> after = a.read_value().to_vector<float>();
  EXPECT_NEAR(after[0], -0.1f, 1e-6);
  EXPECT_NEAR(after[1], 0.1f, 1e-6);
}

// A LossScaleOptimizer decides on the accumulated mean: an inf in one micro-step skips that
// update (the scale halves), and the accumulators start again from zero.
TEST(AccumulationSteps, LossScaleOptimizerSkipsAnUpdateWhoseMicroStepOverflowed) {
  Variable w = make_variable({.initial_value = Tensor::from_vector<float>({1, 2}, {2}), .name = "w"});
  optimizers::LossScaleOptimizer lso(
      std::make_shared<optimizers::SGD>(optimizers::SGDOptions{.learning_rate = 0.5, .gradient_accumulation_steps = 2}),
      optimizers::LossScaleOptions{.initial_scale = 8});
  lso.apply_gradients({{Tensor::from_vector<float>({std::numeric_limits<float>::infinity(), 1}, {2}), w}});
  lso.apply_gradients({{Tensor::from_vector<float>({1, 1}, {2}), w}});
  EXPECT_EQ(w.read_value().to_vector<float>(), (std::vector<float>{1, 2})) << "the overflowed update was applied";
  EXPECT_EQ(lso.loss_scale(), 4.0);
  lso.apply_gradients({{Tensor::from_vector<float>({1, 1}, {2}), w}});
  lso.apply_gradients({{Tensor::from_vector<float>({3, 3}, {2}), w}});
  EXPECT_EQ(w.read_value().to_vector<float>(), (std::vector<float>{0, 1}));  // lr 0.5 × mean 2
}

TEST(AccumulationSteps, OptionsBelowTwoAreRefused) {
  for (int steps : {1, 0, -3}) {
    try {
      optimizers::Adam adam({.gradient_accumulation_steps = steps});
      ADD_FAILURE() << steps << " was accepted";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("`gradient_accumulation_steps` must be an integer >= 2"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_NE(optimizers::SGD({.gradient_accumulation_steps = 4}).get_config().find("\"gradient_accumulation_steps\": 4"),
            std::string::npos);
}

// Saved between the two micro-steps of an update: the accumulators hold the first micro-step's
// gradients; restored into a fresh model (2 replicas → 2, and → 1) the run ends where the
// uninterrupted one does.
TEST(AccumulationSteps, ASaveBetweenMicroStepsResumesExactly) {
  TempDir dir;
  auto run = [&](int replicas, int first, int steps, const std::string& save, const std::string& restore) {
    make_cpus(replicas);
    distribute::MirroredStrategy strategy(cpus(replicas));
    std::unique_ptr<model::Sequential> m;
    std::shared_ptr<optimizers::Optimizer> opt;
    {
      auto scope = strategy.scope();
      m = make_model();
      opt = make(Opt::kAdam, 2);
    }
    train::Checkpoint ckpt({{"model", *m}, {"optimizer", *opt}});
    std::optional<train::LoadStatus> status;
    if (!restore.empty()) status = ckpt.read(restore);
    train_loop(strategy, *m, *opt, first, steps);
    if (status) status->assert_consumed();
    if (!save.empty()) ckpt.write(save);
    std::vector<Tensor> w;
    for (const Variable& v : m->trainable_variables()) w.push_back(checkpoint_value(v).to("/cpu:0"));
    return w;
  };
  const std::vector<Tensor> uninterrupted = run(2, 0, 5, "", "");
  run(2, 0, 3, dir.path() + "/mid", "");  // 3 calls: one update, then one micro-step accumulated
  for (const int replicas : {2, 1}) {
    const std::vector<Tensor> resumed = run(replicas, 3, 2, "", dir.path() + "/mid");
    for (std::size_t i = 0; i < resumed.size(); ++i)
      EXPECT_LE(relative_difference(resumed[i], uninterrupted[i]), 1e-6) << replicas << " replicas, variable " << i;
  }
}

}  // namespace
}  // namespace chorus::sharding_testing
