// BatchNormalization (see model/layers.h).
#include "core/distribution.h"
#include "core/error.h"
#include "model/layers.h"
#include "ops/ops.h"

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
    : Layer(std::move(name)), momentum_(momentum), epsilon_(epsilon), center_(center), scale_(scale),
      synchronized_(synchronized) {
  CHORUS_REQUIRE(momentum >= 0 && momentum <= 1 && epsilon > 0, InvalidArgumentError,
                 "BatchNormalization: momentum must be in [0, 1] and epsilon > 0, got ", momentum, " and ", epsilon);
}

void BatchNormalizationLayer::build_weights(const Shape& in) {
  CHORUS_REQUIRE(in.rank() >= 2, InvalidArgumentError, "BatchNormalization '", name(), "': input must be [batch, ..., channels]");
  const Shape c{in.dims().back()};
  if (scale_) gamma_ = add_weight("gamma", c, initializers::ones());
  if (center_) beta_ = add_weight("beta", c, initializers::zeros());
  moving_mean_ = add_weight("moving_mean", c, initializers::zeros(), false, VariableSynchronization::kOnRead,
                            VariableAggregation::kMean);
  moving_var_ = add_weight("moving_variance", c, initializers::ones(), false, VariableSynchronization::kOnRead,
                           VariableAggregation::kMean);
}

Tensor BatchNormalizationLayer::call(const Tensor& x, bool training) {
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
  // One collective for sum, sum of squares and count.
  Tensor local = ops::concat({ops::reduce_sum(x, ops::Axes(axes)), ops::reduce_sum(ops::square(x), ops::Axes(axes)),
                              Tensor::full({1}, rows, x.dtype(), x.device_name())},
                             0);
  Tensor total = all_reduce_sum(local);
  std::vector<Tensor> parts = ops::split(total, std::vector<std::int64_t>{c, c, 1}, 0);
  const Tensor count = parts[2];
  CHORUS_REQUIRE(count.item<double>() > 0, InvalidArgumentError, "BatchNormalization '", name(),
                 "' (synchronized): every replica's batch is empty");
  const Tensor mean = ops::div(parts[0], count);
  const Tensor var = ops::sub(ops::div(parts[1], count), ops::square(mean));
  Tensor y = ops::mul(ops::sub(x, mean), ops::rsqrt(var + epsilon_));
  if (scale_) y = ops::mul(y, gamma_.value());
  if (center_) y = ops::add(y, beta_.value());
  moving_mean_.assign(moving_mean_.value() * momentum_ + ops::stop_gradient(mean) * (1.0 - momentum_));
  moving_var_.assign(moving_var_.value() * momentum_ + ops::stop_gradient(var) * (1.0 - momentum_));
  return y;
}

LayerPtr BatchNormalization(double momentum, double epsilon, bool center, bool scale, bool synchronized, std::string name) {
  return std::make_shared<BatchNormalizationLayer>(momentum, epsilon, center, scale, synchronized, std::move(name));
}

}  // namespace chorus::layers
