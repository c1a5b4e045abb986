// callbacks::BackupAndRestore and fit's resume (model/callbacks.h): on 2 logical CPU replicas,
// a fit of 3 epochs over shuffled data (a fixed seed, reshuffled each epoch) that is preempted
// (SIGTERM, simulated) in the middle of epoch 2 backs that step up and returns with
// History::preempted; rerun with fresh objects it resumes there and ends with the uninterrupted
// run's weights, bit for bit — also after a crash between backups every N batches (the batches
// since the last backup are trained again). A completed fit deletes its backup (or keeps it when
// asked); initial_epoch; bad options.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>

#include "tests/core/test_util.h"
#include <chorus/data/dataset.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/distribute/preemption.h>
#include <chorus/model/callbacks.h>
#include <chorus/model/initializers.h>
#include <chorus/model/layers.h>
#include <chorus/model/losses.h>
#include <chorus/model/model.h>
#include <chorus/ops/ops.h>
#include <chorus/optimizer/adam.h>

namespace chorus {
namespace {

using chorus::testing::TempDir;

constexpr int kEpochs = 3;

// Calls `fn` after training batch `step` of epoch `epoch` (1-based step, as callbacks see it).
class At final : public callbacks::Callback {
 public:
  At(int epoch, std::int64_t step, std::function<void()> fn) : epoch_(epoch), step_(step), fn_(std::move(fn)) {}
  void on_epoch_begin(model::Model&, int epoch) override { current_ = epoch; }
  void on_train_batch_end(model::Model&, std::int64_t step, std::int64_t, const callbacks::Logs&) override {
    if (current_ == epoch_ && step == step_) fn_();
  }

 private:
  int epoch_, current_ = -1;
  std::int64_t step_;
  std::function<void()> fn_;
};

struct Trained {
  std::vector<std::vector<float>> weights;
  model::History history;
  std::int64_t iterations = 0;
};

// One process's fit: fresh strategy, model (same seeded initial weights), optimizer and data.
Trained fit(const std::vector<callbacks::CallbackPtr>& cbs, int initial_epoch = 0) {
  distribute::MirroredStrategy strategy(chorus::testing::cpus(2));
  std::unique_ptr<model::Sequential> m;
  std::shared_ptr<optimizers::Adam> adam;
  {
    auto scope = strategy.scope();
    m = std::make_unique<model::Sequential>(
        std::vector<layers::LayerPtr>{layers::Dense(8, "tanh", true, initializers::glorot_uniform(1)),
                                      layers::Dense(2, "", true, initializers::glorot_uniform(2))});
    adam = std::make_shared<optimizers::Adam>(0.01);
    m->compile(adam, std::make_shared<losses::MeanSquaredError>());
  }
  const Tensor x = ops::stateless_random_uniform({40, 4}, {1, 2}, {.minval = -1, .maxval = 1});
  const Tensor y = ops::stateless_random_uniform({40, 2}, {3, 4}, {.minval = -1, .maxval = 1});
  const data::Dataset ds = data::Dataset::from_tensor_slices({x, y}).shuffle(40, /*seed=*/7).batch(8);  // 5 steps
  Trained r;
  r.history = m->fit(ds, {.epochs = kEpochs, .initial_epoch = initial_epoch, .callbacks = cbs, .verbose = 0});
  for (const Variable& v : m->trainable_variables()) r.weights.push_back(v.read_value().to_vector<float>());
  r.iterations = adam->iterations().read_value().item<std::int64_t>();
  return r;
}

class BackupAndRestoreTest : public ::testing::Test {
 protected:
  void SetUp() override { chorus::testing::make_cpus(2, 128); }
  void TearDown() override { chorus::internal::reset_runtime_for_testing(); }
  TempDir dir_;
};

TEST_F(BackupAndRestoreTest, APreemptedFitResumesAtItsStepAndEndsAsIfUninterrupted) {
  const Trained uninterrupted = fit({});
  EXPECT_FALSE(uninterrupted.history.preempted);
  EXPECT_EQ(uninterrupted.iterations, kEpochs * 5);

  const std::string backup = dir_.path() + "/backup";
  auto first = std::make_shared<callbacks::BackupAndRestore>(backup);
  const Trained preempted =
      fit({std::make_shared<At>(1, 3, [] { distribute::PreemptionWatcher::simulate_signal(); }), first});
  EXPECT_TRUE(preempted.history.preempted);
  EXPECT_TRUE(first->preempted());
  EXPECT_EQ(preempted.iterations, 5 + 3);                      // epoch 1 and 3 batches of epoch 2
  EXPECT_EQ(preempted.history.history.at("loss").size(), 1u);  // epoch 2 never ended
  EXPECT_TRUE(std::filesystem::exists(backup + "/checkpoint"));

  auto second = std::make_shared<callbacks::BackupAndRestore>(backup);
  const Trained resumed = fit({second});
  ASSERT_TRUE(second->restored().has_value());
  EXPECT_FALSE(resumed.history.preempted);
  EXPECT_EQ(resumed.iterations, uninterrupted.iterations);
  EXPECT_EQ(resumed.history.history.at("loss").size(), 2u);  // epochs 2 (its last 2 batches) and 3
  EXPECT_EQ(resumed.weights, uninterrupted.weights) << "the resumed run must end bit for bit where the other did";
  EXPECT_FALSE(std::filesystem::exists(backup + "/checkpoint")) << "a completed fit deletes its backup";
  // The resumed epoch's loss covers the whole epoch (the metric states were backed up too).
  const std::vector<double>& whole = uninterrupted.history.history.at("loss");
  const std::vector<double>& after = resumed.history.history.at("loss");
  EXPECT_NEAR(after[0], whole[1], 1e-6 * std::abs(whole[1]));
  EXPECT_NEAR(after[1], whole[2], 1e-6 * std::abs(whole[2]));
}

TEST_F(BackupAndRestoreTest, PreemptedOnAnEpochsLastBatchTheRerunReportsThatEpochWhole) {
  const Trained uninterrupted = fit({});
  const std::string backup = dir_.path() + "/backup";
  fit({std::make_shared<At>(1, 5, [] { distribute::PreemptionWatcher::simulate_signal(); }),
       std::make_shared<callbacks::BackupAndRestore>(backup)});
  const Trained resumed = fit({std::make_shared<callbacks::BackupAndRestore>(backup)});
  EXPECT_EQ(resumed.weights, uninterrupted.weights);
  const std::vector<double>& whole = uninterrupted.history.history.at("loss");
  const std::vector<double>& after = resumed.history.history.at("loss");
  ASSERT_EQ(after.size(), 2u);
  EXPECT_NEAR(after[0], whole[1], 1e-6 * std::abs(whole[1])) << "not 0: no batch of epoch 2 ran after the resume";
}

// EarlyStopping ends fit: the backup is done with (Keras deletes it too), so a rerun starts over.
TEST_F(BackupAndRestoreTest, AnEarlyStoppedFitDeletesItsBackup) {
  class StopAfterFirstEpoch final : public callbacks::Callback {
   public:
    void on_epoch_end(model::Model& m, int, const callbacks::Logs&) override { m.stop_training = true; }
  };
  const std::string backup = dir_.path() + "/backup";
  const Trained stopped = fit({std::make_shared<StopAfterFirstEpoch>(),
                               std::make_shared<callbacks::BackupAndRestore>(
                                   backup, callbacks::BackupAndRestore::Options{.save_before_preemption = false})});
  EXPECT_EQ(stopped.iterations, 5);
  EXPECT_FALSE(std::filesystem::exists(backup + "/checkpoint"));
}

TEST_F(BackupAndRestoreTest, ACrashBetweenBackupsRetrainsTheBatchesSinceTheLastOne) {
  const Trained uninterrupted = fit({});
  const std::string backup = dir_.path() + "/backup";
  const callbacks::BackupAndRestore::Options every2{.save_freq = 2, .save_before_preemption = false};
  // A crash (an exception out of fit) after batch 3 of epoch 2: the last backup is after batch 2.
  EXPECT_THROW(fit({std::make_shared<callbacks::BackupAndRestore>(backup, every2),
                    std::make_shared<At>(1, 3, [] { throw UnavailableError("simulated crash"); })}),
               UnavailableError);
  auto again = std::make_shared<callbacks::BackupAndRestore>(backup, every2);
  const Trained resumed = fit({again});
  ASSERT_TRUE(again->restored().has_value());
  EXPECT_EQ(resumed.iterations, uninterrupted.iterations);
  EXPECT_EQ(resumed.weights, uninterrupted.weights);
}

TEST_F(BackupAndRestoreTest, TheBackupIsKeptWhenAskedAndInitialEpochSkipsEpochs) {
  const std::string backup = dir_.path() + "/keep";
  fit({std::make_shared<callbacks::BackupAndRestore>(
      backup, callbacks::BackupAndRestore::Options{.delete_checkpoint = false, .save_before_preemption = false})});
  EXPECT_TRUE(std::filesystem::exists(backup + "/checkpoint"));
  const Trained late = fit({}, /*initial_epoch=*/2);
  EXPECT_EQ(late.iterations, 5);
  EXPECT_EQ(late.history.history.at("loss").size(), 1u);
}

TEST_F(BackupAndRestoreTest, BadOptions) {
  EXPECT_THROW(callbacks::BackupAndRestore(""), InvalidArgumentError);
  EXPECT_THROW(callbacks::BackupAndRestore(dir_.path(), {.save_freq = -1}), InvalidArgumentError);
  EXPECT_THROW(fit({}, /*initial_epoch=*/-1), InvalidArgumentError);
}

}  // namespace
}  // namespace chorus
