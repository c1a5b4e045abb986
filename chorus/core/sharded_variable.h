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
  // gathered (a collective) — for one layer call by ShardingCollectives::gather_parameters, or
  // alone when read elsewhere — and a GradientTape differentiates the variable through its shard
  // (local_shard(), ops/tape.h): its gradient is this replica's shard [length(r)] of the gradient
  // summed over the replicas, reduce-scattered during the backward pass.
  virtual bool gathers_parameters() const = 0;
};

// A stage-3 layer call's gathered parameters (ShardingCollectives::gather_parameters): alive for
// the call; after_call(y) — with y the layer's output — frees their whole values (the tape keeps
// their handles, and gathers them again when the backward pass reaches y) and returns the output
// to use instead of y (y itself when no tape records). The destructor ends the call too, so an
// exception in the layer leaves no parameter gathered.
class ParameterGather {
 public:
  virtual ~ParameterGather() = default;
  virtual Tensor after_call(const Tensor& y) = 0;
};

// The sharded view of `v`, or nullptr when `v` is undefined, plain or mirrored. Constness is
// shallow, as with as_distributed.
ShardedVariable* as_sharded(const Variable& v);

// What a replica context of a strategy that shards state offers besides ReplicaContext
// (core/distribution.h): its ZeRO stage and the gradient reduce-scatter of stage 2. The optimizer
// finds it with sharding_collectives(ctx) (nullptr for the default replica context and for
// strategies that do not shard), so optimizer/ needs no class of distribute/.
class ShardingCollectives {
 public:
  virtual ~ShardingCollectives() = default;
  // The strategy's ZeRO stage (distribute/sharding_options.h): 0 off, 1 slots, 2 slots and
  // gradients, 3 slots, gradients and parameters.
  virtual int sharding_stage() const = 0;
  // Stage 3, FSDP's unit: gathers the stage-3 parameters among `weights` (a layer's own) in one
  // collective before the layer's call, for this replica; value() of each is then its whole
  // value until the returned object's after_call/destruction. nullptr when none of `weights`
  // gathers (stages below 3, no trainable weights). A collective: every replica calls it for the
  // same layer, in the same order (SPMD).
  virtual std::unique_ptr<ParameterGather> gather_parameters(const std::vector<Variable>& weights) = 0;
  // A collective (every replica calls it with the same shapes, dtypes and layouts, in the same
  // order): this replica's shard [layouts[i].length(r)] (1-D, r = replica_id_in_sync_group) of
  // op(values[i] over the replicas), on this replica's device, for each i; values[i] has any
  // shape of layouts[i].num_elements elements (layouts[i].num_shards = the replicas in sync).
  // Packed: consecutive values of one dtype go in one even-split reduce-scatter, rank-major (each
  // value flattened, zero-padded to n·c_i and viewed [n, c_i]; the [n, Σc_i] concatenation
  // reduce-scattered to [Σc_i]), except that a value of at least kDirectShardBytes whose E is
  // divisible by n (E = n·c_i, no padding) goes alone, as it is: its flat storage already is the
  // rank-major [n, c_i], so it is the collective's input, with no packed copy. One replica: the
  // values flattened. Undefined values are an error. The rvalue form releases this function's
  // reference to each value as soon as it has been copied into a pack (or, sent as it is, once
  // its collective finished), and each pack once its collective finished: a caller that moves in
  // the only references (Optimizer::apply_gradients(GradsAndVars&&)) frees its local gradients
  // during the reduce-scatter instead of after it.
  virtual std::vector<Tensor> reduce_scatter_shards(ReduceOp op, std::vector<Tensor>&& values,
                                                    const std::vector<ShardLayout>& layouts) = 0;
  std::vector<Tensor> reduce_scatter_shards(ReduceOp op, const std::vector<Tensor>& values,
                                            const std::vector<ShardLayout>& layouts) {
    return reduce_scatter_shards(op, std::vector<Tensor>(values), layouts);
  }
  // A collective (every replica calls it with the same shapes, dtypes and layouts, in the same
  // order), the inverse of the above: shards[i] is this replica's [layouts[i].length(r)] of a
  // variable, wholes[i] this replica's whole storage of it (any shape of layouts[i].num_elements
  // elements, on this replica's device); afterwards every replica's wholes[i] holds every
  // replica's shards in replica order. Written in place: a whole of at least kDirectShardBytes
  // whose E is divisible by n is the all-gather's output itself (no temporary); the others are
  // gathered in padded packs of at most the strategy's bytes_per_pack (gathered size) and copied
  // out, so the temporary is one pack, never the whole model. Not compressed.
  virtual void all_gather_shards(const std::vector<Tensor>& shards, const std::vector<Tensor>& wholes,
                                 const std::vector<ShardLayout>& layouts) = 0;
};

// The size from which a variable's gradient is reduce-scattered and its weight all-gathered on
// its own, straight from and into its storage, when its element count divides evenly over the
// replicas (ShardingCollectives above); smaller ones share packed collectives, fewer calls.
inline constexpr std::int64_t kDirectShardBytes = 64 << 10;

// `ctx`'s sharding collectives, or nullptr (ctx nullptr, the default replica context, or a
// strategy's context that does not implement them).
ShardingCollectives* sharding_collectives(ReplicaContext* ctx);

}  // namespace chorus
