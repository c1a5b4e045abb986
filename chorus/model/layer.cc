#include <chorus/model/layer.h>

#include <algorithm>
#include <cctype>
#include <map>

#include <chorus/core/distribution.h>
#include <chorus/core/error.h>
#include <chorus/core/step_policy.h>
#include <chorus/core/timeline.h>
#include <chorus/ops/elementwise.h>
#include <chorus/ops/recompute.h>

namespace chorus::layers {

using chorus::internal::str_cat;

std::string to_snake_case(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (std::isupper(static_cast<unsigned char>(c))) {
      const bool prev_lower = i > 0 && std::islower(static_cast<unsigned char>(s[i - 1]));
      const bool next_lower = i + 1 < s.size() && std::islower(static_cast<unsigned char>(s[i + 1]));
      const bool prev_upper = i > 0 && std::isupper(static_cast<unsigned char>(s[i - 1]));
      if (i > 0 && (prev_lower || (prev_upper && next_lower))) out += '_';
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else {
      out += c;
    }
  }
  return out;
}

Layer::Layer(std::string name) : name_(std::move(name)), policy_(mixed_precision::global_policy()) {}

void Layer::set_dtype_policy(const mixed_precision::Policy& policy) {
  CHORUS_REQUIRE(
      !built_, FailedPreconditionError, "layer '", name_.empty() ? class_name() : name_,
      "': cannot change the dtype policy of a built layer (its weights exist); set it before the first call");
  policy_ = policy;
}

LayerPtr with_recompute(LayerPtr layer, bool on) {
  CHORUS_REQUIRE(layer != nullptr, InvalidArgumentError, "with_recompute: null layer");
  layer->set_recompute(on);
  return layer;
}

LayerPtr with_dtype_policy(LayerPtr layer, const mixed_precision::Policy& policy) {
  CHORUS_REQUIRE(layer != nullptr, InvalidArgumentError, "with_dtype_policy: null layer");
  layer->set_dtype_policy(policy);
  return layer;
}

Tensor Layer::read_weight(const Variable& v) const {
  Tensor value = v.value();
  if (is_floating(value.dtype()) && value.dtype() != compute_dtype()) return ops::cast(value, compute_dtype());
  return value;
}

void Layer::set_name(std::string name) {
  CHORUS_REQUIRE(!built_, FailedPreconditionError, "layer '", name_, "': cannot rename a built layer");
  name_ = std::move(name);
}

std::string unique_name(const std::string& base, int first_suffix) {
  static std::mutex mu;
  static std::map<std::string, int> taken;
  std::lock_guard<std::mutex> lock(mu);
  const int n = taken[base]++ + first_suffix;
  return n == 0 ? base : str_cat(base, "_", n);
}

template <typename T>
void Outputs<T>::throw_not_one(std::size_t n) {
  throw InvalidArgumentError(
      str_cat("the layer returned ", n, " outputs; index the list instead of converting it to one"));
}
template class Outputs<Tensor>;
template class Outputs<KerasTensor>;

namespace {

std::string dims_string(const std::vector<std::int64_t>& dims) {
  std::string s = "(None";
  for (auto v : dims) s += str_cat(", ", v);
  return s + ")";
}

}  // namespace

Tensor Layer::operator()(const Tensor& x, bool training) {
  std::vector<Tensor> ys = (*this)(std::vector<Tensor>{x}, training);
  CHORUS_REQUIRE(ys.size() == 1, InvalidArgumentError, "layer '", name_, "' (", class_name(), ") returns ", ys.size(),
                 " outputs: call it with a list of inputs to get them all");
  return std::move(ys[0]);
}

void Layer::check_built_shapes(const std::vector<Tensor>& xs) const {
  const std::size_t checked = shape_checked_inputs();
  CHORUS_REQUIRE(xs.size() == built_shapes_.size() || checked < xs.size() || checked < built_shapes_.size(),
                 InvalidArgumentError, "layer '", name_, "' (", class_name(), ") was built for ", built_shapes_.size(),
                 " input(s) and is called with ", xs.size());
  for (std::size_t i = 0; i < std::min({xs.size(), built_shapes_.size(), checked}); ++i) {
    const auto& d = xs[i].shape().dims();
    const auto& b = built_shapes_[i];
    CHORUS_REQUIRE(d.size() == b.size() + 1 && std::equal(b.begin(), b.end(), d.begin() + 1), InvalidArgumentError,
                   "layer '", name_, "' (", class_name(), ") was built for inputs ", dims_string(b),
                   " and is called with ", xs[i].shape().to_string());
  }
}

Outputs<Tensor> Layer::operator()(const std::vector<Tensor>& xs, bool training) {
  CHORUS_REQUIRE(!xs.empty(), InvalidArgumentError, "layer '", name_.empty() ? class_name() : name_,
                 "': called with no inputs");
  for (const Tensor& x : xs)
    CHORUS_REQUIRE(x.defined(), InvalidArgumentError, "layer '", name_.empty() ? class_name() : name_,
                   "': called with an undefined tensor");
  if (!built_) {
    std::vector<Shape> shapes;
    for (const Tensor& x : xs) shapes.push_back(x.shape());
    build(shapes);
  }
  check_built_shapes(xs);
  // Timeline (core/timeline.h): the call as a "forward" span, and its ops tagged with its name.
  timeline::ScopeName scope(name_);
  timeline::Span span("forward", name_);
  // Recomputed: the tapes keep only the inputs and outputs; the backward pass runs run_call
  // again, gathering stage-3 parameters and replaying random draws (ops/recompute.h).
  if (recompute_)  // outside any tape recompute_grad is the call itself
    return ops::recompute_grad([this, training](const std::vector<Tensor>& in) { return run_call(in, training); })(xs);
  return run_call(xs, training);
}

std::vector<Tensor> Layer::run_call(const std::vector<Tensor>& xs, bool training) {
  // ZeRO stage 3 (FSDP): this layer's sharded parameters are gathered for the call and freed
  // after it (the step policy's, core/step_policy.h); nullptr at other stages.
  std::unique_ptr<ParameterGather> gathered;
  if (!weights_.empty()) gathered = step_policy().gather_parameters(weights_);
  // Keras's autocast: floating inputs in the compute dtype, other dtypes (ids, masks) as given.
  std::vector<Tensor> ys;
  if (autocast() && std::any_of(xs.begin(), xs.end(), [&](const Tensor& x) {
        return is_floating(x.dtype()) && x.dtype() != compute_dtype();
      })) {
    std::vector<Tensor> cast = xs;
    for (Tensor& x : cast)
      if (is_floating(x.dtype()) && x.dtype() != compute_dtype()) x = ops::cast(x, compute_dtype());
    ys = call_list(cast, training);
  } else {
    ys = call_list(xs, training);
  }
  return gathered != nullptr ? gathered->after_call(ys) : ys;
}

Outputs<KerasTensor> Layer::operator()(const std::vector<KerasTensor>& xs) {
  std::shared_ptr<Layer> self = weak_from_this().lock();
  CHORUS_REQUIRE(self != nullptr, InvalidArgumentError, "layer '", name_.empty() ? class_name() : name_,
                 "': a layer called on symbolic tensors (KerasTensor) must be held by a LayerPtr "
                 "(std::shared_ptr), as the layer factories return it");
  std::vector<Tensor> examples;
  for (const KerasTensor& x : xs) {
    CHORUS_REQUIRE(x.defined(), InvalidArgumentError, "layer '", name_.empty() ? class_name() : name_,
                   "': called with an undefined KerasTensor");
    examples.push_back(x.example());
  }
  if (name_.empty() && !built_) name_ = unique_name(to_snake_case(class_name()));
  auto node = std::make_shared<Node>();
  try {
    node->examples = (*this)(examples, false);
  } catch (const InvalidArgumentError& e) {
    std::string from;
    for (std::size_t i = 0; i < xs.size(); ++i)
      from += str_cat(i == 0 ? "" : " and ", xs[i].producer(), " ", xs[i].shape_string());
    throw InvalidArgumentError(str_cat("layer '", name_, "' (", class_name(), ") cannot take the output",
                                       xs.size() > 1 ? "s" : "", " of ", from, ": ", e.what()));
  }
  static std::atomic<std::uint64_t> sequence{0};
  node->layer = std::move(self);
  node->inputs = xs;
  node->sequence = sequence++;
  std::vector<KerasTensor> out;
  for (std::size_t i = 0; i < node->examples.size(); ++i) out.emplace_back(node, static_cast<int>(i));
  return out;
}

KerasTensor Layer::operator()(const KerasTensor& x) {
  std::vector<KerasTensor> ys = (*this)(std::vector<KerasTensor>{x});
  CHORUS_REQUIRE(ys.size() == 1, InvalidArgumentError, "layer '", name_, "' (", class_name(), ") returns ", ys.size(),
                 " outputs: call it with a list of inputs to get them all");
  return ys[0];
}

Tensor Layer::call(const Tensor& x, bool training) {
  (void)x;
  (void)training;
  throw InvalidArgumentError(
      str_cat("layer '", name_, "' (", class_name(), ") takes a list of inputs; it was called with one tensor"));
}

std::vector<Tensor> Layer::call_list(const std::vector<Tensor>& xs, bool training) {
  CHORUS_REQUIRE(xs.size() == 1, InvalidArgumentError, "layer '", name_, "' (", class_name(), ") takes one input, got ",
                 xs.size());
  return {call(xs[0], training)};
}

void Layer::build_weights(const std::vector<Shape>& input_shapes) {
  CHORUS_REQUIRE(input_shapes.size() == 1, InvalidArgumentError, "layer '", name_, "' (", class_name(),
                 ") takes one input, got ", input_shapes.size());
  build_weights(input_shapes[0]);
}

std::shared_ptr<Layer> Layer::track_layer(std::shared_ptr<Layer> layer, std::string attribute) {
  CHORUS_REQUIRE(layer != nullptr, InvalidArgumentError, "layer '", name_, "': track_layer of a null layer");
  CHORUS_REQUIRE(layer.get() != this, InvalidArgumentError, "layer '", name_, "': a layer cannot own itself");
  for (const auto& [a, l] : sublayers_)
    CHORUS_REQUIRE(a != attribute, InvalidArgumentError, "layer '", name_, "': attribute '", attribute,
                   "' already holds layer '", l->name(), "'");
  if (!layer->built() && layer->name().empty()) layer->set_name(attribute);
  if (!layer->built() && !name_.empty()) layer->set_prefix(str_cat(prefix_, name_, "/"));
  sublayers_.emplace_back(std::move(attribute), layer);
  return layer;
}

void Layer::build(const std::vector<Shape>& input_shapes) {
  if (built_) return;
  ReplicaContext* ctx = get_replica_context();
  if (ctx != nullptr && ctx->num_replicas_in_sync() > 1) {
    // Every replica is here (all saw built_ == false: the merge completes only once all arrived).
    ctx->merge_call<int, int>(
        [&](const std::vector<int>&) {
          build_once(input_shapes);
          return 0;
        },
        0);
    return;
  }
  build_once(input_shapes);
}

void Layer::build_once(const std::vector<Shape>& input_shapes) {
  std::lock_guard<std::mutex> lock(build_mu_);
  if (built_) return;
  for (const Shape& s : input_shapes)
    CHORUS_REQUIRE(s.rank() >= 1, InvalidArgumentError, "layer '", name_, "': input needs a batch dimension");
  if (name_.empty()) name_ = to_snake_case(class_name());
  // Owned layers not built yet take their path from this layer's.
  for (const auto& [attribute, l] : sublayers_)
    if (!l->built()) l->set_prefix(str_cat(prefix_, name_, "/"));
  build_weights(input_shapes);
  built_shapes_.clear();
  for (const Shape& s : input_shapes) built_shapes_.emplace_back(s.dims().begin() + 1, s.dims().end());
  built_ = true;
}

Variable Layer::add_weight(const std::string& name, const Shape& shape, const initializers::Initializer& init,
                           bool trainable, VariableSynchronization sync, VariableAggregation aggregation,
                           std::optional<DType> dtype) {
  Variable v = make_variable({.initial_value = init(shape, dtype.value_or(policy_.variable_dtype())),
                              .name = str_cat(prefix_, name_, "/", name),
                              .trainable = trainable,
                              .synchronization = sync,
                              .aggregation = aggregation});
  weights_.push_back(v);
  weight_names_.push_back(name);
  child_created(name, v);  // a restore waiting for this weight assigns it now
  return v;
}

std::vector<train::TrackableChild> Layer::trackable_children() const {
  std::vector<train::TrackableChild> out;
  for (std::size_t i = 0; i < weights_.size(); ++i) out.push_back({weight_names_[i], weights_[i]});
  for (const auto& [attribute, l] : sublayers_) out.push_back({attribute, std::shared_ptr<train::Trackable>(l)});
  return out;
}

void Layer::collect_weights(std::vector<Variable>& out, std::vector<const Layer*>& seen) const {
  if (std::find(seen.begin(), seen.end(), this) != seen.end()) return;  // a shared layer counts once
  seen.push_back(this);
  out.insert(out.end(), weights_.begin(), weights_.end());
  for (const auto& [attribute, l] : sublayers_) l->collect_weights(out, seen);
}

std::vector<Variable> Layer::weights() const {
  std::vector<Variable> out;
  std::vector<const Layer*> seen;
  collect_weights(out, seen);
  return out;
}

std::vector<Variable> Layer::trainable_weights() const {
  std::vector<Variable> out;
  for (const auto& w : weights())
    if (w.trainable()) out.push_back(w);
  return out;
}

std::vector<Variable> Layer::non_trainable_weights() const {
  std::vector<Variable> out;
  for (const auto& w : weights())
    if (!w.trainable()) out.push_back(w);
  return out;
}

std::int64_t Layer::count_params() const {
  std::int64_t n = 0;
  for (const auto& w : weights()) n += w.shape().num_elements();
  return n;
}

}  // namespace chorus::layers
