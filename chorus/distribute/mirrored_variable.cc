#include <chorus/distribute/mirrored_variable.h>

#include <chorus/core/distribution.h>
#include <chorus/core/error.h>
#include <chorus/distribute/per_replica.h>
#include <chorus/distribute/replica_context.h>
#include <chorus/distribute/strategy.h>
#include <chorus/ops/elementwise.h>

namespace chorus::distribute {

using chorus::internal::str_cat;

MirroredVariable::MirroredVariable(Strategy& strategy, std::vector<Variable> components, const VariableArgs& args,
                                   VariableSynchronization synchronization)
    : strategy_(strategy),
      components_(std::move(components)),
      name_(args.name),
      trainable_(synchronization == VariableSynchronization::kOnRead ? false : args.trainable),
      synchronization_(synchronization),
      aggregation_(args.aggregation) {
  CHORUS_REQUIRE(!components_.empty(), InvalidArgumentError, "MirroredVariable '", name_, "': no components");
}

int MirroredVariable::replica_or_cross(const char* what) const {
  ReplicaContext* ctx = get_replica_context();
  if (ctx == nullptr) return -1;
  if (auto* mine = strategy_.current_replica_context()) return mine->local_replica_id();
  // A replica context that is not ours: the default strategy's (a plain thread) reads the primary
  // like cross-replica code; another strategy's is a mistake.
  CHORUS_REQUIRE(&ctx->strategy() == &chorus::get_strategy() && !has_strategy(), FailedPreconditionError, "variable '",
                 name_, "' was created in the scope of ", strategy_.name(), " (", components_.size(),
                 " replicas) and cannot be ", what, " in a replica of ", ctx->strategy().name(),
                 " (a variable belongs to the strategy whose scope created it)");
  return -1;
}

Tensor MirroredVariable::aggregate() const {
  switch (aggregation_) {
    case VariableAggregation::kOnlyFirstReplica:
    case VariableAggregation::kNone: return components_[0].value();
    case VariableAggregation::kSum:
    case VariableAggregation::kMean: {
      Tensor total = components_[0].read_value();
      for (std::size_t r = 1; r < components_.size(); ++r)
        total = ops::add(total, components_[r].value().to(total.device_name()));
      if (aggregation_ == VariableAggregation::kMean)
        total = ops::div(total, ops::scalar_like(total, static_cast<double>(components_.size())));
      return total;
    }
  }
  return components_[0].value();
}

Tensor MirroredVariable::value() const {
  const int r = replica_or_cross("read");
  if (r >= 0) return components_[static_cast<std::size_t>(r)].value();
  if (synchronization_ == VariableSynchronization::kOnRead) return aggregate();
  return components_[0].value();
}

Tensor MirroredVariable::read_value() const {
  const int r = replica_or_cross("read");
  if (r >= 0) return components_[static_cast<std::size_t>(r)].read_value();
  if (synchronization_ == VariableSynchronization::kOnRead) return aggregate().clone();
  return components_[0].read_value();
}

void MirroredVariable::write(const Tensor& value, bool add) {
  CHORUS_REQUIRE(value.defined(), InvalidArgumentError, "variable '", name_, "': ", add ? "assign_add" : "assign",
                 " of an undefined tensor");
  const int r = replica_or_cross("written");
  auto apply = [add](Variable& v, const Tensor& t) {
    if (add)
      v.assign_add(t);
    else
      v.assign(t);
  };
  const std::size_t n = components_.size();
  if (r >= 0) {
    Variable& mine = components_[static_cast<std::size_t>(r)];
    // All replicas of all workers (multi-worker: the write is combined across processes too).
    const int replicas = strategy_.num_replicas_in_sync();
    if (synchronization_ == VariableSynchronization::kOnRead || replicas == 1) {
      apply(mine, value);
      return;
    }
    StrategyReplicaContext* ctx = strategy_.current_replica_context();
    switch (aggregation_) {
      case VariableAggregation::kNone:
        throw InvalidArgumentError(str_cat(
            "You must specify an aggregation method to update a MirroredVariable in Replica Context (variable '", name_,
            "', ", replicas,
            " replicas). You can do so by passing an explicit value for `aggregation` (kSum, kMean or "
            "kOnlyFirstReplica) in VariableArgs"));
      case VariableAggregation::kSum: apply(mine, ctx->all_reduce(ReduceOp::kSum, value)); return;
      case VariableAggregation::kMean: apply(mine, ctx->all_reduce(ReduceOp::kMean, value)); return;
      case VariableAggregation::kOnlyFirstReplica: apply(mine, ctx->broadcast(value, 0)); return;
    }
    return;
  }
  Tensor v = value;
  if (synchronization_ == VariableSynchronization::kOnRead && aggregation_ == VariableAggregation::kSum && n > 1)
    v = ops::div(value, ops::scalar_like(value, static_cast<double>(n)));
  for (Variable& c : components_) apply(c, v);
}

void MirroredVariable::assign(const Tensor& value) { write(value, false); }
void MirroredVariable::assign_add(const Tensor& delta) { write(delta, true); }

Tensor MirroredVariable::checkpoint_value() const {
  if (synchronization_ != VariableSynchronization::kOnRead ||
      (aggregation_ != VariableAggregation::kSum && aggregation_ != VariableAggregation::kMean)) {
    return components_[0].value();
  }
  // The strategy's reduce: over this process's replicas, and in a multi-worker strategy over every
  // worker's (a collective: every worker snapshots, in the same order).
  std::vector<Tensor> values;
  values.reserve(components_.size());
  for (const Variable& c : components_) values.push_back(c.value());
  return strategy_.reduce(aggregation_ == VariableAggregation::kSum ? ReduceOp::kSum : ReduceOp::kMean,
                          PerReplica<Tensor>(std::move(values)));
}

void MirroredVariable::restore(const Tensor& value) {
  Tensor each = value;
  const int replicas = strategy_.num_replicas_in_sync();  // of all workers
  if (synchronization_ == VariableSynchronization::kOnRead && aggregation_ == VariableAggregation::kSum && replicas > 1)
    each = ops::div(value, ops::scalar_like(value, static_cast<double>(replicas)));
  for (const Variable& c : components_) c.impl()->assign(each);  // → the component's own device
}

}  // namespace chorus::distribute
