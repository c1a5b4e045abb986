#include <chorus/model/functional.h>

#include <algorithm>
#include <map>
#include <set>

#include <chorus/core/error.h>
#include <chorus/distribute/strategy.h>

namespace chorus::layers {

using chorus::internal::str_cat;

InputLayer::InputLayer(std::vector<std::int64_t> shape, DType dtype, std::string name)
    : Layer(std::move(name)), shape_(std::move(shape)), dtype_(dtype) {}

Tensor InputLayer::call(const Tensor& x, bool training) {
  (void)training;
  return x;
}

KerasTensor Input(std::vector<std::int64_t> shape, DType dtype, std::string name) {
  std::string dims;
  for (auto d : shape) dims += str_cat(dims.empty() ? "" : ", ", d);
  for (auto d : shape)
    CHORUS_REQUIRE(d >= 1, InvalidArgumentError, "Input(shape=(", dims, ")): every dimension must be >= 1 (",
                   "chorus builds layers for fixed shapes; the batch dimension is not part of shape)");
  if (name.empty()) name = unique_name("input", /*first_suffix=*/1);
  auto layer = std::make_shared<InputLayer>(shape, dtype, name);
  std::vector<std::int64_t> one{1};
  one.insert(one.end(), shape.begin(), shape.end());
  layer->build(Shape(one));
  auto node = std::make_shared<Node>();
  node->layer = layer;
  node->examples = {Tensor::zeros(Shape(one), dtype, distribute::get_strategy().replica_devices()[0])};
  return KerasTensor(std::move(node), 0);
}

}  // namespace chorus::layers

namespace chorus::model {

using chorus::internal::str_cat;
using layers::KerasTensor;
using layers::Layer;
using layers::Node;

namespace {

// Keras's _map_graph_network: the calls from the inputs to the outputs in an order that computes
// every input first (a depth-first post-order), and the layers in Keras's model.layers order.
struct GraphMap {
  std::vector<std::shared_ptr<Node>> post_order;  // Input nodes included
  std::map<const Layer*, int> layer_index;        // the order a depth-first walk meets them
  std::vector<std::shared_ptr<Layer>> layers;     // Keras's order
};

class GraphWalk {
 public:
  GraphWalk(const std::vector<KerasTensor>& inputs, std::string model) : model_(std::move(model)) {
    for (const KerasTensor& t : inputs) {
      input_nodes_.insert(t.node().get());
      input_names_ += str_cat(input_names_.empty() ? "'" : ", '", t.node()->layer->name(), "'");
    }
  }

  void visit(const KerasTensor& t, const Node* reader) {
    const std::shared_ptr<Node>& node = t.node();
    if (finished_.count(node.get())) return;
    CHORUS_REQUIRE(!in_progress_.count(node.get()), InvalidArgumentError, "model '", model_,
                   "': the graph has a cycle through layer ", t.producer());
    if (!map_.layer_index.count(node->layer.get()))
      map_.layer_index.emplace(node->layer.get(), static_cast<int>(map_.layer_index.size()));
    if (node->inputs.empty()) {
      CHORUS_REQUIRE(
          input_nodes_.count(node.get()), InvalidArgumentError, "model '", model_, "': graph disconnected: layer ",
          reader != nullptr ? str_cat("'", reader->layer->name(), "' (", reader->layer->class_name(), ")")
                            : std::string("(an output)"),
          " reads Input '", node->layer->name(), "', which is not among the model's inputs [", input_names_, "]");
    } else {
      in_progress_.insert(node.get());
      for (const KerasTensor& in : node->inputs) visit(in, node.get());
      in_progress_.erase(node.get());
    }
    finished_.insert(node.get());
    map_.post_order.push_back(node);
  }

  // Depths as Keras computes them: an output's node 0, each input one more than its deepest reader;
  // a layer takes its deepest node's depth. Layers by depth (deepest, the inputs, first), ties by
  // layer_index.
  GraphMap finish(const std::vector<KerasTensor>& inputs) {
    std::map<const Node*, int> node_depth;
    std::map<const Layer*, int> layer_depth;
    for (auto it = map_.post_order.rbegin(); it != map_.post_order.rend(); ++it) {
      const Node* node = it->get();
      int depth = node_depth.emplace(node, 0).first->second;
      depth = std::max(depth, layer_depth.count(node->layer.get()) ? layer_depth[node->layer.get()] : 0);
      layer_depth[node->layer.get()] = depth;
      node_depth[node] = depth;
      for (const KerasTensor& in : node->inputs) {
        int& d = node_depth.emplace(in.node().get(), 0).first->second;
        d = std::max(d, depth + 1);
      }
    }
    for (const KerasTensor& t : inputs) {  // an Input no output reads
      const Layer* l = t.node()->layer.get();
      if (!layer_depth.count(l)) {
        layer_depth[l] = 0;
        map_.layer_index[l] = -1;
        map_.post_order.insert(map_.post_order.begin(), t.node());
      }
    }
    std::vector<std::shared_ptr<Layer>> layers;
    std::set<const Layer*> seen;
    for (const auto& node : map_.post_order)
      if (seen.insert(node->layer.get()).second) layers.push_back(node->layer);
    std::stable_sort(layers.begin(), layers.end(), [&](const auto& a, const auto& b) {
      const int da = layer_depth[a.get()], db = layer_depth[b.get()];
      if (da != db) return da > db;
      return map_.layer_index[a.get()] < map_.layer_index[b.get()];
    });
    map_.layers = std::move(layers);
    return std::move(map_);
  }

 private:
  std::string model_;
  std::set<const Node*> input_nodes_, finished_, in_progress_;
  std::string input_names_;
  GraphMap map_;
};

}  // namespace

Functional::Functional(std::vector<KerasTensor> inputs, std::vector<KerasTensor> outputs, std::string name)
    : Model(std::move(name)), inputs_(std::move(inputs)), outputs_(std::move(outputs)) {
  CHORUS_REQUIRE(!inputs_.empty() && !outputs_.empty(), InvalidArgumentError, "model '", this->name(),
                 "': a functional model needs at least one input and one output");
  for (const KerasTensor& t : inputs_) {
    CHORUS_REQUIRE(
        t.defined() && t.node()->inputs.empty() && dynamic_cast<layers::InputLayer*>(t.node()->layer.get()) != nullptr,
        InvalidArgumentError, "model '", this->name(), "': its inputs must come from Input(); ",
        t.defined() ? t.producer() : std::string("an undefined tensor"), " is not an Input");
  }
  for (const KerasTensor& t : outputs_)
    CHORUS_REQUIRE(t.defined(), InvalidArgumentError, "model '", this->name(), "': an output is undefined");
  GraphWalk walk(inputs_, this->name());
  for (const KerasTensor& t : outputs_) walk.visit(t, nullptr);
  GraphMap map = walk.finish(inputs_);
  std::set<std::string> names;
  for (const auto& layer : map.layers) {
    CHORUS_REQUIRE(names.insert(layer->name()).second, InvalidArgumentError, "model '", this->name(),
                   "': two layers are named '", layer->name(), "'; layer names in a model must be unique");
    track_layer(layer, layer->name());
  }
  for (const auto& node : map.post_order)
    if (!node->inputs.empty()) nodes_.push_back(node);
  std::vector<Shape> shapes;
  for (const KerasTensor& t : inputs_) shapes.push_back(t.example().shape());
  layers::Layer::build(shapes);  // built: every layer was built when it was called
}

void Functional::build_weights(const std::vector<Shape>& input_shapes) { (void)input_shapes; }

std::string Functional::output_name(std::size_t i) const {
  CHORUS_REQUIRE(i < outputs_.size(), InvalidArgumentError, "output_name: output ", i, " of ", outputs_.size());
  return outputs_[i].node()->layer->name();
}

std::vector<Tensor> Functional::call_list(const std::vector<Tensor>& xs, bool training) {
  CHORUS_REQUIRE(xs.size() == inputs_.size(), InvalidArgumentError, "model '", name(), "' takes ", inputs_.size(),
                 " input(s), got ", xs.size());
  std::map<const Node*, std::vector<Tensor>> values;
  for (std::size_t i = 0; i < xs.size(); ++i) values[inputs_[i].node().get()] = {xs[i]};
  for (const auto& node : nodes_) {
    std::vector<Tensor> ins;
    ins.reserve(node->inputs.size());
    for (const KerasTensor& in : node->inputs) ins.push_back(values.at(in.node().get()).at(in.index()));
    values[node.get()] = (*node->layer)(ins, training);
  }
  std::vector<Tensor> out;
  out.reserve(outputs_.size());
  for (const KerasTensor& t : outputs_) out.push_back(values.at(t.node().get()).at(t.index()));
  return out;
}

Tensor Functional::call(const Tensor& x, bool training) {
  CHORUS_REQUIRE(outputs_.size() == 1, InvalidArgumentError, "model '", name(), "' has ", outputs_.size(),
                 " outputs: call it with a list of inputs");
  return call_list({x}, training)[0];
}

std::string Functional::node_name(const Node* node) const {
  int k = 0;
  for (const auto& n : nodes_) {
    if (n.get() == node) break;
    if (n->layer == node->layer) ++k;
  }
  return str_cat(name(), "/", node->layer->name(), k == 0 ? std::string() : str_cat("_", k));
}

std::vector<Model::GraphNode> Functional::graph_nodes() const {
  std::vector<GraphNode> out;
  for (const KerasTensor& t : inputs_)
    out.push_back({node_name(t.node().get()), "Placeholder", {}, t.example().shape(), t.dtype(), true});
  for (const auto& node : nodes_) {
    std::vector<std::string> in;
    for (const KerasTensor& t : node->inputs) in.push_back(node_name(t.node().get()));
    out.push_back({node_name(node.get()), node->layer->class_name(), in, node->examples.at(0).shape(),
                   node->layer->compute_dtype(), false});
  }
  return out;
}

std::vector<std::string> Functional::layer_output_shapes() const {
  std::vector<std::string> out;
  for (const auto& l : layers()) {
    const Node* found = nullptr;
    int calls = 0;
    for (const KerasTensor& t : inputs_)
      if (t.node()->layer == l) found = t.node().get(), ++calls;
    for (const auto& n : nodes_)
      if (n->layer == l) found = n.get(), ++calls;
    if (calls != 1 || found == nullptr || found->examples.size() != 1) {
      out.push_back("multiple");
      continue;
    }
    std::string shape = "(None";
    for (std::size_t i = 1; i < found->examples[0].shape().dims().size(); ++i)
      shape += str_cat(", ", found->examples[0].shape().dims()[i]);
    out.push_back(shape + ")");
  }
  return out;
}

}  // namespace chorus::model
