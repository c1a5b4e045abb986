// Keras's merge layers: Add, Multiply and Concatenate combine a list of inputs.
//
//   auto x = layers::Input({32});
//   auto h = (*layers::Dense(32, "relu"))(x);
//   auto y = (*layers::Add())({x, h});                       // a residual connection
//   auto z = (*layers::Concatenate(-1))({x, h});              // (None, 64)
//
// Add and Multiply take two or more inputs of one shape (Keras's shape check) and sum or multiply
// them elementwise; Concatenate joins two or more inputs along `axis` (negative counts from the
// end, the batch axis 0 not allowed), the other dimensions equal. Otherwise InvalidArgumentError
// naming the layer and every input shape. No weights.
#pragma once

#include <chorus/model/layer.h>

namespace chorus::layers {

class MergeLayer : public Layer {
 public:
  enum class Kind { kAdd, kMultiply };
  MergeLayer(Kind kind, std::string name);
  std::string class_name() const override { return kind_ == Kind::kAdd ? "Add" : "Multiply"; }
  void get_config(LayerConfig& config) const override;  // model/serialization.h
  bool creates_weights() const override { return false; }

 protected:
  void build_weights(const std::vector<Shape>& input_shapes) override;
  std::vector<Tensor> call_list(const std::vector<Tensor>& xs, bool training) override;

 private:
  Kind kind_;
};
LayerPtr Add(std::string name = "");
LayerPtr Multiply(std::string name = "");

class ConcatenateLayer final : public Layer {
 public:
  ConcatenateLayer(int axis, std::string name);
  std::string class_name() const override { return "Concatenate"; }
  void get_config(LayerConfig& config) const override;  // model/serialization.h
  bool creates_weights() const override { return false; }
  int axis() const { return axis_; }

 protected:
  void build_weights(const std::vector<Shape>& input_shapes) override;
  std::vector<Tensor> call_list(const std::vector<Tensor>& xs, bool training) override;

 private:
  int axis_;
};
LayerPtr Concatenate(int axis = -1, std::string name = "");

}  // namespace chorus::layers
