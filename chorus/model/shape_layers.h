// Layers that move or reduce values without weights (tf.keras.layers): ZeroPadding2D,
// GlobalAveragePooling2D, GlobalMaxPooling2D, Reshape, Permute. Keras's names, arguments and
// defaults; channels_last; every shape argument excludes the batch dim, as in Keras.
//
//   Sequential model({layers::Conv2D(32, 3, "relu"), layers::GlobalAveragePooling2D(), layers::Dense(10)});
//   layers::ZeroPadding2D({1, 2}, {3, 4});   // ((top, bottom), (left, right)) = ((1, 2), (3, 4))
//   layers::Reshape({-1, 8});                // [n, 4, 4, 2] → [n, 4, 8]
//   layers::Permute({2, 1});                 // [n, a, b] → [n, b, a]
//
// They run in the input's dtype (the policy's compute dtype under a mixed policy, as every layer's
// input is cast to it), are differentiable, and give compute_output_shape without running.
// Errors: InvalidArgumentError naming the layer and the numbers — at construction for bad
// arguments (negative padding, more than one -1, a target dim < -1, dims not a permutation of
// 1..k), at the first call for an input they cannot take (wrong rank, Reshape's element count).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <chorus/model/layer.h>

namespace chorus::layers {

// tf.keras.layers.ZeroPadding2D on [batch, rows, cols, channels]: rows and columns of zeros at the
// top, bottom, left and right.
class ZeroPadding2DLayer final : public Layer {
 public:
  ZeroPadding2DLayer(std::array<std::int64_t, 2> rows, std::array<std::int64_t, 2> cols, std::string name);
  std::string class_name() const override { return "ZeroPadding2D"; }
  void get_config(LayerConfig& config) const override;  // model/serialization.h
  bool creates_weights() const override { return false; }
  Shape compute_output_shape(const Shape& in) const override;
  // ((top, bottom), (left, right))
  std::array<std::array<std::int64_t, 2>, 2> padding() const { return {rows_, cols_}; }

 protected:
  Tensor call(const Tensor& x, bool training) override;

 private:
  std::array<std::int64_t, 2> rows_, cols_;
};
// A layer name that a braced list of numbers cannot become. ZeroPadding2D's names take it instead
// of std::string, which would take {2, 3} as two chars: ZeroPadding2D({1, 0}, {2, 3}) would then
// silently mean symmetric (1, 0) padding named "\x02\x03" (and {0, 3} would make a string_view
// ambiguous). With it the call means ((1, 0), (2, 3)), as it reads.
struct LayerNameArg {
  LayerNameArg(const char* name) : value(name) {}             // NOLINT: implicit on purpose
  LayerNameArg(std::string name) : value(std::move(name)) {}  // NOLINT
  std::string value;
};
// padding: one number for all four sides (Keras's int) ...
LayerPtr ZeroPadding2D(std::int64_t padding = 1, LayerNameArg name = "");
// ... (symmetric rows, symmetric cols) (Keras's tuple of 2 ints): ZeroPadding2D({1, 2}) ...
LayerPtr ZeroPadding2D(std::array<std::int64_t, 2> padding, LayerNameArg name = "");
// ... or (top, bottom), (left, right) (Keras's tuple of 2 tuples): ZeroPadding2D({1, 0}, {2, 3}).
LayerPtr ZeroPadding2D(std::pair<std::int64_t, std::int64_t> rows, std::pair<std::int64_t, std::int64_t> cols,
                       LayerNameArg name = "");

// tf.keras.layers.GlobalAveragePooling2D / GlobalMaxPooling2D: the mean / maximum over rows and
// columns of [batch, rows, cols, channels] → [batch, channels], or [batch, 1, 1, channels] with
// keepdims. NaN propagates (as TF's reduce_mean / reduce_max).
class GlobalPooling2DLayer final : public Layer {
 public:
  GlobalPooling2DLayer(bool max, bool keepdims, std::string name);
  std::string class_name() const override { return max_ ? "GlobalMaxPooling2D" : "GlobalAveragePooling2D"; }
  void get_config(LayerConfig& config) const override;  // model/serialization.h
  bool creates_weights() const override { return false; }
  Shape compute_output_shape(const Shape& in) const override;

 protected:
  Tensor call(const Tensor& x, bool training) override;

 private:
  bool max_, keepdims_;
};
LayerPtr GlobalAveragePooling2D(bool keepdims = false, std::string name = "");
LayerPtr GlobalMaxPooling2D(bool keepdims = false, std::string name = "");

// tf.keras.layers.Reshape: each example to target_shape (batch dim excluded); one entry may be -1,
// inferred from the example's element count. The count must match: InvalidArgumentError naming
// the input shape and the target shape otherwise.
class ReshapeLayer final : public Layer {
 public:
  ReshapeLayer(std::vector<std::int64_t> target_shape, std::string name);
  std::string class_name() const override { return "Reshape"; }
  void get_config(LayerConfig& config) const override;  // model/serialization.h
  bool creates_weights() const override { return false; }
  Shape compute_output_shape(const Shape& in) const override;
  const std::vector<std::int64_t>& target_shape() const { return target_; }

 protected:
  Tensor call(const Tensor& x, bool training) override;

 private:
  std::vector<std::int64_t> target_;
};
LayerPtr Reshape(std::vector<std::int64_t> target_shape, std::string name = "");

// tf.keras.layers.Permute: the non-batch axes reordered; dims is a permutation of 1..k (1-based,
// the batch axis 0 stays first), output axis i + 1 = input axis dims[i]. The input's rank must be
// k + 1.
class PermuteLayer final : public Layer {
 public:
  PermuteLayer(std::vector<int> dims, std::string name);
  std::string class_name() const override { return "Permute"; }
  void get_config(LayerConfig& config) const override;  // model/serialization.h
  bool creates_weights() const override { return false; }
  Shape compute_output_shape(const Shape& in) const override;
  const std::vector<int>& dims() const { return dims_; }

 protected:
  Tensor call(const Tensor& x, bool training) override;

 private:
  std::vector<int> dims_;
};
LayerPtr Permute(std::vector<int> dims, std::string name = "");

}  // namespace chorus::layers
