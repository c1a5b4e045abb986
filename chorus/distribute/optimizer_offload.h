// Optimizer-state offload (ZeRO-Offload, PyTorch FSDP's CPUOffloadPolicy): with
// ShardingOptions::offload_optimizer_state (distribute/sharding_options.h, ZeRO stages 1-3), each
// replica's shards of the optimizer slots live in host memory instead of on its device, and the
// optimizer's update of what this replica owns runs there, on the host's cores.
//
//   cx::distribute::MirroredStrategy strategy({}, {.sharding = {.stage = 3, .offload_optimizer_state = true}});
//
// Where the state lives (core/host_memory.h): replica r's slot shards are plain variables on host
// memory device r — page-locked ("/job:pinned_host_memory/.../CPU:r") when the replica's device is
// a GPU, so that copies are DMA and asynchronous; pageable ("/job:host_memory/.../CPU:r") when it is
// a logical CPU device, whose memory_limit_mb they then do not count against (the host's RAM is
// their limit). The strategy creates them there (Strategy::create_sharded); nothing else changes:
// a slot is the same ShardedVariable, saved whole under the same checkpoint keys.
//
// The update, per step and replica (ReplicaStepPolicy::update → run_updates below), for each
// variable whose slots are in host memory:
//   1. the summed gradient of this replica's slice (the reduce-scatter's shard at stages 2-3, the
//      slice of the all-reduced sum at stage 1) and this replica's slice of the float32 weight —
//      the master copy the optimizer updates; under a mixed-precision policy the variables stay
//      float32 and the layers read 16-bit casts of them — are copied to the host;
//   2. the optimizer's own update (its CPU kernels, vectorised, with the host memory device's
//      intra-op threads) runs there on the copies and the slots, which it writes in place;
//   3. the updated slice is copied back: at stage 3 into the parameter's shard, at stages 1-2 into
//      the slice the all-gather then spreads to every replica.
// The optimizer does the same arithmetic on the same values as without offload: the weights after
// every step are bitwise those of the same stage without offload. It knows nothing of offload.
// Variables without slots (plain SGD) are updated on the device, as without offload.
//
// GPU: the copies go on the device's side stream (DeviceContext::side_stream), ordered against
// its compute stream with events: every device-to-host copy of the step is queued at once, and
// variable i is updated on the host as soon as its own copies landed, while the later variables'
// copies are still in flight, and its host-to-device copy is queued behind them; the compute
// stream waits for the last one by event before anything reads the weights. What overlaps is
// thus the update's copies with the host update (and the host update with the GPU), not yet with
// the backward pass: the gradients reach the update after the backward pass (docs/sharding.md,
// "Offload"). CPU devices: the copies are memcpy on the replica's thread.
//
// Thread-safety: run_updates runs on one replica's thread, with that replica's tensors only.
// Errors: those of the copies and of the optimizer's update, as without offload.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <chorus/core/step_policy.h>
#include <chorus/core/tensor.h>

namespace chorus::distribute {

// The host memory device a slot shard of replica `local_replica`, whose device is
// `replica_device`, lives on with offload (core/host_memory.h), created at the first call: pinned
// for a GPU replica; its intra-op threads are the replica's CPU share (a logical CPU device), or
// an equal share of config::get_intra_op_parallelism_threads() (0: every core) among the GPU
// logical devices.
std::string offload_device(const std::string& replica_device, int local_replica);

namespace internal {

// One variable's update as ReplicaStepPolicy::update hands it to the optimizer: `gradient` (this
// replica's summed gradient of what it writes, on the device), `target` (the weight, its shard or
// a copy of this replica's slice, on the device: written in place) and `slots` (the same part of
// each slot, written in place).
struct UpdateJob {
  std::size_t index = 0;
  Tensor gradient;
  Tensor target;
  std::vector<Tensor> slots;
};

// fn(job.index, gradient, target, slots) for every job, in order: in place when the job's slots
// are on the target's device (or it has none), else on the slots' host memory device as described
// above (the target is written back before this returns, in the device's stream order). Releases
// each job's gradient once used.
void run_updates(std::vector<UpdateJob>& jobs, const StepPolicy::UpdateFn& fn);

}  // namespace internal

}  // namespace chorus::distribute
