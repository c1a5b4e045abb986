// Convolution layers beside Conv2D (model/layers.h): DepthwiseConv2D and Conv1D (tf.keras.layers),
// with Keras's names, argument order and defaults, channels_last only.
//
//   Sequential model({layers::Conv1D(16, 3, 1, "causal", "relu"), layers::Flatten(), layers::Dense(1)});
//   auto dw = layers::DepthwiseConv2D(3, 1, "same", /*depth_multiplier=*/2);   // [n,h,w,C] → [n,h,w,2C]
//
// Activations by name as model/layers.h. Under a mixed policy they compute in the policy's compute
// dtype (weights cast by read_weight), as Keras. Weights (checkpoint names as Keras's):
//   DepthwiseConv2D: "depthwise_kernel" [kh, kw, C, depth_multiplier], "bias" [C · depth_multiplier]
//   Conv1D: "kernel" [kernel_size, C / groups, filters], "bias" [filters]
// Errors (InvalidArgumentError, naming the layer and the numbers): sizes, strides, dilation or
// depth_multiplier < 1, filters not a multiple of groups (construction); an input of the wrong rank,
// channels not a multiple of groups, a window that does not fit the input under "valid" (build).
// Accepted beyond Keras's TF backend: strides > 1 together with dilation > 1 (TF's depthwise and
// 1-D convolutions refuse that combination; the kernels here do not need to).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include <chorus/model/layer.h>
#include <chorus/ops/kinds.h>

namespace chorus::layers {

// tf.keras.layers.DepthwiseConv2D: each input channel convolved with its own depth_multiplier
// filters (ops::depthwise_conv2d), then bias and activation. padding "valid" or "same".
class DepthwiseConv2DLayer final : public Layer {
 public:
  DepthwiseConv2DLayer(std::array<std::int64_t, 2> kernel, std::array<std::int64_t, 2> strides, ops::Padding padding,
                       std::int64_t depth_multiplier, std::string activation, bool use_bias,
                       std::array<std::int64_t, 2> dilation, initializers::Initializer depthwise_init,
                       initializers::Initializer bias_init, std::string name);
  std::string class_name() const override { return "DepthwiseConv2D"; }
  void get_config(LayerConfig& config) const override;  // model/serialization.h
  Shape compute_output_shape(const Shape& in) const override;
  const Variable& depthwise_kernel() const { return kernel_; }
  const Variable& bias() const { return bias_; }

 protected:
  void build_weights(const Shape& in) override;
  Tensor call(const Tensor& x, bool training) override;

 private:
  std::array<std::int64_t, 2> kernel_size_, strides_, dilation_;
  ops::Padding padding_;
  std::int64_t depth_multiplier_;
  std::string activation_;
  bool use_bias_;
  initializers::Initializer kernel_init_, bias_init_;
  Variable kernel_, bias_;
};
LayerPtr DepthwiseConv2D(std::int64_t kernel_size, std::int64_t strides = 1, std::string padding = "valid",
                         std::int64_t depth_multiplier = 1, std::string activation = "", bool use_bias = true,
                         std::int64_t dilation_rate = 1,
                         initializers::Initializer depthwise_initializer = initializers::glorot_uniform(),
                         initializers::Initializer bias_initializer = initializers::zeros(), std::string name = "");
LayerPtr DepthwiseConv2D(std::array<std::int64_t, 2> kernel_size, std::array<std::int64_t, 2> strides,
                         std::string padding = "valid", std::int64_t depth_multiplier = 1, std::string activation = "",
                         bool use_bias = true, std::array<std::int64_t, 2> dilation_rate = {1, 1},
                         initializers::Initializer depthwise_initializer = initializers::glorot_uniform(),
                         initializers::Initializer bias_initializer = initializers::zeros(), std::string name = "");

// tf.keras.layers.Conv1D on [batch, steps, channels] (ops::conv1d). padding "valid", "same" or
// "causal" (Keras's: (kernel_size - 1) · dilation_rate zeros before the first step, then "valid",
// so output t sees only inputs up to t). groups as Conv2D's.
class Conv1DLayer final : public Layer {
 public:
  Conv1DLayer(std::int64_t filters, std::int64_t kernel_size, std::int64_t strides, std::string padding,
              std::string activation, bool use_bias, std::int64_t dilation, std::int64_t groups,
              initializers::Initializer kernel_init, initializers::Initializer bias_init, std::string name);
  std::string class_name() const override { return "Conv1D"; }
  void get_config(LayerConfig& config) const override;  // model/serialization.h
  Shape compute_output_shape(const Shape& in) const override;
  const Variable& kernel() const { return kernel_; }
  const Variable& bias() const { return bias_; }

 protected:
  void build_weights(const Shape& in) override;
  Tensor call(const Tensor& x, bool training) override;

 private:
  std::int64_t causal_pad() const { return (kernel_size_ - 1) * dilation_; }
  std::int64_t filters_, kernel_size_, strides_, dilation_, groups_;
  bool causal_;
  ops::Padding padding_;  // kValid for "causal" (after the causal padding)
  std::string activation_;
  bool use_bias_;
  initializers::Initializer kernel_init_, bias_init_;
  Variable kernel_, bias_;
};
LayerPtr Conv1D(std::int64_t filters, std::int64_t kernel_size, std::int64_t strides = 1, std::string padding = "valid",
                std::string activation = "", bool use_bias = true, std::int64_t dilation_rate = 1,
                std::int64_t groups = 1, initializers::Initializer kernel_initializer = initializers::glorot_uniform(),
                initializers::Initializer bias_initializer = initializers::zeros(), std::string name = "");

}  // namespace chorus::layers
