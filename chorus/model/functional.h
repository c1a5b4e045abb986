// Keras's functional API: Input() and a model made of its inputs and outputs (keras.Model(inputs,
// outputs), whose class Keras calls "Functional").
//
//   distribute::MirroredStrategy strategy;
//   auto scope = strategy.scope();                       // layers build (create weights) here
//   auto image = layers::Input({28, 28, 1}, DType::kFloat32, "image");
//   auto tag = layers::Input({4}, DType::kFloat32, "tag");
//   auto h = (*layers::Flatten())((*layers::Conv2D(8, 3, "relu"))(image));    // (None, 5408)
//   auto shared = layers::Dense(16, "relu");     // a shared layer: called twice, one set of weights
//   auto a = (*shared)((*layers::Dense(32))(h));
//   auto b = (*shared)((*layers::Dense(32))(tag));
//   auto logits = (*layers::Dense(10))((*layers::Concatenate())({a, b}));
//   model::Functional model({image, tag}, {logits}, "classifier");
//   model.compile(...);
//   model.fit(dataset_of_image_tag_label, {.epochs = 2});   // elements (image, tag, label)
//
// The graph: every output is computed from the inputs through the recorded layer calls (Nodes,
// model/keras_tensor.h). Layers are shared by calling them more than once; a model is a layer, so
// a Functional (or any Model) can be called on KerasTensors inside another one (nesting). The
// model runs the calls in an order where every input is computed first (Keras's depth order).
//
// layers() lists the layers as Keras's model.layers does: by depth from the inputs (InputLayers
// first), ties in the order a depth-first walk from the outputs meets them. Checkpoints number
// them as Keras does ("layer_with_weights-N", "layer-N", model/model.h), so a tf_keras model of the
// same graph restores a chorus checkpoint with assert_consumed(), and the other way round.
//
// Errors (InvalidArgumentError, at construction): no inputs or outputs; an input that is not an
// Input(); an output that needs a tensor that is not computed from the inputs (Keras's "graph
// disconnected", naming the Input it needs and the layer that reads it); two layers of one name.
// Shape mismatches are caught when a layer is called (model/layer.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <chorus/model/keras_tensor.h>
#include <chorus/model/model.h>

namespace chorus::layers {

// Keras's InputLayer: the layer behind Input(); no weights, identity.
class InputLayer final : public Layer {
 public:
  InputLayer(std::vector<std::int64_t> shape, DType dtype, std::string name);
  std::string class_name() const override { return "InputLayer"; }
  bool creates_weights() const override { return false; }
  const std::vector<std::int64_t>& input_shape() const { return shape_; }
  DType dtype() const { return dtype_; }

 protected:
  Tensor call(const Tensor& x, bool training) override;

 private:
  std::vector<std::int64_t> shape_;
  DType dtype_;
};

// keras.Input(shape, dtype, name): a symbolic batch of elements of `shape` (the batch dimension
// not included). Its example value lives on the first replica device of the strategy of the
// current scope (the default strategy outside any scope). A shape with a dimension < 1 →
// InvalidArgumentError (chorus's layers are built for fixed shapes).
KerasTensor Input(std::vector<std::int64_t> shape, DType dtype = DType::kFloat32, std::string name = "");

}  // namespace chorus::layers

namespace chorus::model {

class Functional : public Model {
 public:
  Functional(std::vector<layers::KerasTensor> inputs, std::vector<layers::KerasTensor> outputs,
             std::string name = "model");
  std::string class_name() const override { return "Functional"; }
  std::size_t num_inputs() const override { return inputs_.size(); }
  std::size_t num_outputs() const override { return outputs_.size(); }
  std::string output_name(std::size_t i) const override;
  const std::vector<layers::KerasTensor>& inputs() const { return inputs_; }
  const std::vector<layers::KerasTensor>& outputs() const { return outputs_; }
  // The calls in the order the model runs them (Input nodes excluded).
  const std::vector<std::shared_ptr<layers::Node>>& nodes() const { return nodes_; }
  std::vector<train::TrackableChild> trackable_children() const override { return numbered_layer_children(); }

 protected:
  Tensor call(const Tensor& x, bool training) override;
  std::vector<Tensor> call_list(const std::vector<Tensor>& xs, bool training) override;
  void build_weights(const std::vector<Shape>& input_shapes) override;
  std::vector<GraphNode> graph_nodes() const override;
  // Each layer's output shape; "multiple" for a layer called more than once (as Keras prints).
  std::vector<std::string> layer_output_shapes() const override;

 private:
  // The graph node name of a call: "<model>/<layer>", "<model>/<layer>_<k>" for a later call.
  std::string node_name(const layers::Node* node) const;
  std::vector<layers::KerasTensor> inputs_, outputs_;
  std::vector<std::shared_ptr<layers::Node>> nodes_;
};

}  // namespace chorus::model
