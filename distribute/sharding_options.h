// ShardingOptions: ZeRO-style sharded data parallelism for MirroredStrategy (docs/sharding.md).
//
//   chorus::distribute::MirroredStrategy strategy({}, {.sharding = {.stage = 1}});
//
// `stage` is DeepSpeed's zero_optimization.stage:
//   0  off: every replica holds a full copy of every variable and optimizer slot (MirroredStrategy
//      as it always was, bit for bit);
//   1  optimizer slots partitioned: each replica holds 1/n of every slot (Adam's m and v), updates
//      only its shard of each variable, and the updated parameters are all-gathered after the
//      update (one collective per step). Gradients are all-reduced in full, as at stage 0. The
//      weights after each step are those of stage 0 (the same arithmetic per element).
//   2  plus gradients: the gradients of variables with sharded slots are reduce-scattered (one
//      packed collective) instead of all-reduced, so each replica receives only its shard of the
//      summed gradient; clipping by norm all-reduces the partial sums of squares (one small
//      collective), a LossScaleOptimizer's finite check one flag. The weights equal stage 0's to
//      rounding (a norm's sum order differs; without clipnorm/global_clipnorm the reduced values
//      are those of the backend's reduce-scatter instead of its all-reduce).
//   3  (not yet) plus parameters (FSDP): gathered before a layer needs them, freed after.
// Validation happens in the strategy's constructor, before any replica starts: stage 3 →
// UnimplementedError (planned, not available: use stage 2); anything else outside 0..3 →
// InvalidArgumentError. MultiWorkerMirroredStrategyOptions::sharding takes the same stages: the
// shards are spread over every worker's replicas.
// Which variables are sharded: those created with VariableArgs::shard_over_replicas (the
// optimizer's slots) — see core/sharded_variable.h for the layout and the view. Checkpoints hold
// full tensors under the keys MirroredStrategy writes, restorable onto any replica count.
#pragma once

namespace chorus::distribute {

struct ShardingOptions {
  int stage = 0;  // 0 (off), 1 or 2; 3 → UnimplementedError; see above
};

}  // namespace chorus::distribute
