// ReplicaStepPolicy: the step's distribution policy of a chorus strategy (core/step_policy.h) —
// owned by each StrategyReplicaContext (and, for a one-replica strategy's updates in
// cross-replica context, by the strategy). It is where the strategy's options become the step:
//   - overlap (CommunicationOptions' overlap_gradient_all_reduce, ZeRO stage 0 or 1): the sum of
//     the gradients begun during the backward pass, in the all-reduce's own buckets;
//   - ZeRO (distribute/sharding_options.h): stage 1 updates this replica's slice of each variable
//     whose slots are sharded and all-gathers the slices into every replica's weights; stage 2
//     also reduce-scatters those variables' gradients (this replica receives its slice of the
//     sum); stage 3's parameters arrive summed by the backward pass as this replica's shard, are
//     updated in place, and are gathered per layer call (distribute/parameter_gather.h);
//   - offload (ShardingOptions::offload_optimizer_state): update() runs the update of each variable
//     whose slots live in host memory there, on copies (distribute/optimizer_offload.h);
//   - otherwise one packed all-reduce of the gradients (ReplicaContext::all_reduce of the list).
// The results are bitwise those of reducing then updating whole variables (stage 2 to rounding
// of the sum's order, as documented in docs/sharding.md).
#pragma once

#include <chorus/core/step_policy.h>

namespace chorus::distribute {

class Strategy;
class StrategyReplicaContext;

class ReplicaStepPolicy final : public StepPolicy {
 public:
  // `ctx`: the replica's context, or nullptr for a one-replica strategy's cross-replica updates.
  ReplicaStepPolicy(Strategy& strategy, StrategyReplicaContext* ctx);

  std::shared_ptr<GradientReduction> begin_gradient_sum(const std::vector<Tensor>& sources) override;
  std::unique_ptr<ParameterGather> gather_parameters(const std::vector<Variable>& weights) override;
  std::vector<Summed> sum_gradients(std::vector<Tensor>&& grads, const std::vector<Variable>& vars,
                                    const std::vector<Variable>& state,
                                    std::shared_ptr<GradientReduction> begun) override;
  Tensor sum_partials(const Tensor& partial) override;
  void update(const std::vector<Variable>& vars, std::vector<Summed>&& summed,
              const std::vector<std::vector<Variable>>& slots, const UpdateFn& fn) override;

 private:
  // Stage 2: the variables with sharded state get this replica's slice of their summed gradient
  // (one packed reduce-scatter), the others the whole sum (one packed all-reduce).
  std::vector<Summed> scatter_and_reduce(std::vector<Tensor>&& grads, const std::vector<Variable>& vars,
                                         const std::vector<Variable>& state);
  int replica() const;  // replica id in sync group (0 without a context)

  Strategy& strategy_;
  StrategyReplicaContext* ctx_;
};

}  // namespace chorus::distribute
