#include <chorus/model/losses.h>

#include <algorithm>

#include <chorus/core/distribution.h>
#include <chorus/core/error.h>
#include <chorus/ops/ops.h>

namespace chorus::losses {
namespace {

constexpr double kEpsilon = 1e-7;

void require_same_rows(const std::string& loss, const Tensor& y_true, const Tensor& y_pred) {
  CHORUS_REQUIRE(y_true.defined() && y_pred.defined(), InvalidArgumentError, loss, ": undefined input");
  CHORUS_REQUIRE(
      y_true.shape().rank() >= 1 && y_pred.shape().rank() >= 1 && y_true.shape().dims()[0] == y_pred.shape().dims()[0],
      InvalidArgumentError, loss, ": y_true ", y_true.shape().to_string(), " and y_pred ", y_pred.shape().to_string(),
      " differ in batch size");
}

Tensor clipped_log(const Tensor& p) {
  return ops::log(ops::maximum(ops::minimum(p, ops::scalar_like(p, 1.0 - kEpsilon)), ops::scalar_like(p, kEpsilon)));
}

Tensor mean_last_axis(const Tensor& t) { return t.shape().rank() <= 1 ? t : ops::reduce_mean(t, -1); }

}  // namespace

Tensor Loss::operator()(const Tensor& y_true, const Tensor& y_pred) const {
  // Sum / max(count, 1): an empty batch gives 0 and stays connected to the weights (zero gradients).
  const Tensor pe = per_example(y_true, y_pred);
  return ops::div(ops::reduce_sum(pe),
                  ops::scalar_like(pe, static_cast<double>(std::max<std::int64_t>(pe.num_elements(), 1))));
}

Tensor SparseCategoricalCrossentropy::per_example(const Tensor& y_true, const Tensor& y_pred) const {
  require_same_rows(name(), y_true, y_pred);
  const auto& d = y_pred.shape().dims();
  CHORUS_REQUIRE(d.size() >= 2, InvalidArgumentError, name(), ": y_pred must be [batch, ..., classes], got ",
                 y_pred.shape().to_string());
  if (d.size() > 2) {
    // A sequence ([batch, T, classes], labels [batch, T]): each example's loss is the mean over
    // its T positions, so the average over the global batch is Keras's mean over every position.
    const std::int64_t rows = d[0], per_row = y_pred.num_elements() / std::max<std::int64_t>(d.back() * rows, 1);
    CHORUS_REQUIRE(y_true.num_elements() == rows * per_row, InvalidArgumentError, name(), ": y_true ",
                   y_true.shape().to_string(), " does not match y_pred ", y_pred.shape().to_string(),
                   " (one label per position)");
    const Tensor flat =
        per_example(ops::reshape(y_true, {rows * per_row}), ops::reshape(y_pred, {rows * per_row, d.back()}));
    return ops::reduce_mean(ops::reshape(flat, {rows, per_row}), {1});
  }
  const Tensor labels = y_true.shape().rank() == 2 ? ops::reshape(y_true, {y_true.shape().dims()[0]}) : y_true;
  if (from_logits_) return ops::sparse_softmax_cross_entropy_with_logits(labels, y_pred);
  const Tensor onehot = ops::one_hot(labels, y_pred.shape().dims()[1], 1.0, 0.0, y_pred.dtype());
  return ops::neg(ops::reduce_sum(ops::mul(onehot, clipped_log(y_pred)), -1));
}

Tensor CategoricalCrossentropy::per_example(const Tensor& y_true, const Tensor& y_pred) const {
  require_same_rows(name(), y_true, y_pred);
  if (from_logits_) return ops::softmax_cross_entropy_with_logits(y_true, y_pred);
  // Keras normalizes the probabilities to sum to 1 first.
  const Tensor p = ops::div(y_pred, ops::reduce_sum(y_pred, -1, true));
  return ops::neg(ops::reduce_sum(ops::mul(y_true, clipped_log(p)), -1));
}

Tensor BinaryCrossentropy::per_example(const Tensor& y_true, const Tensor& y_pred) const {
  require_same_rows(name(), y_true, y_pred);
  Tensor elementwise;
  if (from_logits_) {
    // max(x, 0) - x z + log(1 + exp(-|x|)): stable for any x (TF's sigmoid_cross_entropy_with_logits).
    const Tensor& x = y_pred;
    elementwise =
        ops::add(ops::sub(ops::relu(x), ops::mul(x, y_true)), ops::log(1.0 + ops::exp(ops::neg(ops::abs(x)))));
  } else {
    const Tensor one = ops::scalar_like(y_pred, 1.0);
    elementwise = ops::neg(ops::add(ops::mul(y_true, clipped_log(y_pred)),
                                    ops::mul(ops::sub(one, y_true), clipped_log(ops::sub(one, y_pred)))));
  }
  return mean_last_axis(elementwise);
}

Tensor MeanSquaredError::per_example(const Tensor& y_true, const Tensor& y_pred) const {
  require_same_rows(name(), y_true, y_pred);
  return mean_last_axis(ops::square(ops::sub(y_pred, y_true)));
}

Tensor compute_average_loss(const Tensor& per_example_loss, std::int64_t global_batch_size) {
  CHORUS_REQUIRE(
      per_example_loss.defined() && is_floating(per_example_loss.dtype()) && per_example_loss.shape().rank() == 1,
      InvalidArgumentError, "compute_average_loss: needs a 1-D floating tensor of per-example losses, got ",
      per_example_loss.defined() ? per_example_loss.shape().to_string() : std::string("undefined"));
  std::int64_t n = global_batch_size;
  if (n <= 0) {
    ReplicaContext* ctx = get_replica_context();
    n = per_example_loss.shape().dims()[0] * (ctx ? ctx->num_replicas_in_sync() : 1);
  }
  // An empty slice sums to 0 and stays connected to the weights, so its gradients are zeros (not
  // missing): every replica then all-reduces the same list of gradients.
  return ops::div(ops::reduce_sum(per_example_loss),
                  ops::scalar_like(per_example_loss, static_cast<double>(std::max<std::int64_t>(n, 1))));
}

}  // namespace chorus::losses
