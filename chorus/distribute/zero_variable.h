// ZeroVariable: MirroredStrategy's sharded variable (core/sharded_variable.h), what a variable
// created with VariableArgs::shard_over_replicas becomes in the scope of a strategy with ZeRO
// sharding on (distribute/sharding_options.h, stage >= 1) — the optimizer's slots — and, at stage
// 3, every trainable floating ON_WRITE variable (a parameter: gathers_parameters()).
//
// State: one plain component per replica, the 1-D shard [layout().length(r)] of the flattened
// value, on replica r's device (named "<name>/shard_<r>"; an empty shard is a [0] variable). Only
// ON_WRITE variables are sharded (the strategy mirrors the others).
// Reading:
//   - in a replica context of its strategy: a slot, that replica's shard (value() aliases its
//     storage); a stage-3 parameter, its whole value: the one gathered for the running layer call
//     (distribute/parameter_gather.h), or else gathered for this read alone (a collective: every
//     replica reads it, in the same order; a GradientTape that records it reduce-scatters its
//     gradient into the shard's); read_value() is value();
//   - in cross-replica context (and in the default strategy's replica context, a plain thread):
//     the shards concatenated in replica order on replica 0's device, reshaped to shape() — a new
//     tensor each time (value() too: writes to it do not reach the variable); with several
//     workers (MultiWorkerMirroredStrategy) every worker's shards, by the strategy's gather: a
//     collective, every worker must read, in the same order;
//   - in a replica context of another strategy: FailedPreconditionError.
// Writing (values always have the whole variable's shape and dtype, else InvalidArgumentError):
//   - replica context: combined across replicas by the aggregation, as MirroredVariable does (a
//     collective; NONE with more than one replica → InvalidArgumentError), then each replica keeps
//     its slice;
//   - cross-replica context: assign = restore(value); assign_add adds each shard's slice.
// checkpoint_value(): the whole tensor, the shards concatenated on the host CPU device (with
// logical CPU replicas that is replica 0's device); with several workers, gathered from all of
// them (a collective: every worker snapshots, in the same order, as checkpoints do).
// restore(value): each local shard gets its slice of `value` (any device; global replica id
// worker_offset() + r), so a checkpoint of any replica or worker count (or of a MirroredVariable)
// restores; no collective.
// Components: this process's shards; the layout spans num_replicas_in_sync() (all workers). The
// components, strategy, name, replica rule and the replica-context combine are
// PerReplicaVariable's (distribute/per_replica_variable.h), shared with MirroredVariable.
#pragma once

#include <vector>

#include <chorus/core/sharded_variable.h>
#include <chorus/core/variable.h>
#include <chorus/distribute/per_replica_variable.h>
#include <chorus/distribute/strategy.h>

namespace chorus::distribute {

class ZeroVariable final : public PerReplicaVariable<ShardedVariable> {
 public:
  // `shards`: one per local replica, in replica order, each [layout.length(worker_offset() + r)]
  // on its device (trainable for a parameter, so that tapes watch them); layout.num_shards =
  // strategy.num_replicas_in_sync(); `parameter`: a stage-3 parameter (gathers_parameters()).
  ZeroVariable(Strategy& strategy, std::vector<Variable> shards, const VariableArgs& args, Shape shape, DType dtype,
               ShardLayout layout, bool parameter);

  VariableSynchronization synchronization() const override { return VariableSynchronization::kOnWrite; }
  const Shape& shape() const override { return shape_; }
  DType dtype() const override { return dtype_; }
  Tensor value() const override;
  Tensor read_value() const override;
  void assign(const Tensor& value) override;
  void assign_add(const Tensor& delta) override;

  Tensor checkpoint_value() const override;
  void restore(const Tensor& value) override;

  const ShardLayout& layout() const override { return layout_; }
  Tensor local_shard() const override;
  bool gathers_parameters() const override { return parameter_; }

  // For distribute/parameter_gather.cc: local replica r's whole value for the running layer call
  // (undefined when none). Each replica thread touches only its own entry.
  const Tensor& gathered(int r) const { return gathered_[static_cast<std::size_t>(r)]; }
  void set_gathered(int r, Tensor whole) { gathered_[static_cast<std::size_t>(r)] = std::move(whole); }

 private:
  // The shards concatenated on `device`, with shape() (a new tensor).
  Tensor whole(const std::string& device) const;
  // Shard r's slice of a whole value (any device).
  Tensor slice_of(const Tensor& whole_value, int r) const;
  void check_whole(const Tensor& value, const char* what) const;
  void write(const Tensor& value, bool add);

  Shape shape_;
  DType dtype_;
  ShardLayout layout_;
  bool parameter_;
  std::vector<Tensor> gathered_;  // per local replica
};

}  // namespace chorus::distribute
