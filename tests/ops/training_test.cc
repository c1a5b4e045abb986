// ops::apply_fused_update (ops/training.h) on the CPU: bitwise the op sequences it replaces for
// every rule and option, float32 and float64, NaN and ±Inf included (fused_update_util.h); it waits
// for a write hold on what it writes; and it declines, changing nothing, what it has no kernel for.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "tests/core/test_util.h"
#include "tests/ops/fused_update_util.h"

namespace chorus {
namespace {

class TrainingOpsTest : public testing::CoreTest {};

ops::FusedUpdate adam() {
  ops::FusedUpdate u;
  u.rule = ops::FusedRule::kAdam;
  u.scalars.alpha = 0.1;
  u.scalars.one_minus_beta_1 = 0.1;
  u.scalars.one_minus_beta_2 = 0.001;
  u.scalars.epsilon = 1e-7;
  return u;
}

// 1000 elements: the vectorized blocks of 16 and a scalar tail; 37: the tail alone; 0: nothing;
// 197,300: four chunks of 2^16, split over the device's threads.
TEST_F(TrainingOpsTest, EveryRuleMatchesItsOpSequenceBitwiseFloat32) {
  fused_testing::check_all<float>("/CPU:0", {1000, 37, 0, 197300});
}
TEST_F(TrainingOpsTest, EveryRuleMatchesItsOpSequenceBitwiseFloat64) {
  fused_testing::check_all<double>("/CPU:0", {1000, 37, 0, 5000});
}

// The scalars read from a block on the device (the captured step's way, ops/training.h): the same
// bits as the scalars by value, and a second step reads what was written into the block since.
TEST_F(TrainingOpsTest, ScalarsFromABlockMatchTheOpSequenceStepAfterStep) {
  fused_testing::check_all<float>("/CPU:0", {1000, 37, 0, 197300}, true);
  fused_testing::check_all<double>("/CPU:0", {1000, 37, 0, 5000}, true);
}

TEST_F(TrainingOpsTest, AScalarBlockOfTheWrongKindIsAnInvalidArgument) {
  Tensor w = Tensor::zeros({4}), g = Tensor::zeros({4});
  std::vector<ops::FusedVariable> group{{w, g, {Tensor::zeros({4}), Tensor::zeros({4})}}};
  ops::FusedUpdate u = adam();
  for (const Tensor& bad : {Tensor::zeros({ops::kFusedScalarSlots}),  // float32
                            Tensor::zeros({ops::kFusedScalarSlots + 1}, DType::kFloat64)}) {
    u.scalars_on_device = bad;
    EXPECT_THROW(ops::apply_fused_update(u, group), InvalidArgumentError) << bad.shape().to_string();
  }
  Tensor wrong = Tensor::zeros({3}, DType::kFloat64);
  EXPECT_THROW(ops::write_fused_scalars(wrong, ops::FusedScalars{}, 0.0), InvalidArgumentError);
  EXPECT_EQ(w.to_vector<float>(), std::vector<float>(4, 0.0f));  // nothing was updated
}

// A gradient sharing storage with its own weight (g = w, as in a test of the update itself) is
// read before it is written, element by element.
TEST_F(TrainingOpsTest, AGradientAliasingItsWeightReadsBeforeWriting) {
  const std::vector<float> w0 = fused_testing::values<float>(100, 1.0, 0.1, false);
  Tensor w = Tensor::from_vector<float>(w0, {100}), ref = Tensor::from_vector<float>(w0, {100});
  std::vector<ops::FusedVariable> group{{w, w, {Tensor::zeros({100}), Tensor::zeros({100})}}};
  ASSERT_TRUE(ops::apply_fused_update(adam(), group));
  std::vector<Tensor> slots{Tensor::zeros({100}), Tensor::zeros({100})};
  fused_testing::op_sequence({"adam", adam(), false}, ref, slots, Tensor::from_vector<float>(w0, {100}), 0.0);
  fused_testing::expect_same_bits<float>(w, ref, "aliased");
}

// The fused update writes weights and slots in place: it waits for a write hold on any of them (an
// async checkpoint still copying it, core/tensor.h).
TEST_F(TrainingOpsTest, WaitsForAWriteHoldOnASlot) {
  Tensor w = Tensor::ones({4}), m = Tensor::zeros({4}), v = Tensor::zeros({4}), g = Tensor::ones({4});
  v.buffer()->hold_writes();
  std::atomic<bool> done{false};
  std::thread step([&] {
    std::vector<ops::FusedVariable> group{{w, g, {m, v}}};
    ASSERT_TRUE(ops::apply_fused_update(adam(), group));
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(done.load());
  EXPECT_EQ(w.to_vector<float>(), std::vector<float>(4, 1.0f));  // not written yet
  v.buffer()->end_hold();
  step.join();
  EXPECT_NE(w.to_vector<float>(), std::vector<float>(4, 1.0f));
}

TEST_F(TrainingOpsTest, DeclinesWhatItHasNoKernelForAndChangesNothing) {
  auto f32 = [](std::int64_t n, float x = 0.0f) { return Tensor::full({n}, x, DType::kFloat32, "/CPU:0"); };
  Tensor w = f32(4, 1.0f), m = f32(4), v = f32(4), g = f32(4, 1.0f);
  const std::vector<float> before = w.to_vector<float>();
  auto declines = [&](std::vector<ops::FusedVariable> group, const ops::FusedUpdate& u, const char* what) {
    EXPECT_FALSE(ops::apply_fused_update(u, group)) << what;
  };
  declines({{w, Tensor::ones({4}, DType::kFloat16), {m, v}}}, adam(), "mixed dtypes");
  declines({{w, f32(3), {m, v}}}, adam(), "a gradient of another shape");
  declines({{w, Tensor(), {m, v}}}, adam(), "an undefined gradient");
  declines({{w, g, {m}}}, adam(), "one slot for Adam");
  declines({{Tensor::ones({4}, DType::kFloat16),
             Tensor::ones({4}, DType::kFloat16),
             {Tensor::zeros({4}, DType::kFloat16), Tensor::zeros({4}, DType::kFloat16)}}},
           adam(), "float16");
  declines({{w, g, {m, v}}, {f32(4), f32(4), {m, f32(4)}}}, adam(), "a slot shared by two variables");
  declines({{w, g, {m, v}},
            {Tensor::ones({4}, DType::kFloat64),
             Tensor::ones({4}, DType::kFloat64),
             {Tensor::zeros({4}, DType::kFloat64), Tensor::zeros({4}, DType::kFloat64)}}},
           adam(), "two dtypes in one group");
  ops::FusedUpdate rms;
  rms.rule = ops::FusedRule::kRMSprop;
  rms.centered = true;
  declines({{w, g, {m}}}, rms, "centered RMSprop without its average slot");
  declines({}, adam(), "an empty group");
  EXPECT_EQ(w.to_vector<float>(), before);
  EXPECT_EQ(m.to_vector<float>(), std::vector<float>(4, 0.0f));
}

}  // namespace
}  // namespace chorus
