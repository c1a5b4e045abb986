// KerasTensor: a symbolic tensor of Keras's functional API — what Input() returns and what a layer
// called on symbolic tensors returns; Functional (model/functional.h) turns them into a model.
//
//   auto x = layers::Input({28, 28, 1});                 // KerasTensor, shape (None, 28, 28, 1)
//   auto h = (*layers::Conv2D(32, 3, "relu"))(x);        // builds the layer; h: (None, 26, 26, 32)
//   auto y = (*layers::Dense(10))((*layers::Flatten())(h));
//   model::Functional model({x}, {y});
//
// A KerasTensor knows the call that made it (a Node: the layer, its symbolic inputs) and carries an
// example value: the layer's output for a batch of one row of zeros, computed when the layer was
// called (so shape and dtype come from the layer itself, and a layer is built — its weights
// created, in the strategy whose scope is open — when it is first called symbolically, as in Keras).
// The batch dimension prints as None. Thread-safety: build a graph from one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <chorus/core/tensor.h>

namespace chorus::layers {

class Layer;
struct Node;

class KerasTensor {
 public:
  KerasTensor() = default;
  KerasTensor(std::shared_ptr<Node> node, int index) : node_(std::move(node)), index_(index) {}

  bool defined() const { return node_ != nullptr; }
  // The dimensions after the batch dimension.
  std::vector<std::int64_t> shape() const;
  DType dtype() const;
  // "(None, 26, 26, 32)", as Keras prints shapes.
  std::string shape_string() const;
  // The call that produced this tensor, and which of its outputs it is.
  const std::shared_ptr<Node>& node() const { return node_; }
  int index() const { return index_; }
  // The layer's output on the batch-of-one example (see above).
  const Tensor& example() const;
  // "'dense' (Dense)": the producing layer, for messages.
  std::string producer() const;

 private:
  std::shared_ptr<Node> node_;
  int index_ = 0;
};

// One call of a layer on symbolic tensors (Keras's Node). An Input's node has no inputs.
struct Node {
  std::shared_ptr<Layer> layer;
  std::vector<KerasTensor> inputs;
  std::vector<Tensor> examples;  // the outputs on the example batch
  std::uint64_t sequence = 0;    // creation order (a layer's node index among a model's nodes)
};

}  // namespace chorus::layers
