// Adam and AdamW (tf.keras.optimizers.Adam, AdamW).
//
//   chorus::optimizers::Adam adam({.learning_rate = 1e-3, .amsgrad = true});
//   chorus::optimizers::AdamW adamw({.learning_rate = 1e-3, .weight_decay = 0.01});
//
// Update (Keras 3's keras/src/optimizers/adam.py; g the summed gradient, t = iterations + 1):
//   lr_t = lr · sqrt(1 − β₂ᵗ) / (1 − β₁ᵗ)        (bias correction folded into the step size)
//   m ← m + (g − m)·(1 − β₁)                      (slot "m")
//   v ← v + (g² − v)·(1 − β₂)                     (slot "v")
//   amsgrad: v̂ ← max(v̂, v), and v̂ replaces v below (slot "vhat")
//   w ← w − lr_t·m / (sqrt(v) + ε)                 (ε outside the square root, as Keras)
// AdamW is Adam plus decoupled weight decay, applied before the update with the same lr (Keras 3's
// BaseOptimizer._apply_weight_decay): w ← w − w·(weight_decay·lr); then the Adam step above.
// Host scalars (lr_t, 1 − β) are computed in float64 and rounded to the variable's dtype.
// Defaults (Keras): learning_rate 0.001, beta_1 0.9, beta_2 0.999, epsilon 1e-7, amsgrad false;
// AdamW's weight_decay 0.004. Errors: beta_1, beta_2 outside [0, 1), epsilon < 0 →
// InvalidArgumentError. The rest of the contract is Optimizer's (optimizer/optimizer.h).
#pragma once

#include <optional>
#include <string>

#include <chorus/optimizer/optimizer.h>

namespace chorus::optimizers {

struct AdamOptions {
  LearningRate learning_rate = 0.001;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-7;
  bool amsgrad = false;
  std::optional<double> weight_decay;
  std::optional<double> clipnorm;
  std::optional<double> clipvalue;
  std::optional<double> global_clipnorm;
  std::optional<int> gradient_accumulation_steps;  // Keras 3's; optimizer.h, "Gradient accumulation"
  std::string name = "Adam";
};

struct AdamWOptions {
  LearningRate learning_rate = 0.001;
  double weight_decay = 0.004;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-7;
  bool amsgrad = false;
  std::optional<double> clipnorm;
  std::optional<double> clipvalue;
  std::optional<double> global_clipnorm;
  std::optional<int> gradient_accumulation_steps;  // Keras 3's; optimizer.h, "Gradient accumulation"
  std::string name = "AdamW";
};

class Adam : public Optimizer {
 public:
  explicit Adam(const AdamOptions& options = {});
  explicit Adam(LearningRate learning_rate) : Adam(AdamOptions{.learning_rate = std::move(learning_rate)}) {}

  double beta_1() const { return beta_1_; }
  double beta_2() const { return beta_2_; }
  double epsilon() const { return epsilon_; }
  bool amsgrad() const { return amsgrad_; }

 protected:
  std::vector<std::string> slot_names_impl() const override;
  void update_step(const Tensor& gradient, Tensor& variable, std::vector<Tensor>& slots, const Step& step) override;
  bool fused_update(const Step& step, ops::FusedUpdate& out) const override;
  bool needs_iterations() const override { return true; }
  std::string config_fields() const override;

 private:
  double beta_1_;
  double beta_2_;
  double epsilon_;
  bool amsgrad_;
  // The step size with both bias corrections: lr · sqrt(1 − β2^t) / (1 − β1^t), t = iterations + 1.
  double alpha(const Step& step) const;
};

class AdamW final : public Adam {
 public:
  explicit AdamW(const AdamWOptions& options = {});
  explicit AdamW(LearningRate learning_rate) : AdamW(AdamWOptions{.learning_rate = std::move(learning_rate)}) {}
};

}  // namespace chorus::optimizers
