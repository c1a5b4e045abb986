// StepPolicy: the step's distribution policy — how one replica's gradients become the optimizer's
// update under its strategy (PyTorch c10d's Reducer and ZeroRedundancyOptimizer in one object).
// The strategy owns it (distribute/step_policy.h): it decides what is all-reduced, what is
// reduce-scattered to this replica's slices (ZeRO stage 2), what the backward pass already summed
// (overlap; ZeRO stage 3), which part of each variable this replica updates (ZeRO stages 1-3) and
// how the updated slices come back into every replica's weights. optimizer/ and model/ program
// against this interface and know nothing of stages, buckets or overlap.
//
// The step's path (docs/architecture.md, "The step"):
//   GradientTape::gradient_and_sum   the tape hands each final gradient to begin_gradient_sum's
//                                    reduction (overlap), which it returns as a value;
//   Optimizer::apply_gradients       validates, then sum_gradients (the reduction's result, or
//                                    the collectives), clips (sum_partials for sliced norms),
//                                    then update() runs the optimizer's arithmetic on what this
//                                    replica owns and brings the slices together.
//
// SPMD: every replica of a strategy calls the same methods with the same shapes, dtypes and
// variables, in the same order (each may be a collective). Thread-safety: a replica's policy is
// used by its replica thread only.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include <chorus/core/distribution.h>
#include <chorus/core/sharded_variable.h>
#include <chorus/core/tensor.h>
#include <chorus/core/variable.h>

namespace chorus {

class StepPolicy {
 public:
  virtual ~StepPolicy() = default;

  // Overlap, during the backward pass: a sum over the replicas of the gradients of `sources` (the
  // variables' tensors the tape differentiates; undefined where the tape expects no gradient),
  // computed in buckets while the rest of the backward pass runs. GradientTape::gradient_and_sum
  // asks for it and returns it with the gradients; Optimizer::apply_gradients takes its result
  // instead of reducing again. nullptr (the default): the policy does not overlap.
  virtual std::shared_ptr<GradientReduction> begin_gradient_sum(const std::vector<Tensor>& sources) {
    (void)sources;
    return nullptr;
  }

  // ZeRO stage 3 (FSDP's unit), before a layer's call: gathers the sharded parameters among
  // `weights` (the layer's own) in one collective; their value() is then whole until the returned
  // object's after_call or destruction. nullptr (the default) when none of them is gathered.
  virtual std::unique_ptr<ParameterGather> gather_parameters(const std::vector<Variable>& weights) {
    (void)weights;
    return nullptr;
  }

  // What the optimizer updates one variable with: the gradient summed over the replicas, whole
  // (the variable's shape) or, when `slice`, this replica's 1-D slice of the flattened sum (its
  // norm then needs sum_partials).
  struct Summed {
    Tensor gradient;
    bool slice = false;
  };

  // The gradients of one apply_gradients summed over the replicas. grads[i] belongs to vars[i]
  // (undefined: none; the result's entry is then undefined too); state[i] is the first slot of
  // vars[i] (undefined when the optimizer keeps none), whose layout says whether vars[i] is
  // updated in slices. `begun`: the sum GradientTape::gradient_and_sum began for exactly these
  // gradients (the same list, in the same order), or nullptr. It takes the caller's references to
  // the gradients, releasing each once it is reduced. Errors: `begun` begun for another list →
  // InvalidArgumentError.
  virtual std::vector<Summed> sum_gradients(std::vector<Tensor>&& grads, const std::vector<Variable>& vars,
                                            const std::vector<Variable>& state,
                                            std::shared_ptr<GradientReduction> begun) = 0;

  // The sum over the replicas of `partial`, a float64 tensor every replica computes alike from its
  // sliced gradients (sums of squares for norms, a finite probe). A collective.
  virtual Tensor sum_partials(const Tensor& partial) = 0;

  // One variable's part of the update: summed[index]'s gradient and what this replica writes —
  // the variable's component, its shard, or a copy of this replica's slice of it — and the same
  // part of each of slots[index] (tensors aliasing their storage: written in place).
  struct UpdateItem {
    std::size_t index = 0;
    Tensor gradient;
    Tensor weight;
    std::vector<Tensor> slots;
  };
  // The update: fn(items) over every variable, in groups — one call with every variable updated
  // where it lives (so that the optimizer may update them together: ops/training.h's fused
  // updates), one call per variable updated elsewhere (offload, distribute/optimizer_offload.h).
  // fn must be elementwise. Afterwards every replica's weights hold every replica's updated slices
  // (one all-gather). A collective when anything is sliced.
  using UpdateFn = std::function<void(std::vector<UpdateItem>& items)>;
  virtual void update(const std::vector<Variable>& vars, std::vector<Summed>&& summed,
                      const std::vector<std::vector<Variable>>& slots, const UpdateFn& fn) = 0;
};

// The policy of the calling thread: its replica context's inside strategy.run, else its
// strategy's (cross-replica context of a one-replica strategy; the default strategy's, which sums
// nothing and updates whole variables).
StepPolicy& step_policy();

}  // namespace chorus
