// Keras's architecture JSON (model/serialization.h): the registry of layer classes,
// Model::to_json and model_from_json (LayerConfig itself: layer_config.cc).
#include <chorus/model/serialization.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <queue>
#include <set>

#include <chorus/core/error.h>
#include <chorus/core/json_internal.h>
#include <chorus/core/strings.h>
#include <chorus/model/functional.h>
#include <chorus/model/layer_config_internal.h>
#include <chorus/model/layers.h>
#include <chorus/model/model.h>

namespace chorus::layers {

using chorus::internal::Json;
using chorus::internal::json_kind;
using chorus::internal::str_cat;

void Layer::set_call_config(const LayerConfig& kwargs) {
  for (const std::string& k : kwargs.keys())
    kwargs.fail(k, str_cat("is a call keyword argument ", class_name(), " does not take (chorus calls it with its ",
                           "inputs only)"));
}

void Layer::get_config(LayerConfig& config) const {
  (void)config;
  throw InvalidArgumentError(str_cat("layer '", name(), "' (", class_name(),
                                     ") does not define get_config, so its model cannot be written as JSON; "
                                     "override Layer::get_config and register the class (model/serialization.h)"));
}

// ---- the registry ----

namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, std::pair<LayerFactory, bool>> factories;  // class → (factory, builtin)
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: static registrations may outlive main's statics
  return *r;
}

}  // namespace

// Built-in layer files register themselves (CHORUS_REGISTER_LAYER_CLASS); a static build links a
// file only when something refers to it, so these references keep each of them.
namespace registration {
void link_layers();
void link_conv_layers();
void link_shape_layers();
void link_merge_layers();
void link_normalization();
void link_layer_normalization();
void link_multi_head_attention();
}  // namespace registration

bool register_layer_class(const std::string& class_name, LayerFactory factory, bool builtin) {
  CHORUS_REQUIRE(!class_name.empty() && factory, InvalidArgumentError,
                 "register_layer_class: needs a class name and a factory");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.factories[class_name] = {std::move(factory), builtin};
  return true;
}

std::vector<std::string> registered_layer_classes() {
  registration::link_layers();
  registration::link_conv_layers();
  registration::link_shape_layers();
  registration::link_merge_layers();
  registration::link_normalization();
  registration::link_layer_normalization();
  registration::link_multi_head_attention();
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> out{"Functional", "InputLayer", "Sequential"};
  for (const auto& [name, f] : r.factories) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

std::optional<std::pair<LayerFactory, bool>> find_factory(const std::string& class_name) {
  registered_layer_classes();  // links the built-in files
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.factories.find(class_name);
  if (it == r.factories.end()) return std::nullopt;
  return it->second;
}

bool is_builtin(const std::string& class_name) {
  auto f = find_factory(class_name);
  return f && f->second;
}

}  // namespace

// ---- writing ----

namespace {

// Python's json.dumps layout (", " and ": "), which Keras's to_json text has.
void dump_keras(const Json& v, std::string& out) {
  if (v.is_object()) {
    out += '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      out += Json(it.key()).dump(-1, ' ', true);
      out += ": ";
      dump_keras(it.value(), out);
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i > 0) out += ", ";
      dump_keras(v[i], out);
    }
    out += ']';
  } else {
    out += v.dump(-1, ' ', true);
  }
}

Json batch_shape(const std::vector<std::int64_t>& dims) {
  Json s = Json::array({nullptr});
  for (auto d : dims) s.push_back(d < 0 ? Json(nullptr) : Json(d));
  return s;
}

Json build_config(const Layer& layer) {
  const auto& shapes = layer.build_input_shapes();
  Json input_shape;
  // Keras builds a layer of keyword inputs (MultiHeadAttention) from its first input's shape.
  if (shapes.size() == 1 || !layer.keyword_inputs().empty()) {
    input_shape = batch_shape(shapes[0]);
  } else {
    input_shape = Json::array();
    for (const auto& s : shapes) input_shape.push_back(batch_shape(s));
  }
  return Json{{"input_shape", std::move(input_shape)}};
}

Json dtype_json(const mixed_precision::Policy& p) {
  if (!p.is_mixed()) return p.name();
  return Json{{"module", "keras.mixed_precision"},
              {"class_name", "Policy"},
              {"config", Json{{"name", p.name()}}},
              {"registered_name", nullptr}};
}

Json input_layer_json(const std::string& name, const std::vector<std::int64_t>& shape, DType dtype) {
  Json config = Json::object();
  config["batch_input_shape"] = batch_shape(shape);
  config["dtype"] = std::string(dtype_name(dtype));
  config["sparse"] = false;
  config["ragged"] = false;
  config["name"] = name;
  config["optional"] = false;
  return Json{{"module", "keras.layers"},
              {"class_name", "InputLayer"},
              {"config", std::move(config)},
              {"registered_name", nullptr}};
}

Json functional_config(const model::Functional& m);
Json sequential_config(const model::Sequential& m);

// One entry of config.layers, without "name" and "inbound_nodes" (the functional writer adds them).
Json layer_json(const Layer& layer) {
  if (const auto* in = dynamic_cast<const InputLayer*>(&layer))
    return input_layer_json(in->name(), in->input_shape(), in->dtype());
  Json entry = Json::object();
  if (const auto* f = dynamic_cast<const model::Functional*>(&layer)) {
    entry = Json{{"module", "tf_keras.src.engine.functional"},
                 {"class_name", "Functional"},
                 {"config", functional_config(*f)},
                 {"registered_name", "Functional"}};
  } else if (const auto* s = dynamic_cast<const model::Sequential*>(&layer)) {
    entry = Json{{"module", "keras"},
                 {"class_name", "Sequential"},
                 {"config", sequential_config(*s)},
                 {"registered_name", nullptr}};
  } else {
    LayerConfig c(layer.class_name(), layer.name());
    c.set("name", layer.name());
    c.set("trainable", true);
    c.impl().config["dtype"] = dtype_json(layer.dtype_policy());
    layer.get_config(c);
    const bool builtin = is_builtin(layer.class_name());
    entry = Json{{"module", builtin ? "keras.layers" : "chorus"},
                 {"class_name", layer.class_name()},
                 {"config", std::move(c.impl().config)},
                 {"registered_name", builtin ? Json(nullptr) : Json(layer.class_name())}};
  }
  if (layer.built()) entry["build_config"] = build_config(layer);
  return entry;
}

// Keras's node_index of a layer's call inside a model: its place among the layer's calls in this
// model, after the call a Functional (or a Sequential with an InputLayer) makes when constructed
// (Keras's _should_skip_first_node).
int first_node_index(const Layer& layer) {
  if (dynamic_cast<const model::Functional*>(&layer) != nullptr) return 1;
  if (dynamic_cast<const model::Sequential*>(&layer) != nullptr && layer.built()) return 1;
  return 0;
}

Json functional_config(const model::Functional& m) {
  // Each layer's calls in this model, in the order they were made.
  std::map<const Layer*, std::vector<std::shared_ptr<Node>>> calls;
  for (const auto& node : m.nodes()) calls[node->layer.get()].push_back(node);
  std::map<const Node*, int> index;
  for (auto& [layer, nodes] : calls) {
    std::sort(nodes.begin(), nodes.end(), [](const auto& a, const auto& b) { return a->sequence < b->sequence; });
    for (std::size_t i = 0; i < nodes.size(); ++i)
      index[nodes[i].get()] = first_node_index(*layer) + static_cast<int>(i);
  }
  for (const KerasTensor& t : m.inputs()) index[t.node().get()] = 0;
  auto ref = [&](const KerasTensor& t) {
    return Json::array({t.node()->layer->name(), index.at(t.node().get()), t.index()});
  };
  Json layers = Json::array();
  for (const LayerPtr& layer : m.layers()) {
    Json entry = layer_json(*layer);
    Json inbound = Json::array();
    const std::vector<std::string> keywords = layer->keyword_inputs();
    for (const auto& node : calls[layer.get()]) {
      Json args = Json::array();
      if (keywords.empty()) {
        for (const KerasTensor& t : node->inputs) {
          Json r = ref(t);
          r.push_back(Json::object());  // the call's keyword arguments: none
          args.push_back(std::move(r));
        }
      } else {  // the first input positional, the others and the call options as keywords
        Json kwargs = Json::object();
        for (std::size_t i = 1; i < node->inputs.size() && i - 1 < keywords.size(); ++i)
          kwargs[keywords[i - 1]] = ref(node->inputs[i]);
        LayerConfig options(layer->class_name(), layer->name());
        layer->get_call_config(options);
        for (const auto& [k, v] : options.impl().config.items()) kwargs[k] = v;
        Json r = ref(node->inputs[0]);
        r.push_back(std::move(kwargs));
        args.push_back(std::move(r));
      }
      inbound.push_back(std::move(args));
    }
    entry["name"] = layer->name();
    entry["inbound_nodes"] = std::move(inbound);
    layers.push_back(std::move(entry));
  }
  Json inputs = Json::array(), outputs = Json::array();
  for (const KerasTensor& t : m.inputs()) inputs.push_back(ref(t));
  for (const KerasTensor& t : m.outputs()) outputs.push_back(ref(t));
  Json config = Json::object();
  config["name"] = m.name();
  config["trainable"] = true;
  config["layers"] = std::move(layers);
  config["input_layers"] = std::move(inputs);
  config["output_layers"] = std::move(outputs);
  return config;
}

Json sequential_config(const model::Sequential& m) {
  Json layers = Json::array();
  const std::vector<LayerPtr> ls = m.layers();
  if (m.built() && m.build_input_shapes().size() == 1)
    layers.push_back(input_layer_json(str_cat(ls.empty() ? m.name() : ls[0]->name(), "_input"),
                                      m.build_input_shapes()[0], DType::kFloat32));
  for (const LayerPtr& layer : ls) layers.push_back(layer_json(*layer));
  return Json{{"name", m.name()}, {"layers", std::move(layers)}};
}

}  // namespace

}  // namespace chorus::layers

// ---- reading ----

namespace chorus::layers {
namespace {

using internal::printable;

constexpr std::size_t kMaxLayersPerModel = std::size_t{1} << 16;

// "model_from_json: model 'outer': <what>"
[[noreturn]] void bad(const std::string& model, const std::string& what) {
  throw InvalidArgumentError(str_cat("model_from_json: model '", printable(model, 200), "': ", what));
}

const Json& member(const Json& object, const char* key, const std::string& model, const std::string& where) {
  if (!object.is_object()) bad(model, str_cat(where, " must be an object, got ", json_kind(object)));
  auto it = object.find(key);
  if (it == object.end()) bad(model, str_cat(where, " has no key '", key, "'"));
  return *it;
}

std::string string_member(const Json& object, const char* key, const std::string& model, const std::string& where) {
  const Json& v = member(object, key, model, where);
  if (!v.is_string()) bad(model, str_cat(where, ": key '", key, "' must be a string, got ", json_kind(v)));
  return v.get<std::string>();
}

std::int64_t int_of(const Json& v, const std::string& model, const std::string& where) {
  if (v.is_number_unsigned() && v.get<std::uint64_t>() <= static_cast<std::uint64_t>(INT64_MAX))
    return static_cast<std::int64_t>(v.get<std::uint64_t>());
  if (!v.is_number_integer()) bad(model, str_cat(where, " must be an integer, got ", json_kind(v)));
  return v.get<std::int64_t>();
}

mixed_precision::Policy read_policy(const LayerConfig& c) {
  if (c.is_null("dtype")) return mixed_precision::global_policy();
  const Json& d = c.impl().config["dtype"];
  std::string name;
  if (d.is_string()) {
    name = d.get<std::string>();
  } else if (d.is_object() && d.contains("config") && d["config"].is_object() && d["config"].contains("name") &&
             d["config"]["name"].is_string()) {
    name = d["config"]["name"].get<std::string>();
  } else {
    c.fail("dtype", str_cat("must be a dtype policy name or Keras's Policy object, got ", json_kind(d)));
  }
  try {
    return mixed_precision::Policy(name);
  } catch (const InvalidArgumentError& e) {
    c.fail("dtype", e.what());
  }
}

// A registered class's factory, with what every layer's config shares: name, trainable, dtype.
LayerPtr make_layer(const LayerFactory& factory, const LayerConfig& c) {
  if (!c.get_bool("trainable", true)) c.fail("trainable", "is false; chorus layers are always trainable");
  const mixed_precision::Policy policy = read_policy(c);
  LayerPtr layer = factory(c);
  if (layer == nullptr) c.fail("class_name", "'s factory returned no layer");
  layer->set_name(c.name());
  layer->set_dtype_policy(policy);
  return layer;
}

std::unique_ptr<model::Model> model_from_config(const std::string& class_name, const Json& config,
                                                const std::string& parent);

struct Created {
  LayerPtr layer;
  KerasTensor input;   // an InputLayer's tensor
  int first_node = 0;  // Keras's node index of its first call in the enclosing model
};

struct InputSpec {
  std::vector<std::int64_t> shape;
  DType dtype = DType::kFloat32;
};

InputSpec input_spec(const Json& config, const std::string& name, const std::string& model) {
  const std::string where = str_cat("InputLayer '", printable(name, 200), "' config");
  const Json& shape =
      config.contains("batch_input_shape") ? config["batch_input_shape"] : member(config, "batch_shape", model, where);
  if (!shape.is_array() || shape.empty())
    bad(model, str_cat(where, ": batch_input_shape must be a list [null, dims...], got ", json_kind(shape)));
  InputSpec spec;
  for (std::size_t i = 1; i < shape.size(); ++i) {
    if (shape[i].is_null())
      bad(model, str_cat(where, ": batch_input_shape has an unknown dimension (null) at ", i,
                         "; chorus builds layers for fixed shapes"));
    spec.shape.push_back(int_of(shape[i], model, str_cat(where, ": batch_input_shape[", i, "]")));
  }
  if (config.contains("dtype") && !config["dtype"].is_null()) {
    const std::string dtype = string_member(config, "dtype", model, where);
    try {
      spec.dtype = parse_dtype(dtype);
    } catch (const InvalidArgumentError& e) {
      bad(model, str_cat(where, ": dtype: ", e.what()));
    }
  }
  for (const char* key : {"sparse", "ragged"})
    if (config.contains(key) && !(config[key].is_boolean() && !config[key].get<bool>()))
      bad(model, str_cat(where, ": '", key, "' must be false; chorus has dense tensors only"));
  return spec;
}

std::vector<std::vector<std::int64_t>> read_build_shapes(const Json& entry) {
  std::vector<std::vector<std::int64_t>> out;
  if (!entry.contains("build_config") || !entry["build_config"].is_object()) return out;
  const Json& bc = entry["build_config"];
  if (!bc.contains("input_shape") || !bc["input_shape"].is_array()) return out;
  const Json& s = bc["input_shape"];
  auto one = [](const Json& dims) {
    std::vector<std::int64_t> d;
    for (const Json& v : dims) d.push_back(v.is_number_integer() ? v.get<std::int64_t>() : -1);
    return d;
  };
  if (!s.empty() && s[0].is_array()) {
    for (const Json& dims : s)
      if (dims.is_array()) out.push_back(one(dims));
  } else {
    out.push_back(one(s));
  }
  return out;
}

Created create_layer(const Json& entry, const std::string& model, std::size_t position) {
  const std::string where = str_cat("config.layers[", position, "]");
  const std::string cls = string_member(entry, "class_name", model, where);
  const Json& config = member(entry, "config", model, where);
  if (!config.is_object()) bad(model, str_cat(where, ": 'config' must be an object, got ", json_kind(config)));
  const std::string name = entry.contains("name") ? string_member(entry, "name", model, where)
                                                  : string_member(config, "name", model, where + ".config");
  if (cls == "InputLayer") {
    InputSpec spec = input_spec(config, name, model);
    Created c;
    c.input = Input(spec.shape, spec.dtype, name);
    c.layer = c.input.node()->layer;
    return c;
  }
  if (cls == "Functional" || cls == "Model" || cls == "Sequential") {
    std::shared_ptr<model::Model> m = model_from_config(cls, config, model);
    Created c;
    // Keras's _should_skip_first_node: a Functional, or a Sequential that starts with an InputLayer
    // (listed, or made from its first layer's batch_input_shape), made a call of its own first.
    const Json& inner = config["layers"];
    c.first_node = cls != "Sequential" || (!inner.empty() && (inner[0].value("class_name", "") == "InputLayer" ||
                                                              inner[0]["config"].contains("batch_input_shape")));
    c.layer = std::move(m);
    return c;
  }
  auto factory = find_factory(cls);
  if (!factory)
    bad(model,
        str_cat("layer '", printable(name, 200), "' has class '", printable(cls, 200),
                "', which chorus does not have; the classes chorus has: ", internal::join(registered_layer_classes())));
  LayerConfig c(cls, name);
  c.impl().config = config;
  c.impl().build_shapes = read_build_shapes(entry);
  return Created{make_layer(factory->first, c), {}, 0};
}

// A reference [layer name, node index, tensor index(, kwargs)] of inbound_nodes, input_layers or
// output_layers, resolved to the producing layer's slot and its call (index into its calls here).
struct Ref {
  std::size_t slot = 0;
  std::size_t call = 0;  // ignored for an InputLayer
  std::size_t tensor = 0;
  const Json* kwargs = nullptr;  // a non-empty keyword-arguments object of the reference
};

class GraphReader {
 public:
  GraphReader(const Json& config, std::string model) : model_(std::move(model)) {
    const Json& layers = member(config, "layers", model_, "config");
    if (!layers.is_array()) bad(model_, str_cat("config.layers must be a list, got ", json_kind(layers)));
    if (layers.size() > kMaxLayersPerModel)
      bad(model_, str_cat("config.layers has ", layers.size(), " layers; at most ", kMaxLayersPerModel));
    for (std::size_t i = 0; i < layers.size(); ++i) {
      Slot s;
      s.created = create_layer(layers[i], model_, i);
      s.name = s.created.layer->name();
      if (!by_name_.emplace(s.name, slots_.size()).second)
        bad(model_, str_cat("two layers are named '", printable(s.name, 200), "'"));
      if (layers[i].contains("inbound_nodes")) {
        const Json& nodes = layers[i]["inbound_nodes"];
        if (!nodes.is_array())
          bad(model_,
              str_cat("layer '", printable(s.name, 200), "': inbound_nodes must be a list, got ", json_kind(nodes)));
        if (s.created.input.defined() && !nodes.empty())
          bad(model_, str_cat("InputLayer '", printable(s.name, 200), "' has inbound nodes; an input has none"));
        for (const Json& n : nodes) s.nodes.push_back(&n);
      }
      s.outputs.resize(s.nodes.size());
      slots_.push_back(std::move(s));
    }
  }

  // Calls every layer on its inbound nodes' tensors, each after the calls it reads (Kahn's
  // algorithm: linear in the graph's size; what is left over is a cycle).
  void run() {
    std::vector<std::size_t> first_id;
    std::size_t total = 0;
    for (const Slot& s : slots_) {
      first_id.push_back(total);
      total += s.nodes.size();
    }
    std::vector<std::vector<Ref>> refs(total);
    std::vector<std::vector<std::size_t>> readers(total);
    std::vector<std::size_t> waiting(total, 0);
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      for (std::size_t j = 0; j < slots_[i].nodes.size(); ++j) {
        const std::size_t id = first_id[i] + j;
        refs[id] = node_refs(*slots_[i].nodes[j], i, j);
        for (const Ref& r : refs[id]) {
          if (slots_[r.slot].created.input.defined()) continue;
          readers[first_id[r.slot] + r.call].push_back(id);
          ++waiting[id];
        }
        if (j > 0) {  // a layer's calls in their order (Keras's node indices)
          readers[id - 1].push_back(id);
          ++waiting[id];
        }
      }
    }
    std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>> ready;
    for (std::size_t id = 0; id < total; ++id)
      if (waiting[id] == 0) ready.push(id);
    std::size_t done = 0;
    std::vector<std::size_t> slot_of(total);
    for (std::size_t i = 0; i < slots_.size(); ++i)
      for (std::size_t j = 0; j < slots_[i].nodes.size(); ++j) slot_of[first_id[i] + j] = i;
    while (!ready.empty()) {
      const std::size_t id = ready.top();
      ready.pop();
      const std::size_t i = slot_of[id];
      call(i, id - first_id[i], refs[id]);
      ++done;
      for (std::size_t r : readers[id])
        if (--waiting[r] == 0) ready.push(r);
    }
    if (done < total) {
      std::vector<std::string> stuck;
      for (std::size_t id = 0; id < total; ++id)
        if (waiting[id] > 0) stuck.push_back(str_cat("'", printable(slots_[slot_of[id]].name, 100), "'"));
      stuck.erase(std::unique(stuck.begin(), stuck.end()), stuck.end());
      bad(model_, str_cat("inbound_nodes form a cycle: the calls of layers ", internal::join(stuck, {.max_items = 10}),
                          " wait on each other"));
    }
  }

  // input_layers / output_layers.
  std::vector<KerasTensor> endpoints(const Json& config, const char* key) {
    const Json& list = member(config, key, model_, "config");
    if (!list.is_array() || list.empty())
      bad(model_, str_cat("config.", key, " must be a non-empty list, got ", json_kind(list)));
    std::vector<const Json*> items;
    if (list[0].is_string()) {  // one reference, not in a list
      items.push_back(&list);
    } else {
      for (const Json& r : list) items.push_back(&r);
    }
    std::vector<KerasTensor> out;
    for (const Json* r : items) {
      const Ref ref = parse_ref(*r, str_cat("config.", key));
      if (std::string(key) == "input_layers" && !slots_[ref.slot].created.input.defined())
        bad(model_, str_cat("config.input_layers names layer '", printable(slots_[ref.slot].name, 200),
                            "', which is not an InputLayer"));
      out.push_back(tensor(ref, str_cat("config.", key)));
    }
    return out;
  }

 private:
  mutable std::map<std::pair<std::size_t, std::size_t>, Json> call_options_;  // (slot, call) → options
  struct Slot {
    Created created;
    std::string name;
    std::vector<const Json*> nodes;
    std::vector<std::vector<KerasTensor>> outputs;  // per call, once made
  };

  Ref parse_ref(const Json& r, const std::string& who) const {
    if (!r.is_array() || r.size() < 3 || r.size() > 4 || !r[0].is_string())
      bad(model_, str_cat(who, ": a tensor reference must be [layer name, node index, tensor index], got ",
                          printable(r.dump(), 200)));
    const std::string name = r[0].get<std::string>();
    const std::int64_t node = int_of(r[1], model_, who + ": the node index");
    const std::int64_t tensor = int_of(r[2], model_, who + ": the tensor index");
    if (r.size() == 4 && !r[3].is_object())
      bad(model_, str_cat(who, ": keyword arguments must be an object, got ", printable(r[3].dump(), 200)));
    const Json* kwargs = r.size() == 4 && !r[3].empty() ? &r[3] : nullptr;
    auto it = by_name_.find(name);
    if (it == by_name_.end())
      bad(model_, str_cat(who, " reads layer '", printable(name, 200), "', which is not in config.layers"));
    const Slot& s = slots_[it->second];
    if (tensor < 0) bad(model_, str_cat(who, " reads tensor ", tensor, " of layer '", printable(name, 200), "'"));
    if (s.created.input.defined())
      return Ref{it->second, 0, static_cast<std::size_t>(tensor), kwargs};  // Keras: node 0
    const std::int64_t call = node - s.created.first_node;
    if (call < 0 || call >= static_cast<std::int64_t>(s.nodes.size()))
      bad(model_,
          str_cat(who, " reads node ", node, " of layer '", printable(name, 200), "', which has ",
                  s.nodes.empty() ? std::string("no calls in this model")
                                  : str_cat("nodes ", s.created.first_node, " to ",
                                            s.created.first_node + static_cast<std::int64_t>(s.nodes.size()) - 1)));
    return Ref{it->second, static_cast<std::size_t>(call), static_cast<std::size_t>(tensor), kwargs};
  }

  std::vector<Ref> node_refs(const Json& node, std::size_t slot, std::size_t call) const {
    const std::string who = str_cat("layer '", printable(slots_[slot].name, 200), "' inbound node ", call);
    if (!node.is_array() || node.empty())
      bad(model_, str_cat(who, " must be a non-empty list of tensor references, got ", json_kind(node)));
    std::vector<Ref> out;
    if (node[0].is_string()) {  // one reference, not in a list
      out.push_back(parse_ref(node, who));
    } else {
      for (const Json& r : node) out.push_back(parse_ref(r, who));
    }
    for (const Ref& r : out)
      if (r.kwargs != nullptr) return keyword_refs(out, slot, call, who);
    return out;
  }

  // A call with keyword arguments (MultiHeadAttention's value, key, attention_mask, and its
  // use_causal_mask): the keyword inputs in the layer's order (a missing key is the value, as in
  // Keras), the other keywords kept for the layer's set_call_config.
  std::vector<Ref> keyword_refs(const std::vector<Ref>& refs, std::size_t slot, std::size_t call,
                                const std::string& who) const {
    const LayerPtr& layer = slots_[slot].created.layer;
    const std::vector<std::string> names = layer != nullptr ? layer->keyword_inputs() : std::vector<std::string>{};
    const Json& kwargs = *refs[0].kwargs;
    if (names.empty() || refs.size() != 1)
      bad(model_, str_cat(who, " passes keyword arguments ", printable(kwargs.dump(), 200), "; chorus's ",
                          layer != nullptr ? layer->class_name() : std::string("layer"), " takes its inputs only"));
    std::vector<Ref> out{refs[0]};
    out[0].kwargs = nullptr;
    std::vector<Ref> named(names.size());
    std::vector<bool> given(names.size(), false);
    Json options = Json::object();
    for (const auto& [k, v] : kwargs.items()) {
      const auto pos = std::find(names.begin(), names.end(), k) - names.begin();
      if (pos == static_cast<std::ptrdiff_t>(names.size())) {
        options[k] = v;
        continue;
      }
      named[static_cast<std::size_t>(pos)] = parse_ref(v, str_cat(who, " keyword '", k, "'"));
      given[static_cast<std::size_t>(pos)] = true;
    }
    std::size_t last = 0;  // the inputs up to the last keyword given
    for (std::size_t i = 0; i < names.size(); ++i)
      if (given[i]) last = i + 1;
    for (std::size_t i = 0; i < last; ++i) {
      if (!given[i] && i == 0) bad(model_, str_cat(who, " gives keyword inputs without '", names[0], "'"));
      out.push_back(given[i] ? named[i] : named[0]);  // Keras: key defaults to value
    }
    call_options_[{slot, call}] = std::move(options);
    return out;
  }

  KerasTensor tensor(const Ref& r, const std::string& who) const {
    const Slot& s = slots_[r.slot];
    const std::vector<KerasTensor>& outs =
        s.created.input.defined() ? std::vector<KerasTensor>{s.created.input} : s.outputs[r.call];
    if (r.tensor >= outs.size())
      bad(model_, str_cat(who, " reads tensor ", r.tensor, " of layer '", printable(s.name, 200),
                          "', whose call gives ", outs.size(), " tensor(s)"));
    return outs[r.tensor];
  }

  void call(std::size_t slot, std::size_t call, const std::vector<Ref>& refs) {
    const std::string who = str_cat("layer '", printable(slots_[slot].name, 200), "' inbound node ", call);
    std::vector<KerasTensor> ins;
    for (const Ref& r : refs) ins.push_back(tensor(r, who));
    auto options = call_options_.find({slot, call});
    if (options != call_options_.end()) {
      LayerConfig c(slots_[slot].created.layer->class_name(), slots_[slot].name);
      c.impl().config = options->second;
      slots_[slot].created.layer->set_call_config(c);
    }
    Outputs<KerasTensor> out = (*slots_[slot].created.layer)(ins);
    slots_[slot].outputs[call] = std::move(out);
  }

  std::string model_;
  std::vector<Slot> slots_;
  std::map<std::string, std::size_t> by_name_;
};

std::unique_ptr<model::Model> functional_from_config(const Json& config, const std::string& parent) {
  const std::string name = string_member(config, "name", parent, "a Functional model's config");
  GraphReader graph(config, name);
  graph.run();
  std::vector<KerasTensor> inputs = graph.endpoints(config, "input_layers");
  std::vector<KerasTensor> outputs = graph.endpoints(config, "output_layers");
  return std::make_unique<model::Functional>(std::move(inputs), std::move(outputs), name);
}

std::unique_ptr<model::Model> sequential_from_config(const Json& config, const std::string& parent) {
  const std::string name = string_member(config, "name", parent, "a Sequential model's config");
  const Json& layers = member(config, "layers", name, "config");
  if (!layers.is_array()) bad(name, str_cat("config.layers must be a list, got ", json_kind(layers)));
  if (layers.size() > kMaxLayersPerModel)
    bad(name, str_cat("config.layers has ", layers.size(), " layers; at most ", kMaxLayersPerModel));
  std::optional<InputSpec> input;
  std::vector<LayerPtr> made;
  std::set<std::string> names;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const std::string where = str_cat("config.layers[", i, "]");
    if (string_member(layers[i], "class_name", name, where) == "InputLayer") {
      if (i != 0) bad(name, str_cat(where, " is an InputLayer; a Sequential model has one, first"));
      const Json& c = member(layers[i], "config", name, where);
      input = input_spec(c, c.contains("name") && c["name"].is_string() ? c["name"].get<std::string>() : "", name);
      continue;
    }
    if (i == 0 && layers[i].contains("config") && layers[i]["config"].is_object() &&
        layers[i]["config"].contains("batch_input_shape"))
      input = input_spec(layers[i]["config"], "(the first layer's batch_input_shape)", name);
    made.push_back(create_layer(layers[i], name, i).layer);
    if (!names.insert(made.back()->name()).second)
      bad(name, str_cat("two layers are named '", printable(made.back()->name(), 200), "'"));
  }
  auto m = std::make_unique<model::Sequential>(std::move(made), name);
  if (input && input->dtype == DType::kFloat32) {  // Model::build runs a float32 batch
    std::vector<std::int64_t> dims{1};
    dims.insert(dims.end(), input->shape.begin(), input->shape.end());
    m->build(Shape(dims));
  }
  return m;
}

std::unique_ptr<model::Model> model_from_config(const std::string& class_name, const Json& config,
                                                const std::string& parent) {
  if (!config.is_object()) bad(parent, str_cat("a model's config must be an object, got ", json_kind(config)));
  if (class_name == "Functional" || class_name == "Model") return functional_from_config(config, parent);
  if (class_name == "Sequential") return sequential_from_config(config, parent);
  bad(parent, str_cat("class_name '", printable(class_name, 200),
                      "' is not a model chorus can rebuild (Functional, Model or Sequential)"));
}

}  // namespace
}  // namespace chorus::layers

namespace chorus::model {

using chorus::internal::Json;
using chorus::internal::str_cat;

std::string Model::to_json() const {
  Json top = Json::object();
  if (const auto* f = dynamic_cast<const Functional*>(this)) {
    top["class_name"] = "Functional";
    top["config"] = layers::functional_config(*f);
  } else if (const auto* s = dynamic_cast<const Sequential*>(this)) {
    top["class_name"] = "Sequential";
    top["config"] = layers::sequential_config(*s);
  } else {
    throw InvalidArgumentError(str_cat("model '", name(), "' (", class_name(),
                                       "): to_json writes Functional and Sequential models only; a subclassed "
                                       "model's call() is code, not a graph (Keras: NotImplementedError)"));
  }
  top["keras_version"] = "2.21.0";
  top["backend"] = "tensorflow";
  std::string out;
  layers::dump_keras(top, out);
  return out;
}

std::unique_ptr<Model> model_from_json(const std::string& json) {
  if (json.size() > kMaxModelJsonBytes)
    throw ResourceExhaustedError(str_cat("model_from_json: the JSON text has ", json.size(),
                                         " bytes; at most kMaxModelJsonBytes = ", kMaxModelJsonBytes, " are read"));
  const Json top = chorus::internal::parse_json(json, "the model JSON");
  if (!top.is_object())
    throw InvalidArgumentError(
        str_cat("model_from_json: the JSON must be an object, got ", chorus::internal::json_kind(top)));
  const std::string cls = layers::string_member(top, "class_name", "(top)", "the JSON");
  return layers::model_from_config(cls, layers::member(top, "config", "(top)", "the JSON"), "(top)");
}

}  // namespace chorus::model
