// The replica context of a chorus strategy (core/distribution.h's ReplicaContext), what
// get_replica_context() returns inside Strategy::run. Collectives go through the strategy's
// cross-device communicator of this replica (collective/communicator.h): every replica must call
// them in the same order; a mismatch raises InvalidArgumentError in every replica naming both
// calls, a replica that does not come raises DeadlineExceededError after the strategy's timeout.
#pragma once

#include <chrono>

#include "core/distribution.h"
#include "core/sharded_variable.h"
#include "distribute/communication_options.h"

namespace chorus::collective {
class Communicator;
}

namespace chorus::distribute {

class Strategy;

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

 protected:
  std::any merge(std::any mine, const std::function<std::any(std::vector<std::any>&)>& fn) override;

 private:
  collective::Communicator& comm() const;
  // All-reduces `in` (on this replica's device) in dtype `wire` (casting to it and back when it
  // differs from in.dtype()) and counts the bytes in the strategy's AllReduceCounters.
  Tensor reduce_one(ReduceOp op, const Tensor& in, DType wire, std::chrono::milliseconds timeout);
  Strategy& strategy_;
  int replica_;
};

}  // namespace chorus::distribute
