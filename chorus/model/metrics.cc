#include <chorus/model/metrics.h>

#include <chorus/core/error.h>
#include <chorus/ops/ops.h>

namespace chorus::metrics {

Metric::Metric(std::string name) : name_(std::move(name)) {
  const VariableArgs base{.initial_value = Tensor::zeros({}, DType::kFloat64),
                          .trainable = false,
                          .synchronization = VariableSynchronization::kOnRead,
                          .aggregation = VariableAggregation::kSum};
  VariableArgs total = base, count = base;
  total.name = name_ + "/total";
  count.name = name_ + "/count";
  total_ = make_variable(total);
  count_ = make_variable(count);
}

void Metric::accumulate(const Tensor& values) {
  const Tensor v = values.dtype() == DType::kFloat64 ? values : ops::cast(values, DType::kFloat64);
  const std::string device = total_.value().device_name();
  Tensor sum = ops::reduce_sum(v);
  total_.assign_add(sum.device_name() == device ? sum : sum.to(device));
  count_.assign_add(Tensor::scalar(static_cast<double>(values.num_elements()), device));
}

double Metric::result() const {
  const auto [total, count] = state();
  return result_of(total, count);
}

std::pair<double, double> Metric::state() const {
  return {total_.read_value().item<double>(), count_.read_value().item<double>()};
}

void Metric::reset_state() {
  total_.assign(Tensor::zeros({}, DType::kFloat64));
  count_.assign(Tensor::zeros({}, DType::kFloat64));
}

namespace {

// Whether each row (all axes but the last) of the predictions is finite: a prediction holding NaN
// or Inf has no meaningful argmax and counts as wrong. Sum of x - x along the class axis: 0 for
// finite rows, NaN otherwise.
Tensor finite_rows(const Tensor& y_pred) {
  const Tensor probe = ops::reduce_sum(ops::sub(y_pred, y_pred), {-1});
  return ops::equal(probe, ops::zeros_like(probe));
}

}  // namespace

void SparseCategoricalAccuracy::update_state(const Tensor& y_true, const Tensor& y_pred) {
  CHORUS_REQUIRE(y_pred.shape().rank() >= 1, InvalidArgumentError, name(), ": y_pred needs a class axis");
  if (y_pred.shape().dims()[0] == 0) return accumulate(Tensor::zeros({0}, DType::kFloat64, y_pred.device_name()));
  const Tensor labels = ops::reshape(ops::cast(y_true, DType::kInt64), {y_true.num_elements()});
  const Tensor predicted = ops::reshape(ops::argmax(y_pred, -1), {y_true.num_elements()});
  const Tensor finite = ops::reshape(finite_rows(y_pred), {y_true.num_elements()});
  accumulate(ops::cast(ops::logical_and(ops::equal(labels, predicted), finite), DType::kFloat64));
}

void CategoricalAccuracy::update_state(const Tensor& y_true, const Tensor& y_pred) {
  if (y_pred.shape().dims()[0] == 0) return accumulate(Tensor::zeros({0}, DType::kFloat64, y_pred.device_name()));
  accumulate(
      ops::cast(ops::logical_and(ops::equal(ops::argmax(y_true, -1), ops::argmax(y_pred, -1)), finite_rows(y_pred)),
                DType::kFloat64));
}

void Accuracy::update_state(const Tensor& y_true, const Tensor& y_pred) {
  accumulate(ops::cast(ops::equal(y_true, ops::cast(y_pred, y_true.dtype())), DType::kFloat64));
}

MetricPtr get(const std::string& name, bool sparse_labels) { return get(name, sparse_labels, ""); }

MetricPtr get(const std::string& name, bool sparse_labels, const std::string& prefix) {
  if (name == "accuracy" || name == "acc") {
    if (sparse_labels) return std::make_shared<SparseCategoricalAccuracy>(prefix + "accuracy");
    return std::make_shared<CategoricalAccuracy>(prefix + "accuracy");
  }
  if (name == "sparse_categorical_accuracy")
    return std::make_shared<SparseCategoricalAccuracy>(prefix + "sparse_categorical_accuracy");
  if (name == "categorical_accuracy") return std::make_shared<CategoricalAccuracy>(prefix + "categorical_accuracy");
  if (name == "mean") return std::make_shared<Mean>(prefix + "mean");
  throw InvalidArgumentError("unknown metric '" + name +
                             "'; use accuracy, sparse_categorical_accuracy, categorical_accuracy or mean");
}

}  // namespace chorus::metrics
