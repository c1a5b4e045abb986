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
// Both copy each replica's part to its device one step ahead, on a background thread, so the copy
// overlaps the running step (TF's prefetch to device). Errors of the pipeline surface from next().
#pragma once

#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "distribute/per_replica.h"

namespace chorus::distribute {

class DistributedDataset {
 public:
  using Batch = PerReplica<data::Element>;
  enum class Mode { kSplitGlobalBatch, kPerReplicaElements };
  DistributedDataset(data::Dataset dataset, std::vector<std::string> devices, Mode mode);

  class Iterator {
   public:
    Iterator(data::Iterator input, std::vector<std::string> devices, Mode mode);
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

 private:
  data::Dataset dataset_;
  std::vector<std::string> devices_;
  Mode mode_;
};

}  // namespace chorus::distribute
