// Saving and loading a model's architecture as Keras's JSON (tf_keras 2.21's model.to_json() and
// tf.keras.models.model_from_json):
//
//   std::string json = model.to_json();                  // Functional or Sequential
//   model.save_weights("/tmp/w");
//   ...
//   auto scope = strategy.scope();                       // the rebuilt layers' weights live here
//   std::unique_ptr<model::Model> m = model::model_from_json(json);
//   m->load_weights("/tmp/w").assert_consumed();
//
// The JSON is Keras's, key for key: {"class_name": "Functional", "config": {"name", "trainable",
// "layers": [{"module", "class_name", "config", "registered_name", "build_config", "name",
// "inbound_nodes"}, ...], "input_layers", "output_layers"}, "keras_version", "backend"}; a layer's
// config holds "name", "trainable", "dtype" (a policy name, or Keras's Policy object for the mixed
// policies), then its own keys as Keras writes them (initializers as {"module":
// "keras.initializers", "class_name": "GlorotUniform", "config": {"seed": null}, ...}, activations
// by name). tf_keras's model_from_json reads what to_json writes, and model_from_json reads what
// tf_keras writes, for the layer classes chorus has. Weights are not part of it (save_weights).
//
// How a layer takes part — one override and one function beside the layer:
//   void DenseLayer::get_config(LayerConfig& c) const {     // after "name", "trainable", "dtype"
//     c.set("units", units_);
//     c.set_activation("activation", activation_);  ...
//   }
//   CHORUS_REGISTER_LAYER_CLASS(Dense, [](const LayerConfig& c) {
//     return Dense(c.get_int("units"), c.get_activation("activation"), ...);
//   });
// The registry wraps every factory: it sets the name and the dtype policy the config names, and
// refuses "trainable": false (chorus layers are always trainable). A custom layer registers the
// same way (its JSON then carries "registered_name": its class name, as Keras's custom objects).
//
// Errors, all InvalidArgumentError unless said: malformed JSON (parse_json's message: where, and
// what); a text over kMaxModelJsonBytes → ResourceExhaustedError; an unknown class (its name and
// the classes chorus has); a missing or mistyped config key (the layer, the key, what was found);
// a value chorus cannot honour (a regularizer, a constraint, channels_first, mask_zero, ...: the
// layer, the key and the value); inbound_nodes that reference a missing layer, node or tensor, or
// that form a cycle (the layers involved); two layers of one name. Nothing recurses deeper than
// parse_json's nesting bound (64) and the graph is processed in time linear in its size.
// model_from_json allocates the weights of the model the JSON describes (layers are built when
// called, as in Keras): a JSON naming a huge model allocates a huge model, up to the allocator's
// memory limit (ResourceExhaustedError past it).
// to_json errors: a layer without get_config (a custom layer that did not override it), or an
// initializer that is not one of initializers.h's factories → InvalidArgumentError naming the
// layer; a model that is neither Functional nor Sequential (Keras: NotImplementedError).
//
// Thread-safety: registration and lookups lock a mutex; to_json and model_from_json follow the
// model's rules (model/model.h), model_from_json builds layers in the current strategy scope.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <chorus/model/initializers.h>
#include <chorus/model/layer.h>

namespace chorus::model {
class Model;
}

namespace chorus::layers {

// One layer's Keras config: written by Layer::get_config, read by a layer class's factory. Keys
// keep the order written. Reading a key that is absent or of another JSON type →
// InvalidArgumentError "layer 'conv' (Conv2D): config key 'filters' must be an integer, got a string".
class LayerConfig {
 public:
  // An empty config for layer `name` of class `class_name` (for messages).
  LayerConfig(std::string class_name, std::string name);
  ~LayerConfig();
  LayerConfig(const LayerConfig&);
  LayerConfig& operator=(const LayerConfig&);

  const std::string& class_name() const;
  const std::string& name() const;

  // ---- writing (get_config) ----
  void set(const std::string& key, bool value);
  void set(const std::string& key, int value) { set(key, static_cast<std::int64_t>(value)); }
  void set(const std::string& key, std::int64_t value);
  void set(const std::string& key, double value);
  void set(const std::string& key, const char* value) { set(key, std::string(value)); }
  void set(const std::string& key, const std::string& value);
  void set(const std::string& key, const std::vector<std::int64_t>& value);
  void set(const std::string& key, const std::vector<std::vector<std::int64_t>>& value);
  void set_null(const std::string& key);
  void set_nulls(std::initializer_list<const char*> keys);  // Keras's null regularizers and constraints
  // A batch shape as Keras writes one: [null, dims...], a dim < 0 also null.
  void set_batch_shape(const std::string& key, const std::vector<std::int64_t>& dims);
  // "" is written as Keras's "linear".
  void set_activation(const std::string& key, const std::string& activation);
  // Keras's initializer object; a function that describe() does not know → InvalidArgumentError.
  void set_initializer(const std::string& key, const initializers::Initializer& init);

  // ---- reading (factories) ----
  bool has(const std::string& key) const;
  std::vector<std::string> keys() const;       // in the order written
  bool is_null(const std::string& key) const;  // absent or null
  bool is_int(const std::string& key) const;
  bool is_list_of_lists(const std::string& key) const;  // [[...], ...]
  std::int64_t get_int(const std::string& key) const;
  std::int64_t get_int(const std::string& key, std::int64_t fallback) const;  // fallback when absent
  double get_double(const std::string& key) const;                            // an integer is accepted
  double get_double(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  // One of `allowed` (padding "valid"/"same"); else InvalidArgumentError listing them.
  std::string get_string_in(const std::string& key, const std::string& fallback,
                            std::initializer_list<const char*> allowed) const;
  // A list of integers (or, with `size`, one integer repeated `size` times, as Keras accepts it);
  // `size` > 0 also requires that length.
  std::vector<std::int64_t> get_int_list(const std::string& key, std::size_t size = 0) const;
  // A list of lists of integers (ZeroPadding2D's ((top, bottom), (left, right))).
  std::vector<std::vector<std::int64_t>> get_int_lists(const std::string& key) const;
  // An activation name chorus has ("linear" → ""); absent or null: "" (Keras's default, linear).
  std::string get_activation(const std::string& key) const;
  // Keras's initializer object (or its bare class name), one of initializers.h's.
  initializers::Initializer get_initializer(const std::string& key) const;
  initializers::Initializer get_initializer(const std::string& key, initializers::Initializer fallback) const;
  // `key` must be absent or null (a regularizer, a constraint, a noise_shape).
  void require_null(const std::string& key) const;
  void require_nulls(std::initializer_list<const char*> keys) const;
  // `key` must be absent or an initializer of Keras class `class_name` (BatchNormalization's
  // fixed "Zeros" / "Ones").
  void require_initializer(const std::string& key, const std::string& class_name) const;
  // `key` must be absent or equal `value` (data_format "channels_last", mask_zero false).
  void require(const std::string& key, const std::string& value) const;
  void require(const std::string& key, const char* value) const { require(key, std::string(value)); }
  void require(const std::string& key, bool value) const;
  // The layer's build_config input shapes (batch dim included, -1 for None), when the JSON has one.
  const std::vector<std::vector<std::int64_t>>& build_input_shapes() const;
  // InvalidArgumentError "layer 'conv' (Conv2D): config key 'key' <what>".
  [[noreturn]] void fail(const std::string& key, const std::string& what) const;

  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

using LayerFactory = std::function<LayerPtr(const LayerConfig& config)>;

// Registers `class_name` for model_from_json. Registering a name twice replaces the factory.
// Returns true (for static registration).
bool register_layer_class(const std::string& class_name, LayerFactory factory, bool builtin = false);
// The layer classes model_from_json knows, sorted (InputLayer, Functional and Sequential included).
std::vector<std::string> registered_layer_classes();

// Static registration beside a layer's code: CHORUS_REGISTER_LAYER_CLASS(Dense, factory).
#define CHORUS_REGISTER_LAYER_CLASS(class_name, ...)                        \
  [[maybe_unused]] static const bool chorus_layer_registered_##class_name = \
      ::chorus::layers::register_layer_class(#class_name, __VA_ARGS__, /*builtin=*/true)

}  // namespace chorus::layers

namespace chorus::model {

// The largest JSON text model_from_json reads (64 MiB; Keras's ResNet-152 is about 0.4 MiB).
inline constexpr std::size_t kMaxModelJsonBytes = std::size_t{64} << 20;

// Keras's model_from_json: a Functional or a Sequential model rebuilt from to_json's text (chorus's
// or tf_keras's), its layers created and built in the current strategy scope, weights freshly
// initialized (load_weights restores them). Errors: see the top of this file.
std::unique_ptr<Model> model_from_json(const std::string& json);

}  // namespace chorus::model
