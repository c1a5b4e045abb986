#include <chorus/model/layer.h>

#include <cctype>

#include <chorus/core/distribution.h>
#include <chorus/core/error.h>
#include <chorus/core/step_policy.h>
#include <chorus/core/timeline.h>
#include <chorus/ops/elementwise.h>

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

Tensor Layer::operator()(const Tensor& x, bool training) {
  CHORUS_REQUIRE(x.defined(), InvalidArgumentError, "layer '", name_.empty() ? class_name() : name_,
                 "': called with an undefined tensor");
  if (!built_) build(x.shape());
  const auto& d = x.shape().dims();
  CHORUS_REQUIRE(
      d.size() == built_shape_.size() + 1 && std::equal(built_shape_.begin(), built_shape_.end(), d.begin() + 1),
      InvalidArgumentError, "layer '", name_, "' (", class_name(), ") was built for inputs (None",
      [&] {
        std::string s;
        for (auto v : built_shape_) s += str_cat(", ", v);
        return s;
      }(),
      ") and is called with ", x.shape().to_string());
  // Timeline (core/timeline.h): the call as a "forward" span, and its ops tagged with its name.
  timeline::ScopeName scope(name_);
  timeline::Span span("forward", name_);
  // ZeRO stage 3 (FSDP): this layer's sharded parameters are gathered for the call and freed
  // after it (the step policy's, core/step_policy.h); nullptr at other stages.
  std::unique_ptr<ParameterGather> gathered;
  if (!weights_.empty()) gathered = step_policy().gather_parameters(weights_);
  // Keras's autocast: floating inputs in the compute dtype, other dtypes (ids, masks) as given.
  const Tensor y = is_floating(x.dtype()) && x.dtype() != compute_dtype()
                       ? call(ops::cast(x, compute_dtype()), training)
                       : call(x, training);
  return gathered != nullptr ? gathered->after_call(y) : y;
}

void Layer::build(const Shape& input_shape) {
  if (built_) return;
  ReplicaContext* ctx = get_replica_context();
  if (ctx != nullptr && ctx->num_replicas_in_sync() > 1) {
    // Every replica is here (all saw built_ == false: the merge completes only once all arrived).
    ctx->merge_call<int, int>(
        [&](const std::vector<int>&) {
          build_once(input_shape);
          return 0;
        },
        0);
    return;
  }
  build_once(input_shape);
}

void Layer::build_once(const Shape& input_shape) {
  std::lock_guard<std::mutex> lock(build_mu_);
  if (built_) return;
  CHORUS_REQUIRE(input_shape.rank() >= 1, InvalidArgumentError, "layer '", name_, "': input needs a batch dimension");
  if (name_.empty()) name_ = to_snake_case(class_name());
  build_weights(input_shape);
  built_shape_.assign(input_shape.dims().begin() + 1, input_shape.dims().end());
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
  return out;
}

std::vector<Variable> Layer::trainable_weights() const {
  std::vector<Variable> out;
  for (const auto& w : weights_)
    if (w.trainable()) out.push_back(w);
  return out;
}

std::vector<Variable> Layer::non_trainable_weights() const {
  std::vector<Variable> out;
  for (const auto& w : weights_)
    if (!w.trainable()) out.push_back(w);
  return out;
}

std::int64_t Layer::count_params() const {
  std::int64_t n = 0;
  for (const auto& w : weights_) n += w.shape().num_elements();
  return n;
}

}  // namespace chorus::layers
