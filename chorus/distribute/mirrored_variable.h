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
// components, strategy, checkpoint_value, restore), never as this class.
#pragma once

#include <vector>

#include <chorus/core/distributed_variable.h>
#include <chorus/core/variable.h>
#include <chorus/distribute/strategy.h>

namespace chorus::distribute {

class MirroredVariable final : public DistributedVariable {
 public:
  MirroredVariable(Strategy& strategy, std::vector<Variable> components, const VariableArgs& args,
                   VariableSynchronization synchronization);

  const std::string& name() const override { return name_; }
  bool trainable() const override { return trainable_; }
  VariableSynchronization synchronization() const override { return synchronization_; }
  VariableAggregation aggregation() const override { return aggregation_; }
  const Shape& shape() const override { return components_[0].shape(); }
  DType dtype() const override { return components_[0].dtype(); }
  // The primary component's device.
  const std::string& device() const override { return components_[0].device(); }
  Tensor value() const override;
  Tensor read_value() const override;
  void assign(const Tensor& value) override;
  void assign_add(const Tensor& delta) override;

  // DistributedVariable: the per-device components, in replica order (checkpoints write one,
  // restore all); the strategy whose scope created it; the checkpoint's value and its restore.
  const std::vector<Variable>& components() const override { return components_; }
  const Strategy& strategy() const override { return strategy_; }
  Tensor checkpoint_value() const override;
  void restore(const Tensor& value) override;

 private:
  // This strategy's replica id on the calling thread, -1 in cross-replica context; throws for a
  // replica context of another strategy.
  int replica_or_cross(const char* what) const;
  Tensor aggregate() const;
  void write(const Tensor& value, bool add);

  Strategy& strategy_;
  std::vector<Variable> components_;
  std::string name_;
  bool trainable_;
  VariableSynchronization synchronization_;
  VariableAggregation aggregation_;
};

}  // namespace chorus::distribute
