#include <chorus/checkpoint/checkpoint_manager.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>

#include <chorus/checkpoint/async_writer.h>
#include <chorus/checkpoint/atomic_file.h>
#include <chorus/checkpoint/bundle.h>
#include <chorus/core/error.h>
#include <chorus/core/file_io.h>
#include <chorus/core/logging.h>

namespace chorus::train {

using ::chorus::internal::str_cat;

namespace {

constexpr const char* kLockFile = ".chorus-manager.lock";

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The exclusive, process-held lock of a directory; the file holds the holder's pid for messages.
// Never follows a link planted at the lock file's path (io::File::open_or_create_owned).
io::File lock_directory(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kLockFile).string();
  io::File lock = io::File::open_or_create_owned(path);
  const int fd = lock.fd();
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {};
    const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    if (err == EWOULDBLOCK) {
      throw FailedPreconditionError(str_cat(
          "CheckpointManager: another CheckpointManager is active in '", dir, "' (lock held by pid ",
          n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string("?"),
          "); only one may manage a directory at a time — destroy the other one first, or use another directory"));
    }
    io::throw_errno(err, "CheckpointManager: cannot lock", path);
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, pid.data(), pid.size(), 0);
  return lock;
}

}  // namespace

CheckpointManager::CheckpointManager(Checkpoint& checkpoint, std::string directory, std::optional<int> max_to_keep,
                                     CheckpointManagerOptions options)
    : checkpoint_(checkpoint),
      directory_(std::move(directory)),
      max_to_keep_(max_to_keep),
      options_(std::move(options)) {
  CHORUS_REQUIRE(!directory_.empty(), InvalidArgumentError, "CheckpointManager: empty directory");
  CHORUS_REQUIRE(!max_to_keep_ || *max_to_keep_ > 0, InvalidArgumentError,
                 "CheckpointManager: max_to_keep must be positive or nullopt (keep all), got ",
                 max_to_keep_.value_or(0));
  CHORUS_REQUIRE(!options_.checkpoint_interval || options_.step_counter.defined(), InvalidArgumentError,
                 "CheckpointManager: checkpoint_interval needs a step_counter");
  CHORUS_REQUIRE(!options_.checkpoint_interval || *options_.checkpoint_interval > 0, InvalidArgumentError,
                 "CheckpointManager: checkpoint_interval must be positive, got ",
                 options_.checkpoint_interval.value_or(0));
  CHORUS_REQUIRE(!options_.step_counter.defined() ||
                     (is_integer(options_.step_counter.dtype()) && options_.step_counter.shape().rank() == 0),
                 InvalidArgumentError, "CheckpointManager: step_counter must be an integer scalar variable, got ",
                 dtype_name(options_.step_counter.dtype()), options_.step_counter.shape().to_string());
  CHORUS_REQUIRE(!options_.checkpoint_name.empty() && options_.checkpoint_name.find('/') == std::string::npos,
                 InvalidArgumentError, "CheckpointManager: checkpoint_name must be a plain file name, got '",
                 options_.checkpoint_name, "'");
  prefix_ = (std::filesystem::path(directory_) / options_.checkpoint_name).string();
  chief_ = is_checkpoint_chief();
  if (chief_) {
    io::create_directories(directory_);
    lock_ = lock_directory(directory_);
    const int removed = remove_stray_temporaries(directory_);
    if (removed > 0) {
      CHORUS_LOG(INFO) << "CheckpointManager: removed " << removed << " temporary file(s) of an interrupted save in '"
                       << directory_ << "'";
    }
  }
  // Recover the state (TF's constructor).
  const double clock = now_seconds();
  if (!options_.start_over_into.empty()) {
    if (chief_) files_moved_aside_ = move_owned_files(options_.start_over_into);
    last_preserved_timestamp_ = clock - 1;
    return;
  }
  std::optional<CheckpointState> state = read_checkpoint_state(directory_);  // on a throw, lock_ is released
  if (!state || (state->model_checkpoint_path.empty() && state->all_model_checkpoint_paths.empty())) {
    // No state (deleted, emptied): recover it from the checkpoints on disk rather than let the
    // next save start over at <name>-1 on top of them.
    last_preserved_timestamp_ = clock - 1;
    const auto on_disk = checkpoints_on_disk();
    if (!on_disk.empty()) {
      CHORUS_LOG(WARNING) << "CheckpointManager: '" << directory_ << "' has " << on_disk.size() << " checkpoint(s) ("
                          << on_disk.front().first << " .. " << on_disk.back().first << ") but "
                          << (state ? "an empty" : "no")
                          << " `checkpoint` state file; recovered the list from the files";
      for (const auto& [path, n] : on_disk) maybe_delete_.emplace_back(path, clock);
      latest_ = on_disk.back().first;
      if (chief_) record_state();
    }
    return;
  }
  last_preserved_timestamp_ = state->last_preserved_timestamp;
  if (clock < last_preserved_timestamp_) {
    CHORUS_LOG(WARNING) << "CheckpointManager: the clock (" << clock << ") is behind the last preserved timestamp ("
                        << last_preserved_timestamp_ << ") of '" << directory_ << "'; using the clock";
    last_preserved_timestamp_ = clock;
  }
  // Only checkpoints of this manager's own naming inside its own directory are managed (and so
  // ever deleted); anything else a state file names is left alone and reported.
  if (!state->model_checkpoint_path.empty()) {
    if (owns(state->model_checkpoint_path)) {
      latest_ = state->model_checkpoint_path;
    } else {
      CHORUS_LOG(WARNING) << "CheckpointManager: the state file of '" << directory_ << "' names '"
                          << state->model_checkpoint_path << "' as the latest checkpoint, which is not a '"
                          << options_.checkpoint_name
                          << "-<N>' checkpoint in that directory; ignored (not restored, never deleted)";
    }
  }
  std::vector<double> stamps = state->all_model_checkpoint_timestamps;
  if (stamps.size() != state->all_model_checkpoint_paths.size()) {
    stamps.assign(state->all_model_checkpoint_paths.size(), last_preserved_timestamp_);
  }
  for (std::size_t i = 0; i < stamps.size(); ++i) {
    const std::string& path = state->all_model_checkpoint_paths[i];
    if (!owns(path)) {
      CHORUS_LOG(WARNING) << "CheckpointManager: the state file of '" << directory_ << "' lists '" << path
                          << "', which is not a '" << options_.checkpoint_name
                          << "-<N>' checkpoint in that directory; it is not managed and never deleted";
      continue;
    }
    const double t = std::min(stamps[i], clock);
    if (t > last_preserved_timestamp_) maybe_delete_.emplace_back(path, t);
  }
  adopt_unrecorded(clock);
}

void CheckpointManager::adopt_unrecorded(double clock) {
  std::int64_t newest_named = -1;
  auto consider = [&](const std::string& path) {
    if (const auto n = checkpoint_number_of(std::filesystem::path(path).filename().string()))
      newest_named = std::max(newest_named, *n);
  };
  if (latest_) consider(*latest_);
  for (const auto& [path, t] : maybe_delete_) consider(path);
  bool adopted = false;
  for (const auto& [path, n] : checkpoints_on_disk()) {
    if (n <= newest_named) continue;
    // Newer than everything the state names: a save whose bundle was committed but whose state
    // write never happened (the process was killed in between). Left alone, every rerun would
    // resume from the older one and then refuse to save over this one.
    try {
      verify_bundle(path);
    } catch (const Error& e) {
      move_aside(
          path, str_cat("is newer than every checkpoint the state file names, but cannot be adopted (", e.what(), ")"));
      continue;
    }
    CHORUS_LOG(WARNING) << "CheckpointManager: adopted '" << path
                        << "': complete and intact on disk, but not named by the state file of '" << directory_
                        << "' (a save cut off between writing the checkpoint and recording it)";
    maybe_delete_.emplace_back(path, clock);
    latest_ = path;
    adopted = true;
  }
  if (adopted && chief_) {
    const std::vector<std::string> doomed = sweep();
    record_state();
    for (const std::string& p : doomed) delete_bundle(p);
  }
}

bool CheckpointManager::owns(const std::string& path) const {
  namespace fs = std::filesystem;
  std::error_code ec1, ec2;
  const fs::path p = fs::weakly_canonical(fs::path(path), ec1);
  const fs::path dir = fs::weakly_canonical(fs::path(directory_), ec2);
  if (ec1 || ec2 || p.parent_path() != dir) return false;
  return checkpoint_number_of(p.filename().string()).has_value();
}

std::optional<std::int64_t> CheckpointManager::checkpoint_number_of(const std::string& name) const {
  const std::string& base = options_.checkpoint_name;
  if (name.size() <= base.size() + 1 || name.compare(0, base.size(), base) != 0 || name[base.size()] != '-')
    return std::nullopt;
  const std::string digits = name.substr(base.size() + 1);
  if (digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoll(digits);
}

std::vector<std::pair<std::string, std::int64_t>> CheckpointManager::checkpoints_on_disk() const {
  std::vector<std::pair<std::string, std::int64_t>> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(directory_, ec)) {
    const std::string name = entry.path().filename().string();
    constexpr std::string_view kIndex = ".index";
    if (name.size() <= kIndex.size() || name.compare(name.size() - kIndex.size(), kIndex.size(), kIndex) != 0) continue;
    const std::string stem = name.substr(0, name.size() - kIndex.size());
    if (const auto n = checkpoint_number_of(stem))
      out.emplace_back((std::filesystem::path(directory_) / stem).string(), *n);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  return out;
}

std::vector<std::string> CheckpointManager::owned_files() const {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(directory_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == "checkpoint") {
      out.push_back(name);
      continue;
    }
    // "<checkpoint_name>-<N>.<suffix>": the bundle's .index and .data-*, and .corrupt-* copies.
    const auto dot = name.find('.');
    if (dot == std::string::npos || !checkpoint_number_of(name.substr(0, dot))) continue;
    const std::string suffix = name.substr(dot + 1);
    if (suffix == "index" || suffix.rfind("data-", 0) == 0 || suffix.rfind("corrupt-", 0) == 0) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::size_t CheckpointManager::move_owned_files(const std::string& destination) const {
  const std::vector<std::string> files = owned_files();
  if (files.empty()) return 0;
  io::create_directories(destination);
  // The state file first: a crash part-way leaves no state naming checkpoints already moved (the
  // constructor then recovers the list from what is left).
  std::vector<std::string> order = files;
  std::stable_partition(order.begin(), order.end(), [](const std::string& n) { return n == "checkpoint"; });
  for (const std::string& name : order)
    rename_file((std::filesystem::path(directory_) / name).string(),
                (std::filesystem::path(destination) / name).string());
  sync_directory(directory_);
  sync_directory(destination);
  return files.size();
}

void CheckpointManager::move_aside(const std::string& path, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    maybe_delete_.erase(
        std::remove_if(maybe_delete_.begin(), maybe_delete_.end(), [&](const auto& e) { return e.first == path; }),
        maybe_delete_.end());
    if (latest_ == path) latest_ = maybe_delete_.empty() ? std::nullopt : std::optional(maybe_delete_.back().first);
  }
  if (!chief_ || !owns(path)) return;
  const std::string aside = str_cat(path, ".corrupt-", static_cast<std::int64_t>(now_seconds()));
  const std::string dir = directory_of(path);
  const std::string base = std::filesystem::path(path).filename().string();
  const std::string aside_base = std::filesystem::path(aside).filename().string();
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == base + ".index" || (name.rfind(base + ".data-", 0) == 0)) {
      rename_file(entry.path().string(),
                  (std::filesystem::path(dir) / (aside_base + name.substr(base.size()))).string());
    }
  }
  sync_directory(dir);
  record_state();
  CHORUS_LOG(WARNING) << "CheckpointManager: checkpoint '" << path << "' " << why << "; moved aside to '" << aside
                      << ".*' (kept, never deleted); the previous checkpoint is used";
}

CheckpointManager::~CheckpointManager() {
  try {
    checkpoint_.async_->wait();
  } catch (const std::exception& e) {
    CHORUS_LOG(ERROR) << "CheckpointManager: the last async save failed: " << e.what();
  }
  checkpoint_.commit_pending_logged();  // its callback updates this manager's state file
  // lock_'s destructor closes the file, which releases the flock.
}

std::int64_t CheckpointManager::current_step() const {
  return options_.step_counter.read_value().to("/CPU:0").reshape(Shape{1}).to_vector<std::int64_t>()[0];
}

std::optional<std::string> CheckpointManager::save(std::optional<std::int64_t> checkpoint_number, bool check_interval,
                                                   const SaveOptions& options) {
  if (options_.checkpoint_interval) {
    const std::int64_t step = current_step();
    if (last_checkpoint_step_) {
      if (step == *last_checkpoint_step_) return std::nullopt;
      if (check_interval && step < *last_checkpoint_step_ + *options_.checkpoint_interval) return std::nullopt;
    }
    last_checkpoint_step_ = step;
  }
  checkpoint_.async_->wait();  // the previous save's error surfaces before the counter moves
  const Variable& counter = checkpoint_.save_counter();
  const std::int64_t next = counter.value().item<std::int64_t>() + 1;
  const std::int64_t n = checkpoint_number ? *checkpoint_number : next;
  const std::string path = str_cat(prefix_, "-", n);
  if (!checkpoint_number && chief_) {
    // A numbered save below the newest one on disk means this run started from scratch (no
    // restore) in a directory that already has a history: refuse rather than overwrite it. Only
    // the chief writes the directory, so only the chief judges it: another worker on the same
    // host may already see the chief's save of this very step (seen with 16 cores, 2026-11-25:
    // worker 1 refused ckpt-1 that worker 0 had just written). A refusing chief fails its
    // process, and the peer monitor releases the other workers.
    const auto on_disk = checkpoints_on_disk();
    if (!on_disk.empty() && n <= on_disk.back().second) {
      throw FailedPreconditionError(str_cat("CheckpointManager: '", directory_, "' already holds checkpoints up to '",
                                            on_disk.back().first, "', and this save would write '", path,
                                            "' over an earlier one: this run did not resume from them. "
                                            "Call restore_or_initialize() first to continue, or use a new directory "
                                            "(or move the old one away) to start over"));
    }
  }
  counter.impl()->assign_add(Tensor::scalar<std::int64_t>(1, "/CPU:0"));
  SaveOptions opts = options;
  opts.chief = chief_;
  try {
    return checkpoint_.write_impl(
        path, opts, [this](const std::string& written) { on_written(written); }, !options.allow_non_finite);
  } catch (const FailedPreconditionError&) {
    // Refused before anything was written (non-finite values): the save did not happen.
    counter.impl()->assign_add(Tensor::scalar<std::int64_t>(-1, "/CPU:0"));
    throw;
  }
}

void CheckpointManager::on_written(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  const double timestamp = now_seconds();
  maybe_delete_.erase(
      std::remove_if(maybe_delete_.begin(), maybe_delete_.end(), [&](const auto& e) { return e.first == path; }),
      maybe_delete_.end());
  maybe_delete_.emplace_back(path, timestamp);
  latest_ = path;
  // One state write, naming the new checkpoint and no longer naming those about to be deleted,
  // then the deletions: a crash at any point leaves a state file that names only complete
  // checkpoints (TF records the state after deleting, so a crash in between leaves it naming a
  // half-deleted one; recording before and after, as this did until 2026-11-27, named it too and
  // cost two more fsyncs per save).
  const std::vector<std::string> doomed = sweep();
  record_state();
  for (const std::string& p : doomed) delete_bundle(p);
}

void CheckpointManager::record_state() {
  if (!chief_) return;
  CheckpointState s;
  s.model_checkpoint_path = latest_.value_or("");
  for (const auto& [p, t] : maybe_delete_) {
    s.all_model_checkpoint_paths.push_back(p);
    s.all_model_checkpoint_timestamps.push_back(t);
  }
  s.last_preserved_timestamp = last_preserved_timestamp_;
  write_checkpoint_state(directory_, s);
}

std::vector<std::string> CheckpointManager::sweep() {
  std::vector<std::string> doomed;
  if (!max_to_keep_) return doomed;
  while (maybe_delete_.size() > static_cast<std::size_t>(*max_to_keep_)) {
    const auto [path, timestamp] = maybe_delete_.front();
    maybe_delete_.erase(maybe_delete_.begin());
    if (options_.keep_checkpoint_every_n_hours &&
        timestamp - *options_.keep_checkpoint_every_n_hours * 3600.0 >= last_preserved_timestamp_) {
      last_preserved_timestamp_ = timestamp;  // preserved: kept on disk, no longer managed
      continue;
    }
    if (chief_ && owns(path)) doomed.push_back(path);
  }
  return doomed;
}

std::optional<std::string> CheckpointManager::restore_or_initialize() {
  std::vector<std::string> candidates;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (latest_) candidates.push_back(*latest_);
    for (auto it = maybe_delete_.rbegin(); it != maybe_delete_.rend(); ++it) {
      if (std::find(candidates.begin(), candidates.end(), it->first) == candidates.end())
        candidates.push_back(it->first);
    }
  }
  for (const std::string& path : candidates) {
    try {
      // Every tensor's CRC first: values restored later (optimizer slots, created by the first
      // step) would otherwise meet the damage in the middle of training, past this fallback, and
      // every rerun would fail the same way.
      if (!options_.strict_restore) verify_bundle(path);
      restore_status_ = checkpoint_.restore(path);
    } catch (const DataLossError& e) {
      if (options_.strict_restore) throw;
      move_aside(path, str_cat("is damaged (", e.what(), ")"));
      continue;
    } catch (const NotFoundError& e) {
      CHORUS_LOG(ERROR) << "CheckpointManager: checkpoint '" << path << "' is missing (" << e.what()
                        << "); trying the previous one";
      continue;
    }
    if (options_.checkpoint_interval) last_checkpoint_step_ = current_step();
    return path;
  }
  if (!candidates.empty()) {
    throw DataLossError(str_cat("CheckpointManager: none of the ", candidates.size(), " checkpoint(s) in '", directory_,
                                "' could be restored (see the errors logged above); move them away to start afresh"));
  }
  if (options_.init_fn) options_.init_fn();
  return std::nullopt;
}

void CheckpointManager::sync() { checkpoint_.sync(); }

std::optional<std::string> CheckpointManager::latest_checkpoint() const {
  std::lock_guard<std::mutex> lock(mu_);
  return latest_;
}

std::vector<std::string> CheckpointManager::checkpoints() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [p, t] : maybe_delete_) out.push_back(p);
  return out;
}

}  // namespace chorus::train
