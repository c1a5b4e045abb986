// Fused optimizer updates (TF's training ops such as tf.raw_ops.ResourceApplyAdam; the multi-tensor
// form of torch.optim's fused=True and Apex's multi_tensor_apply): one call updates a group of
// variables in place — their weights and slots from their gradients — instead of a dozen
// elementwise ops per variable with their temporaries. On a GPU the group is one kernel launch
// per 24 variables (ops/cuda/training.cu); on a CPU one dispatch, the Adam loop vectorised. Used
// by the built-in optimizers (optimizer/optimizer.cc: each step's variables, grouped by device and
// dtype).
//
// The rules (ops/update_rules.h) are the optimizers' op sequences element by element, each op
// rounded to the dtype as ops::add/sub/mul/div/sqrt round it (no contraction into fma): the result
// is bitwise that of the op sequence on the same device, NaN and Inf included.
//   kAdam     slots {m, v}: m ← m + (g − m)(1 − β1); v ← v + (g² − v)(1 − β2); w ← w − m·α / (√v + ε)
//             (optimizer/adam.cc without AMSGrad; α = lr·√(1 − β2^t)/(1 − β1^t))
//   kSgd      slots {} or {momentum} (optimizer/sgd.cc, with Nesterov when `nesterov`)
//   kRMSprop  slots {velocity}, then {momentum} when `momentum_slot`, then {average} when `centered`
//             (optimizer/rmsprop.cc)
// A variable with `decays` first gets w ← w − w·decay (the decoupled weight decay, decay =
// weight_decay · lr, as Optimizer::apply_gradients applies it before the update).
#pragma once

#include <vector>

#include <chorus/core/tensor.h>
#include <chorus/ops/kinds.h>

namespace chorus::ops {

struct FusedUpdate {
  FusedRule rule = FusedRule::kAdam;
  FusedScalars scalars;
  // Defined: the update reads its scalars, and the decay of the variables that decay, from this
  // block (write_fused_scalars, below) when it runs on the device, and ignores `scalars` and each
  // variable's `decay`. A float64 [kFusedScalarSlots] tensor on the group's device, else
  // InvalidArgumentError.
  Tensor scalars_on_device;
  bool nesterov = false;       // kSgd
  bool momentum_slot = false;  // kSgd, kRMSprop: a momentum slot
  bool centered = false;       // kRMSprop: an average slot
};

// One variable of a group: what the update writes (weight and slots, in place) and reads.
struct FusedVariable {
  Tensor weight;
  Tensor gradient;
  std::vector<Tensor> slots;
  bool decays = false;
  double decay = 0.0;
};

// Updates every variable of `group` as described above and returns true; or returns false and
// changes nothing when the group has no fused kernel: an undefined tensor, a dtype other than
// float32/float64 or not one for the whole group, a gradient or slot whose shape is not its
// weight's, the wrong number of slots for the rule, tensors on more than one device, or storage
// shared between variables of the group. Then the caller runs the op sequences. Runs in the
// device's stream order (a CPU device: on the calling thread, ops/internal.h run_cpu; a GPU: queued
// on its stream), after any write hold on a weight or slot ended (core/tensor.h: an async
// checkpoint still copying it); not recorded on gradient tapes (an update is not differentiable,
// as in TF).
bool apply_fused_update(const FusedUpdate& update, std::vector<FusedVariable>& group);

// Scalars on the device, for a captured step (core/graph_capture.h): a replayed graph runs its
// kernels with the arguments they were captured with, so scalars that change every step (Adam's α
// with its bias correction, a schedule's learning rate, the decay weight_decay · lr) cannot be
// kernel arguments there. The optimizer keeps them in a block on each device instead — FusedScalars'
// eight fields in declaration order, then the decay, as float64 — writes it before each step, and
// the update reads it when it runs (FusedUpdate::scalars_on_device). The result is bitwise that of
// the same scalars passed by value (the kernels round each double to the dtype alike).
constexpr std::int64_t kFusedScalarSlots = 9;
// Writes `scalars` and `decay` into `block` (float64 [kFusedScalarSlots]; else
// InvalidArgumentError), ordered on its device's stream: after the work enqueued before, before the
// work enqueued after. On a GPU an asynchronous copy from the host that never waits for the GPU; it
// is not capturable, so it is written before a replay, never inside a capture.
void write_fused_scalars(Tensor& block, const FusedScalars& scalars, double decay);

}  // namespace chorus::ops
