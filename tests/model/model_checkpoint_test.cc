// Models and optimizers in checkpoints: Keras's key names, restore before build (restore-on-
// create, slots included), a resumed MirroredStrategy run that continues bit for bit, and the
// ModelCheckpoint callback.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/checkpoint/bundle_test_util.h"
#include "tests/core/test_util.h"
#include <chorus/checkpoint/bundle.h>
#include <chorus/checkpoint/checkpoint_manager.h>
#include <chorus/core/config.h>
#include <chorus/core/runtime.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/distribute/mirrored_variable.h>
#include <chorus/model/callbacks.h>
#include <chorus/model/layers.h>
#include <chorus/model/model.h>
#include <chorus/optimizer/adam.h>

namespace chorus {
namespace {

using train::testing::TempDir;

void make_cpus(int n) { chorus::testing::make_cpus(n, 256); }

data::Dataset blobs(int n) {
  std::vector<float> x(static_cast<std::size_t>(2 * n));
  std::vector<std::int32_t> y(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    y[static_cast<std::size_t>(i)] = i % 2;
    x[static_cast<std::size_t>(2 * i)] = (i % 2 ? 1.0f : -1.0f) + 0.01f * static_cast<float>(i % 7);
    x[static_cast<std::size_t>(2 * i + 1)] = 0.1f * static_cast<float>(i % 5);
  }
  return data::Dataset::from_tensor_slices(
      {Tensor::from_vector<float>(x, {n, 2}), Tensor::from_vector<std::int32_t>(y)});
}

std::unique_ptr<model::Sequential> make_model(std::uint64_t seed) {
  auto m = std::make_unique<model::Sequential>(std::vector<layers::LayerPtr>{
      layers::Dense(8, "relu", true, initializers::glorot_uniform(seed)), layers::Dropout(0.0),
      layers::Dense(2, "", true, initializers::glorot_uniform(seed + 1))});
  m->compile(std::make_shared<optimizers::Adam>(0.01), std::make_shared<losses::SparseCategoricalCrossentropy>(true));
  return m;
}

std::vector<std::vector<float>> weights(const model::Model& m) {
  std::vector<std::vector<float>> out;
  for (const auto& v : m.variables()) {
    auto mv = std::dynamic_pointer_cast<distribute::MirroredVariable>(v.impl());
    for (const auto& c : mv->components())
      out.push_back(c.read_value().reshape(Shape{v.shape().num_elements()}).to_vector<float>());
  }
  return out;
}

TEST(ModelCheckpoint, KerasKeyNames) {
  make_cpus(1);
  TempDir dir;
  distribute::MirroredStrategy strategy({"/cpu:0"});
  auto scope = strategy.scope();
  auto m = make_model(1);
  m->fit(blobs(16).batch(8), {.epochs = 1, .verbose = 0});
  train::Checkpoint ckpt({{"model", *m}, {"optimizer", m->optimizer()}});
  const auto keys = train::BundleReader(ckpt.save(dir / "ckpt")).keys();
  for (const std::string k :
       {"model/layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE",
        "model/layer_with_weights-0/bias/.ATTRIBUTES/VARIABLE_VALUE",
        "model/layer_with_weights-1/kernel/.ATTRIBUTES/VARIABLE_VALUE",
        "model/layer_with_weights-0/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE",
        "model/layer_with_weights-1/bias/.OPTIMIZER_SLOT/optimizer/v/.ATTRIBUTES/VARIABLE_VALUE",
        "optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE", "save_counter/.ATTRIBUTES/VARIABLE_VALUE",
        "_CHECKPOINTABLE_OBJECT_GRAPH"}) {
    EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
  }
  EXPECT_EQ(keys.size(), 4u + 8u + 3u);  // 4 weights, 2 slots each, iter, save_counter, graph
}

TEST(ModelCheckpoint, RestoreBeforeBuildResumesBitForBit) {
  make_cpus(2);
  TempDir dir;
  const auto ds = blobs(64).batch(16);
  std::string path;
  std::vector<std::vector<float>> expected;
  {
    distribute::MirroredStrategy strategy({"/cpu:0", "/cpu:1"});
    std::unique_ptr<model::Sequential> m;
    {
      auto scope = strategy.scope();
      m = make_model(1);
    }
    m->fit(ds, {.epochs = 2, .verbose = 0});
    train::Checkpoint ckpt({{"model", *m}, {"optimizer", m->optimizer()}});
    path = ckpt.save(dir / "ckpt");
    m->fit(ds, {.epochs = 1, .verbose = 0});  // the run we must reproduce
    expected = weights(*m);
  }
  distribute::MirroredStrategy strategy({"/cpu:0", "/cpu:1"});
  std::unique_ptr<model::Sequential> m;
  {
    auto scope = strategy.scope();
    m = make_model(7);  // other initial values: all must come from the checkpoint
  }
  train::Checkpoint ckpt({{"model", *m}, {"optimizer", m->optimizer()}});
  auto status = ckpt.restore(path);  // nothing built yet: values wait for creation
  EXPECT_FALSE(status.unused_keys().empty());
  m->fit(ds, {.epochs = 1, .verbose = 0});  // builds (weights restored), creates slots (restored)
  status.assert_consumed();
  EXPECT_EQ(weights(*m), expected);
}

TEST(ModelCheckpoint, CallbackSavesEachEpochAndResumes) {
  make_cpus(2);
  TempDir dir;
  distribute::MirroredStrategy strategy({"/cpu:0", "/cpu:1"});
  std::unique_ptr<model::Sequential> m;
  {
    auto scope = strategy.scope();
    m = make_model(3);
  }
  train::Checkpoint ckpt({{"model", *m}, {"optimizer", m->optimizer()}});
  train::CheckpointManager manager(ckpt, dir.path(), 2);
  EXPECT_FALSE(manager.restore_or_initialize());
  auto cb = std::make_shared<callbacks::ModelCheckpoint>(manager);
  m->fit(blobs(32).batch(8), {.epochs = 3, .callbacks = {cb}, .verbose = 0});
  EXPECT_EQ(cb->saved(), (std::vector<std::string>{dir / "ckpt-1", dir / "ckpt-2", dir / "ckpt-3"}));
  EXPECT_EQ(manager.checkpoints(), (std::vector<std::string>{dir / "ckpt-2", dir / "ckpt-3"}));
  auto by_batch = std::make_shared<callbacks::ModelCheckpoint>(
      manager, callbacks::ModelCheckpoint::Options{.save_freq = 3, .async = true});
  m->fit(blobs(32).batch(8), {.epochs = 2, .callbacks = {by_batch}, .verbose = 0});  // 8 batches → 2 saves
  EXPECT_EQ(by_batch->saved().size(), 2u);
  EXPECT_EQ(train::latest_checkpoint(dir.path()), dir / "ckpt-5");
  EXPECT_EQ(m->optimizer().iterations().value().item<std::int64_t>(), 20);
}

}  // namespace
}  // namespace chorus
