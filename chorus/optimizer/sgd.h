// SGD with optional momentum and Nesterov momentum (tf.keras.optimizers.SGD).
//
//   chorus::optimizers::SGD sgd({.learning_rate = 0.1, .momentum = 0.9, .nesterov = true});
//   sgd.apply_gradients({{grad, w}});
//
// Update (Keras 3's keras/src/optimizers/sgd.py; g the summed gradient, lr the learning rate):
//   momentum == 0:  w ← w − lr·g                         (no slot)
//   momentum > 0:   v ← momentum·v − lr·g                 (slot "momentum", zeros)
//                   w ← w + v                             (nesterov: w ← w + momentum·v − lr·g,
//                                                          with the new v)
// Options: learning_rate (default 0.01, or a schedule), momentum in [0, 1] (Keras's check),
// nesterov, and the common ones (optimizer/optimizer.h). The contract — aggregation across
// replicas, slots, errors, thread-safety — is Optimizer's.
#pragma once

#include <optional>
#include <string>

#include <chorus/optimizer/optimizer.h>

namespace chorus::optimizers {

struct SGDOptions {
  LearningRate learning_rate = 0.01;
  double momentum = 0.0;
  bool nesterov = false;
  std::optional<double> weight_decay;
  std::optional<double> clipnorm;
  std::optional<double> clipvalue;
  std::optional<double> global_clipnorm;
  std::optional<int> gradient_accumulation_steps;  // Keras 3's; optimizer.h, "Gradient accumulation"
  std::string name = "SGD";
};

class SGD final : public Optimizer {
 public:
  explicit SGD(const SGDOptions& options = {});
  explicit SGD(LearningRate learning_rate) : SGD(SGDOptions{.learning_rate = std::move(learning_rate)}) {}

  double momentum() const { return momentum_; }
  bool nesterov() const { return nesterov_; }

 protected:
  std::vector<std::string> slot_names_impl() const override;
  void update_step(const Tensor& gradient, Tensor& variable, std::vector<Tensor>& slots, const Step& step) override;
  bool fused_update(const Step& step, ops::FusedUpdate& out) const override;
  std::string config_fields() const override;

 private:
  double momentum_;
  bool nesterov_;
};

}  // namespace chorus::optimizers
