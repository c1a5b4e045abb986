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
// Staging: what overlaps the backward pass. A summed gradient bound for the host is copied there as
// soon as the collective that summed it completed, while the backward pass goes on, instead of at
// the update — PyTorch FSDP's CPUOffloadPolicy copies each gradient shard in the post-backward
// hook likewise:
//   - stage 3: the GatherParameters node (distribute/parameter_gather.h) starts the copies of the
//     shards its reduce-scatter returned, on the replica thread, without waiting;
//   - stages 2-3 with overlap, the gradients reduce-scattered in buckets (distribute/
//     overlapped_reduction.h): the communication thread starts them right after each bucket's
//     reduce-scatter, from the received piece (uncompressed pieces only: a
//     compressed one is cast on the device first).
// The copy runs on the host memory device's stream (a CPU device's: memcpy on that stream's own
// worker thread; a GPU's: cudaMemcpyAsync on the device's side stream, which the host stream
// waits for by event), so the update's host kernels, queued behind it, see it landed. The update
// takes the staged copy of a gradient only if the optimizer hands it that very storage (a clipped,
// unscaled or accumulated gradient is a new tensor, copied at the update as before; gradients are
// never written in place) — so staging never changes a value. Which gradients are staged is learnt from the
// previous update (those whose slots were in host memory): the first step copies at the update.
// Strategy::offload_counters() says how many were staged and how many copied at the update.
//
// GPU: the update's copies go on the device's side stream (DeviceContext::side_stream), ordered
// against its compute stream with events: every device-to-host copy of the step not staged
// already is queued at once, and variable i is updated on the host as soon as its own copies
// landed, while the later variables' copies are still in flight, and its host-to-device copy is
// queued behind them; the compute stream waits for the last one by event before anything reads
// the weights. CPU devices: the update's copies are memcpy on the replica's thread.
//
// Thread-safety: run_updates runs on one replica's thread, with that replica's tensors only.
// Errors: those of the copies and of the optimizer's update, as without offload.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <chorus/core/step_policy.h>
#include <chorus/core/stream.h>
#include <chorus/core/tensor.h>

namespace chorus::distribute {

// The host memory device a slot shard of replica `local_replica`, whose device is
// `replica_device`, lives on with offload (core/host_memory.h), created at the first call: pinned
// for a GPU replica; its intra-op threads are the replica's CPU share (a logical CPU device), or
// an equal share of config::get_intra_op_parallelism_threads() (0: every core) among the GPU
// logical devices.
std::string offload_device(const std::string& replica_device, int local_replica);

// How the offloaded updates' gradients reached the host (Strategy::offload_counters, summed over
// this process's replicas and steps).
struct OffloadCounters {
  std::int64_t staged = 0;  // copied during the backward pass, as their collective completed
  std::int64_t copied = 0;  // copied at the update
};

namespace internal {

// Starts copying src's elements [offset, offset + dst.num_elements()) into `dst` (same dtype, on a
// host memory device) in dst's stream order, without waiting (see "Staging" above); both storages
// are kept alive until the copy ran. `ready`: an event after which src holds its values (the
// collective that wrote it: Work::event), so that a GPU copy waits for that and not for whatever
// the device's stream queued since; null: after everything src's device stream queued so far.
// Any thread.
void start_host_copy(const Tensor& src, std::int64_t offset, const Tensor& dst,
                     const std::shared_ptr<Event>& ready = nullptr);

// One replica's staged gradient copies (see "Staging"), owned by its StrategyReplicaContext.
// Thread-safety: its replica thread only (the communication thread starts copies into tensors
// that the replica thread adds here when it takes the bucket).
class HostStaging {
 public:
  // The variables (VariableBase identities) whose gradients to stage from now on: those whose
  // update ran on the host last time.
  void plan(std::unordered_set<const void*> variables) { wanted_ = std::move(variables); }
  bool wanted(const void* variable) const { return wanted_.count(variable) != 0; }
  // `host` holds (or will, in its stream order) the elements of `gradient`, the summed gradient of
  // `variable`.
  void add(const void* variable, const Tensor& gradient, Tensor host);
  // The staged copy of `gradient`'s storage (the same Buffer, alive since it was staged, and as
  // many elements), forgotten here; undefined when none.
  Tensor take(const Tensor& gradient);
  // The variables whose staged copies no update took (the optimizer changed the gradient: clipped,
  // unscaled, accumulated): staging them again would be wasted.
  std::unordered_set<const void*> untaken() const;
  // Forgets every staged copy (the end of an update or of a step): their bytes go once copied.
  void clear() { staged_.clear(); }

 private:
  struct Staged {
    const void* variable;
    std::weak_ptr<Buffer> source;  // the gradient's storage: not kept alive by the staging
    Tensor host;
  };
  std::unordered_set<const void*> wanted_;
  // By the address of the gradient's storage (take() is one lookup, not a scan, per variable);
  // `source` tells a live storage from a later one at the same address.
  std::unordered_multimap<const Buffer*, Staged> staged_;
};

// One variable's update as ReplicaStepPolicy::update hands it to the optimizer (a
// StepPolicy::UpdateItem): `gradient` (this replica's summed gradient of what it writes, on the
// device), `target` (the weight, its shard or a copy of this replica's slice, on the device:
// written in place) and `slots` (the same part of each slot, written in place).
struct UpdateJob {
  std::size_t index = 0;
  Tensor gradient;
  Tensor target;
  std::vector<Tensor> slots;
  Tensor staged;         // the gradient's staged host copy (HostStaging::take), or undefined
  bool on_host = false;  // set by run_updates: the update ran on the slots' host memory device
};

// The update of every job: in place, as one group (fn(items) once), the jobs whose slots are on
// the target's device (or that have none); the others one at a time on the slots' host memory
// device as described above, with the staged copy of the gradient when there is one on that device
// (the target is written back before this returns, in the device's stream order). Releases each
// job's gradient once used. Returns how the host updates' gradients got there.
OffloadCounters run_updates(std::vector<UpdateJob>& jobs, const StepPolicy::UpdateFn& fn);

}  // namespace internal

}  // namespace chorus::distribute
