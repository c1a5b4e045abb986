#include <chorus/distribute/mirrored_variable.h>

#include <chorus/distribute/per_replica.h>
#include <chorus/distribute/strategy.h>
#include <chorus/ops/elementwise.h>

namespace chorus::distribute {

MirroredVariable::MirroredVariable(Strategy& strategy, std::vector<Variable> components, const VariableArgs& args,
                                   VariableSynchronization synchronization)
    : PerReplicaVariable("MirroredVariable", strategy, std::move(components), args,
                         synchronization == VariableSynchronization::kOnRead ? false : args.trainable),
      synchronization_(synchronization) {}

Tensor MirroredVariable::aggregate() const {
  switch (aggregation()) {
    case VariableAggregation::kOnlyFirstReplica:
    case VariableAggregation::kNone: return components_[0].value();
    case VariableAggregation::kSum:
    case VariableAggregation::kMean: {
      Tensor total = components_[0].read_value();
      for (std::size_t r = 1; r < components_.size(); ++r)
        total = ops::add(total, components_[r].value().to(total.device_name()));
      if (aggregation() == VariableAggregation::kMean)
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
  check_defined(value, add ? "assign_add" : "assign");
  const int r = replica_or_cross("written");
  if (r >= 0) {
    Variable& mine = components_[static_cast<std::size_t>(r)];
    if (synchronization_ == VariableSynchronization::kOnRead) {
      write_component(mine, value, add);
      return;
    }
    write_component(mine, combine_across_replicas(value, "a MirroredVariable"), add);
    return;
  }
  const std::size_t n = components_.size();
  Tensor v = value;
  if (synchronization_ == VariableSynchronization::kOnRead && aggregation() == VariableAggregation::kSum && n > 1)
    v = ops::div(value, ops::scalar_like(value, static_cast<double>(n)));
  for (Variable& c : components_) write_component(c, v, add);
}

void MirroredVariable::assign(const Tensor& value) { write(value, false); }
void MirroredVariable::assign_add(const Tensor& delta) { write(delta, true); }

Tensor MirroredVariable::checkpoint_value() const {
  if (synchronization_ != VariableSynchronization::kOnRead ||
      (aggregation() != VariableAggregation::kSum && aggregation() != VariableAggregation::kMean)) {
    return components_[0].value();
  }
  // The strategy's reduce: over this process's replicas, and in a multi-worker strategy over every
  // worker's (a collective: every worker snapshots, in the same order).
  std::vector<Tensor> values;
  values.reserve(components_.size());
  for (const Variable& c : components_) values.push_back(c.value());
  return strategy_.reduce(aggregation() == VariableAggregation::kSum ? ReduceOp::kSum : ReduceOp::kMean,
                          PerReplica<Tensor>(std::move(values)));
}

void MirroredVariable::restore(const Tensor& value) {
  Tensor each = value;
  const int replicas = strategy_.num_replicas_in_sync();  // of all workers
  if (synchronization_ == VariableSynchronization::kOnRead && aggregation() == VariableAggregation::kSum &&
      replicas > 1)
    each = ops::div(value, ops::scalar_like(value, static_cast<double>(replicas)));
  for (const Variable& c : components_) c.impl()->assign(each);  // → the component's own device
}

}  // namespace chorus::distribute
