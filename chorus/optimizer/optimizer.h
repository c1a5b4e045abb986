// Optimizer: the base of SGD, Adam, AdamW and RMSprop (tf.keras.optimizers.Optimizer, Keras 3's
// BaseOptimizer), written once as single-device code that is correct under any strategy.
//
//   chorus::distribute::MirroredStrategy strategy;
//   chorus::Variable w;
//   std::unique_ptr<chorus::optimizers::Adam> adam;
//   {
//     auto scope = strategy.scope();                       // w, iterations, slots become mirrored
//     w = chorus::make_variable({.initial_value = chorus::Tensor::zeros({4, 1}), .name = "w"});
//     adam = std::make_unique<chorus::optimizers::Adam>(chorus::optimizers::AdamOptions{.learning_rate = 1e-3});
//   }
//   strategy.run([&](const chorus::data::Element& batch) {
//     chorus::ops::GradientTape tape;
//     chorus::Tensor loss = ...;                           // sum of per-example losses / global batch
//     auto grads = tape.gradient(loss, std::vector<chorus::Variable>{w});
//     adam->apply_gradients({{grads[0], w}});              // summed over replicas, then applied
//   }, batch);
//
// apply_gradients(grads_and_vars), in this order (Keras 3's BaseOptimizer.apply):
//   1. validates every pair (errors below) — before any communication, so every replica throws
//      the same error instead of hanging in a collective;
//   2. skips pairs whose gradient is undefined (TF's None) and logs, once per optimizer, Keras's
//      warning "Gradients do not exist for variables [...] when minimizing the loss...";
//   3. creates the slots of variables seen for the first time (see build());
//   4. in replica context, sums the gradients over the replicas as the strategy's step policy
//      hands them over (core/step_policy.h): ONE packed all-reduce of the list, or the sum begun
//      during the backward pass (apply_gradients(Gradients&&), compute_gradients), or under ZeRO
//      this replica's slices of the sums (Keras sums: scale the loss by the global batch size, as
//      compute_average_loss does). Under the default strategy the sums are the gradients;
//   5. reads the learning rate at the current `iterations` (the steps completed before this one);
//   6. clips (clipnorm per gradient, or global_clipnorm over all, or clipvalue — at most one);
//   7. applies decoupled weight decay if set: w ← w − w·(weight_decay·lr) (Keras's order: before
//      the update, with the same lr);
//   8. runs the optimizer's update on each variable (see each optimizer's header);
//   9. increments `iterations` by one.
//
// How replicas stay bitwise equal: steps 5–9 do not communicate and do not use
// MirroredVariable::assign (which would all-reduce again). Each replica updates *its own
// component* of each variable, slot and of `iterations` in place (update_in_place below: the
// Tensor that Variable::value() returns inside strategy.run aliases this replica's component;
// copy_from overwrites it on the component's device stream). Every replica starts from the same
// component values, gets the same summed gradients from the all-reduce (the collective hands every
// replica the same bits), reads the same host scalars and runs the same deterministic element-wise
// kernels, so the results are equal bit for bit — after any number of steps.
//
// Contexts and strategies:
//   - default strategy (no scope): one replica, the same code path, all_reduce returns its input.
//   - inside strategy.run: every replica must call apply_gradients with the same variables, in the
//     same order, with gradients of the same shapes and the same undefined entries (SPMD).
//   - cross-replica context (inside scope(), outside run) with more than one replica →
//     InvalidArgumentError: call it inside strategy.run (TF raises likewise). With one replica it
//     runs as under the default strategy.
// Construct the optimizer inside strategy.scope() (as Keras requires): its `iterations` variable
// (int64, non-trainable, ON_WRITE, ONLY_FIRST_REPLICA) is created by the constructor through the
// variable-creator hook and must be mirrored like the model's variables.
//
// Slots (m, v, momentum, ...) are made with make_variable, so under a strategy they are
// MirroredVariables: non-trainable, zeros, named "<variable name>/<slot>" ("dense/kernel/m"), in a
// deterministic order (variables in the order given, slots in the optimizer's order).
//
// Sharded state (ZeRO, distribute/sharding_options.h, docs/sharding.md): slots ask for
// VariableArgs::shard_over_replicas, so under MirroredStrategy with sharding stage >= 1 they are
// ShardedVariables (core/sharded_variable.h) holding 1/n of the elements per replica. The
// optimizer does not know the stage: the step policy (core/step_policy.h) decides what step 4
// returns — whole sums, or this replica's 1-D slices of them — and what steps 7–8 write — the
// variable's component, its shard (stage 3), or a copy of this replica's slice, all-gathered into
// every replica's weights afterwards. update_step must therefore be elementwise (every built-in
// one is): it gets tensors of one shape, not necessarily the variable's. Clipping by norm over
// slices sums their float64 squares over the replicas (the policy's sum_partials: one
// collective). Stage 1 is bitwise stage 0; stage 2 (reduce-scattered sums) equals it to rounding.
// A stage-3 parameter's gradient must be the 1-D shard [length(r)] that GradientTape::gradient
// returns (already summed over the replicas in the backward pass).
//
// Gradient accumulation (Keras 3's gradient_accumulation_steps = N, PyTorch DDP's no_sync):
// apply_gradients adds each gradient to the variable's accumulator and returns — no collective,
// no update, only `iterations` counts the call — except on every N-th call, which takes the mean
// (g + accumulated) / N of each, zeroes the accumulators and goes on with step 3 as usual (one
// all-reduce, or reduce-scatter, for the N calls). So N calls on micro-batches of B rows (each
// loss scaled by its own global batch, as compute_average_loss does) update as one call on the
// N·B rows would: the same mean gradient, clipped once, one optimizer step. `iterations` counts
// calls (Keras's _iterations, checkpointed as "optimizer/iter"); learning-rate schedules and the
// optimizers' step counts (Adam's bias correction) use the updates, iterations / N. Accumulators
// are optimizer variables attached to their variable like slots ("gradient_accumulator", after
// the optimizer's own slots in variables(), checkpointed, restored on creation): each replica
// keeps its own local sum (ON_READ with SUM aggregation: a checkpoint stores the replicas' total,
// and restoring onto another replica count splits it evenly); at ZeRO stage 3, where the tape
// already returns summed gradient shards, the accumulator is sharded like a slot and holds the
// summed shards (the reduce-scatter then runs on every call: the backward pass does it). A
// LossScaleOptimizer skips the N-th call's update when the accumulated mean is not finite.
//
// Errors (InvalidArgumentError unless noted; messages name the variable):
//   - a gradient whose shape or dtype differs from its variable's (at ZeRO stage 3, from this
//     replica's shard of it);
//   - a variable that is undefined, not floating-point, or listed twice;
//   - no gradient for any variable ("No gradients provided for any variable", as Keras);
//   - in replica context of an n > 1 strategy, a variable, slot or `iterations` that is not a
//     distributed ON_WRITE variable of that strategy (a MirroredVariable; the optimizer sees it
//     through core/distributed_variable.h) — create them inside strategy.scope(); a distributed
//     variable of several replicas used outside its strategy's run;
//   - options: more than one of clipnorm / clipvalue / global_clipnorm (Keras's message), a
//     non-positive clip value, a negative weight_decay, gradient_accumulation_steps < 2, an
//     out-of-range hyperparameter.
// Thread-safety: apply_gradients, build, variables and get_slot may be called concurrently by the
// replicas of one strategy.run (that is how they are used). Otherwise use an optimizer from one
// thread at a time. Copy is deleted; move is allowed while no call is in progress.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <chorus/checkpoint/trackable.h>
#include <chorus/core/distribution.h>
#include <chorus/core/step_policy.h>
#include <chorus/core/tensor.h>
#include <chorus/core/variable.h>
#include <chorus/ops/tape.h>
#include <chorus/ops/training.h>
#include <chorus/optimizer/learning_rate_schedule.h>

namespace chorus::optimizers {

using GradsAndVars = std::vector<std::pair<Tensor, Variable>>;

// What compute_gradients returns and apply_gradients takes: this replica's gradients with their
// variables, and — when the strategy overlaps the all-reduce with the backward pass — the sum of
// exactly these gradients over the replicas, begun during the backward pass
// (core/step_policy.h). apply_gradients then takes that sum instead of reducing again. Pass it
// with the gradients unchanged (a changed gradient list goes through apply_gradients(gv) alone);
// every replica must pass it alike. A sum never passed on still runs, for nothing.
struct Gradients {
  GradsAndVars grads_and_vars;
  std::shared_ptr<GradientReduction> sum;  // nullptr: apply_gradients reduces the gradients itself
};

// The arguments every Keras optimizer takes besides its own (BaseOptimizer's).
struct CommonOptions {
  std::optional<double> weight_decay;     // decoupled: w ← w − w·wd·lr before each update
  std::optional<double> clipnorm;         // each gradient clipped to this L2 norm
  std::optional<double> clipvalue;        // each element clipped to [−clipvalue, clipvalue]
  std::optional<double> global_clipnorm;  // all gradients scaled so their joint L2 norm <= this
  // Keras 3's gradient_accumulation_steps (>= 2; see "Gradient accumulation" above): update with
  // the mean of this many calls' gradients, every this-many-th call.
  std::optional<int> gradient_accumulation_steps;
};

class LossScaleOptimizer;

class Optimizer : public train::Trackable {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  Optimizer(Optimizer&&) noexcept;
  Optimizer& operator=(Optimizer&&) noexcept;

  // The update described above. Blocks until the update is enqueued (it may still run on the
  // devices' streams; reads of the variables wait for it).
  virtual void apply_gradients(const GradsAndVars& grads_and_vars);
  // The same update, handing the optimizer the caller's references to the gradients:
  //   opt->apply_gradients(std::move(gv));   // gv is moved from: do not use it afterwards
  // The optimizer then drops each local gradient as soon as it is done with it — at ZeRO stage 2,
  // once it is copied into (or sent as) the reduce-scatter's input — instead of when the call
  // returns, so a caller holding no other reference to them (Model::fit does not) does not keep
  // every whole local gradient alive through the update and the all-gather of the weights. The
  // results are the same bits as the const& form; only the gradients' lifetimes differ. A braced
  // list, `opt->apply_gradients({{g, w}})`, binds here too (the list holds copies of the handles,
  // so the caller's `g` lives on). A wrapper overrides both forms.
  virtual void apply_gradients(GradsAndVars&& grads_and_vars);
  // The same update with what compute_gradients returned: the gradients' sum over the replicas
  // comes from the backward pass when it began one (overlap), else from the usual collectives.
  virtual void apply_gradients(Gradients&& gradients);

  // TF's Optimizer.compute_gradients(loss, var_list, tape): the gradients of `loss` (recorded by
  // `tape`) with respect to `vars`, as apply_gradients takes them — the loss scaled and the
  // gradients unscaled (get_scaled_loss, get_unscaled_gradients), and, when the strategy overlaps
  // and this optimizer sums each call's gradients as they are (no gradient accumulation, no loss
  // scaling), their sum begun during the backward pass. Model::train_step and minimize use it:
  //   chorus::optimizers::Gradients g = opt->compute_gradients(loss, vars, tape);
  //   opt->apply_gradients(std::move(g));
  Gradients compute_gradients(const Tensor& loss, const std::vector<Variable>& vars, ops::GradientTape& tape,
                              ops::UnconnectedGradients unconnected = ops::UnconnectedGradients::kNone);

  // Loss scaling (Keras 2's LossScaleOptimizer API, here on every optimizer so that fit and
  // minimize need not know which one they hold): the loss to differentiate, and the gradients of
  // that loss brought back to the loss's scale. The identity here; LossScaleOptimizer
  // (optimizer/loss_scale_optimizer.h) multiplies by its loss scale and divides by it.
  virtual Tensor get_scaled_loss(const Tensor& loss) const;
  virtual std::vector<Tensor> get_unscaled_gradients(std::vector<Tensor> grads) const { return grads; }

  // Keras 2's minimize with a callable: records loss_fn() on a fresh GradientTape, then
  // apply_gradients(compute_gradients(...)). Returns the loss.
  Tensor minimize(const std::function<Tensor()>& loss_fn, const std::vector<Variable>& vars);
  // Keras 2's minimize(loss, var_list, tape=tape): `tape` recorded `loss`.
  void minimize(const Tensor& loss, const std::vector<Variable>& vars, ops::GradientTape& tape);

  // Creates the slots of every variable in `vars` that has none yet (Keras's build(var_list)).
  // Cross-replica context (inside strategy.scope()) or default strategy: created directly. Replica
  // context: created once for all replicas through merge_call (every replica must call it with
  // the same variables). apply_gradients calls it for you; calling it early makes variables()
  // complete before the first step (for a checkpoint restore). Idempotent.
  virtual void build(const std::vector<Variable>& vars);

  // The learning rate the next apply_gradients uses (the schedule at iterations()).
  virtual double learning_rate() const;
  virtual const LearningRate& learning_rate_spec() const;
  // Keras's `optimizer.learning_rate = ...`: takes effect at the next apply_gradients.
  virtual void set_learning_rate(LearningRate learning_rate);

  // The number of apply_gradients calls completed (int64 scalar variable; read its value). With
  // gradient_accumulation_steps N, updates happen on every N-th call: iterations / N of them.
  virtual const Variable& iterations() const;
  // iterations() first, then every slot in creation order, each variable's accumulator after its
  // slots (for checkpoints: stable names).
  virtual std::vector<Variable> variables() const;
  // The slot `slot_name` ("m", "v", "momentum", ...) of `var`; NotFoundError when `var` has no
  // slots yet or the optimizer has no such slot (the message lists the slot names).
  virtual Variable get_slot(const Variable& var, std::string_view slot_name) const;
  // The slot names this optimizer gives each variable, in creation order.
  std::vector<std::string> slot_names() const { return slot_names_impl(); }

  // Keras 3's exclude_from_weight_decay: no weight decay for these variables and for variables
  // whose name contains one of `var_names`. Only before the first build (FailedPreconditionError
  // after it, as Keras).
  virtual void exclude_from_weight_decay(const std::vector<Variable>& vars,
                                         const std::vector<std::string>& var_names = {});

  const std::string& name() const { return name_; }

  // tf.debugging.check_numerics for the update. When on, apply_gradients checks the summed
  // gradients (after the all-reduce: the same bits on every replica; at ZeRO stage 2 one tiny
  // all-reduce of a shared probe, so every replica decides alike) with one fused finite check and
  // one host read per call; a NaN or Inf throws InvalidArgumentError naming the variable (the
  // first, in the list's order), what it holds and the step (iterations() + 1), before any weight
  // or slot changes. Off by default; Model::fit turns it on for the fit with
  // FitOptions::terminate_on_nan (chorus-train: on). Ignored by a LossScaleOptimizer's inner
  // optimizer, which skips non-finite steps by design.
  void set_check_numerics(bool on) { check_numerics_ = on; }
  bool check_numerics() const { return check_numerics_; }

  // Checkpointing (checkpoint/trackable.h): the child "iter" is `iterations` (Keras 2's name, so
  // keys read "optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE"); every slot is attached to its
  // variable ("<variable path>/.OPTIMIZER_SLOT/optimizer/m"). Slots restored before they exist
  // are assigned when apply_gradients/build creates them.
  std::vector<train::TrackableChild> trackable_children() const override;
  std::vector<train::SlotVariableRef> slot_variables() const override;

  // Keras's get_config() as JSON text: {"name": "Adam", "learning_rate": 0.001, ...}.
  virtual std::string get_config() const;

  // ---- Captured steps (Model::fit with FitOptions::capture_steps; core/graph_capture.h) ----
  // A replayed CUDA graph repeats apply_gradients' device work only: its host logic ran once, at
  // the capture. So in captured steps the scalars that change from step to step (a schedule's
  // learning rate, Adam's bias-corrected α, the decay weight_decay · lr) are read on the device:
  // after set_scalars_on_device(true) every update is a fused one that reads them from a block on
  // its device (ops/training.h's scalar block), which prepare_step() writes for the coming step —
  // before each step, eager, captured or replayed — and count_replayed_step() then advances the
  // host's copy of the step counter as a replay advanced the device's. The results are bitwise
  // those of the scalars passed by value.
  //
  // What keeps steps with `vars` from being captured ("" when nothing does): gradient
  // accumulation, check_numerics (a host read every step), no fused update for this optimizer or
  // for a variable's dtype, CHORUS_FUSED_OPTIMIZER=0; a LossScaleOptimizer (its skip of
  // non-finite steps is decided on the host).
  virtual std::string why_not_capturable(const std::vector<Variable>& vars) const;
  // Off by default. On: apply_gradients throws FailedPreconditionError where an update cannot be
  // fused, or where prepare_step() has not written the device's block.
  void set_scalars_on_device(bool on) { scalars_on_device_ = on; }
  bool scalars_on_device() const { return scalars_on_device_; }
  // For each replica device of iterations() in this process: the coming step's scalars into its
  // block (made at the first call), ordered on its stream. Eager work: never inside a capture.
  // FailedPreconditionError unless scalars_on_device().
  void prepare_step();
  // Each replica's host copy of the step counter + 1 (a replay advanced the device's).
  void count_replayed_step();
  // Drops the host's copies of the step counter, so that the next read goes to the device: after a
  // capture whose device work never ran (its apply_gradients advanced the copies).
  void forget_step_counter_copies();

 protected:
  Optimizer(std::string name, LearningRate learning_rate, const CommonOptions& common);
  // A wrapper around another optimizer (LossScaleOptimizer): no iterations variable, no slots and
  // no update of its own; it must override every public virtual above to delegate.
  struct WrapperTag {};
  Optimizer(std::string name, WrapperTag);

  // What a wrapper may do between the all-reduce and the update: apply_gradients, except that
  // `after_aggregation` gets the summed gradients (the same bits on every replica) right after
  // step 3 — at ZeRO stage 2, this replica's shards of them followed by one float64 scalar that is
  // NaN when any replica's shards hold an inf or NaN (so a finite check decides alike everywhere). When it returns
  // false the step is skipped — nothing is updated except `iterations`, which still counts the step (Keras's
  // LossScaleOptimizer). Same validation, errors, contexts. It owns `grads_and_vars` (pass a copy,
  // or std::move the caller's list to let each gradient go early, as apply_gradients(&&)).
  using AfterAggregation = std::function<bool(std::vector<Tensor>& summed_gradients)>;
  void apply_gradients_with(GradsAndVars grads_and_vars, std::shared_ptr<GradientReduction> sum,
                            const AfterAggregation& after_aggregation);
  // Whether compute_gradients asks the backward pass for the gradients' sum: only when each call's
  // gradients are summed as the tape returns them (no gradient accumulation; a LossScaleOptimizer
  // unscales each replica's gradients first: false).
  virtual bool sums_during_backward() const;

  // What update_step gets besides the tensors: host scalars, identical on every replica.
  struct Step {
    double learning_rate;     // at `iterations`
    std::int64_t iterations;  // steps completed before this one (Keras's self.iterations)
  };
  // The slot names, in creation order (fixed by the constructor's options).
  virtual std::vector<std::string> slot_names_impl() const = 0;
  // One variable's update. `variable` and `slots` are this replica's components (tensors aliasing
  // their storage, cut off from gradient tapes); write them with update_in_place only. `gradient`
  // is the summed, clipped gradient with the variable's shape, dtype and device — or, with sharded
  // slots, all four are this replica's 1-D slices (see "Sharded slots" above).
  virtual void update_step(const Tensor& gradient, Tensor& variable, std::vector<Tensor>& slots, const Step& step) = 0;
  // The fused form of update_step (ops/training.h: one kernel for every variable of a device and
  // dtype — torch.optim's fused=True): true with `out` filled when this step's update is one of
  // its rules, bitwise update_step's op sequence; false (the default) to update variable by
  // variable with update_step. The built-in Adam (without AMSGrad), SGD and RMSprop fuse;
  // CHORUS_FUSED_OPTIMIZER=0 turns fusing off (core/env.h).
  virtual bool fused_update(const Step& step, ops::FusedUpdate& out) const {
    (void)step;
    (void)out;
    return false;
  }
  // Whether update_step needs Step::iterations (else a constant learning rate saves the read of
  // the counter, which waits for the replica's device stream).
  virtual bool needs_iterations() const { return false; }
  // The optimizer's own get_config fields: `"beta_1": 0.9, "beta_2": 0.999` (no braces). get_config()
  // reads them as JSON: a fragment that is not is InvalidArgumentError naming config_fields().
  virtual std::string config_fields() const = 0;

  // Overwrites `component` — one replica's storage of a variable or slot, as Variable::value()
  // returns it inside strategy.run — with `value` (same shape and dtype), in place, ordered on the
  // component's device stream after the reads that computed `value`. No communication.
  static void update_in_place(Tensor& component, const Tensor& value);

 private:
  friend class LossScaleOptimizer;  // calls apply_gradients_with on the optimizer it wraps
  struct State;
  void create_slots(const std::vector<Variable>& vars);
  // apply_gradients' steps 1–2: every pair checked (errors above); fills `grads` (this call's only
  // references, undefined where none) and `vars` in the list's order.
  void validate(GradsAndVars& grads_and_vars, ReplicaContext* ctx, std::vector<Tensor>& grads,
                std::vector<Variable>& vars) const;
  // The step counter on the host. Reading this replica's component of iterations() waits for its
  // device (a GPU synchronize every step for Adam and schedules), so the optimizer keeps a host copy
  // of each component it read or advanced, valid while nothing else wrote the component (its
  // storage's write count, core/tensor.h Buffer::writes, is the one recorded: a restore, an
  // assign() or a LossScaleOptimizer's skip invalidates it, and the next read goes to the device).
  std::int64_t read_iterations(const Tensor& component) const;
  void remember_iterations(const Tensor& component, std::int64_t value) const;
  // component += 1 on its device; `before`: its value just before, when known (the copy follows).
  void advance_iterations(Tensor& component, std::optional<std::int64_t> before) const;
  // Steps 7–8 on one group the step policy hands over (core/step_policy.h): fused per device and
  // dtype where fused_update says so (the weight decay inside), else the decay op and update_step
  // per variable. vars[item.index] is each item's variable.
  void update_group(std::vector<StepPolicy::UpdateItem>& items, const std::vector<Variable>& vars, const Step& step);
  // Gradient accumulation: adds `grads` to the accumulators; on the N-th call replaces them by the
  // mean and returns true (update now), else counts the call and returns false.
  bool accumulate(std::vector<Tensor>& grads, const std::vector<Variable>& vars, ReplicaContext* ctx);
  // After the sums: a wrapper's check (false: skip the update), or check_numerics. `slice` marks
  // this replica's slices (nullptr: none).
  bool after_summing(std::vector<Tensor>& grads, const std::vector<Variable>& vars, const std::vector<char>* slice,
                     StepPolicy& policy, const AfterAggregation& after_aggregation) const;
  std::vector<Tensor> clip(std::vector<Tensor> grads) const;
  bool uses_weight_decay(const Variable& var) const;
  int accumulation_steps() const;  // gradient_accumulation_steps, 1 when off

  // The replica components of iterations() in this process (the variable itself when it has one).
  std::vector<Tensor> counter_components() const;

  std::string name_;
  bool check_numerics_ = false;     // set_check_numerics
  bool scalars_on_device_ = false;  // set_scalars_on_device
  LearningRate learning_rate_;
  CommonOptions common_;
  Variable iterations_;
  std::unique_ptr<State> state_;
};

}  // namespace chorus::optimizers
