// fit in an unlucky world (issue 22): NaN input data stops training at the first non-finite loss
// (TerminateOnNaN) instead of training NaN weights to the end; NaN weights are never checkpointed
// over finite ones; a NaN prediction counts as wrong, not as class 0; and a full TensorBoard log
// volume ends the summaries, not the training or its checkpoints. Label: hostile.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "tests/checkpoint/bundle_test_util.h"
#include "tests/core/test_util.h"
#include <chorus/checkpoint/bundle.h>
#include <chorus/checkpoint/checkpoint_manager.h>
#include <chorus/core/config.h>
#include <chorus/core/error.h>
#include <chorus/core/runtime.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/model/callbacks.h>
#include <chorus/model/layers.h>
#include <chorus/model/metrics.h>
#include <chorus/model/model.h>
#include <chorus/ops/finite.h>
#include <chorus/optimizer/sgd.h>

namespace chorus {
namespace {

using train::testing::TempDir;

class FitHostileTest : public chorus::testing::CoreTest {
 protected:
  void SetUp() override {
    CoreTest::SetUp();
    config::set_visible_devices({}, "GPU");
    config::set_logical_device_configuration(config::list_physical_devices("CPU")[0],
                                             {{.memory_limit_mb = 256}, {.memory_limit_mb = 256}});
  }
};

// n rows of 2 features, labels alternate; rows in [nan_from, n) have a NaN feature.
data::Dataset blobs(int n, int nan_from) {
  std::vector<float> x(static_cast<std::size_t>(2 * n));
  std::vector<std::int32_t> y(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    y[static_cast<std::size_t>(i)] = i % 2;
    x[static_cast<std::size_t>(2 * i)] = i % 2 ? 1.0f : -1.0f;
    x[static_cast<std::size_t>(2 * i + 1)] = i >= nan_from ? std::numeric_limits<float>::quiet_NaN() : 0.1f * (i % 5);
  }
  return data::Dataset::from_tensor_slices(
      {Tensor::from_vector<float>(x, {n, 2}), Tensor::from_vector<std::int32_t>(y)});
}

// Linear layers: a ReLU would turn a NaN activation into 0 (max(0, NaN)) and hide it from the loss,
// though not from the weights its gradient reaches.
std::unique_ptr<model::Sequential> make_model() {
  auto m = std::make_unique<model::Sequential>(
      std::vector<layers::LayerPtr>{layers::Dense(4, "", true, initializers::glorot_uniform(1)),
                                    layers::Dense(2, "", true, initializers::glorot_uniform(2))});
  m->compile(std::make_shared<optimizers::SGD>(0.1), std::make_shared<losses::SparseCategoricalCrossentropy>(true),
             {"accuracy"});
  return m;
}

TEST_F(FitHostileTest, TerminateOnNaNStopsAtTheFirstNonFiniteLossAndNamesTheStep) {
  distribute::MirroredStrategy strategy;
  std::unique_ptr<model::Sequential> m;
  {
    auto scope = strategy.scope();
    m = make_model();
  }
  // 8 rows per batch: batches 1-3 are finite, batch 4 (rows 24..31) holds the first NaN.
  const auto ds = blobs(64, 24).batch(8);
  std::string msg;
  try {
    m->fit(ds, {.epochs = 2, .verbose = 0, .terminate_on_nan = true});
  } catch (const InvalidArgumentError& e) {
    msg = e.what();
  }
  // The summed gradients are checked before the update (Optimizer::set_check_numerics, on with
  // terminate_on_nan): step 4's NaN stops fit there, naming the variable, before the loss's check at
  // the batch's end and before any weight changes.
  EXPECT_NE(msg.find("the gradient of variable '"), std::string::npos) << msg;
  EXPECT_NE(msg.find("holds NaN or Inf at step 4"), std::string::npos) << msg;
  for (const Variable& v : m->variables())
    EXPECT_TRUE(ops::all_finite(v.read_value())) << v.name() << ": the NaN step was applied";
  EXPECT_FALSE(m->optimizer().check_numerics()) << "fit leaves the optimizer as it found it";
}

// A last update can overflow the weights while its loss and gradients were finite: the epoch's
// end stops fit before a checkpoint of them, naming the variable.
TEST_F(FitHostileTest, TerminateOnNaNStopsAnEpochThatEndsWithNonFiniteWeights) {
  TempDir dir;
  distribute::MirroredStrategy strategy;
  std::unique_ptr<model::Sequential> m;
  {
    auto scope = strategy.scope();
    m = make_model();
  }
  train::Checkpoint ckpt({{"model", *m}, {"optimizer", m->optimizer()}});
  train::CheckpointManager manager(ckpt, dir.path(), 3);
  auto saver = std::make_shared<callbacks::ModelCheckpoint>(manager);
  // A callback that breaks one weight at the epoch's last batch, as an overflowing update would.
  struct Overflow final : callbacks::Callback {
    int batches = 0;
    void on_train_batch_end(model::Model& model, std::int64_t, std::int64_t, const callbacks::Logs&) override {
      if (++batches != 4) return;  // the last of epoch 1's four
      Variable w = model.variables().back();
      std::vector<float> v = w.read_value().to_vector<float>();
      v[0] = std::numeric_limits<float>::infinity();
      w.assign(Tensor::from_vector<float>(v, w.shape()));
    }
  };
  std::string msg;
  try {
    m->fit(blobs(32, 32).batch(8),
           {.epochs = 2, .callbacks = {std::make_shared<Overflow>(), saver}, .verbose = 0, .terminate_on_nan = true});
  } catch (const InvalidArgumentError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("hold NaN or Inf at the end of epoch 1 (first: '"), std::string::npos) << msg;
  EXPECT_FALSE(manager.latest_checkpoint().has_value()) << "the non-finite weights were checkpointed";
}

TEST_F(FitHostileTest, NonFiniteWeightsAreNeverCheckpointed) {
  TempDir dir;
  distribute::MirroredStrategy strategy;
  std::unique_ptr<model::Sequential> m;
  {
    auto scope = strategy.scope();
    m = make_model();
  }
  train::Checkpoint ckpt({{"model", *m}, {"optimizer", m->optimizer()}});
  train::CheckpointManager manager(ckpt, dir.path(), 3);
  auto saver = std::make_shared<callbacks::ModelCheckpoint>(manager);
  m->fit(blobs(32, 32).batch(8), {.epochs = 1, .callbacks = {saver}, .verbose = 0});  // finite: ckpt-1
  ASSERT_EQ(manager.latest_checkpoint(), dir / "ckpt-1");
  chorus::testing::LogCapture logs;
  m->fit(blobs(32, 8).batch(8), {.epochs = 2, .callbacks = {saver}, .verbose = 0});  // NaN, guard off
  EXPECT_EQ(manager.latest_checkpoint(), dir / "ckpt-1") << "NaN weights were saved";
  EXPECT_FALSE(train::bundle_exists(dir / "ckpt-2"));
  EXPECT_TRUE(logs.contains("not saved"));
}

TEST_F(FitHostileTest, ANaNPredictionCountsAsWrong) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Label 0 each time: a NaN row would be "class 0" by argmax; only the finite right row counts.
  const Tensor pred = Tensor::from_vector<float>({nan, 0.f, 2.f, 1.f, 0.f, nan, 1.f, 1.f}, {4, 2});
  const Tensor labels = Tensor::from_vector<std::int32_t>({0, 0, 0, 1});
  for (const char* name : {"accuracy", "sparse_categorical_accuracy"}) {
    auto acc = metrics::get(name, /*sparse_labels=*/true);
    acc->update_state(labels, pred);
    EXPECT_DOUBLE_EQ(acc->result(), 0.25) << name;  // row 1 right; rows 0 and 2 NaN; row 3 wrong
  }
  auto cat = metrics::get("categorical_accuracy", false);
  cat->update_state(Tensor::from_vector<float>({1, 0, 1, 0}, {2, 2}),
                    Tensor::from_vector<float>({nan, 0.f, 2.f, 1.f}, {2, 2}));
  EXPECT_DOUBLE_EQ(cat->result(), 0.5);
}

TEST_F(FitHostileTest, AFullLogVolumeEndsTheSummariesNotTheTraining) {
  TempDir dir;
  distribute::MirroredStrategy strategy;
  std::unique_ptr<model::Sequential> m;
  {
    auto scope = strategy.scope();
    m = make_model();
  }
  train::Checkpoint ckpt({{"model", *m}, {"optimizer", m->optimizer()}});
  train::CheckpointManager manager(ckpt, dir / "ckpt", 3);
  // A file-size limit stands in for a full volume without root: event files outgrow it (EFBIG, a
  // ResourceExhaustedError as ENOSPC is), the tiny checkpoints do not.
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  const auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 2048;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  chorus::testing::LogCapture logs;
  model::History h;
  EXPECT_NO_THROW(h = m->fit(blobs(64, 64).batch(4),
                             {.epochs = 3,
                              .callbacks = {std::make_shared<callbacks::TensorBoard>(dir / "logs", /*update_freq=*/1),
                                            std::make_shared<callbacks::ModelCheckpoint>(manager)},
                              .verbose = 0}));
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(h.history["loss"].size(), 3u) << "all epochs trained";
  EXPECT_EQ(manager.latest_checkpoint(), dir / "ckpt/ckpt-3") << "every epoch checkpointed";
  EXPECT_TRUE(logs.contains("cannot write summaries")) << "the failure is reported";
  int warnings = 0;
  for (const auto& l : logs.lines()) warnings += l.find("cannot write summaries") != std::string::npos;
  EXPECT_EQ(warnings, 1) << "once";
}

}  // namespace
}  // namespace chorus
