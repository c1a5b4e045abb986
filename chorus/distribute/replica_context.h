// The replica context of a chorus strategy (core/distribution.h's ReplicaContext), what
// get_replica_context() returns inside Strategy::run. Collectives go through the strategy's
// cross-device communicator of this replica (collective/communicator.h): every replica must call
// them in the same order; a mismatch raises InvalidArgumentError in every replica naming both
// calls, a replica that does not come raises DeadlineExceededError after the strategy's timeout.
#pragma once

#include <chrono>

#include <chorus/core/distribution.h>
#include <chorus/core/sharded_variable.h>
#include <chorus/distribute/all_reduce_packs.h>
#include <chorus/distribute/communication_options.h>

namespace chorus::collective {
class Communicator;
}

namespace chorus::distribute {

class Strategy;
namespace internal {
class CommWorker;
class OverlappedReduction;
}  // namespace internal

class StrategyReplicaContext final : public ReplicaContext, public ShardingCollectives {
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
  // ZeRO (core/sharded_variable.h's ShardingCollectives): the strategy's sharding stage, and the
  // stage-2 gradient reduce-scatter. Packs follow all_reduce's rule (consecutive values of one
  // dtype up to the strategy's bytes_per_pack, counted padded; a value that moves directly —
  // core/sharded_variable.h's kDirectShardBytes — goes alone, as it is) and its compression (a float32 or
  // float64 pack is cast to the wire dtype, reduce-scattered, cast back); the counters count it.
  // all_gather_shards writes the weights in place (direct ones are the collective's output; the
  // others go through one padded pack at a time, bytes_per_pack at most), uncompressed, uncounted.
  int sharding_stage() const override;
  using ShardingCollectives::reduce_scatter_shards;
  std::vector<Tensor> reduce_scatter_shards(ReduceOp op, std::vector<Tensor>&& values,
                                            const std::vector<ShardLayout>& layouts) override;
  void all_gather_shards(const std::vector<Tensor>& shards, const std::vector<Tensor>& wholes,
                         const std::vector<ShardLayout>& layouts) override;
  // Stage 3: distribute/parameter_gather.h's gather of a layer's parameters.
  std::unique_ptr<ParameterGather> gather_parameters(const std::vector<Variable>& weights) override;
  // Replica `root`'s value on every replica (for ONLY_FIRST_REPLICA variables); root is a
  // replica id in sync group.
  Tensor broadcast(const Tensor& value, int root);

  // Overlap (core/distribution.h's GradientReduction; distribute/overlapped_reduction.h): when
  // the strategy overlaps (its options' overlap_gradient_all_reduce, ZeRO stage 0 or 1), a
  // reduction whose buckets this replica's communication thread all-reduces during the
  // backward pass; all_reduce(kSum, list) with the strategy's options takes its results when the
  // list is exactly its gradients. Anything else — a list that differs (clipped or scaled per
  // replica), a reduction never taken by the end of the step, a second one begun first — reduces
  // as without overlap, logs a warning once and turns overlap off for this replica: its buckets
  // were reduced for nothing.
  std::shared_ptr<GradientReduction> begin_gradient_reduction(const std::vector<Tensor>& sources) override;
  void drop_gradient_reduction() override;
  void skip_next_gradient_reduction() override;
  // For Strategy::run_replicas, after the step function returned: drops a reduction nobody took
  // (as above) and waits for the communication thread, rethrowing its error.
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
  // Drops pending_ (waiting for what it launched); `why` non-empty: warns once and turns overlap off.
  void discard_pending(const char* why);
  Strategy& strategy_;
  int replica_;
  std::unique_ptr<internal::CommWorker> worker_;  // made at the first overlapped reduction
  std::shared_ptr<internal::OverlappedReduction> pending_;
  bool skip_next_ = false;
  bool overlap_off_ = false;  // a reduction was not taken: no more on this replica
};

}  // namespace chorus::distribute
