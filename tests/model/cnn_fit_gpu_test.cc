// The main job on a GPU: a small CNN trained with Model::fit on synthetic digits under
// MirroredStrategy on two virtual GPUs carved out of GPU:0 (examples/mnist_mirrored.cc in small):
// the loss falls, held-out accuracy clears a floor, every mirrored variable (optimizer slots
// included) stays bitwise identical on both GPUs, and the numbers agree with the CPU — the first
// steps against the same training on one CPU device, the trained network's logits against the CPU
// kernels. Skips without a GPU (label gpu), with the CUDA runtime's reason.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>

#include "tests/core/virtual_gpus.h"
#include <chorus/core/config.h>
#include <chorus/core/gpu.h>
#include <chorus/core/runtime.h>
#include <chorus/core/timeline.h>
#include <chorus/data/synthetic_digits.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/distribute/mirrored_variable.h>
#include <chorus/model/layers.h>
#include <chorus/model/model.h>
#include <chorus/ops/ops.h>
#include <chorus/optimizer/adam.h>
#include <chorus/optimizer/optimizer.h>
#include <chorus/optimizer/sgd.h>

namespace chorus {
namespace {

using distribute::MirroredVariable;

class CnnFitGpu : public chorus::testing::TwoVirtualGpusTest<1024> {};

// conv 3x3x8 → pool 2 → conv 3x3x16 → pool 2 → dense 10, seeded so that two builds start equal.
// The optimizer is made inside the scope too (its `iterations` must be mirrored).
// Built outside the scope: Model::build enters the strategy's scope itself, and a nested scope of
// the same strategy currently wraps each variable twice (a MirroredVariable whose components are
// MirroredVariables, all primaries on replica 0's device).
template <typename Opt>
std::unique_ptr<model::Sequential> make_cnn(distribute::Strategy& s, double learning_rate) {
  std::unique_ptr<model::Sequential> m;
  {
    auto scope = s.scope();
    namespace L = layers;
    m = std::make_unique<model::Sequential>(std::vector<L::LayerPtr>{
        L::Conv2D(8, 3, "relu", 1, "valid", true, initializers::glorot_uniform(11)), L::MaxPooling2D(2),
        L::Conv2D(16, 3, "relu", 1, "valid", true, initializers::glorot_uniform(12)), L::MaxPooling2D(2), L::Flatten(),
        L::Dense(10, "", true, initializers::glorot_uniform(13))});
    m->compile(std::make_shared<Opt>(learning_rate),
               std::make_shared<losses::SparseCategoricalCrossentropy>(/*from_logits=*/true), {"accuracy"});
  }
  m->build(Shape({1, data::kSyntheticDigitsSize, data::kSyntheticDigitsSize, 1}));
  return m;
}

std::vector<double> host(const Tensor& t) {
  return ops::cast(t.to("/cpu:0"), DType::kFloat64).reshape(Shape{t.num_elements()}).to_vector<double>();
}

// Every component of every variable of the model and its optimizer: on its replica's device and
// bitwise equal to replica 0's.
void expect_replicas_identical(const model::Model& m) {
  std::vector<Variable> vars = m.variables();
  for (const auto& v : m.optimizer().variables()) vars.push_back(v);
  ASSERT_GT(vars.size(), m.trainable_variables().size());  // the slots are there
  const auto devices = m.strategy().replica_devices();
  for (const auto& v : vars) {
    auto mv = std::dynamic_pointer_cast<MirroredVariable>(v.impl());
    ASSERT_NE(mv, nullptr) << v.name();
    ASSERT_EQ(mv->components().size(), devices.size()) << v.name();
    const Tensor first = mv->components()[0].read_value().to("/cpu:0");
    std::vector<std::uint8_t> a(first.nbytes());
    first.copy_to_host(a.data());
    for (std::size_t r = 0; r < devices.size(); ++r) {
      EXPECT_EQ(mv->components()[r].device(), devices[r]) << v.name();
      const Tensor c = mv->components()[r].read_value().to("/cpu:0");
      std::vector<std::uint8_t> b(c.nbytes());
      c.copy_to_host(b.data());
      EXPECT_EQ(a, b) << v.name() << ": replica " << r << " differs from replica 0";
    }
  }
}

TEST_F(CnnFitGpu, TrainsOnTwoVirtualGpus) {
  distribute::MirroredStrategy strategy({"/gpu:0", "/gpu:1"});
  ASSERT_EQ(strategy.num_replicas_in_sync(), 2);
  EXPECT_EQ(strategy.cross_device_ops().ops, distribute::CrossDeviceOps::kVirtualGpu);
  auto m = make_cnn<optimizers::Adam>(strategy, 3e-3);
  const auto train = data::synthetic_digits(4096, /*seed=*/1).shuffle(4096, 42).batch(64);
  const auto test = data::synthetic_digits(1000, /*seed=*/2).batch(250);

  const auto before = m->evaluate(test);
  EXPECT_NEAR(before.at("loss"), std::log(10.0), 1.0);  // an untrained classifier of 10 classes
  const auto h = m->fit(train, {.epochs = 2, .verbose = 0, .terminate_on_nan = true});
  const auto& loss = h.history.at("loss");
  ASSERT_EQ(loss.size(), 2u);
  EXPECT_LT(loss[1], loss[0]);
  const auto after = m->evaluate(test);
  std::cout << "[cnn fit gpu] held-out loss " << before.at("loss") << " -> " << after.at("loss") << ", accuracy "
            << before.at("accuracy") << " -> " << after.at("accuracy") << "\n";
  EXPECT_LT(after.at("loss"), 0.5 * before.at("loss"));
  EXPECT_GE(after.at("accuracy"), 0.95);  // 0.998 with two logical CPU devices
  expect_replicas_identical(*m);

  // The trained network's outputs on the GPU against the same weights on the CPU kernels.
  distribute::MirroredStrategy on_cpu({"/cpu:0"});
  auto ref = make_cnn<optimizers::Adam>(on_cpu, 3e-3);
  {
    auto scope = on_cpu.scope();
    const auto src = m->trainable_variables();
    auto dst = ref->trainable_variables();
    ASSERT_EQ(src.size(), dst.size());
    for (std::size_t i = 0; i < src.size(); ++i) dst[i].assign(src[i].read_value().to("/cpu:0"));
  }
  const auto sample = data::synthetic_digits(200, /*seed=*/3).batch(100);
  const Tensor logits_gpu = m->predict(sample), logits_cpu = ref->predict(sample);
  ASSERT_EQ(logits_gpu.shape(), Shape({200, 10}));
  const auto g = host(logits_gpu), c = host(logits_cpu);
  for (std::size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], c[i], 1e-4 * (1 + std::abs(c[i]))) << "logit " << i;
}

TEST_F(CnnFitGpu, FirstStepsMatchOneCpuDevice) {
  // Plain SGD for a few steps: two GPUs splitting each batch land where one CPU device seeing the
  // whole batch lands, to float32 rounding (the GPU's cuDNN/cuBLAS run without TF32: gpu tests get
  // NVIDIA_TF32_OVERRIDE=0, tests/CMakeLists.txt).
  const auto train = data::synthetic_digits(256, /*seed=*/4).batch(64);
  distribute::MirroredStrategy on_gpus({"/gpu:0", "/gpu:1"});
  auto m = make_cnn<optimizers::SGD>(on_gpus, 0.05);
  const auto h = m->fit(train, {.epochs = 1, .verbose = 0});
  distribute::MirroredStrategy on_cpu({"/cpu:0"});
  auto ref = make_cnn<optimizers::SGD>(on_cpu, 0.05);
  const auto h_ref = ref->fit(train, {.epochs = 1, .verbose = 0});

  EXPECT_NEAR(h.history.at("loss")[0], h_ref.history.at("loss")[0], 1e-5 * (1 + h_ref.history.at("loss")[0]));
  auto untrained = make_cnn<optimizers::SGD>(on_cpu, 0.05);
  const auto a = m->trainable_variables(), b = ref->trainable_variables(), b0 = untrained->trainable_variables();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto x = host(a[i].read_value()), y = host(b[i].read_value());
    ASSERT_EQ(x.size(), y.size());
    double moved = 0;  // the test compares moved weights, not initial ones
    for (std::size_t j = 0; j < x.size(); ++j)
      ASSERT_NEAR(x[j], y[j], 1e-4 * (1 + std::abs(y[j]))) << a[i].name() << " at " << j;
    const auto init = host(b0[i].read_value());
    for (std::size_t j = 0; j < y.size(); ++j) moved = std::max(moved, std::abs(y[j] - init[j]));
    EXPECT_GT(moved, 1e-3) << a[i].name() << " did not move: the comparison would be vacuous";
  }
  expect_replicas_identical(*m);
}

// Issue 42's "no host waits in a steady step": after warm-up, a fit step on two virtual GPUs —
// the input's upload, forward, backward, the virtual-GPU all-reduce, the fused Adam update, the
// metrics — never blocks the host on the GPU (core/gpu.h host_waits, which fit puts in each "train
// step" timeline event). With the progress bar on and steps_per_execution 8, the running metrics
// are read every 8 steps, between steps, not inside one.
TEST_F(CnnFitGpu, SteadyStepsMakeNoHostWaits) {
  distribute::MirroredStrategy strategy;
  auto m = make_cnn<optimizers::Adam>(strategy, 1e-3);
  const auto train = data::synthetic_digits(64 * 24, /*seed=*/6).batch(64, /*drop_remainder=*/true).cache();
  m->fit(train, {.epochs = 1, .steps_per_epoch = 4, .verbose = 0});  // warm-up: kernels, pools, slots
  timeline::start_capture();
  m->fit(train, {.epochs = 1, .verbose = 1, .steps_per_execution = 8});
  const std::optional<timeline::Capture> capture = timeline::stop_capture();
  ASSERT_TRUE(capture.has_value());
  int steps = 0;
  for (const timeline::CapturedEvent& e : capture->events) {
    if (e.name != "train step") continue;
    ++steps;
    if (steps <= 2) continue;  // the epoch's first steps: the iterator's start
    EXPECT_NE(e.args_json.find("\"host_waits\": 0"), std::string::npos) << "step " << steps << ": " << e.args_json;
  }
  EXPECT_EQ(steps, 24);
}

}  // namespace
}  // namespace chorus
