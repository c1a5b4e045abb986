// BatchNormalization (see model/layers.h).
#include <chorus/core/distribution.h>
#include <chorus/core/error.h>
#include <chorus/model/layers.h>
#include <chorus/model/serialization.h>
#include <chorus/ops/ops.h>

namespace chorus::layers {
namespace {

// SUM all-reduce across the replicas in sync that the tape can differentiate: the gradient of
// each replica's input is the sum of every replica's output gradient — itself an all-reduce,
// which every replica's backward pass reaches in the same order (SPMD).
Tensor all_reduce_sum(const Tensor& x) {
  ReplicaContext* ctx = get_replica_context();
  if (ctx == nullptr || ctx->num_replicas_in_sync() == 1) return x;
  Tensor y = ctx->all_reduce(ReduceOp::kSum, x);
  if (ops::internal::should_record({x})) {
    ops::internal::record("AllReduce", {x}, {y}, [ctx](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
      return {ctx->all_reduce(ReduceOp::kSum, gs[0])};
    });
  }
  return y;
}

}  // namespace

BatchNormalizationLayer::BatchNormalizationLayer(double momentum, double epsilon, bool center, bool scale,
                                                 bool synchronized, std::string name)
    : Layer(std::move(name)),
      momentum_(momentum),
      epsilon_(epsilon),
      center_(center),
      scale_(scale),
      synchronized_(synchronized) {
  CHORUS_REQUIRE(momentum >= 0 && momentum <= 1 && epsilon > 0, InvalidArgumentError,
                 "BatchNormalization: momentum must be in [0, 1] and epsilon > 0, got ", momentum, " and ", epsilon);
}

void BatchNormalizationLayer::build_weights(const Shape& in) {
  CHORUS_REQUIRE(in.rank() >= 2, InvalidArgumentError, "BatchNormalization '", name(),
                 "': input must be [batch, ..., channels]");
  const Shape c{in.dims().back()};
  if (scale_) gamma_ = add_weight("gamma", c, initializers::ones());
  if (center_) beta_ = add_weight("beta", c, initializers::zeros());
  moving_mean_ = add_weight("moving_mean", c, initializers::zeros(), false, VariableSynchronization::kOnRead,
                            VariableAggregation::kMean);
  moving_var_ = add_weight("moving_variance", c, initializers::ones(), false, VariableSynchronization::kOnRead,
                           VariableAggregation::kMean);
}

Tensor BatchNormalizationLayer::call(const Tensor& x, bool training) {
  const DType stats = dtype_policy().variable_dtype();
  if (x.dtype() == stats) return normalize(x, training);
  return ops::cast(normalize(ops::cast(x, stats), training), x.dtype());
}

Tensor BatchNormalizationLayer::normalize(const Tensor& x, bool training) {
  const std::int64_t c = x.shape().dims().back();
  const Tensor gamma = scale_ ? gamma_.value() : Tensor::ones({c}, x.dtype(), x.device_name());
  const Tensor beta = center_ ? beta_.value() : Tensor::zeros({c}, x.dtype(), x.device_name());
  if (!training) {
    if (x.num_elements() == 0) return x;
    return ops::batch_norm(x, gamma, beta, moving_mean_.value(), moving_var_.value(), epsilon_, false).y;
  }
  if (synchronized_) return synchronized_call(x);
  if (x.num_elements() == 0) return x;
  ops::BatchNormResult r = ops::batch_norm(x, gamma, beta, Tensor(), Tensor(), epsilon_, true);
  // Moving statistics: this replica's component (ON_READ), outside the tape.
  const Tensor m = ops::stop_gradient(r.batch_mean), v = ops::stop_gradient(r.batch_variance);
  moving_mean_.assign(moving_mean_.value() * momentum_ + m * (1.0 - momentum_));
  moving_var_.assign(moving_var_.value() * momentum_ + v * (1.0 - momentum_));
  return r.y;
}

Tensor BatchNormalizationLayer::synchronized_call(const Tensor& x) {
  const int rank = x.shape().rank();
  const std::int64_t c = x.shape().dims().back();
  std::vector<int> axes;
  for (int i = 0; i < rank - 1; ++i) axes.push_back(i);
  const double rows = c == 0 ? 0.0 : static_cast<double>(x.num_elements() / c);
  // Not E[x²] − mean², which cancels catastrophically in float32 once |mean| >> std (mean 1e4,
  // std 1: E[x²] ≈ 1e8 has an ulp of 8, the variance comes out as noise, even negative → NaN).
  // Two rounds instead, each one small all-reduce:
  //   1. the global count and sum → a shift K, the global mean rounded to x's dtype;
  //   2. the shifted sums S1 = Σ(x − K), S2 = Σ(x − K)²: mean = K + S1/N and
  //      var = S2/N − (S1/N)² (the corrected two-pass formula: the cancellation is now of order
  //      (mean − K)², i.e. of the rounding of K, not of mean²).
  // mean and var do not depend on K mathematically (∂/∂K = 0), so K is a constant for the tape:
  // only round 2 is differentiated, one all-reduce in the backward pass, as before.
  const Tensor first = all_reduce_sum(ops::concat(
      {ops::stop_gradient(ops::reduce_sum(x, ops::Axes(axes))), Tensor::full({1}, rows, x.dtype(), x.device_name())},
      0));
  std::vector<Tensor> p1 = ops::split(first, std::vector<std::int64_t>{c, 1}, 0);
  // No host read of the count (it would sync the device every call): every replica's batch empty
  // → N is clamped to 1, the statistics are 0 and the moving statistics keep their values.
  const Tensor has_rows = ops::greater(p1[1], ops::scalar_like(p1[1], 0.0));
  const Tensor count = ops::maximum(p1[1], ops::scalar_like(p1[1], 1.0));
  const Tensor shift = ops::div(p1[0], count);
  const Tensor d = ops::sub(x, shift);
  const Tensor second = all_reduce_sum(
      ops::concat({ops::reduce_sum(d, ops::Axes(axes)), ops::reduce_sum(ops::square(d), ops::Axes(axes))}, 0));
  std::vector<Tensor> p2 = ops::split(second, std::vector<std::int64_t>{c, c}, 0);
  const Tensor centered_mean = ops::div(p2[0], count);  // mean − K
  const Tensor mean = ops::add(shift, centered_mean);
  // ≥ 0 in exact arithmetic (Cauchy–Schwarz); rounding may leave −tiny for constant channels.
  const Tensor var = ops::maximum(ops::sub(ops::div(p2[1], count), ops::square(centered_mean)), ops::zeros_like(p2[1]));
  // x − mean as (x − K) − (mean − K): both small, no rounding of a large mean in the output.
  Tensor y = ops::mul(ops::sub(d, centered_mean), ops::rsqrt(var + epsilon_));
  if (scale_) y = ops::mul(y, gamma_.value());
  if (center_) y = ops::add(y, beta_.value());
  const Tensor old_mean = moving_mean_.value(), old_var = moving_var_.value();
  moving_mean_.assign(
      ops::where(has_rows, old_mean * momentum_ + ops::stop_gradient(mean) * (1.0 - momentum_), old_mean));
  moving_var_.assign(ops::where(has_rows, old_var * momentum_ + ops::stop_gradient(var) * (1.0 - momentum_), old_var));
  return y;
}

LayerPtr BatchNormalization(double momentum, double epsilon, bool center, bool scale, bool synchronized,
                            std::string name) {
  return std::make_shared<BatchNormalizationLayer>(momentum, epsilon, center, scale, synchronized, std::move(name));
}

// ---- Keras config (model/serialization.h) ----

void BatchNormalizationLayer::get_config(LayerConfig& c) const {
  const auto& shapes = build_input_shapes();  // the axis is the last one; Keras writes it resolved once built
  if (shapes.empty()) {
    c.set("axis", -1);
  } else {
    c.set("axis", std::vector<std::int64_t>{static_cast<std::int64_t>(shapes[0].size())});
  }
  c.set("momentum", momentum_);
  c.set("epsilon", epsilon_);
  c.set("center", center_);
  c.set("scale", scale_);
  c.set_initializer("beta_initializer", initializers::zeros());
  c.set_initializer("gamma_initializer", initializers::ones());
  c.set_initializer("moving_mean_initializer", initializers::zeros());
  c.set_initializer("moving_variance_initializer", initializers::ones());
  c.set_nulls({"beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint"});
  if (synchronized_) c.set("synchronized", true);  // tf_keras accepts it; it writes it nowhere
}
CHORUS_REGISTER_LAYER_CLASS(BatchNormalization, [](const LayerConfig& c) {
  // chorus normalizes over the last axis: -1, or the last axis of build_config's input shape.
  const std::vector<std::int64_t> axis = c.get_int_list("axis", 1);
  const auto& shapes = c.build_input_shapes();
  const bool last = axis[0] == -1 || (shapes.size() == 1 && axis[0] == static_cast<std::int64_t>(shapes[0].size()) - 1);
  if (!last)
    c.fail("axis", "must be the last axis (-1); chorus's BatchNormalization normalizes over the last axis only");
  c.require_nulls({"beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint", "virtual_batch_size",
                   "adjustment"});
  c.require("renorm", false);
  c.require_initializer("beta_initializer", "Zeros");
  c.require_initializer("gamma_initializer", "Ones");
  c.require_initializer("moving_mean_initializer", "Zeros");
  c.require_initializer("moving_variance_initializer", "Ones");
  return BatchNormalization(c.get_double("momentum", 0.99), c.get_double("epsilon", 1e-3), c.get_bool("center", true),
                            c.get_bool("scale", true), c.get_bool("synchronized", false));
});

namespace registration {
void link_normalization() {}
}  // namespace registration

}  // namespace chorus::layers
