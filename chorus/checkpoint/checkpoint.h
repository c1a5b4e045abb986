// Checkpoint: TensorFlow's tf.train.Checkpoint in C++ — save and restore a graph of objects
// (models, optimizers, variables, data iterators, random generators) in TF's own file format.
//
//   train::Checkpoint ckpt({{"model", model}, {"optimizer", model.optimizer()},
//                           {"step", step}, {"data", iterator}});
//   std::string path = ckpt.save("/tmp/run/ckpt");     // "/tmp/run/ckpt-1" (.index + .data-*)
//   ...
//   ckpt.restore(path).assert_consumed();               // in a fresh program: same values back
//
// Files: TF's tensor bundle (checkpoint/bundle.h) with TF's keys — variables under
// "<object path>/.ATTRIBUTES/VARIABLE_VALUE", slots under ".OPTIMIZER_SLOT", the object graph
// under "_CHECKPOINTABLE_OBJECT_GRAPH" (checkpoint/trackable.h explains paths). TensorFlow's
// tf.train.load_checkpoint reads what save() writes, and restore() reads TF's checkpoints.
//
// save(prefix): increments save_counter (an int64 variable, child "save_counter" of the root,
//   created at the first save) and writes "<prefix>-<save_counter>"; returns that path.
// write(path): writes exactly `path` (no counter). Both are crash-safe: a bundle is complete and
//   durable when its .index exists (BundleWriter::finish: temporary files, fsync, rename, index
//   last, directory fsync).
// restore(path): matches the checkpoint's object graph against the live objects, child name by
//   child name from the root (TF's object-based restore); without an object graph, by key
//   (name-based). All values are read and checked first; if any variable's shape or dtype differs,
//   InvalidArgumentError lists *every* mismatch (with the missing and unexpected values) and
//   nothing is assigned; if a variable's value has a TF dtype no chorus DType matches (int8,
//   int16, uint16, uint32, uint64, complex64, complex128, string, ...), UnimplementedError names
//   each such key and dtype ("'v/.ATTRIBUTES/VARIABLE_VALUE' has TF dtype DT_INT8 (int8) [3]")
//   and nothing is assigned. Otherwise every matched value is assigned at once. Values whose object
//   does not exist yet (a model not built, slots not created) wait and are assigned when it is
//   created (TF's restore-on-create). A missing index → NotFoundError; corruption → DataLossError
//   naming the file and tensor (nothing assigned).
// read(path): restore() for a write() (save_counter neither expected nor restored).
//
// Distribution (docs/formats.md C5): a mirrored variable is saved once — its primary component for
// ON_WRITE, the aggregate for ON_READ — and restored into every component directly on its device;
// an ON_READ SUM variable gets value / replicas in each component, so the sum survives. So a
// checkpoint saved with k replicas restores with m (any k, m, the default strategy included).
// Save and restore in cross-replica context (inside strategy.scope(), outside run) or outside any
// scope. Multiple processes: only the chief writes files (SaveOptions::chief; default: the
// chief of the strategy the mirrored variables belong to, and launcher rank 0 or a single
// process, as SummaryWriter); every process increments its counter and returns the same path;
// then all processes meet in that strategy's worker barrier (DistributionStrategy::
// worker_barrier, a no-op in one process), so no worker goes on before the chief's bundle is
// durable. In a multi-worker run every worker must call save/write at the same points.
// Sharded variables (ZeRO, core/sharded_variable.h) are the exception (SaveOptions::sharded, on
// by default): every process writes its own shards as TF slices into its own data file
// `<path>.data-<w>-of-<N>` straight from their storage; the processes then exchange their index
// entries (a collective of metadata) and the chief writes the index, the commit point. A process
// that fails to write makes every process throw (its own error there, AbortedError elsewhere),
// and nothing is committed. A restore reads only the slices each local shard overlaps.
//
// Async (SaveOptions::async, TF's CheckpointOptions(enable_async=True)): save() returns without
// copying host values: it puts a write hold on each (core/tensor.h Buffer::hold_writes; GPU values
// are copied device-to-host at once), and a background thread copies them, ending each hold after
// its copy, then writes the bundle. Training may go on at once: reads never wait, a write into a
// value waits until the writer has copied it, so the bundle holds the values of the call. A
// synchronous save writes straight from the variables' storage. The next save (or write) first
// waits for the previous one; a failure
// of the background write is thrown by the next save/write/sync(), or logged by the destructor.
// In a multi-process run an async save meets the barrier in sync() or in the next save.
//
// Thread-safety: one Checkpoint is used from one thread at a time (the background writer is
// internal). Saving while another thread updates the variables saves some mix of old and new
// values, async saves included (the write holds are taken after the streams are drained, not
// under a lock a concurrent writer would see): call save between steps, outside strategy.run.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <chorus/checkpoint/trackable.h>
#include <chorus/core/distribution.h>

namespace chorus::train {

struct SaveOptions {
  bool async = false;
  // Whether this process writes files; nullopt: launcher rank 0 or single process.
  std::optional<bool> chief;
  // CheckpointManager::save refuses values that are not all finite (FailedPreconditionError
  // naming the first such key; nothing is written, the save counter is unchanged), so that a
  // diverged model never becomes the latest checkpoint over a good one. True saves them anyway
  // (to look at a divergence). Checkpoint::save and write, TF's plain writes, ignore it and write
  // what they are given.
  bool allow_non_finite = false;
  // Sharded variables (ZeRO, core/sharded_variable.h) of more than one shard: true (nullopt) —
  // every process writes its own shards into its own data file as TF slices, straight from their
  // storage, and the chief writes the index from the others' metadata (docs/checkpoints.md
  // "Sharded checkpoints"); false — each is gathered whole to the chief, which writes alone (the
  // layout before 2026-11-28, and bench_checkpoint's yardstick). Either restores anywhere.
  std::optional<bool> sharded;
};

namespace internal {
class RestoreCoordinator;
class AsyncWriter;
}  // namespace internal

// What restore() matched (TF's CheckpointLoadStatus). Copies share the state, which changes as
// deferred values are assigned. The assertions throw FailedPreconditionError listing every
// problem (TF raises AssertionError); each returns *this for chaining.
class LoadStatus {
 public:
  // Every value in the checkpoint was assigned to an object, and every variable/object of the
  // live graph got a value (nothing left pending).
  const LoadStatus& assert_consumed() const;
  // Every variable/object that exists now was matched (the checkpoint may hold more).
  const LoadStatus& assert_existing_objects_matched() const;
  // Something besides the root was matched.
  const LoadStatus& assert_nontrivial_match() const;
  // Silences the warning the Checkpoint logs when it goes away with values of this restore unused.
  const LoadStatus& expect_partial() const;

  // The checkpoint keys not (yet) assigned, sorted.
  std::vector<std::string> unused_keys() const;
  // Paths of live variables and objects that got no value from the checkpoint, sorted.
  std::vector<std::string> unmatched_objects() const;

 private:
  friend class Checkpoint;
  explicit LoadStatus(std::shared_ptr<internal::RestoreCoordinator> coordinator);
  std::shared_ptr<internal::RestoreCoordinator> coordinator_;
};

// Whether this process writes checkpoint files when SaveOptions::chief is not given: the
// strategy's chief (DistributionStrategy::is_chief) in process rank 0 (core/env.h process_rank: the
// launcher's, or the worker index a MultiWorkerMirroredStrategy registered — so also outside its
// scope, and for workers that TF_CONFIG alone numbered), or a single process.
bool is_checkpoint_chief();

class Checkpoint final : public Trackable {
 public:
  // Children of the root, in this order (names: non-empty, unique, not "save_counter";
  // InvalidArgumentError otherwise).
  Checkpoint(std::initializer_list<std::pair<std::string, TrackableRef>> children);
  explicit Checkpoint(std::vector<TrackableChild> children);
  // Waits for an async write in flight (its error is logged, not thrown); logs, per restore whose
  // status did not expect_partial(), how many checkpoint values were never restored (as TF).
  ~Checkpoint() override;

  std::string save(const std::string& file_prefix, const SaveOptions& options = {});
  std::string write(const std::string& file_path, const SaveOptions& options = {});
  LoadStatus restore(const std::string& save_path);
  LoadStatus read(const std::string& save_path);
  // Waits for the async write in flight, rethrows its error; then the multi-process barrier.
  void sync();

  // The number of save() calls: an int64 host variable (not mirrored), created by the first call
  // of this, save() or restore(); child "save_counter" of the root.
  const Variable& save_counter();

  std::vector<TrackableChild> trackable_children() const override;

 private:
  friend class CheckpointManager;
  // `written` runs once the bundle is durable (on the writer thread for async saves), and at once
  // in a non-chief process, which writes nothing. `refuse_non_finite` (CheckpointManager's saves,
  // unless SaveOptions::allow_non_finite): every worker checks the values it would save, the same
  // on all of them, and throws FailedPreconditionError before anything is written.
  std::string write_impl(const std::string& path, const SaveOptions& options,
                         std::function<void(const std::string&)> written = nullptr, bool refuse_non_finite = false);
  LoadStatus restore_impl(const std::string& path, bool expect_save_counter);
  void ensure_save_counter();
  void meet_barrier();
  // The rest of a multi-process sharded save once this process's data file is written: the
  // exchange of metadata, the chief's index, `written`.
  void commit_sharded(const std::string& path, const DistributionStrategy& strategy, int num_workers,
                      const std::string& metadata, const std::function<void(const std::string&)>& written);
  // Runs a pending commit_sharded (an async multi-process sharded save nobody synced), logging
  // its error: the destructors' (the manager's first, as the commit may call back into it).
  void commit_pending_logged() noexcept;
  const DistributionStrategy& owning_strategy() const;

  std::vector<TrackableChild> children_;
  Variable save_counter_;
  std::unique_ptr<internal::AsyncWriter> async_;
  std::function<void()> commit_pending_;  // an async multi-process sharded save's commit_sharded
  std::string barrier_pending_;           // the tag of a save whose worker barrier is still to be met
  const DistributionStrategy* barrier_strategy_ = nullptr;
  std::vector<std::weak_ptr<internal::RestoreCoordinator>> coordinators_;
};

}  // namespace chorus::train
