// Model::fit's captured steps (FitOptions::capture_steps, model/step_capture.h). On GPU:0 under
// OneDeviceStrategy: a CNN trained for two epochs with its steps replayed from a captured CUDA
// graph ends with bitwise the weights, slots and step counter of eager training (an epoch's last,
// smaller batch runs eagerly between replays), with every full batch after the warm-up and the
// capture replayed; a model with dropout keeps its steps eager and says why. Without a GPU (and in
// CI) the CPU case runs: capture_steps on a CPU device trains eagerly, bitwise the same, and says
// why. The GPU cases skip without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include <chorus/core/gpu.h>
#include <chorus/data/synthetic_digits.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/model/layers.h>
#include <chorus/model/model.h>
#include <chorus/optimizer/adam.h>

namespace chorus {
namespace {

std::unique_ptr<model::Sequential> make_cnn(distribute::Strategy& s, bool dropout) {
  std::unique_ptr<model::Sequential> m;
  {
    auto scope = s.scope();
    namespace L = layers;
    std::vector<L::LayerPtr> ls{
        L::Conv2D(8, 3, "relu", 1, "valid", true, initializers::glorot_uniform(11)), L::MaxPooling2D(2),
        L::Conv2D(16, 3, "relu", 1, "valid", true, initializers::glorot_uniform(12)), L::MaxPooling2D(2), L::Flatten()};
    if (dropout) ls.push_back(L::Dropout(0.25, 5));
    ls.push_back(L::Dense(10, "", true, initializers::glorot_uniform(13)));
    m = std::make_unique<model::Sequential>(std::move(ls));
    m->compile(std::make_shared<optimizers::Adam>(optimizers::AdamOptions{.learning_rate = 1e-3, .weight_decay = 0.01}),
               std::make_shared<losses::SparseCategoricalCrossentropy>(/*from_logits=*/true), {"accuracy"});
  }
  m->build(Shape({1, data::kSyntheticDigitsSize, data::kSyntheticDigitsSize, 1}));
  return m;
}

// Every variable of the model and its optimizer, as bytes.
std::vector<std::vector<std::uint8_t>> state(const model::Model& m) {
  std::vector<Variable> vars = m.variables();
  for (const Variable& v : m.optimizer().variables()) vars.push_back(v);
  std::vector<std::vector<std::uint8_t>> out;
  for (const Variable& v : vars) {
    const Tensor t = v.read_value().to("/cpu:0");
    std::vector<std::uint8_t> b(t.nbytes());
    t.copy_to_host(b.data());
    out.push_back(std::move(b));
  }
  return out;
}

struct Trained {
  model::History history;
  std::vector<std::vector<std::uint8_t>> state;
};

// 10 full batches of 64 and one of 32 per epoch, two epochs.
Trained train(const std::string& device, bool capture, bool dropout = false) {
  distribute::OneDeviceStrategy strategy(device);
  auto m = make_cnn(strategy, dropout);
  const auto ds = data::synthetic_digits(64 * 10 + 32, /*seed=*/3).batch(64);
  Trained r;
  r.history = m->fit(ds, {.epochs = 2, .verbose = 0, .capture_steps = capture});
  r.state = state(*m);
  return r;
}

TEST(StepCapture, OnACpuDeviceTheStepsRunEagerlyAndSayWhy) {
  const Trained eager = train("/cpu:0", false);
  const Trained captured = train("/cpu:0", true);
  EXPECT_EQ(captured.history.replayed_steps, 0);
  EXPECT_NE(captured.history.why_eager.find("is not a GPU"), std::string::npos) << captured.history.why_eager;
  EXPECT_EQ(captured.state, eager.state);
  EXPECT_EQ(captured.history.history, eager.history.history);
}

TEST(StepCapture, ZeroWarmUpStepsIsAnInvalidArgument) {
  distribute::OneDeviceStrategy strategy("/cpu:0");
  auto m = make_cnn(strategy, false);
  const auto ds = data::synthetic_digits(64, /*seed=*/3).batch(64);
  EXPECT_THROW(m->fit(ds, {.verbose = 0, .capture_steps = true, .capture_warmup_steps = 0}), InvalidArgumentError);
}

class StepCaptureGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::device_count() == 0) GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason();
  }
};

TEST_F(StepCaptureGpu, ReplayedStepsGiveTheEagerWeightsBitwise) {
  const Trained eager = train("/gpu:0", false);
  const Trained captured = train("/gpu:0", true);
  EXPECT_EQ(captured.history.why_eager, "");
  // Per epoch 10 full batches and a smaller one (eager); the first epoch's first 2 are the warm-up
  // and its 3rd the capture: 8 + 10 replays.
  EXPECT_EQ(captured.history.replayed_steps, 18);
  ASSERT_EQ(captured.state.size(), eager.state.size());
  for (std::size_t i = 0; i < eager.state.size(); ++i) EXPECT_EQ(captured.state[i], eager.state[i]) << "variable " << i;
  EXPECT_EQ(captured.history.history, eager.history.history);
}

TEST_F(StepCaptureGpu, DropoutKeepsTheStepsEagerAndSaysWhy) {
  const Trained captured = train("/gpu:0", true, /*dropout=*/true);
  EXPECT_EQ(captured.history.replayed_steps, 0);
  EXPECT_NE(captured.history.why_eager.find("random numbers"), std::string::npos) << captured.history.why_eager;
}

}  // namespace
}  // namespace chorus
