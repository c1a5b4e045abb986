// RMSprop, plain or centered, with optional momentum (tf.keras.optimizers.RMSprop).
//
//   chorus::optimizers::RMSprop rms({.learning_rate = 1e-3, .momentum = 0.9, .centered = true});
//
// Update (Keras 3's keras/src/optimizers/rmsprop.py; g the summed gradient):
//   s ← ρ·s + (1 − ρ)·g²                              (slot "velocity")
//   centered: ḡ ← ρ·ḡ + (1 − ρ)·g                     (slot "average_gradient")
//             d = s − ḡ² + ε          else  d = s + ε  (ε inside the square root, as Keras)
//   Δ = lr·g / sqrt(d)
//   momentum > 0: μ ← momentum·μ + Δ, w ← w − μ        (slot "momentum")
//   else:         w ← w − Δ
// Slots in creation order: velocity, momentum (if momentum > 0), average_gradient (if centered).
// Defaults (Keras): learning_rate 0.001, rho 0.9, momentum 0, epsilon 1e-7, centered false.
// Errors: rho outside [0, 1), momentum outside [0, 1], epsilon < 0 → InvalidArgumentError. The
// rest of the contract is Optimizer's (optimizer/optimizer.h).
#pragma once

#include <optional>
#include <string>

#include <chorus/optimizer/optimizer.h>

namespace chorus::optimizers {

struct RMSpropOptions {
  LearningRate learning_rate = 0.001;
  double rho = 0.9;
  double momentum = 0.0;
  double epsilon = 1e-7;
  bool centered = false;
  std::optional<double> weight_decay;
  std::optional<double> clipnorm;
  std::optional<double> clipvalue;
  std::optional<double> global_clipnorm;
  std::optional<int> gradient_accumulation_steps;  // Keras 3's; optimizer.h, "Gradient accumulation"
  std::string name = "RMSprop";
};

class RMSprop final : public Optimizer {
 public:
  explicit RMSprop(const RMSpropOptions& options = {});
  explicit RMSprop(LearningRate learning_rate) : RMSprop(RMSpropOptions{.learning_rate = std::move(learning_rate)}) {}

  double rho() const { return rho_; }
  double momentum() const { return momentum_; }
  double epsilon() const { return epsilon_; }
  bool centered() const { return centered_; }

 protected:
  std::vector<std::string> slot_names_impl() const override;
  void update_step(const Tensor& gradient, Tensor& variable, std::vector<Tensor>& slots, const Step& step) override;
  bool fused_update(const Step& step, ops::FusedUpdate& out) const override;
  std::string config_fields() const override;

 private:
  double rho_;
  double momentum_;
  double epsilon_;
  bool centered_;
};

}  // namespace chorus::optimizers
