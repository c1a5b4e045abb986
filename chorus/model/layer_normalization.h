// Per-example normalization layers over trailing axes (tf.keras.layers.LayerNormalization,
// keras.layers.RMSNormalization), on ops::layer_norm / ops::rms_norm (ops/normalization.h).
//
//   Sequential model({layers::Dense(64), layers::LayerNormalization(), layers::Dense(10)});
//   auto ln = layers::LayerNormalization({-2, -1});          // over the last two axes
//   auto rms = layers::RMSNormalization();                   // weight "scale", epsilon 1e-6
//
// axis: the axes normalized over, negative ones counted from the end (Keras's int or list); not the
// batch axis, else InvalidArgumentError at build, naming the axes and the input shape.
// LayerNormalization takes any other axes, as Keras does (e.g. [1, 3] of a rank-4 input): the fused
// kernel normalizes trailing axes, so non-trailing ones are transposed to the end and back (two
// copies of the activation; the gradient flows through both). RMSNormalization takes trailing axes
// only (InvalidArgumentError otherwise).
//
// LayerNormalization: y = (x − mean) / sqrt(var + epsilon) · gamma + beta per example, mean and the
// biased variance over `axis` (tf_keras's numerics; epsilon 1e-3 by default). Weights "gamma"
// (ones, when scale) and "beta" (zeros, when center), of the shape of the normalized axes in
// ascending order (Keras's).
// RMSNormalization: y = x · rsqrt(mean(x²) + epsilon) · scale, the weight "scale" (ones) — Keras 3's
// names and default epsilon 1e-6.
//
// Under a mixed policy (mixed_bfloat16, mixed_float16) both normalize in float32 with their float32
// weights, as Keras does, and return the compute dtype (one rounding). No state besides the
// weights: training and inference compute the same thing, on every replica independently.
#pragma once

#include <string>
#include <vector>

#include <chorus/model/layer.h>

namespace chorus::layers {

class LayerNormalizationLayer final : public Layer {
 public:
  LayerNormalizationLayer(std::vector<int> axis, double epsilon, bool center, bool scale, std::string name);
  std::string class_name() const override { return "LayerNormalization"; }
  void get_config(LayerConfig& config) const override;
  const Variable& gamma() const { return gamma_; }
  const Variable& beta() const { return beta_; }

 protected:
  void build_weights(const Shape& in) override;
  Tensor call(const Tensor& x, bool training) override;

 private:
  std::vector<int> axis_;
  double epsilon_;
  bool center_, scale_;
  int begin_axis_ = -1;              // set at build: the first normalized axis (after perm_)
  std::vector<int> perm_, inverse_;  // set at build for non-trailing axes: to the end and back
  Variable gamma_, beta_;
};

class RMSNormalizationLayer final : public Layer {
 public:
  RMSNormalizationLayer(std::vector<int> axis, double epsilon, std::string name);
  std::string class_name() const override { return "RMSNormalization"; }
  void get_config(LayerConfig& config) const override;
  const Variable& scale() const { return scale_; }

 protected:
  void build_weights(const Shape& in) override;
  Tensor call(const Tensor& x, bool training) override;

 private:
  std::vector<int> axis_;
  double epsilon_;
  int begin_axis_ = -1;
  Variable scale_;
};

// epsilon must be >= 0 (InvalidArgumentError).
LayerPtr LayerNormalization(int axis = -1, double epsilon = 1e-3, bool center = true, bool scale = true,
                            std::string name = "");
LayerPtr LayerNormalization(std::vector<int> axis, double epsilon = 1e-3, bool center = true, bool scale = true,
                            std::string name = "");
LayerPtr RMSNormalization(int axis = -1, double epsilon = 1e-6, std::string name = "");
LayerPtr RMSNormalization(std::vector<int> axis, double epsilon = 1e-6, std::string name = "");

}  // namespace chorus::layers
