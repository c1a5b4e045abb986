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
//      are those of the backend's reduce-scatter instead of its all-reduce). With the strategy's
//      overlap_gradient_all_reduce the reduce-scatter runs in buckets during the backward pass on
//      the communication threads (distribute/overlapped_reduction.h), bitwise as after it.
//   3  plus parameters (FSDP): every trainable floating ON_WRITE variable is sharded too; a layer's
//      parameters are all-gathered just before its call and their storage freed after it,
//      gathered again when the backward pass reaches the layer, and their gradients
//      reduce-scattered to the shards as soon as the layer's backward ran
//      (distribute/parameter_gather.h); the optimizer updates the shards in place and nothing is
//      gathered after the update. Weights equal stage 0's to rounding, as stage 2.
// `prefetch_limit` (stage 3; FSDP's forward_prefetch/backward_prefetch and limit_all_gathers): while
// a layer runs, the all-gathers of the next `prefetch_limit` layers' parameters run on the
// replica's communication thread (distribute/gather_prefetch.h), in the forward pass in the order
// of the previous step's layer calls and in the backward pass in the order of its backward pass
// (both recorded on the first step). Peak: a replica holds whole parameters of at most
// prefetch_limit + 1 layers at once (the running one and those in flight). 0: no prefetch (each
// layer gathers when called, on the replica thread). The weights are bitwise those without prefetch
// (the same gathers, earlier). Every worker of a MultiWorkerMirroredStrategy must use the same limit.
// Validation happens in the strategy's constructor, before any replica starts: a stage outside
// 0..3, or a prefetch_limit outside 0..kMaxPrefetchLimit → InvalidArgumentError.
// MultiWorkerMirroredStrategyOptions::sharding takes the same stages: the shards are spread over every worker's
// replicas. Which variables are sharded: those created with VariableArgs::shard_over_replicas (the optimizer's slots),
// and at stage 3 the parameters — see core/sharded_variable.h for the layout and the view. Checkpoints hold full
// tensors under the keys MirroredStrategy writes, restorable onto any replica count and stage.
#pragma once

#include <string>

namespace chorus::distribute {

inline constexpr int kMaxPrefetchLimit = 64;

struct ShardingOptions {
  int stage = 0;           // 0 (off), 1, 2 or 3; see above
  int prefetch_limit = 1;  // stage 3: layers whose gathers run ahead (0: none); see above
  // ZeRO-Offload (FSDP's CPUOffloadPolicy), stages 1-3: each replica's shards of the optimizer
  // slots live in host memory and the update runs there (distribute/optimizer_offload.h).
  // At stage 0 → InvalidArgumentError at construction.
  bool offload_optimizer_state = false;
};

// InvalidArgumentError naming `strategy` unless options.stage is 0..3, prefetch_limit
// 0..kMaxPrefetchLimit, and stage >= 1 with offload_optimizer_state.
void check_sharding(const ShardingOptions& options, const char* strategy);
// "; sharding: ZeRO stage 2 (optimizer slots and gradients partitioned over 4 replicas)" for the
// strategy's log line ("; sharding: off (ZeRO stage 0)" at 0).
std::string sharding_description(int stage, int replicas);
// "; optimizer state offloaded to host memory (ZeRO-Offload)" when `offload`, else "".
std::string offload_description(bool offload);

}  // namespace chorus::distribute
