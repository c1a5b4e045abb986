// Variables and the variable-creator hook (TF's tf.Variable and tf.variable_creator_scope).
//
//   chorus::Variable v = chorus::make_variable({.initial_value = chorus::Tensor::zeros({10}),
//                                               .name = "dense/bias"});
//   v.assign_add(chorus::Tensor::ones({10}));
//
// A Variable is a shared handle (copying it aliases the same variable, like a Python reference)
// to a VariableBase. The default implementation holds one tensor on one device. Strategies
// install a VariableCreator (via VariableCreatorScope) so that variables created inside their
// scope become MirroredVariables with one component per replica — layers and optimizers just call
// make_variable() and never know.
//
// Creator chain: make_variable() calls the innermost creator of the calling thread with `next`
// = the next creator outwards, ending with the default creator. A creator may change the args,
// call next (any number of times), or build its own VariableBase. The stack is thread-local.
//
// Thread-safety: reads are safe from any thread; assign/assign_add are enqueued on the variable's
// device stream, so concurrent writers are serialized in an unspecified order.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <chorus/core/tensor.h>

namespace chorus {

// How a variable is kept in sync across replicas (TF's tf.VariableSynchronization).
enum class VariableSynchronization { kAuto, kNone, kOnWrite, kOnRead };
// How updates from several replicas combine (TF's tf.VariableAggregation).
enum class VariableAggregation { kNone, kSum, kMean, kOnlyFirstReplica };

struct VariableArgs {
  Tensor initial_value;  // required (its shape and dtype become the variable's)
  std::string name = "Variable";
  bool trainable = true;  // trainable variables are watched by GradientTape automatically
  VariableSynchronization synchronization = VariableSynchronization::kAuto;
  VariableAggregation aggregation = VariableAggregation::kNone;
  std::string device;  // "" = placement rules (DeviceScope, else the initial value's device)
  // Asks a strategy that shards state (ZeRO stage >= 1, distribute/sharding_options.h) for a
  // sharded variable (core/sharded_variable.h): each replica holds one flat slice of the value
  // instead of a full copy. Optimizer slots ask for it. Honoured for ON_WRITE (or AUTO)
  // variables only; every other strategy, stage 0, and ON_READ variables ignore it (mirrored).
  bool shard_over_replicas = false;
};

class VariableBase {
 public:
  virtual ~VariableBase() = default;
  virtual const std::string& name() const = 0;
  virtual bool trainable() const = 0;
  virtual VariableSynchronization synchronization() const = 0;
  virtual VariableAggregation aggregation() const = 0;
  virtual const Shape& shape() const = 0;
  virtual DType dtype() const = 0;
  virtual const std::string& device() const = 0;
  // The current value, aliasing the variable's storage: later assignments are visible through it.
  virtual Tensor value() const = 0;
  // A copy of the current value (TF's read_value).
  virtual Tensor read_value() const = 0;
  // Shape and dtype must match (InvalidArgumentError naming both); value may live on any device.
  virtual void assign(const Tensor& value) = 0;
  virtual void assign_add(const Tensor& delta) = 0;
  // assign(value), taking value's storage instead of copying it where that is the same thing: a
  // variable whose value() aliases one storage, with `value` on its device and no other Tensor
  // sharing value's storage, exchanges the two storages (Buffer::exchange; tensors aliasing the
  // variable see the new values, as after assign). Checkpoint restores hand over values they
  // just read this way. Otherwise, and by default, it is assign(value).
  virtual void assign_taking(Tensor value) { assign(value); }
};

class Variable {
 public:
  Variable() = default;
  explicit Variable(std::shared_ptr<VariableBase> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  const std::string& name() const { return get().name(); }
  bool trainable() const { return get().trainable(); }
  VariableSynchronization synchronization() const { return get().synchronization(); }
  VariableAggregation aggregation() const { return get().aggregation(); }
  const Shape& shape() const { return get().shape(); }
  DType dtype() const { return get().dtype(); }
  const std::string& device() const { return get().device(); }
  Tensor value() const { return get().value(); }
  Tensor read_value() const { return get().read_value(); }
  void assign(const Tensor& value) { get().assign(value); }
  void assign_add(const Tensor& delta) { get().assign_add(delta); }

  // The implementation, for strategies that need their own type (dynamic_pointer_cast).
  const std::shared_ptr<VariableBase>& impl() const { return impl_; }
  // True when both handles refer to the same variable.
  bool is(const Variable& other) const { return impl_ == other.impl_; }

 private:
  VariableBase& get() const;
  std::shared_ptr<VariableBase> impl_;
};

using NextCreator = std::function<Variable(const VariableArgs&)>;
using VariableCreator = std::function<Variable(const VariableArgs&, const NextCreator& next)>;

// Creates a variable through the calling thread's creator chain. An undefined initial_value →
// InvalidArgumentError.
Variable make_variable(const VariableArgs& args);

// The chain's end: a single-device variable holding a copy of args.initial_value.
Variable default_variable_creator(const VariableArgs& args);

// RAII: pushes `creator` on the calling thread's creator stack (tf.variable_creator_scope).
class VariableCreatorScope {
 public:
  explicit VariableCreatorScope(VariableCreator creator);
  ~VariableCreatorScope();
  VariableCreatorScope(const VariableCreatorScope&) = delete;
  VariableCreatorScope& operator=(const VariableCreatorScope&) = delete;
};

}  // namespace chorus
