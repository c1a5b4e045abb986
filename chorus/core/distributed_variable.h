// DistributedVariable: the view of a variable whose state lives in several components on several
// devices — what a strategy's variable creator makes (distribute::MirroredVariable: one full copy
// per replica). Code above distribute/ (optimizer/, checkpoint/, model/) sees such a variable
// only through this interface, never through a strategy's class, so that it stays single-device
// code (DESIGN, "Layers of the house").
//
//   if (const chorus::DistributedVariable* d = chorus::as_distributed(v)) {
//     for (const chorus::Variable& c : d->components()) ...;  // one per replica of this process
//   }
//
// A DistributedVariable is a VariableBase: name(), value(), assign() and the rest keep the meaning
// the implementing class gives them (MirroredVariable: this replica's component in its replica
// context, see distribute/mirrored_variable.h). Of the inherited accessors, synchronization() and
// aggregation() say how the components are kept in sync (ON_WRITE: every write is combined across
// replicas by the aggregation; ON_READ: each replica writes its own, reads combine them). The view
// adds:
//   - components(): the plain variables that hold the state in this process, in replica order,
//     each on its replica's device (never themselves distributed). Fixed at creation.
//   - strategy(): the strategy whose scope created the variable. It may be used only in that
//     strategy's replicas, or in cross-replica context.
//   - checkpoint_value() / restore(): the whole variable as one tensor, as a checkpoint stores it,
//     and back. checkpoint/ saves and restores through these, so the rule for combining and
//     splitting components stays with the class that defines them.
//
// Sharded state (ZeRO, DESIGN "Where the next capabilities go"): a sharded variable implements
// this same interface through core/sharded_variable.h's ShardedVariable — components() its 1-D
// shards in this process (one per replica), checkpoint_value() the shards gathered into the whole
// tensor, restore() each shard given its slice — so that checkpoint/ needs no change and
// optimizer/ asks the view (as_sharded) rather than a strategy's class. Add to the interface only
// what such callers need.
//
// Thread-safety: components() and strategy() are safe from any thread. checkpoint_value() may be
// a collective (below): every worker calls it, for the same variables in the same order.
#pragma once

#include <vector>

#include <chorus/core/distribution.h>
#include <chorus/core/variable.h>

namespace chorus {

class DistributedVariable : public VariableBase {
 public:
  // The per-device components of this process, in replica order; never empty.
  virtual const std::vector<Variable>& components() const = 0;
  // The strategy whose scope created this variable (outlives it).
  virtual const DistributionStrategy& strategy() const = 0;

  // The value a checkpoint saves, one tensor of shape() and dtype(), not yet copied (it may alias
  // a component: copy it before the variable changes). MirroredVariable: ON_WRITE → the primary
  // (replica 0's) component; ON_READ with SUM or MEAN → the components combined over all replicas
  // of all workers (the strategy's reduce: a collective in a multi-worker strategy); ON_READ
  // otherwise → the primary component.
  virtual Tensor checkpoint_value() const = 0;
  // Sets every component from a restored whole value (shape and dtype already checked; `value`
  // may live on any device: each component copies it to its own). MirroredVariable: each
  // component gets `value`, except ON_READ SUM with more than one replica in sync (of all
  // workers), where each gets value / replicas, so that the aggregate reads back as `value`.
  virtual void restore(const Tensor& value) = 0;
};

// The distributed view of `v`, or nullptr for a plain (single-device) or undefined variable. Like
// Variable::impl(), the handle's constness is shallow: the view may be restored through.
inline DistributedVariable* as_distributed(const Variable& v) {
  return dynamic_cast<DistributedVariable*>(v.impl().get());
}

}  // namespace chorus
