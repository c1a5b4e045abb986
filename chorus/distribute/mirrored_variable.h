// MirroredVariable: a variable with one component per replica device (TF's MirroredVariable and
// SyncOnReadVariable), what variables created in a MirroredStrategy's scope become.
//
// Reading (value(), read_value()):
//   - in a replica context of its strategy: that replica's component;
//   - in cross-replica context: ON_WRITE → the primary (replica 0's) component; ON_READ → the
//     components aggregated (SUM: sum, MEAN: mean, ONLY_FIRST_REPLICA: replica 0's), a new tensor;
//   - in a replica context of another strategy: FailedPreconditionError (a variable belongs to
//     the strategy it was created in).
// Writing (assign, assign_add), TF's semantics:
//   ON_WRITE, replica context: the replicas' values are combined by the aggregation and every
//     component gets the same result (a collective: every replica must write, in the same
//     order): SUM → sum, MEAN → mean, ONLY_FIRST_REPLICA → replica 0's value; NONE with more than
//     one replica → InvalidArgumentError (TF: "You must specify an aggregation method ...").
//     Example (TF's docs): MEAN variable 5.0, assign_add(1.0) in each of 2 replicas → 6.0 on both.
//   ON_WRITE, cross-replica context: every component gets the value.
//   ON_READ, replica context: only this replica's component changes (no communication).
//   ON_READ, cross-replica context: each component gets value / replicas for SUM (so the
//     aggregate reads back as `value`), value otherwise.
// ON_READ variables are not trainable (TF makes them non-trainable by default); NONE
// synchronization is refused at creation (InvalidArgumentError), as in TF.
// Code above distribute/ sees it through core's DistributedVariable (core/distributed_variable.h:
// components, strategy, checkpoint_value, restore), never as this class. The components, strategy,
// name, replica rule and the replica-context combine are PerReplicaVariable's
// (distribute/per_replica_variable.h), shared with ZeroVariable.
#pragma once

#include <vector>

#include <chorus/core/distributed_variable.h>
#include <chorus/core/variable.h>
#include <chorus/distribute/per_replica_variable.h>
#include <chorus/distribute/strategy.h>

namespace chorus::distribute {

class MirroredVariable final : public PerReplicaVariable<DistributedVariable> {
 public:
  MirroredVariable(Strategy& strategy, std::vector<Variable> components, const VariableArgs& args,
                   VariableSynchronization synchronization);

  VariableSynchronization synchronization() const override { return synchronization_; }
  const Shape& shape() const override { return components_[0].shape(); }
  DType dtype() const override { return components_[0].dtype(); }
  Tensor value() const override;
  Tensor read_value() const override;
  void assign(const Tensor& value) override;
  void assign_add(const Tensor& delta) override;

  // DistributedVariable: the checkpoint's value and its restore (checkpoints write one value,
  // restore all components); components() and strategy() are PerReplicaVariable's.
  Tensor checkpoint_value() const override;
  void restore(const Tensor& value) override;

 private:
  Tensor aggregate() const;
  void write(const Tensor& value, bool add);

  VariableSynchronization synchronization_;
};

}  // namespace chorus::distribute
