// Trackable: what a Checkpoint can save — TensorFlow's object-based checkpointing
// (tf.train.Checkpoint walks a graph of objects; tensorflow/python/trackable/base.py).
//
// A checkpoint is a graph: the Checkpoint is the root, its named children are objects (models,
// optimizers, iterators, ...) or variables; objects have named children of their own. A
// variable's value is stored under the path of names that first reaches it (breadth first, in
// the order children are listed), escaped as TF does: "model/layer_with_weights-0/kernel" →
// key "model/layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE". Optimizer slots are
// attached to the variable they belong to: "<variable path>/.OPTIMIZER_SLOT/<optimizer path>/m".
//
// Implementing Trackable (model::Model, layers::Layer and optimizers::Optimizer do):
//   - trackable_children(): the named dependencies, in a stable order. Names are local ("kernel",
//     "layer_with_weights-0"), unique within the object.
//   - slot_variables(): optimizers only — (original variable, slot name, slot variable).
//   - serialize_to_tensors()/restore_from_tensors(): state that is not a Variable (an iterator's
//     position, a generator's Philox state), saved as attributes of the object's node.
//   - Objects whose children appear after construction (a layer creates its weights when it is
//     built; an optimizer creates slots at its first step) call child_created()/slot_created()
//     right after creating them. A restore that was waiting for that child is applied there
//     (TF's restore-on-create): `checkpoint.restore(path)` before `model.build(...)` works.
//
// Data iterators and random generators are not Trackable themselves (they live in lower
// modules); TrackableRef wraps them: Checkpoint({{"data", iterator}, {"rng", generator}}).
// Lifetime: a TrackableRef made from a reference does not own it; the object must outlive the
// Checkpoint that refers to it (as in TF, where the checkpoint holds references).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include <chorus/core/tensor.h>
#include <chorus/core/variable.h>

namespace chorus::data {
class Iterator;
}
namespace chorus::ops {
class Generator;
}

namespace chorus::train {

class Trackable;
namespace internal {
struct PendingRestores;
}

// A dependency: an object or a variable.
class TrackableRef {
 public:
  TrackableRef(Trackable& object);                  // not owned
  TrackableRef(std::shared_ptr<Trackable> object);  // shared
  template <typename T, typename = std::enable_if_t<std::is_base_of_v<Trackable, T>>>
  TrackableRef(std::shared_ptr<T> object) : TrackableRef(std::shared_ptr<Trackable>(std::move(object))) {}
  TrackableRef(Variable variable);
  TrackableRef(data::Iterator& iterator);   // position (data::Iterator::save/restore)
  TrackableRef(ops::Generator& generator);  // Philox state

  bool is_variable() const { return variable_.defined(); }
  const Variable& variable() const { return variable_; }
  Trackable* object() const { return object_; }

 private:
  std::shared_ptr<Trackable> owned_;
  Trackable* object_ = nullptr;
  Variable variable_;
};

struct TrackableChild {
  std::string name;
  TrackableRef ref;
};

struct SlotVariableRef {
  Variable original;
  std::string slot_name;
  Variable slot;
};

class Trackable {
 public:
  Trackable();
  virtual ~Trackable();
  Trackable(const Trackable&) = delete;
  Trackable& operator=(const Trackable&) = delete;
  // Moving takes the pending restores along (a moved-from object must not be used).
  Trackable(Trackable&&) noexcept;
  Trackable& operator=(Trackable&&) noexcept;

  virtual std::vector<TrackableChild> trackable_children() const = 0;
  virtual std::vector<SlotVariableRef> slot_variables() const { return {}; }
  // Attribute name → tensor (any device), read at save time in cross-replica or default context.
  virtual std::map<std::string, Tensor> serialize_to_tensors() const { return {}; }
  // The saved attributes (host tensors), every one serialize_to_tensors() wrote. Throws on a
  // value that does not fit (InvalidArgumentError).
  virtual void restore_from_tensors(const std::map<std::string, Tensor>& tensors) { (void)tensors; }

  // For the restore machinery (checkpoint/checkpoint.cc): restores waiting for children.
  internal::PendingRestores& pending_restores() const { return *pending_; }

 protected:
  // Call after creating a child that did not exist before (see above). Applies a pending restore
  // of it, if any; a shape/dtype mismatch with the checkpoint → InvalidArgumentError naming the
  // checkpoint key (the child keeps its initial value).
  void child_created(const std::string& name, const TrackableRef& child) const;
  // The same for an optimizer's new slot variable.
  void slot_created(const Variable& original, const std::string& slot_name, const Variable& slot) const;
  // For a wrapper that stands for `inner` in the checkpoint graph (TF's DelegatingTrackableMixin:
  // LossScaleOptimizer lists the inner optimizer's children and slots as its own): restores that
  // wait for children or slots are kept with `inner`, which creates them. Call in the constructor.
  void delegate_restores_to(const Trackable& inner) { pending_ = inner.pending_; }

 private:
  std::shared_ptr<internal::PendingRestores> pending_;
};

// TF's escape_local_name: "." → "..", "/" → ".S".
std::string escape_local_name(const std::string& name);

}  // namespace chorus::train
