// LayerNormalization and RMSNormalization (see model/layer_normalization.h).
#include <chorus/model/layer_normalization.h>

#include <chorus/model/serialization.h>

#include <algorithm>
#include <sstream>

#include <chorus/core/error.h>
#include <chorus/ops/ops.h>

namespace chorus::layers {
namespace {

std::string axes_string(const std::vector<int>& axes) {
  std::ostringstream s;
  s << "[";
  for (std::size_t i = 0; i < axes.size(); ++i) s << (i ? ", " : "") << axes[i];
  s << "]";
  return s.str();
}

// `axis` resolved against `in`: non-negative, sorted, without repeats; InvalidArgumentError for an
// axis out of range or the batch axis (0).
std::vector<int> resolve_axes(const char* layer, const std::string& name, const std::vector<int>& axis,
                              const Shape& in) {
  const int rank = in.rank();
  std::vector<int> a;
  for (int v : axis) {
    CHORUS_REQUIRE(v >= -rank && v < rank, InvalidArgumentError, layer, " '", name, "': axis ", v,
                   " is out of range for input of rank ", rank, " ", in.to_string());
    a.push_back(v < 0 ? v + rank : v);
  }
  std::sort(a.begin(), a.end());
  a.erase(std::unique(a.begin(), a.end()), a.end());
  CHORUS_REQUIRE(a.front() >= 1, InvalidArgumentError, layer, " '", name, "': axis ", axes_string(axis),
                 " must not include the batch axis (0); input ", in.to_string());
  return a;
}

// Whether the resolved `axes` are the trailing axes of a rank-`rank` input.
bool trailing(const std::vector<int>& axes, int rank) {
  const int begin = rank - static_cast<int>(axes.size());
  for (std::size_t i = 0; i < axes.size(); ++i)
    if (axes[i] != begin + static_cast<int>(i)) return false;
  return true;
}

}  // namespace

namespace internal {

NormalizationPlan plan_normalization(const char* layer, const std::string& name, const std::vector<int>& axis,
                                     const Shape& in) {
  const std::vector<int> axes = resolve_axes(layer, name, axis, in);
  const int rank = in.rank();
  NormalizationPlan plan;
  plan.begin_axis = rank - static_cast<int>(axes.size());
  // Other axes: the kept ones first, then the normalized ones in ascending order (Keras's weight
  // shape), so that the fused kernel normalizes trailing axes; the result goes back by `inverse`.
  std::vector<std::int64_t> p_dims;
  for (int d : axes) p_dims.push_back(in.dims()[static_cast<std::size_t>(d)]);
  plan.params = Shape(p_dims);
  if (!trailing(axes, rank)) {
    for (int d = 0; d < rank; ++d)
      if (!std::binary_search(axes.begin(), axes.end(), d)) plan.perm.push_back(d);
    plan.perm.insert(plan.perm.end(), axes.begin(), axes.end());
    plan.inverse.assign(static_cast<std::size_t>(rank), 0);
    for (int i = 0; i < rank; ++i) plan.inverse[static_cast<std::size_t>(plan.perm[static_cast<std::size_t>(i)])] = i;
  }
  return plan;
}

}  // namespace internal

namespace {

bool is_16bit(DType d) { return d == DType::kBFloat16 || d == DType::kFloat16; }

// Runs `norm` in the variables' dtype (float32 under a mixed policy) and returns x's dtype. The
// ops take 16-bit x with float32 parameters directly (normalized in float32, rounded once).
template <typename Norm>
Tensor in_variable_dtype(const Tensor& x, DType variable_dtype, Norm norm) {
  if (x.dtype() == variable_dtype || (is_16bit(x.dtype()) && variable_dtype == DType::kFloat32)) return norm(x);
  return ops::cast(norm(ops::cast(x, variable_dtype)), x.dtype());
}

// `norm` over the plan's trailing axes, with x's normalized axes moved there and back when they
// are not trailing (two copies of the activation; the gradient flows through both).
template <typename Norm>
Tensor normalize(const Tensor& x, const internal::NormalizationPlan& plan, DType variable_dtype, Norm norm) {
  if (plan.perm.empty()) return in_variable_dtype(x, variable_dtype, norm);
  return ops::transpose(in_variable_dtype(ops::transpose(x, plan.perm), variable_dtype, norm), plan.inverse);
}

}  // namespace

LayerNormalizationLayer::LayerNormalizationLayer(std::vector<int> axis, double epsilon, bool center, bool scale,
                                                 std::string name)
    : Layer(std::move(name)), axis_(std::move(axis)), epsilon_(epsilon), center_(center), scale_(scale) {
  CHORUS_REQUIRE(!axis_.empty(), InvalidArgumentError, "LayerNormalization: axis must name at least one axis");
  CHORUS_REQUIRE(epsilon >= 0, InvalidArgumentError, "LayerNormalization: epsilon must be >= 0, got ", epsilon);
}

void LayerNormalizationLayer::build_weights(const Shape& in) {
  plan_ = internal::plan_normalization("LayerNormalization", name(), axis_, in);
  if (scale_) gamma_ = add_weight("gamma", plan_.params, initializers::ones());
  if (center_) beta_ = add_weight("beta", plan_.params, initializers::zeros());
}

Tensor LayerNormalizationLayer::call(const Tensor& x, bool) {
  const Tensor gamma = scale_ ? gamma_.value() : Tensor();
  const Tensor beta = center_ ? beta_.value() : Tensor();
  return normalize(x, plan_, dtype_policy().variable_dtype(),
                   [&](const Tensor& v) { return ops::layer_norm(v, gamma, beta, epsilon_, plan_.begin_axis); });
}

RMSNormalizationLayer::RMSNormalizationLayer(std::vector<int> axis, double epsilon, std::string name)
    : Layer(std::move(name)), axis_(std::move(axis)), epsilon_(epsilon) {
  CHORUS_REQUIRE(!axis_.empty(), InvalidArgumentError, "RMSNormalization: axis must name at least one axis");
  CHORUS_REQUIRE(epsilon >= 0, InvalidArgumentError, "RMSNormalization: epsilon must be >= 0, got ", epsilon);
}

void RMSNormalizationLayer::build_weights(const Shape& in) {
  plan_ = internal::plan_normalization("RMSNormalization", name(), axis_, in);
  scale_ = add_weight("scale", plan_.params, initializers::ones());
}

Tensor RMSNormalizationLayer::call(const Tensor& x, bool) {
  const Tensor scale = scale_.value();
  return normalize(x, plan_, dtype_policy().variable_dtype(),
                   [&](const Tensor& v) { return ops::rms_norm(v, scale, epsilon_, plan_.begin_axis); });
}

LayerPtr LayerNormalization(int axis, double epsilon, bool center, bool scale, std::string name) {
  return LayerNormalization(std::vector<int>{axis}, epsilon, center, scale, std::move(name));
}
LayerPtr LayerNormalization(std::vector<int> axis, double epsilon, bool center, bool scale, std::string name) {
  return std::make_shared<LayerNormalizationLayer>(std::move(axis), epsilon, center, scale, std::move(name));
}
LayerPtr RMSNormalization(int axis, double epsilon, std::string name) {
  return RMSNormalization(std::vector<int>{axis}, epsilon, std::move(name));
}
LayerPtr RMSNormalization(std::vector<int> axis, double epsilon, std::string name) {
  return std::make_shared<RMSNormalizationLayer>(std::move(axis), epsilon, std::move(name));
}

// ---- Keras config (model/serialization.h) ----

namespace {

// Keras writes the axes resolved against the built input (batch included): [2] for -1 on [B, T, C].
std::vector<std::int64_t> resolved_axes(const std::vector<int>& axis,
                                        const std::vector<std::vector<std::int64_t>>& shapes) {
  std::vector<std::int64_t> out;
  for (int a : axis) {
    if (a < 0 && !shapes.empty()) a += static_cast<int>(shapes[0].size()) + 1;
    out.push_back(a);
  }
  return out;
}

// The factory's axes: Keras's (an int or a list), counted from the end when build_config says the rank.
std::vector<int> config_axes(const LayerConfig& c) {
  std::vector<int> out;
  const auto& shapes = c.build_input_shapes();
  const std::vector<std::int64_t> axes =
      c.is_int("axis") ? std::vector<std::int64_t>{c.get_int("axis")} : c.get_int_list("axis");
  for (std::int64_t a : axes) {
    if (a > 0 && shapes.size() == 1) a -= static_cast<std::int64_t>(shapes[0].size());  // rank incl. batch
    out.push_back(static_cast<int>(a));
  }
  return out;
}

}  // namespace

void LayerNormalizationLayer::get_config(LayerConfig& c) const {
  c.set("axis", resolved_axes(axis_, build_input_shapes()));
  c.set("epsilon", epsilon_);
  c.set("center", center_);
  c.set("scale", scale_);
  c.set_initializer("beta_initializer", initializers::zeros());
  c.set_initializer("gamma_initializer", initializers::ones());
  c.set_nulls({"beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint"});
}
CHORUS_REGISTER_LAYER_CLASS(LayerNormalization, [](const LayerConfig& c) {
  c.require_nulls({"beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint"});
  c.require_initializer("beta_initializer", "Zeros");
  c.require_initializer("gamma_initializer", "Ones");
  return LayerNormalization(config_axes(c), c.get_double("epsilon", 1e-3), c.get_bool("center", true),
                            c.get_bool("scale", true));
});

void RMSNormalizationLayer::get_config(LayerConfig& c) const {  // Keras 3's keys
  const std::vector<std::int64_t> axes = resolved_axes(axis_, build_input_shapes());
  if (axes.size() == 1)
    c.set("axis", axes[0]);
  else
    c.set("axis", axes);
  c.set("epsilon", epsilon_);
}
CHORUS_REGISTER_LAYER_CLASS(RMSNormalization, [](const LayerConfig& c) {
  return RMSNormalization(config_axes(c), c.get_double("epsilon", 1e-6));
});

namespace registration {
void link_layer_normalization() {}
}  // namespace registration

}  // namespace chorus::layers
