// The replica context of a chorus strategy (core/distribution.h's ReplicaContext), what
// get_replica_context() returns inside Strategy::run. Collectives go through the strategy's
// cross-device communicator of this replica (collective/communicator.h): every replica must call
// them in the same order; a mismatch raises InvalidArgumentError in every replica naming both
// calls, a replica that does not come raises DeadlineExceededError after the strategy's timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include <chorus/core/distribution.h>
#include <chorus/core/sharded_variable.h>
#include <chorus/core/step_policy.h>
#include <chorus/distribute/all_reduce_packs.h>
#include <chorus/distribute/communication_options.h>
#include <chorus/distribute/optimizer_offload.h>

namespace chorus::collective {
class Communicator;
}

namespace chorus::distribute {

class Strategy;
namespace internal {
class CommWorker;
class GatherPrefetcher;

// One collective of the sharding collectives (reduce_scatter_shards, all_gather_shards): the
// members (indices into the call's lists) that travel together, and their buffers. `direct`: one
// member moved straight from (scatter) or into (gather) its own storage.
struct ShardPiece {
  std::vector<std::size_t> members;
  DType dtype = DType::kFloat32;  // the members' (a compressed scatter's `send` is the wire dtype)
  bool direct = false;
  std::int64_t in_bytes = 0;  // scatter: the packed bytes before compression (the counters)
  Tensor send, received;
  // An overlapped scatter with offload: per member, the host copy of its shard started once
  // `received` arrived (undefined: not staged). StrategyReplicaContext::begin_overlapped_sharded_sum.
  std::vector<Tensor> staged;
  std::shared_ptr<Event> done;  // scatter: the collective's event (device backends), or null
};

// An all_gather_shards begun on the replica's communication thread (begin_all_gather_shards):
// the wholes hold the gathered values once finish_gather(pending) returned, not before.
struct PendingGather {
  std::vector<Tensor> wholes;
  std::vector<ShardLayout> layouts;
  std::vector<ShardPiece> pieces;
  std::shared_ptr<CommWorker> worker;  // null once finished (or when nothing was queued)
  std::uint64_t ticket = 0;
};
}  // namespace internal

class StrategyReplicaContext final : public ReplicaContext {
 public:
  // `replica`: the local replica index (0..num_local_replicas()-1) on this process.
  StrategyReplicaContext(Strategy& strategy, int replica);

  DistributionStrategy& strategy() const override;
  Strategy& owner() const { return strategy_; }
  // Among all replicas of all workers (worker_offset() + local index), as TF.
  int replica_id_in_sync_group() const override;
  // Among this process's replicas: the index of its device and of its variable components.
  int local_replica_id() const { return replica_; }
  int num_replicas_in_sync() const override;

  // One tensor, as it is: never compressed, the strategy's timeout.
  Tensor all_reduce(ReduceOp op, const Tensor& value) override;
  // A list (gradients), packed and reduced with the strategy's communication_options (the form
  // Optimizer::apply_gradients and Model::fit use); the overload takes each field set in
  // `options` over the strategy's (distribute/communication_options.h: packing, compression, its
  // error bound). Undefined tensors stay undefined. Bad options → InvalidArgumentError.
  std::vector<Tensor> all_reduce(ReduceOp op, const std::vector<Tensor>& values) override;
  std::vector<Tensor> all_reduce(ReduceOp op, const std::vector<Tensor>& values, const CommunicationOptions& options);
  Tensor all_gather(const Tensor& value, int axis) override;
  // ZeRO's collectives (used by distribute/step_policy.h and parameter_gather.h). Every replica
  // calls them with the same shapes, dtypes and layouts (core/sharded_variable.h's ShardLayout),
  // in the same order.
  //
  // reduce_scatter_shards: this replica's shard [layouts[i].length(r)] (1-D, r =
  // replica_id_in_sync_group) of op(values[i] over the replicas), on this replica's device, for
  // each i; values[i] has any shape of layouts[i].num_elements elements. Packed: consecutive
  // values of one dtype go in one even-split reduce-scatter, rank-major (each value flattened,
  // zero-padded to n·c_i and viewed [n, c_i]) up to the strategy's bytes_per_pack (counted
  // padded), except that a value of at least kDirectShardBytes whose E divides by n goes alone,
  // as it is (its flat storage already is the rank-major [n, c_i]). Compressed like all_reduce
  // (a float32 or float64 pack is cast to the wire dtype and back); the counters count it. One
  // replica: the values flattened. Undefined values are an error. It releases its reference to
  // each value once packed (or, sent as it is, once its collective finished).
  std::vector<Tensor> reduce_scatter_shards(ReduceOp op, std::vector<Tensor>&& values,
                                            const std::vector<ShardLayout>& layouts);
  std::vector<Tensor> reduce_scatter_shards(ReduceOp op, const std::vector<Tensor>& values,
                                            const std::vector<ShardLayout>& layouts) {
    return reduce_scatter_shards(op, std::vector<Tensor>(values), layouts);
  }
  // The inverse: shards[i] is this replica's [layouts[i].length(r)] of a variable, wholes[i] this
  // replica's whole storage of it; afterwards every replica's wholes[i] holds every replica's
  // shards in replica order. In place: a whole of at least kDirectShardBytes whose E divides by n
  // is the all-gather's output itself; the others go through one padded pack at a time
  // (bytes_per_pack at most), so the temporary is never the whole model. Uncompressed, uncounted.
  void all_gather_shards(const std::vector<Tensor>& shards, const std::vector<Tensor>& wholes,
                         const std::vector<ShardLayout>& layouts);
  // all_gather_shards on this replica's communication thread (ZeRO stage 3's prefetch,
  // distribute/gather_prefetch.h): the packs are built now, on the calling (replica) thread, and
  // the collectives — the same ones all_gather_shards runs, so the same bytes — queued behind what
  // the thread has (every replica queues the same ones in the same order). The wholes must not be
  // read or written, nor the shards written, until finish_gather(pending) returned on the replica
  // thread (which waits and unpacks; it rethrows the collective's error).
  std::shared_ptr<internal::PendingGather> begin_all_gather_shards(const std::vector<Tensor>& shards,
                                                                   const std::vector<Tensor>& wholes,
                                                                   const std::vector<ShardLayout>& layouts);
  void finish_gather(internal::PendingGather& pending) const;
  // Replica `root`'s value on every replica (for ONLY_FIRST_REPLICA variables); root is a
  // replica id in sync group.
  Tensor broadcast(const Tensor& value, int root);

  // Overlap (distribute/overlapped_reduction.h), for this replica's StepPolicy: when the strategy
  // overlaps (its options' overlap_gradient_all_reduce, more than one replica), a sum of the
  // gradients of `sources` whose buckets this replica's communication thread all-reduces during
  // the backward pass; else nullptr.
  std::shared_ptr<GradientReduction> begin_overlapped_sum(const std::vector<Tensor>& sources);
  // The same at ZeRO stages 2 and 3 (when it overlaps; else nullptr): kinds[i] says what becomes
  // of source i's gradient — 0 nothing (none expected, or a stage-3 parameter's shard, already
  // summed), 1 all-reduced whole, 2 reduce-scattered to this replica's shard of layouts[i]. The
  // buckets are the packs all_reduce(list with only the kind-1 entries defined) and
  // reduce_scatter_shards(the kind-2 entries, in order) move, so the sums are bitwise theirs;
  // take() gives the whole sums and the shards in the sources' places. nullptr also when nothing
  // is of kind 1 or 2. to_host[i] (kind 2 only; empty or null: none): the variable whose shard
  // source i's is — the communication thread starts copying it to offload_host() once its bucket
  // is reduced, and take() adds the copy to staging() (distribute/optimizer_offload.h, "Staging").
  std::shared_ptr<GradientReduction> begin_overlapped_sharded_sum(const std::vector<Tensor>& sources,
                                                                  const std::vector<char>& kinds,
                                                                  const std::vector<ShardLayout>& layouts,
                                                                  const std::vector<const void*>& to_host = {});
  // Offload (distribute/optimizer_offload.h): the host memory device of this replica's offloaded
  // optimizer state (nullptr when the strategy does not offload), and its staged gradient copies.
  std::shared_ptr<DeviceContext> offload_host() const;
  internal::HostStaging& staging() { return staging_; }
  // Stage 3's gather prefetcher of this replica (distribute/gather_prefetch.h); nullptr when the
  // strategy does not prefetch (prefetch_limit 0, stage < 3, or one replica).
  internal::GatherPrefetcher* prefetcher();
  // The step's distribution policy of this replica (distribute/step_policy.h).
  StepPolicy& step_policy() override;
  // For Strategy::run_replicas, after the step function returned: waits for the communication
  // thread (a gradient sum begun and never taken still ran; a prefetched gather not used), rethrowing
  // its error, ends the prefetcher's step (it learns the step's order of layer calls) and forgets
  // the staged copies no update took.
  void end_step();
  ~StrategyReplicaContext() override;

 protected:
  std::any merge(std::any mine, const std::function<std::any(std::vector<std::any>&)>& fn) override;

 private:
  // This replica's communicator, for a collective of the replica thread: waits for the
  // communication thread first (one thread at a time uses a communicator).
  collective::Communicator& comm();
  // All-reduces `pack` (distribute/all_reduce_packs.h) with `communicator`, on the calling thread
  // (the replica's or its communication thread: `overlapped`), and counts it in the strategy's
  // AllReduceCounters.
  void reduce_pack(collective::Communicator& communicator, ReduceOp op, internal::Pack& pack,
                   std::chrono::milliseconds timeout, bool overlapped);
  // The sharding collectives' pieces, in order (the same on every replica: they depend only on
  // the layouts and dtypes); may_go_direct[i]: value i may move alone, straight from/into its storage.
  std::vector<internal::ShardPiece> plan_shard_pieces(const std::vector<ShardLayout>& layouts,
                                                      const std::vector<DType>& dtypes,
                                                      const std::vector<char>& may_go_direct) const;
  void check_shard_values(const std::vector<Tensor>& values, const std::vector<ShardLayout>& layouts) const;
  // A reduce-scatter piece: packed on the replica thread (releasing values[m]), run on `communicator`
  // (the replica's thread or its communication thread: `overlapped`), unpacked into out[m].
  void pack_scatter(internal::ShardPiece& piece, std::vector<Tensor>& values, const std::vector<ShardLayout>& layouts);
  void run_scatter(collective::Communicator& communicator, ReduceOp op, internal::ShardPiece& piece, bool overlapped);
  void unpack_scatter(internal::ShardPiece& piece, const std::vector<ShardLayout>& layouts,
                      std::vector<Tensor>& out) const;
  // An all-gather piece, likewise (a direct one gathers into the whole's own storage).
  void check_gather(const std::vector<Tensor>& shards, const std::vector<Tensor>& wholes,
                    const std::vector<ShardLayout>& layouts) const;
  std::vector<internal::ShardPiece> plan_gather(const std::vector<Tensor>& wholes,
                                                const std::vector<ShardLayout>& layouts) const;
  void pack_gather(internal::ShardPiece& piece, const std::vector<Tensor>& shards, const std::vector<Tensor>& wholes,
                   const std::vector<ShardLayout>& layouts) const;
  void run_gather(collective::Communicator& communicator, internal::ShardPiece& piece, bool overlapped);
  void unpack_gather(internal::ShardPiece& piece, const std::vector<Tensor>& wholes,
                     const std::vector<ShardLayout>& layouts) const;
  // The communication thread, made at first use.
  internal::CommWorker& worker();

  Strategy& strategy_;
  int replica_;
  // Made at first use; shared with the sums and pending gathers, which wait through it.
  std::shared_ptr<internal::CommWorker> worker_;
  std::unique_ptr<internal::GatherPrefetcher> prefetcher_;  // made at first use (stage 3)
  internal::HostStaging staging_;
  std::unique_ptr<StepPolicy> policy_;
};

}  // namespace chorus::distribute
