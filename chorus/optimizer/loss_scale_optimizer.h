// LossScaleOptimizer: dynamic loss scaling around another optimizer
// (tf.keras.mixed_precision.LossScaleOptimizer, Keras 2 / tf_keras semantics and defaults).
//
// Gradients of float16 losses underflow to zero; multiplying the loss by a large scale S before
// differentiating and dividing the gradients by S afterwards keeps them representable. When S is
// too large the gradients overflow to Inf/NaN: that step is skipped and S halved. After
// `dynamic_growth_steps` finite steps in a row S is doubled.
//
//   std::shared_ptr<Optimizer> opt;
//   {
//     auto scope = strategy.scope();   // the loss scale and its counter are mirrored like the model
//     opt = std::make_shared<LossScaleOptimizer>(std::make_shared<Adam>(AdamOptions{}));
//   }
//   strategy.run([&](const data::Element& batch) {
//     ops::GradientTape tape;
//     Tensor loss = ...;
//     Tensor scaled = opt->get_scaled_loss(loss);                  // loss · S
//     auto grads = opt->get_unscaled_gradients(tape.gradient(scaled, vars));  // · 1/S
//     opt->apply_gradients(pairs(grads, vars));                    // skipped if not all finite
//   }, batch);
//   model.compile(opt, loss);   // fit and minimize scale and unscale by themselves
//
// apply_gradients is the inner optimizer's (optimizer/optimizer.h), with one addition between the
// all-reduce and the update: the summed gradients are checked for Inf/NaN. Because the check reads
// the all-reduced gradients — the same bits on every replica and every worker — all replicas make
// the same decision: a NaN or Inf in one replica's gradient reaches every replica through the sum,
// and every replica skips that step. Then, on every replica's own component:
//   all finite:  good_steps += 1; if good_steps == dynamic_growth_steps: S ← 2·S (when 2·S is
//                finite), good_steps ← 0; then the inner optimizer's update.
//   otherwise:   S ← max(S / 2, 1), good_steps ← 0; no update; `iterations` still counts the step.
// With dynamic == false, S stays initial_scale and a non-finite step is still skipped.
//
// State (two variables created by the constructor through the variable-creator hook: construct
// it inside strategy.scope(), as the inner optimizer): `current_loss_scale` (float32 scalar) and
// `good_steps` (int64 scalar). Checkpoints: as TensorFlow's LossScaleOptimizerV3 (a delegating
// trackable), the inner optimizer's children and slots appear under the optimizer's own path, and
// the loss scale under "<path>/loss_scale/current_loss_scale" and ".../good_steps".
//
// Everything else — learning_rate, set_learning_rate, iterations, get_slot, build, variables
// (the inner's, then the two loss-scale variables) — is the inner optimizer's.
//
// Errors (InvalidArgumentError): a null inner optimizer; an inner LossScaleOptimizer; an
// initial_scale that is not a finite number >= 1; dynamic_growth_steps < 1.
// Thread-safety: as Optimizer (the replicas of one strategy.run may call it concurrently).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/optimizer/optimizer.h>

namespace chorus::optimizers {

struct LossScaleOptions {
  bool dynamic = true;
  double initial_scale = 32768.0;            // 2^15, Keras's default
  std::int64_t dynamic_growth_steps = 2000;  // Keras's default
};

class LossScaleOptimizer final : public Optimizer {
 public:
  explicit LossScaleOptimizer(std::shared_ptr<Optimizer> inner_optimizer, const LossScaleOptions& options = {});

  // The current loss scale S (reads this replica's component inside strategy.run).
  double loss_scale() const;
  // good_steps: finite steps since S last changed (Keras's dynamic_counter).
  std::int64_t dynamic_counter() const;
  bool dynamic() const { return options_.dynamic; }
  double initial_scale() const { return options_.initial_scale; }
  std::int64_t dynamic_growth_steps() const { return options_.dynamic_growth_steps; }
  Optimizer& inner_optimizer() const { return *inner_; }

  Tensor get_scaled_loss(const Tensor& loss) const override;
  std::vector<Tensor> get_unscaled_gradients(std::vector<Tensor> grads) const override;
  void apply_gradients(const GradsAndVars& grads_and_vars) override;
  void apply_gradients(GradsAndVars&& grads_and_vars) override;
  // compute_gradients begins no sum here (sums_during_backward): the gradients are unscaled on
  // each replica first. A sum passed anyway is not used.
  void apply_gradients(Gradients&& gradients) override;

  void build(const std::vector<Variable>& vars) override { inner_->build(vars); }
  double learning_rate() const override { return inner_->learning_rate(); }
  const LearningRate& learning_rate_spec() const override { return inner_->learning_rate_spec(); }
  void set_learning_rate(LearningRate learning_rate) override { inner_->set_learning_rate(std::move(learning_rate)); }
  const Variable& iterations() const override { return inner_->iterations(); }
  std::vector<Variable> variables() const override;
  Variable get_slot(const Variable& var, std::string_view slot_name) const override {
    return inner_->get_slot(var, slot_name);
  }
  void exclude_from_weight_decay(const std::vector<Variable>& vars,
                                 const std::vector<std::string>& var_names = {}) override {
    inner_->exclude_from_weight_decay(vars, var_names);
  }
  // {"inner_optimizer": {...}, "dynamic": true, "initial_scale": 32768, "dynamic_growth_steps": 2000}
  std::string get_config() const override;
  std::string why_not_capturable(const std::vector<Variable>&) const override {
    return "a LossScaleOptimizer decides on the host whether to skip a step with non-finite gradients";
  }

  std::vector<train::TrackableChild> trackable_children() const override;
  std::vector<train::SlotVariableRef> slot_variables() const override { return inner_->slot_variables(); }

 protected:
  std::vector<std::string> slot_names_impl() const override { return inner_->slot_names(); }
  void update_step(const Tensor&, Tensor&, std::vector<Tensor>&, const Step&) override;
  bool sums_during_backward() const override { return false; }
  std::string config_fields() const override { return ""; }

 private:
  // The decision and the state update on the summed gradients (see above); true: apply them.
  bool update_loss_scale(const std::vector<Tensor>& summed_gradients);

  std::shared_ptr<Optimizer> inner_;
  LossScaleOptions options_;
  // Keras's _DynamicLossScaleState: a trackable with two variables.
  std::shared_ptr<train::Trackable> state_node_;
  Variable current_loss_scale_;
  Variable good_steps_;
};

}  // namespace chorus::optimizers
