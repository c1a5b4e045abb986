// The built-in layers (tf.keras.layers), each a Layer subclass with a factory function named like
// Keras's class, returning a LayerPtr for Sequential:
//
//   Sequential model({layers::Conv2D(32, 3, "relu"), layers::MaxPooling2D(2), layers::Flatten(),
//                     layers::Dense(10)});
//
// Activations by name: "" or "linear", "relu", "sigmoid", "tanh", "gelu", "softmax", "silu" (or
// "swish"), "leaky_relu" (alpha 0.2, tf.nn.leaky_relu's default), "elu", "softplus" (else
// InvalidArgumentError listing them). LayerNormalization and RMSNormalization are in
// model/layer_normalization.h. Inputs are float32 NHWC for the 2-D layers, as Keras's
// default channels_last.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include <chorus/model/layer.h>
#include <chorus/ops/kinds.h>
#include <chorus/ops/random.h>

namespace chorus::layers {

// Applies a named activation; "" and "linear" return x.
Tensor activate(const std::string& activation, const Tensor& x);
// InvalidArgumentError unless `activation` is known.
void check_activation(const std::string& activation);

class DenseLayer final : public Layer {
 public:
  DenseLayer(std::int64_t units, std::string activation, bool use_bias, initializers::Initializer kernel_init,
             initializers::Initializer bias_init, std::string name);
  std::string class_name() const override { return "Dense"; }
  void get_config(LayerConfig& config) const override;  // model/serialization.h
  Shape compute_output_shape(const Shape& in) const override;
  const Variable& kernel() const { return kernel_; }
  const Variable& bias() const { return bias_; }

 protected:
  void build_weights(const Shape& in) override;
  Tensor call(const Tensor& x, bool training) override;

 private:
  std::int64_t units_;
  std::string activation_;
  bool use_bias_;
  initializers::Initializer kernel_init_, bias_init_;
  Variable kernel_, bias_;
};
LayerPtr Dense(std::int64_t units, std::string activation = "", bool use_bias = true,
               initializers::Initializer kernel_initializer = initializers::glorot_uniform(),
               initializers::Initializer bias_initializer = initializers::zeros(), std::string name = "");

// Conv2D with `groups` (Keras's groups): the input's channels split into `groups` blocks, each
// convolved with filters / groups of the filters (ops::conv2d's grouped convolution); the kernel is
// [kh, kw, in_channels / groups, filters]. filters must be a multiple of groups (checked at
// construction), and so must the input's channels (checked when built): InvalidArgumentError with
// both numbers otherwise.
class Conv2DLayer final : public Layer {
 public:
  Conv2DLayer(std::int64_t filters, std::array<std::int64_t, 2> kernel, std::array<std::int64_t, 2> strides,
              ops::Padding padding, std::string activation, bool use_bias, std::array<std::int64_t, 2> dilation,
              initializers::Initializer kernel_init, initializers::Initializer bias_init, std::string name,
              std::int64_t groups = 1);
  std::string class_name() const override { return "Conv2D"; }
  void get_config(LayerConfig& config) const override;  // model/serialization.h
  Shape compute_output_shape(const Shape& in) const override;
  const Variable& kernel() const { return kernel_; }
  const Variable& bias() const { return bias_; }

 protected:
  void build_weights(const Shape& in) override;
  Tensor call(const Tensor& x, bool training) override;

 private:
  std::int64_t filters_, groups_;
  std::array<std::int64_t, 2> kernel_size_, strides_, dilation_;
  ops::Padding padding_;
  std::string activation_;
  bool use_bias_;
  initializers::Initializer kernel_init_, bias_init_;
  Variable kernel_, bias_;
};
// kernel_size and strides as one number (square) or two; padding "valid" or "same". groups comes
// last (after name) so that the positional arguments before it keep their meaning:
//   layers::Conv2D(64, {3, 3}, {1, 1}, "same", "relu", {1, 1}, true, glorot_uniform(), zeros(), "", /*groups=*/4)
LayerPtr Conv2D(std::int64_t filters, std::int64_t kernel_size, std::string activation = "", std::int64_t strides = 1,
                std::string padding = "valid", bool use_bias = true,
                initializers::Initializer kernel_initializer = initializers::glorot_uniform(),
                initializers::Initializer bias_initializer = initializers::zeros(), std::string name = "");
LayerPtr Conv2D(std::int64_t filters, std::array<std::int64_t, 2> kernel_size, std::array<std::int64_t, 2> strides,
                std::string padding = "valid", std::string activation = "",
                std::array<std::int64_t, 2> dilation = {1, 1}, bool use_bias = true,
                initializers::Initializer kernel_initializer = initializers::glorot_uniform(),
                initializers::Initializer bias_initializer = initializers::zeros(), std::string name = "",
                std::int64_t groups = 1);

class Pooling2DLayer final : public Layer {
 public:
  Pooling2DLayer(ops::PoolKind kind, std::array<std::int64_t, 2> pool, std::array<std::int64_t, 2> strides,
                 ops::Padding padding, std::string name);
  std::string class_name() const override { return kind_ == ops::PoolKind::kMax ? "MaxPooling2D" : "AveragePooling2D"; }
  void get_config(LayerConfig& config) const override;  // model/serialization.h
  bool creates_weights() const override { return false; }
  Shape compute_output_shape(const Shape& in) const override;

 protected:
  Tensor call(const Tensor& x, bool training) override;

 private:
  ops::PoolKind kind_;
  std::array<std::int64_t, 2> pool_, strides_;
  ops::Padding padding_;
};
// strides 0: = pool_size (Keras's default).
LayerPtr MaxPooling2D(std::int64_t pool_size = 2, std::int64_t strides = 0, std::string padding = "valid",
                      std::string name = "");
LayerPtr AveragePooling2D(std::int64_t pool_size = 2, std::int64_t strides = 0, std::string padding = "valid",
                          std::string name = "");

class FlattenLayer final : public Layer {
 public:
  explicit FlattenLayer(std::string name) : Layer(std::move(name)) {}
  std::string class_name() const override { return "Flatten"; }
  void get_config(LayerConfig& config) const override;  // model/serialization.h
  bool creates_weights() const override { return false; }
  Shape compute_output_shape(const Shape& in) const override;

 protected:
  Tensor call(const Tensor& x, bool training) override;
};
LayerPtr Flatten(std::string name = "");

class ActivationLayer final : public Layer {
 public:
  ActivationLayer(std::string activation, std::string name);
  std::string class_name() const override { return "Activation"; }
  void get_config(LayerConfig& config) const override;  // model/serialization.h
  bool creates_weights() const override { return false; }

 protected:
  Tensor call(const Tensor& x, bool training) override;

 private:
  std::string activation_;
};
LayerPtr Activation(std::string activation, std::string name = "");

// Active only when called with training = true; a seed makes the masks reproducible (each call
// draws the next numbers of the layer's own generator).
class DropoutLayer final : public Layer {
 public:
  DropoutLayer(double rate, std::optional<std::uint64_t> seed, std::string name);
  std::string class_name() const override { return "Dropout"; }
  void get_config(LayerConfig& config) const override;  // model/serialization.h
  bool creates_weights() const override { return false; }

 protected:
  Tensor call(const Tensor& x, bool training) override;

 private:
  double rate_;
  std::optional<std::uint64_t> seed_;
  std::optional<ops::Generator> generator_;
  std::mutex mu_;
};
LayerPtr Dropout(double rate, std::optional<std::uint64_t> seed = std::nullopt, std::string name = "");

// Integer ids (int32/int64) [..] → [.., output_dim] float32 rows of a trainable table.
class EmbeddingLayer final : public Layer {
 public:
  EmbeddingLayer(std::int64_t input_dim, std::int64_t output_dim, initializers::Initializer init, std::string name);
  std::string class_name() const override { return "Embedding"; }
  void get_config(LayerConfig& config) const override;  // model/serialization.h
  Shape compute_output_shape(const Shape& in) const override;
  const Variable& embeddings() const { return table_; }

 protected:
  void build_weights(const Shape& in) override;
  Tensor call(const Tensor& x, bool training) override;

 private:
  std::int64_t input_dim_, output_dim_;
  initializers::Initializer init_;
  Variable table_;
};
LayerPtr Embedding(std::int64_t input_dim, std::int64_t output_dim,
                   initializers::Initializer embeddings_initializer = initializers::random_uniform(),
                   std::string name = "");

// Batch normalization over the last axis. Training: normalizes with the batch statistics and
// updates the moving ones (moving = momentum·moving + (1 − momentum)·batch); inference: the
// moving statistics. Under a strategy each replica uses its own batch's statistics (Keras's
// default) unless `synchronized`, which computes the global batch's statistics over all replicas
// (Keras's synchronized=True, SyncBatchNorm) — differentiably: the backward pass all-reduces too.
// Synchronized, two small all-reduces per call: count and sum (a shift K = the global mean), then
// the shifted sums Σ(x − K), Σ(x − K)² — so the variance stays accurate (and ≥ 0) in float32
// even when |mean| >> std, where Keras's E[x²] − mean² cancels to noise or NaN; no host sync.
// Every replica's batch empty: an empty output, the moving statistics unchanged.
// moving_mean / moving_variance are ON_READ MEAN variables (TF's choice): each replica updates
// its own, reading in cross-replica context averages them. An empty per-replica batch passes
// through unchanged (no statistics from nothing).
// Under a mixed policy it normalizes in float32 (the variables' dtype), as Keras does, and returns
// the compute dtype.
class BatchNormalizationLayer final : public Layer {
 public:
  BatchNormalizationLayer(double momentum, double epsilon, bool center, bool scale, bool synchronized,
                          std::string name);
  std::string class_name() const override { return "BatchNormalization"; }
  void get_config(LayerConfig& config) const override;  // model/serialization.h
  const Variable& moving_mean() const { return moving_mean_; }
  const Variable& moving_variance() const { return moving_var_; }
  const Variable& gamma() const { return gamma_; }
  const Variable& beta() const { return beta_; }

 protected:
  void build_weights(const Shape& in) override;
  Tensor call(const Tensor& x, bool training) override;

 private:
  Tensor normalize(const Tensor& x, bool training);  // x in the variables' dtype
  Tensor synchronized_call(const Tensor& x);
  double momentum_, epsilon_;
  bool center_, scale_, synchronized_;
  Variable gamma_, beta_, moving_mean_, moving_var_;
};
LayerPtr BatchNormalization(double momentum = 0.99, double epsilon = 1e-3, bool center = true, bool scale = true,
                            bool synchronized = false, std::string name = "");

ops::Padding parse_padding(const std::string& padding);

}  // namespace chorus::layers
