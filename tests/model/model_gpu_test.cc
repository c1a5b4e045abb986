// fit / evaluate / predict and checkpoints under MirroredStrategy on two virtual GPUs carved out
// of GPU:0 (the virtual-GPU reduction), against the same run on one logical CPU device. Skips
// without a GPU (label gpu), with the CUDA runtime's reason.
#include <gtest/gtest.h>

#include "tests/checkpoint/bundle_test_util.h"
#include <chorus/checkpoint/checkpoint.h>
#include <chorus/core/config.h>
#include <chorus/core/gpu.h>
#include <chorus/core/runtime.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/distribute/mirrored_variable.h>
#include <chorus/model/layers.h>
#include <chorus/model/model.h>
#include <chorus/optimizer/sgd.h>

namespace chorus {
namespace {

data::Dataset blobs(int n) {
  std::vector<float> x(static_cast<std::size_t>(2 * n));
  std::vector<std::int32_t> y(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    y[static_cast<std::size_t>(i)] = i % 2;
    x[static_cast<std::size_t>(2 * i)] = (i % 2 ? 1.0f : -1.0f) + 0.05f * static_cast<float>(i % 7);
    x[static_cast<std::size_t>(2 * i + 1)] = 0.1f * static_cast<float>(i % 5) - 0.2f;
  }
  return data::Dataset::from_tensor_slices(
      {Tensor::from_vector<float>(x, {n, 2}), Tensor::from_vector<std::int32_t>(y)});
}

std::unique_ptr<model::Sequential> make_model(distribute::Strategy& s) {
  auto scope = s.scope();
  auto m = std::make_unique<model::Sequential>(
      std::vector<layers::LayerPtr>{layers::Dense(8, "relu", true, initializers::glorot_uniform(1)),
                                    layers::Dense(2, "", true, initializers::glorot_uniform(2))});
  m->compile(std::make_shared<optimizers::SGD>(0.1), std::make_shared<losses::SparseCategoricalCrossentropy>(true),
             {"accuracy"});
  return m;
}

std::vector<std::vector<float>> weights(const model::Model& m) {
  std::vector<std::vector<float>> out;
  for (const auto& v : m.trainable_variables()) {
    auto mv = std::dynamic_pointer_cast<distribute::MirroredVariable>(v.impl());
    const Variable& c = mv ? mv->components()[0] : v;
    out.push_back(c.read_value().to("/cpu:0").reshape(Shape{v.shape().num_elements()}).to_vector<float>());
  }
  return out;
}

TEST(ModelGpu, FitEvaluatePredictAndCheckpointOnTwoVirtualGpus) {
  chorus::internal::reset_runtime_for_testing();
  auto gpus = config::list_physical_devices("GPU");
  if (gpus.empty()) GTEST_SKIP() << "no GPU visible: " << gpu::unavailable_reason();
  config::set_logical_device_configuration(gpus[0], {{.memory_limit_mb = 1024}, {.memory_limit_mb = 1024}});
  const auto ds = blobs(96).batch(16);

  distribute::MirroredStrategy on_gpus({"/gpu:0", "/gpu:1"});
  auto m = make_model(on_gpus);
  m->fit(ds, {.epochs = 3, .verbose = 0});
  // Replicas bitwise equal.
  for (const auto& v : m->trainable_variables()) {
    auto mv = std::dynamic_pointer_cast<distribute::MirroredVariable>(v.impl());
    ASSERT_NE(mv, nullptr);
    EXPECT_EQ(mv->components()[0].device(), on_gpus.replica_devices()[0]);
    EXPECT_EQ(mv->components()[1].read_value().to("/cpu:0").to_vector<float>(),
              mv->components()[0].read_value().to("/cpu:0").to_vector<float>())
        << v.name();
  }
  EXPECT_GT(m->evaluate(blobs(64).batch(32)).at("accuracy"), 0.9);
  EXPECT_EQ(m->predict(blobs(10).batch(4)).shape(), Shape({10, 2}));

  // The same training on one CPU device: the same weights to float32 rounding.
  distribute::MirroredStrategy on_cpu({"/cpu:0"});
  auto ref = make_model(on_cpu);
  ref->fit(ds, {.epochs = 3, .verbose = 0});
  const auto a = weights(*m), b = weights(*ref);
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t j = 0; j < a[i].size(); ++j) EXPECT_NEAR(a[i][j], b[i][j], 1e-4) << i << "," << j;

  // A checkpoint of GPU variables restores onto the CPU model.
  train::testing::TempDir dir;
  const std::string path = train::Checkpoint({{"model", *m}}).write(dir / "gpu");
  train::Checkpoint({{"model", *ref}}).read(path).expect_partial().assert_existing_objects_matched();
  EXPECT_EQ(weights(*ref), a);
}

}  // namespace
}  // namespace chorus
