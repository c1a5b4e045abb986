// The parity experiment shared by parity_test.cc (logical CPU devices) and
// parity_gpu_test.cc (logical GPUs): a small 2-layer model trained with k replicas on global
// batches of k·B rows and, separately, on one replica (default strategy) with the same rows.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "tests/optimizer/test_util.h"
#include <chorus/core/distribution.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/optimizer/optimizers.h>

namespace chorus::optimizers::testing {

constexpr int kIn = 4, kHidden = 8, kPerReplicaBatch = 6, kSteps = 20;

inline std::vector<float> pattern(std::size_t n, double a, double b) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(std::sin(a * static_cast<double>(i) + b));
  return v;
}

struct Model {
  Variable w1, b1, w2, b2;
  std::vector<Variable> vars() const { return {w1, b1, w2, b2}; }
};

inline Model make_model() {
  return {make_variable({.initial_value = Tensor::from_vector<float>(pattern(kIn * kHidden, 0.37, 0.1), {kIn, kHidden}),
                         .name = "dense/kernel"}),
          make_variable({.initial_value = Tensor::from_vector<float>(pattern(kHidden, 0.91, 0.3), {kHidden}),
                         .name = "dense/bias"}),
          make_variable({.initial_value = Tensor::from_vector<float>(pattern(kHidden, 0.53, 0.7), {kHidden, 1}),
                         .name = "dense_1/kernel"}),
          make_variable({.initial_value = Tensor::zeros({1}), .name = "dense_1/bias"})};
}

// Sum of per-example squared errors divided by the global batch (compute_average_loss).
inline Tensor loss_of(const Model& m, const Tensor& x, const Tensor& y, double global_batch) {
  Tensor h = ops::tanh(ops::matmul(x, m.w1.value()) + m.b1.value());
  Tensor pred = ops::matmul(h, m.w2.value()) + m.b2.value();
  return ops::reduce_sum(ops::square(pred - y)) / global_batch;
}

inline void train_step(Optimizer& opt, const Model& m, const Tensor& x, const Tensor& y, double global_batch) {
  ops::GradientTape tape;
  Tensor loss = loss_of(m, x, y, global_batch);
  std::vector<Variable> vars = m.vars();
  std::vector<Tensor> grads = tape.gradient(loss, vars);
  GradsAndVars gv;
  for (std::size_t i = 0; i < vars.size(); ++i) gv.emplace_back(grads[i], vars[i]);
  opt.apply_gradients(gv);
}

// Step s's global batch: rows that differ from step to step.
inline std::pair<Tensor, Tensor> batch(int step, int rows) {
  auto x = pattern(static_cast<std::size_t>(rows * kIn), 0.71, 0.2 + step);
  std::vector<float> y(static_cast<std::size_t>(rows));
  for (int r = 0; r < rows; ++r) y[r] = std::cos(0.4 * r + step) + 0.5f * x[r * kIn];
  return {Tensor::from_vector<float>(x, {rows, kIn}), Tensor::from_vector<float>(y, {rows, 1})};
}

using MakeOptimizer = std::function<std::unique_ptr<Optimizer>()>;

// Trains both ways; returns the worst per-variable relative difference (see below).
inline double train_and_compare(const std::vector<std::string>& devices, const MakeOptimizer& make_optimizer) {
  const int k = static_cast<int>(devices.size());
  const int rows = k * kPerReplicaBatch;
  // One replica, default strategy, whole batches.
  Model single = make_model();
  auto single_opt = make_optimizer();
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = batch(s, rows);
    train_step(*single_opt, single, x, y, rows);
  }

  distribute::MirroredStrategy strategy(devices);
  Model model;
  std::unique_ptr<Optimizer> opt;
  {
    auto scope = strategy.scope();
    model = make_model();
    opt = make_optimizer();
  }
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = batch(s, rows);
    std::vector<Tensor> xs, ys;
    for (int r = 0; r < k; ++r) {
      const std::string& dev = devices[static_cast<std::size_t>(r)];
      xs.push_back(ops::slice(x, {r * kPerReplicaBatch, 0}, {kPerReplicaBatch, kIn}).to(dev));
      ys.push_back(ops::slice(y, {r * kPerReplicaBatch, 0}, {kPerReplicaBatch, 1}).to(dev));
    }
    strategy.run([&](const Tensor& xr, const Tensor& yr) { train_step(*opt, model, xr, yr, rows); },
                 distribute::PerReplica<Tensor>(xs), distribute::PerReplica<Tensor>(ys));
    std::vector<Variable> all = opt->variables();
    for (const Variable& v : model.vars()) all.push_back(v);
    for (const Variable& v : all) {
      auto bytes = testing::component_bytes(v);
      EXPECT_EQ(bytes.size(), static_cast<std::size_t>(k)) << v.name();
      for (int r = 1; r < static_cast<int>(bytes.size()); ++r)
        EXPECT_EQ(bytes[r], bytes[0]) << v.name() << ": replica " << r << " differs from replica 0 after step " << s;
    }
  }
  EXPECT_EQ(opt->iterations().read_value().item<std::int64_t>(), kSteps);

  // Per variable: ‖distributed − single‖∞ / ‖single‖∞ (relative to the variable's scale: an element
  // that crosses zero has no meaningful element-wise relative error); the worst over variables.
  // The element-wise relative error (floored at 1e-3) is printed beside it.
  double worst = 0.0, worst_elementwise = 0.0;
  const auto a = model.vars(), b = single.vars();
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto da = a[i].read_value().to_vector<double>(), db = b[i].read_value().to_vector<double>();
    double diff = 0.0, scale = 0.0;
    for (std::size_t j = 0; j < da.size(); ++j) {
      diff = std::max(diff, std::abs(da[j] - db[j]));
      scale = std::max(scale, std::abs(db[j]));
      worst_elementwise = std::max(worst_elementwise, std::abs(da[j] - db[j]) / std::max(std::abs(db[j]), 1e-3));
    }
    worst = std::max(worst, diff / scale);
  }
  std::cout << "[parity] k=" << k << " max element-wise relative difference " << worst_elementwise << "\n";
  // The model moved: the comparison is not between two untouched initial values.
  const auto init = make_model();
  EXPECT_GT(std::abs(b[0].read_value().to_vector<double>()[0] - init.w1.read_value().to_vector<double>()[0]), 1e-3);
  return worst;
}

}  // namespace chorus::optimizers::testing
