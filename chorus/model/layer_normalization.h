// Per-example normalization layers over trailing axes (tf.keras.layers.LayerNormalization,
// keras.layers.RMSNormalization), on ops::layer_norm / ops::rms_norm (ops/normalization.h).
//
//   Sequential model({layers::Dense(64), layers::LayerNormalization(), layers::Dense(10)});
//   auto ln = layers::LayerNormalization({-2, -1});          // over the last two axes
//   auto rms = layers::RMSNormalization();                   // weight "scale", epsilon 1e-6
//
// axis: the axes normalized over, negative ones counted from the end (Keras's int or list); not the
// batch axis, else InvalidArgumentError at build, naming the axes and the input shape.
// Both take any other axes, as Keras's LayerNormalization does (e.g. [1, 3] of a rank-4 input): the
// fused kernels normalize trailing axes, so non-trailing ones are transposed to the end and back
// (two copies of the activation; the gradient flows through both). The weights have the shape of the
// normalized axes in ascending order and scale those axes. (Keras 3's RMSNormalization makes its
// scale that shape too but multiplies it against the input's last axes, so for non-trailing axes it
// fails or scales other axes; chorus scales the normalized ones, as LayerNormalization does.)
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

namespace internal {
// How a layer normalizes over `axis` of inputs shaped `in`: the normalized axes moved to the end
// by `perm` (empty when they already are trailing) and back by `inverse`; the first of them after
// the move; the weights' shape (the normalized axes' sizes in ascending axis order). An axis out
// of range or the batch axis (0) → InvalidArgumentError naming `layer`, `name`, the axes and the input.
struct NormalizationPlan {
  int begin_axis = -1;
  std::vector<int> perm, inverse;
  Shape params;
};
NormalizationPlan plan_normalization(const char* layer, const std::string& name, const std::vector<int>& axis,
                                     const Shape& in);
}  // namespace internal

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
  internal::NormalizationPlan plan_;  // set at build
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
  internal::NormalizationPlan plan_;  // set at build
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
