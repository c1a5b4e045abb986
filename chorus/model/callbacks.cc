#include <chorus/model/callbacks.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <chorus/checkpoint/atomic_file.h>
#include <chorus/checkpoint/bundle.h>
#include <chorus/checkpoint/checkpoint.h>
#include <chorus/checkpoint/checkpoint_manager.h>
#include <chorus/checkpoint/checkpoint_state.h>
#include <chorus/core/distribution.h>
#include <chorus/core/env.h>
#include <chorus/core/error.h>
#include <chorus/core/logging.h>
#include <chorus/distribute/preemption.h>
#include <chorus/distribute/strategy.h>
#include <chorus/model/model.h>
#include <chorus/ops/elementwise.h>
#include <chorus/ops/finite.h>
#include <chorus/ops/reduction.h>
#include <chorus/optimizer/optimizer.h>
#include <chorus/summary/summary_writer.h>
#include <chorus/summary/trace.h>

namespace chorus::callbacks {

using chorus::internal::str_cat;

namespace {
std::string format_logs(const Logs& logs) {
  std::ostringstream os;
  // "loss" first, then the rest in name order (Keras prints loss, then metrics).
  auto put = [&os](const std::string& k, double v) {
    os << " - " << k << ": " << std::fixed << std::setprecision(4) << v;
  };
  if (auto it = logs.find("loss"); it != logs.end()) put(it->first, it->second);
  for (const auto& [k, v] : logs)
    if (k != "loss") put(k, v);
  return os.str();
}
}  // namespace

std::optional<ProgressMode> progress_mode_requested() {
  const std::optional<std::string> text = env::get("CHORUS_PROGRESS");
  if (!text) return std::nullopt;
  if (*text == "bar") return ProgressMode::kBar;
  if (*text == "epoch") return ProgressMode::kEpoch;
  if (*text == "none") return ProgressMode::kNone;
  throw InvalidArgumentError(str_cat("CHORUS_PROGRESS='", *text,
                                     "' is not valid: use bar (redrawn on a terminal), epoch (one line per ",
                                     "epoch) or none"));
}

ProgressMode progress_mode_from_environment() {
  if (const std::optional<ProgressMode> requested = progress_mode_requested()) return *requested;
  const bool person = isatty(STDOUT_FILENO) != 0 && !env::launcher_rank() && !env::get("CI");
  return person ? ProgressMode::kBar : ProgressMode::kEpoch;
}

ProgressBar::ProgressBar(int epochs, std::ostream* out, std::optional<bool> tty)
    : epochs_(epochs),
      out_(out ? out : &std::cout),
      mode_(tty ? (*tty ? ProgressMode::kBar : ProgressMode::kEpoch) : progress_mode_from_environment()) {}

void ProgressBar::on_epoch_begin(model::Model&, int epoch) {
  start_ = std::chrono::steady_clock::now();
  if (mode_ == ProgressMode::kNone) return;
  *out_ << "Epoch " << epoch + 1 << "/" << epochs_ << "\n";
  out_->flush();
}

std::string ProgressBar::line(std::int64_t step, std::int64_t steps, const Logs& logs, bool final) const {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::ostringstream os;
  if (steps > 0) {
    const int width = 30;
    const int done = static_cast<int>(width * std::min<std::int64_t>(step, steps) / steps);
    const int digits = static_cast<int>(std::to_string(steps).size());
    os << std::setw(digits) << step << "/" << steps << " ["
       << std::string(static_cast<std::size_t>(std::max(0, done - 1)), '=')
       << (done >= width ? "=" : (done > 0 ? ">" : ""))
       << std::string(static_cast<std::size_t>(width - std::max(done, 0)), '.') << "]";
  } else {
    os << step << "/Unknown";
  }
  if (final || steps <= 0) {
    os << " - " << std::lround(elapsed) << "s " << (step ? std::lround(1000 * elapsed / step) : 0) << "ms/step";
  } else {
    os << " - ETA: " << std::lround(elapsed / std::max<std::int64_t>(step, 1) * (steps - step)) << "s";
  }
  os << format_logs(logs);
  return os.str();
}

void ProgressBar::on_train_batch_end(model::Model&, std::int64_t step, std::int64_t steps, const Logs& logs) {
  last_steps_ = steps > 0 ? steps : step;
  if (mode_ != ProgressMode::kBar) return;
  *out_ << "\r" << line(step, steps, logs, false) << "\033[K";
  out_->flush();
}

void ProgressBar::on_epoch_end(model::Model&, int, const Logs& logs) {
  if (mode_ == ProgressMode::kNone) return;
  const bool bar = mode_ == ProgressMode::kBar;
  if (bar) *out_ << "\r";
  *out_ << line(last_steps_, last_steps_, logs, true) << (bar ? "\033[K" : "") << "\n";
  out_->flush();
}

TensorBoard::TensorBoard(std::string log_dir, std::int64_t update_freq, bool write_graph)
    : log_dir_(std::move(log_dir)), update_freq_(update_freq), write_graph_(write_graph) {
  CHORUS_REQUIRE(!log_dir_.empty(), InvalidArgumentError, "TensorBoard: log_dir is empty");
  CHORUS_REQUIRE(update_freq_ >= 0, InvalidArgumentError, "TensorBoard: update_freq must be >= 0");
}
TensorBoard::~TensorBoard() = default;

// A failing summary write (a full or read-only log volume, ...) must not end training: the first
// error is logged once, summaries stop, training and checkpoints go on.
template <typename F>
void TensorBoard::guarded(F&& write) {
  if (disabled_) return;
  try {
    write();
  } catch (const Error& e) {
    disabled_ = true;
    CHORUS_LOG(WARNING) << "TensorBoard: cannot write summaries to '" << log_dir_ << "' (" << e.what()
                        << "); no more summaries in this run, training and checkpoints go on";
  }
}

void TensorBoard::on_train_begin(model::Model&) {
  guarded([&] {
    if (!train_) train_ = std::make_unique<summary::SummaryWriter>(log_dir_ + "/train");
    if (!validation_) validation_ = std::make_unique<summary::SummaryWriter>(log_dir_ + "/validation");
  });
}

void TensorBoard::on_train_end(model::Model&) {
  guarded([&] {
    if (train_) train_->flush();
    if (validation_) validation_->flush();
  });
}

void TensorBoard::on_train_batch_end(model::Model& m, std::int64_t, std::int64_t, const Logs& logs) {
  ++global_step_;
  if (write_graph_ && !graph_written_ && !disabled_ && train_) {
    graph_written_ = true;
    summary::GraphDef graph;
    try {
      graph = m.graph_def();
      summary::encode_graph_def(graph);  // validates: a model TensorBoard cannot draw costs only its graph
    } catch (const Error& e) {
      CHORUS_LOG(WARNING) << "TensorBoard: no graph for model '" << m.name() << "': " << e.what();
      graph.node.clear();
    }
    if (!graph.node.empty()) guarded([&] { summary::graph(*train_, graph); });
  }
  if (update_freq_ > 0 && global_step_ % update_freq_ == 0)
    if (auto it = logs.find("loss"); it != logs.end())
      guarded([&] { train_->scalar("batch_loss", it->second, global_step_); });
}

void TensorBoard::on_epoch_end(model::Model&, int epoch, const Logs& logs) {
  guarded([&] {
    for (const auto& [k, v] : logs) {
      if (k.rfind("val_", 0) == 0)
        validation_->scalar("epoch_" + k.substr(4), v, epoch);
      else
        train_->scalar("epoch_" + k, v, epoch);
    }
    train_->flush();
    validation_->flush();
  });
}

EarlyStopping::EarlyStopping(std::string monitor, int patience, double min_delta)
    : monitor_(std::move(monitor)),
      patience_(patience),
      min_delta_(std::abs(min_delta)),
      minimize_(monitor_.find("acc") == std::string::npos) {
  CHORUS_REQUIRE(patience_ >= 0, InvalidArgumentError, "EarlyStopping: patience must be >= 0");
}

void EarlyStopping::on_train_begin(model::Model&) {
  wait_ = 0;
  first_ = true;
  stopped_epoch_ = -1;
}

void EarlyStopping::on_epoch_end(model::Model& m, int epoch, const Logs& logs) {
  auto it = logs.find(monitor_);
  if (it == logs.end()) {
    std::string present;
    for (const auto& [k, v] : logs) present += (present.empty() ? "" : ", ") + k;
    throw InvalidArgumentError(str_cat("EarlyStopping: '", monitor_, "' is not in the logs (", present,
                                       "); pass validation_data to monitor val_* values"));
  }
  const double v = it->second;
  const bool better = first_ || (minimize_ ? v < best_ - min_delta_ : v > best_ + min_delta_);
  if (better) {
    best_ = v;
    wait_ = 0;
    first_ = false;
    return;
  }
  if (++wait_ > patience_) {
    stopped_epoch_ = epoch;
    m.stop_training = true;
  }
}

ModelCheckpoint::ModelCheckpoint(train::CheckpointManager& manager, Options options)
    : manager_(manager), options_(options) {
  CHORUS_REQUIRE(options_.save_freq >= 0, InvalidArgumentError, "ModelCheckpoint: save_freq must be >= 0, got ",
                 options_.save_freq);
}

void TerminateOnNaN::on_train_batch_end(model::Model&, std::int64_t step, std::int64_t, const Logs& logs) {
  const auto it = logs.find("loss");
  if (it == logs.end() || std::isfinite(it->second)) return;
  const double v = it->second;
  throw InvalidArgumentError(
      str_cat("TerminateOnNaN: the loss is ",
              std::isnan(v) ? "NaN"
              : v > 0       ? "inf"
                            : "-inf",
              " at epoch ", epoch_ + 1, ", step ", step,
              "; training stopped (check the input data for NaN/Inf, or lower the learning rate)"));
}

namespace {

// The names of the model's floating-point variables holding NaN or Inf; one small reduction and
// host read per variable (ops/finite.h).
std::vector<std::string> non_finite_variables(model::Model& m) {
  std::vector<std::string> bad;
  for (const Variable& v : m.variables()) {
    if (is_floating(v.dtype()) && !ops::all_finite(v.read_value())) bad.push_back(v.name());
  }
  return bad;
}

}  // namespace

void TerminateOnNaN::on_epoch_end(model::Model& m, int epoch, const Logs&) {
  if (const auto bad = non_finite_variables(m); !bad.empty()) {
    throw InvalidArgumentError(str_cat("TerminateOnNaN: ", bad.size(),
                                       " variable(s) hold NaN or Inf at the end of epoch ", epoch + 1, " (first: '",
                                       bad.front(),
                                       "'); training stopped before any checkpoint of them (lower the learning rate, "
                                       "or clip the gradients)"));
  }
}

void ModelCheckpoint::save(model::Model& m) {
  if (const auto bad = non_finite_variables(m); !bad.empty()) {
    CHORUS_LOG(ERROR) << "ModelCheckpoint: not saved: " << bad.size() << " variable(s) hold NaN or Inf (first: '"
                      << bad.front() << "'); the latest checkpoint stays "
                      << manager_.latest_checkpoint().value_or("(none)");
    return;
  }
  auto path = manager_.save(std::nullopt, true, {.async = options_.async});
  if (path) saved_.push_back(*path);
}

void ModelCheckpoint::on_train_batch_end(model::Model& m, std::int64_t, std::int64_t, const Logs&) {
  if (options_.save_freq > 0 && ++batches_ % options_.save_freq == 0) save(m);
}

void ModelCheckpoint::on_epoch_end(model::Model& m, int, const Logs&) {
  if (options_.save_freq == 0) save(m);
}

void ModelCheckpoint::on_train_end(model::Model&) { manager_.sync(); }

// --- BackupAndRestore ---

struct BackupAndRestore::State {
  Variable epoch, batch;  // where fit is: the next epoch to run, and its batches already trained
  std::unique_ptr<train::Checkpoint> checkpoint;
  std::unique_ptr<train::CheckpointManager> manager;
  std::unique_ptr<distribute::PreemptionWatcher> watcher;
  std::int64_t batches = 0;  // training batches since fit began (the same on every worker)
};

BackupAndRestore::BackupAndRestore(std::string backup_dir, Options options)
    : dir_(std::move(backup_dir)), options_(options) {
  CHORUS_REQUIRE(!dir_.empty(), InvalidArgumentError, "BackupAndRestore: empty backup_dir");
  CHORUS_REQUIRE(options_.save_freq >= 0, InvalidArgumentError, "BackupAndRestore: save_freq must be >= 0, got ",
                 options_.save_freq);
}

BackupAndRestore::~BackupAndRestore() = default;

void BackupAndRestore::on_train_begin(model::Model& m) {
  state_ = std::make_unique<State>();
  restored_.reset();
  preempted_ = false;
  // Bookkeeping read and written in cross-replica context (plain, or mirrored when fit runs in a
  // strategy's scope: the same on every replica).
  state_->epoch = make_variable(
      {.initial_value = Tensor::scalar<std::int64_t>(0, "/cpu:0"), .name = "backup/epoch", .trainable = false});
  state_->batch = make_variable(
      {.initial_value = Tensor::scalar<std::int64_t>(0, "/cpu:0"), .name = "backup/batch", .trainable = false});
  std::vector<train::TrackableChild> children{
      {"model", m}, {"optimizer", m.optimizer_ptr()}, {"epoch", state_->epoch}, {"batch", state_->batch}};
  const std::vector<Variable> metric_state = m.metric_variables();
  for (std::size_t i = 0; i < metric_state.size(); ++i)
    children.push_back({str_cat("metric_state_", i), metric_state[i]});
  state_->checkpoint = std::make_unique<train::Checkpoint>(std::move(children));
  state_->manager = std::make_unique<train::CheckpointManager>(*state_->checkpoint, dir_, /*max_to_keep=*/1);
  restored_ = state_->manager->restore_or_initialize();
  const auto epoch = state_->epoch.read_value().item<std::int64_t>();
  const auto batch = state_->batch.read_value().item<std::int64_t>();
  // Every worker must resume from the same point (a backup_dir each worker sees alike).
  const distribute::Strategy& s = m.strategy();
  const int workers = s.num_replicas_in_sync() / s.num_local_replicas();
  if (workers > 1) {
    const std::vector<double> mine{restored_ ? 1.0 : 0.0, static_cast<double>(epoch), static_cast<double>(batch)};
    const std::vector<double> all = s.sum_over_workers(mine);
    for (std::size_t i = 0; i < mine.size(); ++i)
      CHORUS_REQUIRE(all[i] == mine[i] * workers, FailedPreconditionError,
                     "BackupAndRestore: the workers restored different backups from '", dir_, "' (this worker: ",
                     restored_ ? str_cat(*restored_, ", epoch ", epoch + 1, ", batch ", batch) : std::string("none"),
                     "); put backup_dir on a file system every worker sees");
  }
  if (restored_) {
    m.set_resume_point(static_cast<int>(epoch), batch);
    CHORUS_LOG(INFO) << "BackupAndRestore: resuming from " << *restored_ << " at epoch " << epoch + 1 << ", after "
                     << batch << " batch(es) of it";
  }
  if (options_.save_before_preemption) state_->watcher = std::make_unique<distribute::PreemptionWatcher>(m.strategy());
}

void BackupAndRestore::on_epoch_begin(model::Model&, int epoch) { epoch_ = epoch; }

std::optional<std::pair<int, std::int64_t>> BackupAndRestore::saved_point(const std::string& backup_dir) {
  const std::optional<std::string> latest = train::latest_checkpoint(backup_dir);
  if (!latest) return std::nullopt;
  train::BundleReader reader(*latest);
  const auto value = [&](const char* name) {
    return reader.read(str_cat(name, "/.ATTRIBUTES/VARIABLE_VALUE")).item<std::int64_t>();
  };
  return std::make_pair(static_cast<int>(value("epoch")), value("batch"));
}

void BackupAndRestore::save(model::Model& m, int epoch, std::int64_t step) {
  if (const auto bad = non_finite_variables(m); !bad.empty()) {
    CHORUS_LOG(ERROR) << "BackupAndRestore: not backed up: " << bad.size() << " variable(s) hold NaN or Inf (first: '"
                      << bad.front() << "'); the backup stays "
                      << state_->manager->latest_checkpoint().value_or("(none)");
    return;
  }
  state_->epoch.assign(Tensor::scalar<std::int64_t>(epoch, "/cpu:0"));
  state_->batch.assign(Tensor::scalar<std::int64_t>(step, "/cpu:0"));
  state_->manager->save();
}

void BackupAndRestore::on_train_batch_end(model::Model& m, std::int64_t step, std::int64_t, const Logs&) {
  const std::int64_t batches = ++state_->batches;
  bool saved = false;
  if (options_.save_freq > 0 && batches % options_.save_freq == 0) {
    save(m, epoch_, step);
    saved = true;
  }
  if (state_->watcher && state_->watcher->should_stop(batches)) {
    if (!saved) save(m, epoch_, step);
    state_->manager->sync();
    preempted_ = true;
    CHORUS_LOG(WARNING) << "BackupAndRestore: preempted; epoch " << epoch_ + 1 << ", batch " << step << " backed up to "
                        << state_->manager->latest_checkpoint().value_or(dir_) << "; fit stops here (rerun to resume)";
    m.stop_after_this_step();
  }
}

void BackupAndRestore::on_epoch_end(model::Model& m, int epoch, const Logs&) { save(m, epoch + 1, 0); }

void BackupAndRestore::on_train_end(model::Model& m) {
  state_->manager->sync();
  // fit ended (also by EarlyStopping, as Keras): the backup is done with. A preempted run keeps
  // it for the rerun (a crashed one never gets here).
  if (options_.delete_checkpoint && !preempted_ && m.strategy().worker_offset() == 0) {
    for (const std::string& prefix : state_->manager->checkpoints()) train::delete_bundle(prefix);
    train::remove_file_if_exists(dir_ + "/checkpoint");
  }
  state_.reset();  // the watcher (the signal dispositions of before) and the manager's directory lock
}

LearningRateScheduler::LearningRateScheduler(std::function<double(int, double)> schedule)
    : schedule_(std::move(schedule)) {
  CHORUS_REQUIRE(schedule_ != nullptr, InvalidArgumentError, "LearningRateScheduler: schedule is empty");
}

void LearningRateScheduler::on_epoch_begin(model::Model& m, int epoch) {
  const double lr = schedule_(epoch, m.optimizer().learning_rate());
  CHORUS_REQUIRE(std::isfinite(lr) && lr >= 0, InvalidArgumentError, "LearningRateScheduler: schedule returned ", lr,
                 " for epoch ", epoch);
  m.optimizer().set_learning_rate(lr);
}

}  // namespace chorus::callbacks
