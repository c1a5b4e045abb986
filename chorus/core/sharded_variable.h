// ShardedVariable: the view of a distributed variable whose state is partitioned across the
// replicas instead of copied to each (ZeRO, DeepSpeed's zero_optimization / PyTorch's FSDP) —
// what a strategy with sharding on (distribute/sharding_options.h, stage >= 1) makes for
// variables created with VariableArgs::shard_over_replicas (the optimizer's slots), and at stage 3
// for every trainable floating ON_WRITE variable (the parameters, FSDP).
//
//   if (chorus::ShardedVariable* s = chorus::as_sharded(slot)) {
//     const chorus::ShardLayout& layout = s->layout();
//     chorus::Tensor mine = s->local_shard();     // [layout.length(r)], aliasing r's storage
//   }
//
// Layout: flat and per variable. The variable is flattened (row-major) to E = num_elements
// elements and cut into n = num_shards consecutive pieces of c = padded = ceil(E / n) elements;
// replica r owns elements [begin(r), begin(r) + length(r)) with begin(r) = min(E, r·c) and
// length(r) = min(E, (r+1)·c) − begin(r). The last pieces may be shorter or empty (E = 35, n = 4:
// 9, 9, 9, 8; E = 1, n = 4: 1, 0, 0, 0; E = 0: all empty). Every replica computes the same layout
// from (E, n) alone, so shards need no exchange of lengths, and the layout of a checkpointed
// tensor on another replica count is just another (E, n).
//
// As a DistributedVariable (core/distributed_variable.h), a ShardedVariable's
//   - components() are the 1-D shards [length(r)] of this process, in replica order, each on its
//     replica's device (plain variables; an empty shard is a [0] variable);
//   - shape() and dtype() are the whole variable's; device() is replica 0's;
//   - value() / read_value() in a replica context of its strategy are that replica's shard
//     ([length(r)], not the variable's shape) for a slot; for a stage-3 parameter the whole
//     value, gathered from every replica's shard (gathers_parameters() below); in cross-replica
//     context the shards concatenated in replica order and reshaped to shape() (a new tensor:
//     writes to it are lost);
//   - checkpoint_value() is the whole tensor (the shards concatenated, as a checkpoint stores it:
//     full tensors, the same keys and shapes a MirroredVariable saves); restore(value) gives each
//     shard its slice of `value`, so a checkpoint restores onto any replica count;
//   - assign in cross-replica context is restore(); see the implementing class for the rest.
// Code above distribute/ (optimizer/, checkpoint/) sees sharded variables only through this view.
// Thread-safety: layout() and components() are safe from any thread; the rest as
// DistributedVariable.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <chorus/core/distributed_variable.h>
#include <chorus/core/distribution.h>
#include <chorus/core/variable.h>

namespace chorus {

struct ShardLayout {
  std::int64_t num_elements = 0;  // E: the variable's element count
  int num_shards = 1;             // n: the replicas in sync
  std::int64_t padded = 0;        // c = ceil(E / n): the longest shard, the unit of padded collectives

  // The layout of E elements over n shards. E < 0 or n < 1 → InvalidArgumentError.
  static ShardLayout of(std::int64_t num_elements, int num_shards);
  // r in [0, n) (not checked: callers pass a replica id).
  std::int64_t begin(int r) const {
    const std::int64_t b = static_cast<std::int64_t>(r) * padded;
    return b < num_elements ? b : num_elements;
  }
  std::int64_t length(int r) const {
    const std::int64_t e = static_cast<std::int64_t>(r + 1) * padded;
    return (e < num_elements ? e : num_elements) - begin(r);
  }
};

class ShardedVariable : public DistributedVariable {
 public:
  // The layout of this variable over its strategy's replicas (fixed at creation).
  virtual const ShardLayout& layout() const = 0;
  // This replica's shard, 1-D [length(r)], aliasing its storage (write it in place, as
  // optimizers write their slots): in a replica context of the strategy, that replica's; in
  // cross-replica context of a one-replica strategy, the only one. Elsewhere →
  // FailedPreconditionError.
  virtual Tensor local_shard() const = 0;
  // True for a ZeRO stage-3 parameter: value() in a replica context is the whole variable,
  // gathered (a collective) — for one layer call by StepPolicy::gather_parameters (core/step_policy.h), or
  // alone when read elsewhere — and a GradientTape differentiates the variable through its shard
  // (local_shard(), ops/tape.h): its gradient is this replica's shard [length(r)] of the gradient
  // summed over the replicas, reduce-scattered during the backward pass.
  virtual bool gathers_parameters() const = 0;
};

// A stage-3 layer call's gathered parameters (StepPolicy::gather_parameters): alive for
// the call; after_call(ys) — with ys the layer's outputs — frees their whole values (the tape keeps
// their handles, and gathers them again when the backward pass reaches the outputs) and returns
// the outputs to use instead of ys (ys themselves when no tape records). The destructor ends the call too, so an
// exception in the layer leaves no parameter gathered.
class ParameterGather {
 public:
  virtual ~ParameterGather() = default;
  virtual std::vector<Tensor> after_call(const std::vector<Tensor>& ys) = 0;
};

// The sharded view of `v`, or nullptr when `v` is undefined, plain or mirrored. Constness is
// shallow, as with as_distributed.
ShardedVariable* as_sharded(const Variable& v);
// The sharded view of `v` when it is a ZeRO stage-3 parameter (gathers_parameters(): its gradient
// is this replica's shard of the sum, its update writes local_shard()), else nullptr.
const ShardedVariable* as_sharded_parameter(const Variable& v);

// The size from which a variable's gradient is reduce-scattered and its weight all-gathered on
// its own, straight from and into its storage, when its element count divides evenly over the
// replicas (distribute/replica_context.h); smaller ones share packed collectives, fewer calls.
inline constexpr std::int64_t kDirectShardBytes = 64 << 10;

}  // namespace chorus
