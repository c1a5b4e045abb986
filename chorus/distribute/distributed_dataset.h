// Distributed input (tf.distribute's DistributedDataset), made by
// Strategy::experimental_distribute_dataset and Strategy::distribute_datasets_from_function.
//
//   auto dist = strategy.experimental_distribute_dataset(ds.batch(64));   // global batches
//   auto it = dist.make_iterator();
//   while (auto batch = it.next()) strategy.run(step, *batch);   // replica r gets (*batch)[r]
//
// experimental_distribute_dataset: each element is a global batch (every component has the batch
// on axis 0); replica r gets its contiguous slice, on its device. n rows over R replicas: the
// first n % R replicas get ceil(n/R) rows, the others floor(n/R) — so a last batch of 3 rows over
// 4 replicas gives 1, 1, 1, 0 (an empty slice, shape [0, ...]; losses and metrics must handle it,
// as in TF).
// distribute_datasets_from_function: fn(InputContext) is called once (one input pipeline per
// process) and returns a dataset of per-replica batches; each step hands consecutive elements to
// replicas 0..R-1; when the data runs out mid-step the remaining replicas get empty batches.
// Across workers (MultiWorkerMirroredStrategy, experimental_distribute_dataset), TF's rebatch +
// auto-shard: every worker reads the same dataset of global batches; each global batch of n rows
// is split into num_workers × k slices (k local replicas) by the rule above, and worker w's replicas
// get slices w·k .. w·k+k-1 — so a worker gets about n / num_workers rows per step, split among
// its replicas. That is AutoShardPolicy::kData (kAuto means kData: chorus has no file-level
// sharding). kOff: no sharding — every worker reads every slice: the per-replica slices of each
// global batch (n / (num_workers × k) rows each) go to this worker's replicas k per step, so a
// worker takes num_workers steps per global batch (TF's OFF: each worker sees the whole data).
// Every worker must read the same data (same seeds), or the steps of the workers do not match.
// Both copy each replica's part to its device one step ahead, on a background thread, so the copy
// overlaps the running step (TF's prefetch to device). Errors of the pipeline surface from next().
// String components (file names, serialized records) stay in host memory, as TF keeps string
// tensors on the host: a replica on a CPU device gets them on its device; a replica on a GPU gets
// them on /CPU:0 (its numeric components still on its GPU). They are split into per-replica rows
// like the others.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <chorus/data/dataset.h>
#include <chorus/distribute/per_replica.h>

namespace chorus::distribute {

// tf.data.experimental.AutoShardPolicy (FILE and HINT are not available: kAuto is kData).
enum class AutoShardPolicy { kAuto, kOff, kData };
// "auto", "off", "data".
const char* auto_shard_policy_name(AutoShardPolicy policy);

// Which part of the data this worker reads (experimental_distribute_dataset across workers).
struct WorkerSharding {
  int num_workers = 1;
  int worker_index = 0;
  AutoShardPolicy policy = AutoShardPolicy::kAuto;
};

class DistributedDataset {
 public:
  using Batch = PerReplica<data::Element>;
  enum class Mode { kSplitGlobalBatch, kPerReplicaElements };
  // `sharding` applies to kSplitGlobalBatch only (distribute_datasets_from_function leaves the
  // sharding to the user's function, as TF).
  DistributedDataset(data::Dataset dataset, std::vector<std::string> devices, Mode mode, WorkerSharding sharding = {});

  class Iterator {
   public:
    Iterator(data::Iterator input, std::vector<std::string> devices, Mode mode, WorkerSharding sharding = {});
    ~Iterator();
    Iterator(Iterator&&) noexcept;
    Iterator& operator=(Iterator&&) noexcept;
    // The next step's per-replica batches, or nullopt at the end.
    std::optional<Batch> next();

   private:
    struct State;
    std::unique_ptr<State> state_;
  };
  Iterator make_iterator() const;
  int num_replicas() const { return static_cast<int>(devices_.size()); }
  const WorkerSharding& sharding() const { return sharding_; }

 private:
  data::Dataset dataset_;
  std::vector<std::string> devices_;
  Mode mode_;
  WorkerSharding sharding_;
};

}  // namespace chorus::distribute
