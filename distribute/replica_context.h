// The replica context of a chorus strategy (core/distribution.h's ReplicaContext), what
// get_replica_context() returns inside Strategy::run. Collectives go through the strategy's
// cross-device communicator of this replica (collective/communicator.h): every replica must call
// them in the same order; a mismatch raises InvalidArgumentError in every replica naming both
// calls, a replica that does not come raises DeadlineExceededError after the strategy's timeout.
#pragma once

#include "core/distribution.h"
#include "distribute/communication_options.h"

namespace chorus::collective {
class Communicator;
}

namespace chorus::distribute {

class Strategy;

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

  Tensor all_reduce(ReduceOp op, const Tensor& value) override;
  std::vector<Tensor> all_reduce(ReduceOp op, const std::vector<Tensor>& values) override;
  std::vector<Tensor> all_reduce(ReduceOp op, const std::vector<Tensor>& values, const CommunicationOptions& options);
  Tensor all_gather(const Tensor& value, int axis) override;
  // Replica `root`'s value on every replica (for ONLY_FIRST_REPLICA variables); root is a
  // replica id in sync group.
  Tensor broadcast(const Tensor& value, int root);

 protected:
  std::any merge(std::any mine, const std::function<std::any(std::vector<std::any>&)>& fn) override;

 private:
  collective::Communicator& comm() const;
  Strategy& strategy_;
  int replica_;
};

}  // namespace chorus::distribute
