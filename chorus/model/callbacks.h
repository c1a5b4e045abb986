// Callbacks of Model::fit (tf.keras.callbacks): ProgressBar, TensorBoard, EarlyStopping,
// TerminateOnNaN, ModelCheckpoint, BackupAndRestore, LearningRateScheduler. Logs are name → value maps ("loss",
// "accuracy", "val_loss",
// ...).
//
//   model.fit(ds, {.epochs = 5, .callbacks = {callbacks::TensorBoard("./logs"),
//                                              callbacks::EarlyStopping("val_loss", 2)}});
//
// ProgressBar is added by fit itself when verbose (Keras's default): on a terminal it redraws one
// line per step ("  12/469 [>.....] - ETA: 5s - loss: 0.3125 - accuracy: 0.9100"); otherwise it
// prints one line per epoch. Callbacks run on the program's thread (cross-replica context).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace chorus::model {
class Model;
}
namespace chorus::summary {
class SummaryWriter;
}
namespace chorus::train {
class CheckpointManager;
}

namespace chorus::callbacks {

using Logs = std::map<std::string, double>;

class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin(model::Model&) {}
  virtual void on_train_end(model::Model&) {}
  virtual void on_epoch_begin(model::Model&, int /*epoch*/) {}
  virtual void on_epoch_end(model::Model&, int /*epoch*/, const Logs&) {}
  // step counts from 1 within the epoch; steps is -1 when unknown.
  virtual void on_train_batch_end(model::Model&, std::int64_t /*step*/, std::int64_t /*steps*/, const Logs&) {}
};
using CallbackPtr = std::shared_ptr<Callback>;

// How ProgressBar prints: kBar redraws a bar per epoch with "\r" (a person's terminal), kEpoch
// prints one line per epoch (Keras's verbose=2: log files, pipes, CI), kNone prints nothing.
enum class ProgressMode { kBar, kEpoch, kNone };

// CHORUS_PROGRESS=bar|epoch|none when set (any other value: InvalidArgumentError naming the
// variable and the values). Otherwise kBar only when stdout is a terminal, the process was not
// started by a launcher (mpirun hands its ranks a pty even when its own output goes to a file or
// a pipe: core/env.h's launcher_rank) and CI is unset; else kEpoch.
ProgressMode progress_mode_from_environment();
// CHORUS_PROGRESS's mode alone: nullopt when unset (a bad value: the same InvalidArgumentError).
std::optional<ProgressMode> progress_mode_requested();

class ProgressBar final : public Callback {
 public:
  // `out` defaults to std::cout; `tty` set: kBar (true) or kEpoch (false); unset:
  // progress_mode_from_environment().
  explicit ProgressBar(int epochs, std::ostream* out = nullptr, std::optional<bool> tty = std::nullopt);
  void on_epoch_begin(model::Model&, int epoch) override;
  void on_train_batch_end(model::Model&, std::int64_t step, std::int64_t steps, const Logs& logs) override;
  void on_epoch_end(model::Model&, int epoch, const Logs& logs) override;

 private:
  std::string line(std::int64_t step, std::int64_t steps, const Logs& logs, bool final) const;
  int epochs_;
  std::ostream* out_;
  ProgressMode mode_;
  std::chrono::steady_clock::time_point start_;
  std::int64_t last_steps_ = -1;
};

// Scalars per epoch ("epoch_loss", "epoch_accuracy", ...) into <log_dir>/train and
// <log_dir>/validation, and per batch every `update_freq` steps ("batch_loss") when > 0, as
// Keras's TensorBoard callback. With write_graph (Keras's default), the model's graph
// (Model::graph_def(): layers as nodes with their output shapes and device) goes into
// <log_dir>/train once, after the first step, for TensorBoard's Graphs tab (docs/summary.md,
// "Graphs and Profile"); a graph that cannot be made is logged as a warning and skipped. Only the
// chief writes (summary/summary_writer.h). A write that fails (a full log volume: ENOSPC, EFBIG,
// EDQUOT; permissions) is logged once as a warning and ends the summaries of this run, never the
// training or its checkpoints.
class TensorBoard final : public Callback {
 public:
  explicit TensorBoard(std::string log_dir, std::int64_t update_freq = 0, bool write_graph = true);
  ~TensorBoard() override;
  void on_train_begin(model::Model&) override;
  void on_train_end(model::Model&) override;
  void on_train_batch_end(model::Model&, std::int64_t step, std::int64_t steps, const Logs& logs) override;
  void on_epoch_end(model::Model&, int epoch, const Logs& logs) override;

 private:
  std::string log_dir_;
  std::int64_t update_freq_;
  bool write_graph_;
  bool graph_written_ = false;
  template <typename F>
  void guarded(F&& write);
  std::int64_t global_step_ = 0;
  bool disabled_ = false;
  std::unique_ptr<summary::SummaryWriter> train_, validation_;
};

// Stops training when `monitor` has not improved by more than min_delta for `patience` epochs
// (mode: "min" for losses, "max" otherwise, chosen from the name as Keras's "auto"). A monitor
// missing from the logs → InvalidArgumentError naming the logs present.
class EarlyStopping final : public Callback {
 public:
  explicit EarlyStopping(std::string monitor = "val_loss", int patience = 0, double min_delta = 0.0);
  void on_train_begin(model::Model&) override;
  void on_epoch_end(model::Model& m, int epoch, const Logs& logs) override;
  int stopped_epoch() const { return stopped_epoch_; }

 private:
  std::string monitor_;
  int patience_;
  double min_delta_;
  bool minimize_;
  double best_ = 0;
  int wait_ = 0;
  int stopped_epoch_ = -1;
  bool first_ = true;
};

// Stops training at the first batch whose loss is NaN or infinite (Keras's TerminateOnNaN), by
// throwing InvalidArgumentError that names the epoch, the step and the value; and at an epoch's
// end whose weights are not all finite (naming the first such variable and the epoch: a last
// update can overflow them with a finite loss). Throwing, unlike Keras's stop_training, ends fit
// before any later callback of the batch or the epoch's end runs, so no checkpoint of the
// non-finite weights is written. Fit adds it first when FitOptions::terminate_on_nan, and then
// also has the optimizer check the summed gradients of every step (Optimizer::set_check_numerics:
// a NaN or Inf gradient stops fit before the update, naming the variable and the step);
// chorus-train does by default.
class TerminateOnNaN final : public Callback {
 public:
  void on_epoch_begin(model::Model&, int epoch) override { epoch_ = epoch; }
  void on_train_batch_end(model::Model&, std::int64_t step, std::int64_t steps, const Logs& logs) override;
  void on_epoch_end(model::Model& m, int epoch, const Logs& logs) override;

 private:
  int epoch_ = 0;
};

// Saves through a CheckpointManager (TF's recommended pairing; Keras's ModelCheckpoint in C++):
// at every epoch's end, or every `save_freq` training batches when > 0 (counted across epochs),
// and waits for an async save in flight when training ends. The manager's Checkpoint decides
// what is saved (typically {"model", model}, {"optimizer", model.optimizer()}); only the chief
// writes files (checkpoint/checkpoint.h). Resume with manager.restore_or_initialize() before fit.
// A model whose floating-point weights are not all finite is never saved: the save is skipped
// with an error logged, so the latest checkpoint stays the last finite one.
class ModelCheckpoint final : public Callback {
 public:
  struct Options {
    std::int64_t save_freq = 0;  // 0: each epoch; N > 0: every N batches
    bool async = false;          // train::SaveOptions::async
  };
  // The manager must outlive the callback.
  explicit ModelCheckpoint(train::CheckpointManager& manager, Options options);
  explicit ModelCheckpoint(train::CheckpointManager& manager) : ModelCheckpoint(manager, Options{}) {}
  void on_train_batch_end(model::Model&, std::int64_t step, std::int64_t steps, const Logs& logs) override;
  void on_epoch_end(model::Model&, int epoch, const Logs& logs) override;
  void on_train_end(model::Model&) override;
  // The paths saved so far, in order.
  const std::vector<std::string>& saved() const { return saved_; }

 private:
  void save(model::Model& m);
  train::CheckpointManager& manager_;
  Options options_;
  std::int64_t batches_ = 0;
  std::vector<std::string> saved_;
};

// Keras's BackupAndRestore: fault tolerance for fit. It backs the training state up — model,
// optimizer (slots, iterations, accumulators), and where fit is: epoch and batch — into
// `backup_dir` (a CheckpointManager keeping the latest one; TensorFlow checkpoint files) at each
// epoch's end, and every `save_freq` batches when > 0. When fit starts and a backup exists, it
// restores it and fit resumes at that epoch and batch (Model::set_resume_point: the batches
// already trained on are skipped, the data's order kept), so a rerun of the same program
// continues where the interrupted one stopped.
// Preemption (save_before_preemption, the default): the callback installs a
// distribute::PreemptionWatcher (SIGTERM; one per process) and asks it after every batch — a
// small collective under MultiWorkerMirroredStrategy — so that once any worker is signalled,
// every worker backs up the same step and fit returns right after it with History::preempted
// set (no epoch end, no validation); exit 0 and rerun to finish.
// When fit completes (not preempted) and delete_checkpoint, the backup's checkpoints are deleted
// (the chief's files only: the bundles and the "checkpoint" state file the manager wrote).
// Under several workers every worker calls the saves (only the chief writes) and reads the
// backup: put backup_dir on a file system every worker sees. A model whose weights are not all
// finite is not backed up (the save is skipped with an error logged, as ModelCheckpoint).
// The backup holds the loss and metric states too, so a resumed epoch reports the whole epoch's
// numbers. Bit for bit resumes need a deterministic model: Dropout's random state is not backed up.
// Errors: an empty backup_dir or save_freq < 0 → InvalidArgumentError; a second watcher in the
// process (another BackupAndRestore training at once) → FailedPreconditionError from fit's start;
// a backup that is not a checkpoint of this model → the restore's errors (checkpoint/checkpoint.h);
// workers that restored different backups (backup_dir not shared) → FailedPreconditionError on
// every worker, naming what each restored.
class BackupAndRestore final : public Callback {
 public:
  struct Options {
    std::int64_t save_freq = 0;          // 0: at each epoch's end only; N > 0: also every N batches
    bool delete_checkpoint = true;       // delete the backup when fit completes
    bool save_before_preemption = true;  // SIGTERM: back up the same step on every worker and stop
  };
  explicit BackupAndRestore(std::string backup_dir, Options options);
  explicit BackupAndRestore(std::string backup_dir) : BackupAndRestore(std::move(backup_dir), Options{}) {}
  ~BackupAndRestore() override;
  void on_train_begin(model::Model& m) override;
  void on_epoch_begin(model::Model&, int epoch) override;
  void on_train_batch_end(model::Model& m, std::int64_t step, std::int64_t steps, const Logs& logs) override;
  void on_epoch_end(model::Model& m, int epoch, const Logs& logs) override;
  void on_train_end(model::Model& m) override;
  // Where the latest backup in `backup_dir` stands — (next epoch, batches of it trained) — or
  // nullopt without one (reads its two small tensors; nothing is restored).
  static std::optional<std::pair<int, std::int64_t>> saved_point(const std::string& backup_dir);
  // The backup restored by the last on_train_begin, if any.
  const std::optional<std::string>& restored() const { return restored_; }
  // Whether the last fit stopped on preemption.
  bool preempted() const { return preempted_; }

 private:
  struct State;
  void save(model::Model& m, int epoch, std::int64_t step);
  std::string dir_;
  Options options_;
  std::unique_ptr<State> state_;
  std::optional<std::string> restored_;
  bool preempted_ = false;
  int epoch_ = 0;
};

// Sets the optimizer's learning rate at each epoch's start to schedule(epoch, current lr).
class LearningRateScheduler final : public Callback {
 public:
  explicit LearningRateScheduler(std::function<double(int epoch, double lr)> schedule);
  void on_epoch_begin(model::Model& m, int epoch) override;

 private:
  std::function<double(int, double)> schedule_;
};

}  // namespace chorus::callbacks
