// CheckpointManager: TensorFlow's tf.train.CheckpointManager — numbered saves in a directory,
// the `checkpoint` state file, retention, and resuming (docs/formats.md C).
//
//   train::Checkpoint ckpt({{"model", model}, {"optimizer", model.optimizer()}, {"step", step}});
//   train::CheckpointManager manager(ckpt, "/tmp/run", /*max_to_keep=*/3);
//   manager.restore_or_initialize();                  // resumes from the latest save, if any
//   for (...) { train_step(); if (step % 100 == 0) manager.save(); }
//
// save(checkpoint_number, check_interval, options): with checkpoint_interval set, returns nullopt
//   (saves nothing) when the step_counter equals the last saved step or, if check_interval, is
//   below last + interval. Otherwise increments the checkpoint's save_counter and writes
//   "<directory>/<checkpoint_name>-<N>" (N = checkpoint_number, else save_counter) through
//   Checkpoint's crash-safe write. Once the bundle is durable: the path becomes the latest (a
//   re-saved path moves to the end), checkpoints beyond max_to_keep leave the list oldest first
//   (unless keep_checkpoint_every_n_hours preserves one: kept on disk, forgotten by the manager),
//   the state file is replaced atomically (once per save), and only then are the checkpoints that
//   left the list deleted. So a crash at any moment leaves a state file that names complete
//   checkpoints only, and no checkpoint is deleted before the new one is committed. With SaveOptions::async the
//   bookkeeping runs on the writer thread after the write (call sync(), or the next save waits).
// Constructor: creates the directory, recovers the state file (timestamps clamped to now;
//   missing timestamps taken as last_preserved_timestamp; a missing file: last preserved = now
//   − 1 s), removes `*.tempstate*` files left by crashed writers. Only one manager may be active in
//   a directory (TF's rule): the chief takes an exclusive lock (`flock` on
//   `<directory>/.chorus-manager.lock`, held until destruction); a second manager — in this or
//   another process — gets FailedPreconditionError naming the directory and the holder's pid.
//   The state file is not trusted: only "<directory>/<checkpoint_name>-<N>" entries (paths
//   resolved, `..` and links included) are managed; anything else it names is reported in a
//   warning, never restored as the latest and never deleted. An empty or missing state file with
//   "<checkpoint_name>-<N>.index" files on disk: the list is recovered from the files (warning).
//   A checkpoint on disk numbered above every one the state file names (a save killed after its
//   commit, before its state write) is read whole and CRC-checked: adopted as the latest when
//   intact, moved aside as "<path>.corrupt-<unix time>.*" when not (a warning either way), so the
//   directory never wedges (resume from the older one, then a refused save over the newer one).
//   The lock file is never followed through a link and must be a regular file of this user
//   (io::File::open_or_create_owned; FailedPreconditionError naming the path otherwise).
// restore_or_initialize(): restores latest_checkpoint() and returns it. The checkpoint is first
//   read whole and CRC-checked (verify_bundle: one more read of it), so damage anywhere — also in
//   values restored only later, such as optimizer slots — is found here: a corrupt one
//   (DataLossError) is moved aside to "<path>.corrupt-<unix time>.*" (never deleted; the state file
//   no longer lists it; one warning says so) and the next older one is tried (a checkpoint damaged
//   by a crash of the storage never stops a resume, nor any later one); with none good →
//   DataLossError; with none at all, runs init_fn and returns nullopt. With
//   options.strict_restore, TF's behaviour: no check, no fallback, DataLossError.
// save() without a checkpoint_number refuses (FailedPreconditionError, nothing written) to write
//   "<name>-<N>" when the directory already holds a checkpoint numbered N or higher: the run did
//   not resume (restore_or_initialize) and would overwrite its history.
// Multi-process: every worker constructs the manager and calls save at the same steps. Only the
//   chief (Checkpoint's rule) writes the bundle, the state file and deletes; the others keep the
//   same bookkeeping in memory.
// Errors: max_to_keep <= 0 → InvalidArgumentError (pass nullopt to keep all); checkpoint_interval
//   without step_counter → InvalidArgumentError; OS errors as typed errors naming the path.
// Lifetime: the Checkpoint must outlive its manager (the manager refers to it).
// Thread-safety: call from one thread; the async writer's bookkeeping is synchronized inside.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <chorus/checkpoint/checkpoint.h>
#include <chorus/checkpoint/checkpoint_state.h>
#include <chorus/core/file_io.h>

namespace chorus::train {

struct CheckpointManagerOptions {
  std::optional<double> keep_checkpoint_every_n_hours;
  std::string checkpoint_name = "ckpt";
  Variable step_counter;                            // an integer scalar variable (optional)
  std::optional<std::int64_t> checkpoint_interval;  // in steps of step_counter
  std::function<void()> init_fn;                    // restore_or_initialize without a checkpoint
  // Start the directory over (chorus-train --no-resume): when not empty, the constructor, once it
  // holds the directory's lock, moves every file this manager owns — "<checkpoint_name>-<N>.*"
  // (bundles, and those moved aside as damaged) and the `checkpoint` state file — into this
  // directory (created; nothing is deleted) and starts with no checkpoints, so the first save is
  // "<checkpoint_name>-1". Nothing else in the directory is touched, and a directory another
  // manager holds is refused before anything moves. The chief moves; the other workers start
  // empty without reading the state.
  std::string start_over_into;
  // restore_or_initialize's fallback (the default, false): the latest checkpoint is CRC-checked
  // whole before it is restored, and a damaged one is moved aside and the previous one used. True:
  // TF's behaviour — the latest is restored as it is, and damage raises DataLossError (from the
  // restore, or from the step that creates a deferred value such as an optimizer slot); nothing
  // is moved.
  bool strict_restore = false;
};

class CheckpointManager {
 public:
  CheckpointManager(Checkpoint& checkpoint, std::string directory, std::optional<int> max_to_keep,
                    CheckpointManagerOptions options = {});
  // Waits for an async save in flight; releases the directory lock.
  ~CheckpointManager();
  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;

  std::optional<std::string> save(std::optional<std::int64_t> checkpoint_number = std::nullopt,
                                  bool check_interval = true, const SaveOptions& options = {});
  std::optional<std::string> restore_or_initialize();
  // Waits for the async save in flight and rethrows its error.
  void sync();
  // The status of the restore restore_or_initialize() did (nullopt before or without one), for
  // assertions TF's restore_or_initialize cannot offer: manager.restore_status()->assert_consumed().
  const std::optional<LoadStatus>& restore_status() const { return restore_status_; }

  // How many files options.start_over_into made the constructor move (0 on other workers).
  std::size_t files_moved_aside() const { return files_moved_aside_; }

  std::optional<std::string> latest_checkpoint() const;
  // The kept checkpoints, oldest first (preserved ones not included).
  std::vector<std::string> checkpoints() const;
  const std::string& directory() const { return directory_; }
  std::optional<std::int64_t> checkpoint_interval() const { return options_.checkpoint_interval; }

 private:
  void on_written(const std::string& path);
  void record_state();
  // Drops checkpoints beyond max_to_keep from the list, oldest first; returns those to delete
  // (after the state no longer names them).
  std::vector<std::string> sweep();
  std::int64_t current_step() const;
  // Whether `path` is "<directory>/<checkpoint_name>-<N>" once both are resolved: only such
  // checkpoints are managed, deleted by retention or moved aside.
  bool owns(const std::string& path) const;
  std::optional<std::int64_t> checkpoint_number_of(const std::string& file_name) const;
  // The files options.start_over_into moves (see there), by name; and the move itself.
  std::vector<std::string> owned_files() const;
  std::size_t move_owned_files(const std::string& destination) const;
  // The "<checkpoint_name>-<N>" checkpoints whose .index is in the directory, by N ascending.
  std::vector<std::pair<std::string, std::int64_t>> checkpoints_on_disk() const;
  // Adopts "<checkpoint_name>-<N>" checkpoints on disk newer than every one the state names (a save
  // killed between its commit and its state write): each that verify_bundle finds intact becomes
  // the latest (warning), any other is moved aside (warning); the chief then records the state.
  void adopt_unrecorded(double clock);
  // Renames a damaged checkpoint's files to "<path>.corrupt-<unix time>.*" (chief; never
  // deletes), forgets it, and logs one warning saying what `why` says ("is damaged (...)").
  void move_aside(const std::string& path, const std::string& why);

  Checkpoint& checkpoint_;
  std::string directory_;
  std::optional<int> max_to_keep_;
  CheckpointManagerOptions options_;
  std::string prefix_;
  bool chief_;
  io::File lock_;  // the flock on <directory>/.chorus-manager.lock (chief only)

  mutable std::mutex mu_;  // the bookkeeping below (the async writer's thread updates it)
  std::vector<std::pair<std::string, double>> maybe_delete_;  // (path, timestamp), oldest first
  std::optional<std::string> latest_;
  double last_preserved_timestamp_ = 0;
  std::optional<std::int64_t> last_checkpoint_step_;
  std::optional<LoadStatus> restore_status_;
  std::size_t files_moved_aside_ = 0;
};

}  // namespace chorus::train
