// Metrics (tf.keras.metrics): running aggregates over batches.
//
//   metrics::SparseCategoricalAccuracy acc;           // create inside strategy.scope() when distributed
//   acc.update_state(labels, logits);                  // in each replica, every step
//   double a = acc.result();                           // cross-replica: all replicas combined
//
// State lives in ON_READ variables with SUM aggregation (total, count): under a strategy each
// replica updates its own components without communication, and reading result() in cross-replica
// context sums them — TF's design for metrics. reset_state() zeroes them (in cross-replica context).
// result() of nothing is 0.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <chorus/core/tensor.h>
#include <chorus/core/variable.h>

namespace chorus::metrics {

class Metric {
 public:
  explicit Metric(std::string name);
  virtual ~Metric() = default;
  const std::string& name() const { return name_; }
  virtual void update_state(const Tensor& y_true, const Tensor& y_pred) = 0;
  double result() const;
  // The state result() is computed from: (total, count), and that computation (Model::fit sums
  // the states of every worker before it, so a metric covers the whole job's data).
  std::pair<double, double> state() const;
  static double result_of(double total, double count) { return count == 0 ? 0.0 : total / count; }
  void reset_state();
  std::vector<Variable> variables() const { return {total_, count_}; }

 protected:
  // Adds sum(values) to total and values.num_elements() to count (values: float tensor).
  void accumulate(const Tensor& values);

 private:
  std::string name_;
  Variable total_, count_;
};
using MetricPtr = std::shared_ptr<Metric>;

// The mean of the values passed (Keras's Mean): update_state(values, values) or add(values).
class Mean final : public Metric {
 public:
  explicit Mean(std::string name = "mean") : Metric(std::move(name)) {}
  void update_state(const Tensor& values, const Tensor&) override { accumulate(values); }
  void add(const Tensor& values) { accumulate(values); }
};

// argmax(y_pred, -1) == y_true (class ids).
class SparseCategoricalAccuracy final : public Metric {
 public:
  explicit SparseCategoricalAccuracy(std::string name = "sparse_categorical_accuracy") : Metric(std::move(name)) {}
  void update_state(const Tensor& y_true, const Tensor& y_pred) override;
};

// argmax(y_pred, -1) == argmax(y_true, -1) (one-hot labels).
class CategoricalAccuracy final : public Metric {
 public:
  explicit CategoricalAccuracy(std::string name = "categorical_accuracy") : Metric(std::move(name)) {}
  void update_state(const Tensor& y_true, const Tensor& y_pred) override;
};

// y_true == y_pred elementwise (after casting y_pred to y_true's dtype).
class Accuracy final : public Metric {
 public:
  explicit Accuracy(std::string name = "accuracy") : Metric(std::move(name)) {}
  void update_state(const Tensor& y_true, const Tensor& y_pred) override;
};

// By Keras name: "accuracy"/"acc" (resolved against the loss as Keras does: sparse labels →
// SparseCategoricalAccuracy named "accuracy"), "sparse_categorical_accuracy",
// "categorical_accuracy", "mean". Unknown → InvalidArgumentError listing names.
MetricPtr get(const std::string& name, bool sparse_labels = true);
// The same metric named `prefix` + its name ("out1_" + "accuracy"): a model with several outputs
// has one of each per output, named as Keras names them.
MetricPtr get(const std::string& name, bool sparse_labels, const std::string& prefix);

}  // namespace chorus::metrics
