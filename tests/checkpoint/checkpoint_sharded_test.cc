// Checkpoints under ZeRO stage 1 (distribute/sharding_options.h): a model and its Adam optimizer
// saved from MirroredStrategy with stage 1 holds exactly the keys, shapes and values stage 0
// writes (slots as full tensors, TensorFlow's layout); it restores onto stage 0, a stage-0 save
// restores onto stage 1, and a 4-replica stage-1 save restores onto 3 replicas — slots restored
// on creation, as always — and 3 more steps then equal the uninterrupted run. Stage 2 (gradients
// reduce-scattered) writes the same keys and shapes, and restores to and from stages 0 and 1 and
// another replica count; equal to 1e-6 relative (its reductions round differently). Stage 3
// (parameters sharded too) writes the same keys and shapes, the parameters whole, and restores
// onto stage 0, stage 2 and another replica count, and stage 0's save onto stage 3.
#include <gtest/gtest.h>

#include "tests/core/test_util.h"
#include "tests/optimizer/sharding_util.h"
#include <chorus/checkpoint/bundle.h>
#include <chorus/checkpoint/checkpoint.h>

namespace chorus::sharding_testing {
namespace {

using chorus::testing::TempDir;

constexpr int kFirst = 4, kMore = 3;

// Trains steps [0, steps) with (k, stage); saves after kFirst steps to `save_path` when given.
State train(int k, int stage, int steps, const std::string& save_path = "") {
  distribute::MirroredStrategy strategy(cpus(k), {.sharding = {.stage = stage}});
  std::unique_ptr<model::Sequential> m;
  std::shared_ptr<optimizers::Optimizer> opt;
  {
    auto scope = strategy.scope();
    m = make_model();
    opt = make_optimizer(Opt::kAdam);
  }
  train_loop(strategy, *m, *opt, 0, std::min(steps, kFirst));
  if (!save_path.empty()) {
    train::Checkpoint ckpt({{"model", *m}, {"optimizer", *opt}});
    ckpt.write(save_path);
  }
  if (steps > kFirst) train_loop(strategy, *m, *opt, kFirst, steps - kFirst);
  return snapshot(*m, *opt);
}

// Restores `path` into a fresh model and optimizer with (k, stage) and trains steps [kFirst,
// kFirst + kMore); the slots are sharded exactly when stage >= 1.
State resume(int k, int stage, const std::string& path) {
  distribute::MirroredStrategy strategy(cpus(k), {.sharding = {.stage = stage}});
  return resume_and_train(strategy, path, kFirst, [&](model::Sequential& m, optimizers::Optimizer& opt) {
    train_loop(strategy, m, opt, kFirst, kMore);
    for (const auto& ref : opt.slot_variables())
      EXPECT_EQ(as_sharded(ref.slot) != nullptr, stage >= 1) << ref.slot.name();
  });
}

class ShardedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override { make_cpus(4); }
  void TearDown() override { chorus::internal::reset_runtime_for_testing(); }
  TempDir dir_;
};

// ZeRO stages 1 and 2 all-gather the updated shards straight into each replica's weight (for
// weights of 64 KiB and more), from every replica's thread. An async save holds writes into the
// saved weight until its writer copied it (core/tensor.h): the gather waits too, so the bundle
// holds the weight of the call, not a mix with the step taken right after it.
TEST_F(ShardedCheckpoint, AsyncSaveKeepsTheWeightsOfTheCallWhileZeroGathersTheNextStep) {
  for (int stage : {1, 2}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    distribute::MirroredStrategy strategy(cpus(2), {.sharding = {.stage = stage}});
    const std::int64_t n = 64 << 10;  // 256 KiB of float32: the direct gather
    Variable w;
    std::shared_ptr<optimizers::Optimizer> opt;
    {
      auto scope = strategy.scope();
      w = make_variable({.initial_value = Tensor::full({n}, 1.0), .name = "w"});
      opt = std::make_shared<optimizers::SGD>(optimizers::SGDOptions{.learning_rate = 0.5, .momentum = 0.9});
    }
    auto step = [&] {
      strategy.run([&] {
        const Tensor g = Tensor::full({n}, 1.0, DType::kFloat32, w.device());
        opt->apply_gradients({{g, w}});
      });
    };
    step();  // creates the sharded momentum
    // Saved first, so the writer is still copying it when the step's gather comes (without the
    // wait in Communicator, the gather wrote into w before the writer had copied it).
    Variable ballast = make_variable({.initial_value = Tensor::full({4 << 20}, 2.0), .name = "ballast"});
    train::Checkpoint ckpt({{"ballast", ballast}, {"w", w}, {"optimizer", *opt}});
    for (int round = 0; round < 3; ++round) {
      const std::vector<float> before = checkpoint_value(w).to_vector<float>();
      const std::string path =
          ckpt.write(dir_.path() + "/async-" + std::to_string(stage) + "-" + std::to_string(round), {.async = true});
      step();  // at once: the gather waits for the writer's copy of w
      ckpt.sync();
      const std::vector<float> saved =
          train::BundleReader(path).read("w/.ATTRIBUTES/VARIABLE_VALUE").to_vector<float>();
      ASSERT_EQ(saved, before) << "round " << round;
      EXPECT_NE(checkpoint_value(w).to_vector<float>(), before);  // the step did happen
    }
  }
}

TEST_F(ShardedCheckpoint, StageOneWritesTheKeysShapesAndValuesOfStageZero) {
  const std::string p0 = dir_.path() + "/stage0", p1 = dir_.path() + "/stage1";
  train(4, 0, kFirst, p0);
  train(4, 1, kFirst, p1);
  train::BundleReader r0(p0), r1(p1);
  const std::vector<std::string> keys = r0.keys();
  EXPECT_EQ(r1.keys(), keys);
  int slot_keys = 0;
  for (const std::string& key : keys) {
    if (key.find(".OPTIMIZER_SLOT") != std::string::npos) ++slot_keys;
    EXPECT_EQ(r1.entry(key).shape, r0.entry(key).shape) << key;
    EXPECT_EQ(r1.entry(key).dtype, r0.entry(key).dtype) << key;
    if (key == "_CHECKPOINTABLE_OBJECT_GRAPH") continue;  // serialized graph: compared by the keys above
    EXPECT_EQ(bytes_of(r1.read(key)), bytes_of(r0.read(key))) << key;
  }
  EXPECT_EQ(slot_keys, 12) << "6 variables × Adam's m and v";  // full tensors, e.g. [5, 7]
  const std::string kernel_m =
      "model/layer_with_weights-0/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE";
  ASSERT_TRUE(r1.contains(kernel_m)) << kernel_m;
  EXPECT_EQ(r1.entry(kernel_m).shape, Shape({5, 7}));
}

TEST_F(ShardedCheckpoint, StageOneRestoresOntoStageZero) {
  const State uninterrupted = train(4, 1, kFirst + kMore, dir_.path() + "/s1");
  expect_states_equal(resume(4, 0, dir_.path() + "/s1"), uninterrupted, 0.0, "stage 1 → stage 0");
}

TEST_F(ShardedCheckpoint, StageZeroRestoresOntoStageOne) {
  const State uninterrupted = train(4, 0, kFirst + kMore, dir_.path() + "/s0");
  expect_states_equal(resume(4, 1, dir_.path() + "/s0"), uninterrupted, 0.0, "stage 0 → stage 1");
}

TEST_F(ShardedCheckpoint, FourReplicaStageOneRestoresOntoThreeReplicas) {
  // The last 3 steps sum the gradients over 3 replicas instead of 4 (another rounding), so the
  // comparison is to 1e-6 relative, not bitwise.
  const State uninterrupted = train(4, 1, kFirst + kMore, dir_.path() + "/s1");
  expect_states_equal(resume(3, 1, dir_.path() + "/s1"), uninterrupted, 1e-6, "4 replicas → 3 replicas, stage 1");
}

// A save at `stage` after kFirst steps has the keys, shapes and dtypes of stage 0's, its float
// values equal to 1e-6 relative.
void expect_keys_and_values_of_stage_zero(int stage, const std::string& dir) {
  const std::string p0 = dir + "/stage0", p = dir + "/stage" + std::to_string(stage);
  train(4, 0, kFirst, p0);
  train(4, stage, kFirst, p);
  train::BundleReader r0(p0), r(p);
  EXPECT_EQ(r.keys(), r0.keys());
  for (const std::string& key : r0.keys()) {
    EXPECT_EQ(r.entry(key).shape, r0.entry(key).shape) << key;
    EXPECT_EQ(r.entry(key).dtype, r0.entry(key).dtype) << key;
    if (key == "_CHECKPOINTABLE_OBJECT_GRAPH" || r0.entry(key).dtype != DType::kFloat32) continue;
    EXPECT_LE(relative_difference(r.read(key), r0.read(key)), 1e-6) << key;
  }
}

TEST_F(ShardedCheckpoint, StageTwoWritesTheKeysAndShapesOfStageZero) {
  expect_keys_and_values_of_stage_zero(2, dir_.path());
}

TEST_F(ShardedCheckpoint, StageTwoRestoresOntoStagesZeroAndOne) {
  const State uninterrupted = train(4, 2, kFirst + kMore, dir_.path() + "/s2");
  expect_states_equal(resume(4, 0, dir_.path() + "/s2"), uninterrupted, 1e-6, "stage 2 → stage 0");
  expect_states_equal(resume(4, 1, dir_.path() + "/s2"), uninterrupted, 1e-6, "stage 2 → stage 1");
  expect_states_equal(resume(3, 2, dir_.path() + "/s2"), uninterrupted, 1e-6, "4 replicas → 3 replicas, stage 2");
}

TEST_F(ShardedCheckpoint, StagesZeroAndOneRestoreOntoStageTwo) {
  const State s0 = train(4, 0, kFirst + kMore, dir_.path() + "/s0");
  expect_states_equal(resume(4, 2, dir_.path() + "/s0"), s0, 1e-6, "stage 0 → stage 2");
  const State s1 = train(4, 1, kFirst + kMore, dir_.path() + "/s1");
  expect_states_equal(resume(4, 2, dir_.path() + "/s1"), s1, 1e-6, "stage 1 → stage 2");
}

TEST_F(ShardedCheckpoint, StageThreeWritesTheKeysAndShapesOfStageZero) {
  expect_keys_and_values_of_stage_zero(3, dir_.path());
}

TEST_F(ShardedCheckpoint, StageThreeRestoresOntoOtherStagesAndReplicaCountsAndBack) {
  const State uninterrupted = train(4, 3, kFirst + kMore, dir_.path() + "/s3");
  expect_states_equal(resume(4, 0, dir_.path() + "/s3"), uninterrupted, 1e-6, "stage 3 → stage 0");
  expect_states_equal(resume(4, 2, dir_.path() + "/s3"), uninterrupted, 1e-6, "stage 3 → stage 2");
  expect_states_equal(resume(3, 3, dir_.path() + "/s3"), uninterrupted, 1e-6, "4 replicas → 3 replicas, stage 3");
  const State s0 = train(4, 0, kFirst + kMore, dir_.path() + "/s0");
  expect_states_equal(resume(4, 3, dir_.path() + "/s0"), s0, 1e-6, "stage 0 → stage 3");
  expect_states_equal(resume(2, 3, dir_.path() + "/s0"), s0, 1e-6, "stage 0, 4 replicas → stage 3, 2 replicas");
}

}  // namespace
}  // namespace chorus::sharding_testing
