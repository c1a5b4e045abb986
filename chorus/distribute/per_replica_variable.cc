#include <chorus/distribute/per_replica_variable.h>

#include <type_traits>

#include <chorus/core/distribution.h>
#include <chorus/core/error.h>
#include <chorus/distribute/replica_context.h>

namespace chorus::distribute {

using chorus::internal::str_cat;

template <typename View>
PerReplicaVariable<View>::PerReplicaVariable(const char* kind, Strategy& strategy, std::vector<Variable> components,
                                             const VariableArgs& args, bool trainable)
    : strategy_(strategy),
      components_(std::move(components)),
      name_(args.name),
      trainable_(trainable),
      aggregation_(args.aggregation) {
  CHORUS_REQUIRE(!components_.empty(), InvalidArgumentError, kind, " '", name_, "': no components");
}

template <typename View>
int PerReplicaVariable<View>::replica_or_cross(const char* what) const {
  ReplicaContext* ctx = get_replica_context();
  if (ctx == nullptr) return -1;
  if (auto* mine = strategy_.current_replica_context()) return mine->local_replica_id();
  // A replica context that is not ours: the default strategy's (a plain thread) reads like
  // cross-replica code; another strategy's is a mistake.
  std::string sharding;
  if constexpr (std::is_same_v<View, ShardedVariable>) sharding = str_cat(", ZeRO stage ", strategy_.sharding_stage());
  CHORUS_REQUIRE(&ctx->strategy() == &chorus::get_strategy() && !has_strategy(), FailedPreconditionError, "variable '",
                 name_, "' was created in the scope of ", strategy_.name(), " (", components_.size(), " replicas",
                 sharding, ") and cannot be ", what, " in a replica of ", ctx->strategy().name(),
                 " (a variable belongs to the strategy whose scope created it)");
  return -1;
}

template <typename View>
Tensor PerReplicaVariable<View>::combine_across_replicas(const Tensor& value, const char* kind) const {
  const int replicas = strategy_.num_replicas_in_sync();  // of all workers
  if (replicas == 1) return value;
  StrategyReplicaContext* ctx = strategy_.current_replica_context();
  switch (aggregation_) {
    case VariableAggregation::kNone:
      throw InvalidArgumentError(
          str_cat("You must specify an aggregation method to update ", kind, " in Replica Context (variable '", name_,
                  "', ", replicas,
                  " replicas). You can do so by passing an explicit value for `aggregation` (kSum, kMean or "
                  "kOnlyFirstReplica) in VariableArgs"));
    case VariableAggregation::kSum: return ctx->all_reduce(ReduceOp::kSum, value);
    case VariableAggregation::kMean: return ctx->all_reduce(ReduceOp::kMean, value);
    case VariableAggregation::kOnlyFirstReplica: return ctx->broadcast(value, 0);
  }
  return value;
}

template <typename View>
void PerReplicaVariable<View>::check_defined(const Tensor& value, const char* what) const {
  CHORUS_REQUIRE(value.defined(), InvalidArgumentError, "variable '", name_, "': ", what, " of an undefined tensor");
}

template <typename View>
void PerReplicaVariable<View>::write_component(Variable& v, const Tensor& t, bool add) {
  if (add)
    v.assign_add(t);
  else
    v.assign(t);
}

template class PerReplicaVariable<DistributedVariable>;
template class PerReplicaVariable<ShardedVariable>;

}  // namespace chorus::distribute
