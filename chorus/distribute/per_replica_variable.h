// PerReplicaVariable: what MirroredVariable (distribute/mirrored_variable.h) and ZeroVariable
// (distribute/zero_variable.h) share — a variable of a Strategy whose state is one plain component
// variable per local replica, in replica order, each on its replica's device (a MirroredVariable's
// copies, a ZeroVariable's shards). It holds the components, the strategy whose scope created it,
// the name, trainability and aggregation, and gives both classes the same rules for:
//   - where a call runs (replica_or_cross): in a replica context of its strategy, that replica;
//     in cross-replica context, or in the default strategy's replica context (a plain thread), no
//     replica; in a replica context of another strategy, FailedPreconditionError (a variable
//     belongs to the strategy whose scope created it);
//   - combining a write made in a replica context (combine_across_replicas): TF's ON_WRITE rule,
//     SUM → sum, MEAN → mean, ONLY_FIRST_REPLICA → replica 0's value, over all replicas of all
//     workers (a collective); NONE with more than one replica → InvalidArgumentError.
// What a value is (a copy or a shard), reading, writing, checkpoint_value() and restore() stay in
// each class.
//
// `View` is the core/ interface code above distribute/ sees: DistributedVariable
// (core/distributed_variable.h) for MirroredVariable, ShardedVariable (core/sharded_variable.h) for
// ZeroVariable. Instantiated for those two only (per_replica_variable.cc). Not thread-safe beyond
// what the components are: each replica thread touches its own component.
#pragma once

#include <string>
#include <vector>

#include <chorus/core/distributed_variable.h>
#include <chorus/core/sharded_variable.h>
#include <chorus/core/variable.h>
#include <chorus/distribute/strategy.h>

namespace chorus::distribute {

template <typename View>
class PerReplicaVariable : public View {
 public:
  const std::string& name() const override { return name_; }
  bool trainable() const override { return trainable_; }
  VariableAggregation aggregation() const override { return aggregation_; }
  // The primary (replica 0's) component's device.
  const std::string& device() const override { return components_[0].device(); }
  // This process's components, in replica order.
  const std::vector<Variable>& components() const override { return components_; }
  const Strategy& strategy() const override { return strategy_; }

 protected:
  // `components`: one per local replica, in replica order (InvalidArgumentError naming `kind`, the
  // class, when empty). The name and aggregation come from `args`; `trainable` is the class's.
  PerReplicaVariable(const char* kind, Strategy& strategy, std::vector<Variable> components, const VariableArgs& args,
                     bool trainable);

  // The local replica index on the calling thread, -1 in cross-replica context (and the default
  // strategy's replica context); throws FailedPreconditionError for a replica context of another
  // strategy. `what`: what was being done to the variable ("read", "written"), for the message.
  int replica_or_cross(const char* what) const;

  // `value`, written in a replica context of the strategy, combined across all replicas by the
  // aggregation (a collective: every replica must write, in the same order); `value` itself with
  // one replica. `kind` names the variable in NONE's error ("a MirroredVariable").
  Tensor combine_across_replicas(const Tensor& value, const char* kind) const;

  // InvalidArgumentError "variable '<name>': <what> of an undefined tensor" when `value` is undefined.
  void check_defined(const Tensor& value, const char* what) const;

  // v.assign(t), or v.assign_add(t) when `add`.
  static void write_component(Variable& v, const Tensor& t, bool add);

  Strategy& strategy_;
  std::vector<Variable> components_;

 private:
  std::string name_;
  bool trainable_;
  VariableAggregation aggregation_;
};

extern template class PerReplicaVariable<DistributedVariable>;
extern template class PerReplicaVariable<ShardedVariable>;

}  // namespace chorus::distribute
