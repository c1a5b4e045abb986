// Layer: the Keras building block (tf.keras.layers.Layer) — weights plus a call.
//
//   auto dense = layers::Dense(64, "relu");      // std::shared_ptr<Layer>
//   Tensor y = (*dense)(x);                       // builds (creates weights) on the first call
//
// Weights are created through make_variable (core/variable.h), so inside a strategy's scope they
// are MirroredVariables with one component per replica; calling the layer inside strategy.run
// reads each replica's component. A layer is built once, from the first input's shape (all dims
// but the batch dim must stay the same afterwards: InvalidArgumentError otherwise).
//
// Names: a layer's name defaults to its class in snake case ("conv2d"); a model makes names
// unique ("conv2d", "conv2d_1") and prefixes its own ("sequential/conv2d/kernel" is the variable
// name, which checkpoints and summaries use). Subclass Layer for custom layers: override
// class_name(), build_weights() (call add_weight there) and call(x, training) — or, for a layer of
// several inputs or outputs (Add, MultiHeadAttention, a functional model), call_list(xs, training)
// and build_weights(shapes). A layer that owns layers (Keras's attribute tracking) registers them
// with track_layer(layer, "attribute") in its constructor: their weights are part of weights(),
// their variables are named "<owner path>/<their name>/...", and the checkpoint finds them under
// the attribute ("attribute/kernel"), as Keras's keys read.
//
// Functional API (model/keras_tensor.h, model/functional.h): calling a layer on KerasTensors
// builds it and returns KerasTensors; the layer must be held by a LayerPtr (std::shared_ptr). An
// unnamed layer then takes a process-wide unique name ("dense", "dense_1", ...) as Keras does.
// A call whose inputs do not fit the layer → InvalidArgumentError naming the layer, the layers
// that produced its inputs and their shapes.
// Building inside strategy.run (replica context, several replicas): every replica must call the
// layer (SPMD); the build runs once, as a merge_call in cross-replica context, so the weights are
// created once as MirroredVariables. Elsewhere building is serialized by a mutex. Calls are
// thread-safe when call() is.
//
// Dtype policy (model/mixed_precision.h): a layer takes the global policy when constructed.
// operator() casts floating-point inputs to the policy's compute dtype before call(); layers read
// their weights through read_weight(), which casts them to the compute dtype, and create them in
// the variable dtype (add_weight's default).
//
// ZeRO stage 3 (distribute/sharding_options.h): in a replica context of a strategy at stage 3,
// operator() gathers the layer's own sharded parameters in one collective before call() and frees
// them after it (StepPolicy::gather_parameters, core/step_policy.h); read them
// in call() (read_weight / value()) — a layer that keeps a weight's value beyond its call must
// not use it after the call.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <chorus/checkpoint/trackable.h>
#include <chorus/core/tensor.h>
#include <chorus/core/variable.h>
#include <chorus/model/initializers.h>
#include <chorus/model/keras_tensor.h>
#include <chorus/model/mixed_precision.h>

namespace chorus::layers {

class LayerConfig;  // model/serialization.h

// What a layer called on a list returns: its outputs, and — for a layer of one output (Add,
// Concatenate, most) — that output by conversion, as Keras returns a tensor:
//   KerasTensor y = (*layers::Add())({a, b});
// The conversion of a list of several outputs → InvalidArgumentError.
template <typename T>
class Outputs : public std::vector<T> {
 public:
  Outputs() = default;
  Outputs(std::vector<T> v) : std::vector<T>(std::move(v)) {}  // NOLINT: implicit by design
  operator T() const {                                         // NOLINT: implicit by design
    if (this->size() != 1) throw_not_one(this->size());
    return this->front();
  }

 private:
  [[noreturn]] static void throw_not_one(std::size_t n);
};

class Layer : public train::Trackable, public std::enable_shared_from_this<Layer> {
 public:
  explicit Layer(std::string name = "");
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  // "Dense", "Conv2D", ...
  virtual std::string class_name() const = 0;
  // Builds on the first call (from x's shape), then call(x, training). A layer of several
  // outputs → InvalidArgumentError (call it with a list).
  Tensor operator()(const Tensor& x, bool training = false);
  // Several inputs and outputs: builds from the inputs' shapes, then call_list(xs, training).
  Outputs<Tensor> operator()(const std::vector<Tensor>& xs, bool training = false);
  // On symbolic tensors (the functional API): builds the layer and records the call.
  KerasTensor operator()(const KerasTensor& x);
  Outputs<KerasTensor> operator()(const std::vector<KerasTensor>& xs);
  // Creates the weights for inputs of `input_shape` (batch dim included, ignored).
  void build(const Shape& input_shape) { build(std::vector<Shape>{input_shape}); }
  void build(const std::vector<Shape>& input_shapes);
  bool built() const { return built_.load(); }

  const std::string& name() const { return name_; }
  // Used by models before building: the name and the path prefix of the weights ("sequential/").
  void set_name(std::string name);
  void set_prefix(std::string prefix) { prefix_ = std::move(prefix); }

  // Activation recomputation (gradient checkpointing, ops/recompute.h): when set, a call under a
  // recording tape keeps only the layer's inputs and outputs, and the backward pass runs the call
  // again (random ops replaying the same Philox draws; at ZeRO stage 3 the parameters gathered
  // again) to get its gradients — TF's tf.recompute_grad around the layer. Set it on a built or
  // unbuilt layer; it takes effect from the next call after the build (the building call records
  // normally). Owned layers are recomputed with their owner.
  void set_recompute(bool on) { recompute_ = on; }
  bool recompute() const { return recompute_; }

  // The dtype policy (Keras's layer.dtype_policy): the global policy when the layer was
  // constructed, or the one set here. Setting it on a built layer → FailedPreconditionError.
  const mixed_precision::Policy& dtype_policy() const { return policy_; }
  void set_dtype_policy(const mixed_precision::Policy& policy);
  DType compute_dtype() const { return policy_.compute_dtype(); }

  // The layer's weights, then those of the layers it owns (depth first, each layer once).
  std::vector<Variable> weights() const;
  std::vector<Variable> trainable_weights() const;
  std::vector<Variable> non_trainable_weights() const;
  // The layers this layer owns (track_layer), with their attribute names, in tracking order.
  const std::vector<std::pair<std::string, std::shared_ptr<Layer>>>& sublayers() const { return sublayers_; }
  // The output shape for an input shape (batch dim included); default: run-free shape inference
  // must be provided by layers that change shapes.
  virtual Shape compute_output_shape(const Shape& input_shape) const { return input_shape; }
  // Parameters (elements of all weights) for summaries.
  std::int64_t count_params() const;
  // Whether the layer has weights once built (Keras numbers such layers "layer_with_weights-N" in
  // checkpoints, also before they are built): true unless a layer without weights says otherwise.
  virtual bool creates_weights() const { return true; }
  bool has_weights() const { return built() ? !weights().empty() : creates_weights(); }

  // Checkpointing (checkpoint/trackable.h): the weights by their short names ("kernel", "bias"),
  // then the owned layers by attribute; restored values wait for the build if the layer is not
  // built yet.
  std::vector<train::TrackableChild> trackable_children() const override;

  // Keras's get_config, for Model::to_json (model/serialization.h): writes the layer's own keys
  // after "name", "trainable" and "dtype", which the caller writes. The default throws
  // InvalidArgumentError (a custom layer must override it to be saved).
  virtual void get_config(LayerConfig& config) const;
  // Keras's call keyword arguments, for to_json / model_from_json: the names under which Keras
  // passes the inputs after the first ("value", "key", "attention_mask" for MultiHeadAttention;
  // empty, the default: every input positional), and the call options written beside them
  // (get_call_config: "use_causal_mask") and read back (set_call_config, on an unbuilt layer;
  // a key the layer does not take → InvalidArgumentError naming it).
  virtual std::vector<std::string> keyword_inputs() const { return {}; }
  virtual void get_call_config(LayerConfig& kwargs) const { (void)kwargs; }
  virtual void set_call_config(const LayerConfig& kwargs);
  // The input shapes it was built for, batch dim excluded (Keras's build_config); empty before.
  const std::vector<std::vector<std::int64_t>>& build_input_shapes() const { return built_shapes_; }

 protected:
  virtual void build_weights(const Shape& input_shape) { (void)input_shape; }
  // Several inputs: the default passes a single input's shape to build_weights(shape).
  virtual void build_weights(const std::vector<Shape>& input_shapes);
  // A layer overrides one of the two. The defaults: call_list passes a single input to call();
  // call raises InvalidArgumentError (a layer of several inputs called with one).
  virtual Tensor call(const Tensor& x, bool training);
  virtual std::vector<Tensor> call_list(const std::vector<Tensor>& xs, bool training);
  // Registers an owned layer under `attribute` (its checkpoint key; also its name when it has
  // none). Call before the layer is built. Returns it.
  std::shared_ptr<Layer> track_layer(std::shared_ptr<Layer> layer, std::string attribute);
  // How many leading inputs must keep the shapes the layer was built for (all by default; a layer
  // whose later inputs are optional or vary — MultiHeadAttention's mask — says fewer).
  virtual std::size_t shape_checked_inputs() const { return static_cast<std::size_t>(-1); }
  // Keras's autocast: whether operator() casts floating inputs to the compute dtype (a model
  // leaves it to its layers).
  virtual bool autocast() const { return true; }
  // The shapes (batch dim excluded) the layer was built for.
  const std::vector<std::vector<std::int64_t>>& built_shapes() const { return built_shapes_; }
  // The path prefix its weights get ("sequential/"), "" at the top.
  const std::string& prefix() const { return prefix_; }
  // Creates a weight in `dtype`, or in the policy's variable dtype when `dtype` is not given.
  Variable add_weight(const std::string& name, const Shape& shape, const initializers::Initializer& init,
                      bool trainable = true, VariableSynchronization sync = VariableSynchronization::kAuto,
                      VariableAggregation aggregation = VariableAggregation::kNone,
                      std::optional<DType> dtype = std::nullopt);
  // The weight's value (this replica's component) in the compute dtype: a differentiable cast
  // when the variable is floating and of another dtype, else the value itself.
  Tensor read_weight(const Variable& v) const;

 private:
  std::string name_;
  std::string prefix_;
  mixed_precision::Policy policy_;
  std::vector<Variable> weights_;
  std::vector<std::string> weight_names_;  // short names, parallel to weights_
  void build_once(const std::vector<Shape>& input_shapes);
  void check_built_shapes(const std::vector<Tensor>& xs) const;
  void collect_weights(std::vector<Variable>& out, std::vector<const Layer*>& seen) const;
  std::vector<std::pair<std::string, std::shared_ptr<Layer>>> sublayers_;
  std::vector<std::vector<std::int64_t>> built_shapes_;  // input dims without the batch dim
  std::atomic<bool> built_{false};
  bool recompute_ = false;
  std::vector<Tensor> run_call(const std::vector<Tensor>& xs, bool training);
  std::mutex build_mu_;
};

using LayerPtr = std::shared_ptr<Layer>;

// "Conv2D" → "conv2d", "MaxPooling2D" → "max_pooling2d", "BatchNormalization" → "batch_normalization".
std::string to_snake_case(const std::string& class_name);
// A process-wide unique name from `base` (Keras's backend.unique_object_name): "dense", then
// "dense_1", "dense_2", ...; with first_suffix 1 (Keras's zero_based=False, Input's names):
// "input_1", "input_2", ...
std::string unique_name(const std::string& base, int first_suffix = 0);

// Sets `layer`'s dtype policy and returns it, for use inside a layer list:
//   Sequential({layers::Dense(512, "relu"), layers::with_dtype_policy(layers::Dense(10), "float32")})
LayerPtr with_dtype_policy(LayerPtr layer, const mixed_precision::Policy& policy);
inline LayerPtr with_dtype_policy(LayerPtr layer, std::string_view policy) {
  return with_dtype_policy(std::move(layer), mixed_precision::Policy(policy));
}
// Sets `layer`'s recomputation (Layer::set_recompute) and returns it, for a layer list:
//   Sequential({layers::with_recompute(block), layers::Dense(10)})
LayerPtr with_recompute(LayerPtr layer, bool on = true);

}  // namespace chorus::layers
