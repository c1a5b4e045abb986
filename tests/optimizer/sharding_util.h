// Shared by the ZeRO tests (tests/optimizer/sharding_parity_test.cc,
// tests/checkpoint/checkpoint_sharded_test.cc, tests/distribute/sharding_mpi_test.cc,
// tests/model/sharding_gpu_test.cc): a small Sequential model whose variables give
// uneven and empty shards over 2, 3 and 4 replicas — kernels [5,7] (35 elements: 9,9,9,8 over 4),
// [7,3] (21: 6,6,6,3), [3,1] (3: 1,1,1,0), biases [7], [3] and [1] (1,0,0,0) —, a fixed global
// batch of 12 rows (divisible by 2, 3 and 4, so every replica count sees the same rows per step),
// a custom training loop (strategy.run + GradientTape + apply_gradients) and fit.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <chorus/checkpoint/checkpoint.h>
#include <chorus/core/config.h>
#include <chorus/core/distributed_variable.h>
#include <chorus/core/runtime.h>
#include <chorus/core/sharded_variable.h>
#include <chorus/data/dataset.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/model/initializers.h>
#include <chorus/model/layers.h>
#include <chorus/model/losses.h>
#include <chorus/model/model.h>
#include <chorus/ops/ops.h>
#include <chorus/optimizer/optimizers.h>

namespace chorus::sharding_testing {

constexpr int kIn = 5, kGlobalRows = 12;

// A fresh runtime with `n` logical CPU devices of 64 MiB each, no GPU.
inline void make_cpus(int n) {
  chorus::internal::reset_runtime_for_testing();
  config::set_visible_devices({}, "GPU");
  std::vector<LogicalDeviceConfiguration> cfgs(static_cast<std::size_t>(n),
                                               LogicalDeviceConfiguration{.memory_limit_mb = 64});
  config::set_logical_device_configuration(config::list_physical_devices("CPU")[0], cfgs);
}

inline std::vector<std::string> cpus(int n) {
  std::vector<std::string> d;
  for (int i = 0; i < n; ++i) d.push_back("/cpu:" + std::to_string(i));
  return d;
}

// Built in the caller's strategy scope; the same initial values for the same seeds everywhere.
inline std::unique_ptr<model::Sequential> make_model() {
  auto m = std::make_unique<model::Sequential>(
      std::vector<layers::LayerPtr>{layers::Dense(7, "tanh", true, initializers::glorot_uniform(1)),
                                    layers::Dense(3, "tanh", true, initializers::glorot_uniform(2)),
                                    layers::Dense(1, "", true, initializers::glorot_uniform(3))});
  m->build(Shape({kGlobalRows, kIn}));
  return m;
}

enum class Opt { kAdam, kSgdMomentum, kAdamGlobalClipnorm, kAdamWeightDecay, kSgdClipnorm };

inline const char* opt_name(Opt o) {
  switch (o) {
    case Opt::kAdam: return "Adam";
    case Opt::kSgdMomentum: return "SgdMomentum";
    case Opt::kAdamGlobalClipnorm: return "AdamGlobalClipnorm";
    case Opt::kAdamWeightDecay: return "AdamWeightDecay";
    case Opt::kSgdClipnorm: return "SgdClipnorm";
  }
  return "?";
}

// Created in the caller's strategy scope. The clip norm is small enough to clip every step here.
inline std::shared_ptr<optimizers::Optimizer> make_optimizer(Opt o) {
  switch (o) {
    case Opt::kAdam: return std::make_shared<optimizers::Adam>(optimizers::AdamOptions{.learning_rate = 0.05});
    case Opt::kSgdMomentum:
      return std::make_shared<optimizers::SGD>(optimizers::SGDOptions{.learning_rate = 0.1, .momentum = 0.9});
    case Opt::kAdamGlobalClipnorm:
      return std::make_shared<optimizers::Adam>(
          optimizers::AdamOptions{.learning_rate = 0.05, .global_clipnorm = 0.05});
    case Opt::kAdamWeightDecay:
      return std::make_shared<optimizers::Adam>(optimizers::AdamOptions{.learning_rate = 0.05, .weight_decay = 0.1});
    case Opt::kSgdClipnorm:
      return std::make_shared<optimizers::SGD>(
          optimizers::SGDOptions{.learning_rate = 0.1, .momentum = 0.9, .clipnorm = 0.02});
  }
  return nullptr;
}

// Step s's global batch: x [12, 5], y [12, 1], different every step.
inline std::pair<Tensor, Tensor> batch(int s) {
  std::vector<float> x(kGlobalRows * kIn), y(kGlobalRows);
  for (int i = 0; i < kGlobalRows * kIn; ++i) x[i] = static_cast<float>(std::sin(0.37 * i + 1.1 * s + 0.2));
  for (int r = 0; r < kGlobalRows; ++r) y[r] = static_cast<float>(std::cos(0.5 * r + 0.7 * s) + 0.3 * x[r * kIn]);
  return {Tensor::from_vector<float>(x, {kGlobalRows, kIn}), Tensor::from_vector<float>(y, {kGlobalRows, 1})};
}

// Steps [first, first + steps) of the custom loop: each replica takes its 12/k rows, the loss is
// the sum of squared errors over the global batch of 12.
inline void train_loop(distribute::Strategy& strategy, model::Sequential& m, optimizers::Optimizer& opt, int first,
                       int steps) {
  const int k = strategy.num_replicas_in_sync();
  const int rows = kGlobalRows / k;
  const std::vector<std::string> devices = strategy.replica_devices();
  for (int s = first; s < first + steps; ++s) {
    auto [x, y] = batch(s);
    std::vector<Tensor> xs, ys;
    for (int r = 0; r < k; ++r) {
      xs.push_back(ops::slice(x, {r * rows, 0}, {rows, kIn}).to(devices[static_cast<std::size_t>(r)]));
      ys.push_back(ops::slice(y, {r * rows, 0}, {rows, 1}).to(devices[static_cast<std::size_t>(r)]));
    }
    strategy.run(
        [&](const Tensor& xr, const Tensor& yr) {
          ops::GradientTape tape;
          Tensor pred = m(xr, true);
          Tensor loss = ops::reduce_sum(ops::square(pred - yr)) / static_cast<double>(kGlobalRows);
          std::vector<Variable> vars = m.trainable_variables();
          std::vector<Tensor> grads = opt.get_unscaled_gradients(tape.gradient(opt.get_scaled_loss(loss), vars));
          optimizers::GradsAndVars gv;
          for (std::size_t i = 0; i < vars.size(); ++i) gv.emplace_back(grads[i], vars[i]);
          opt.apply_gradients(gv);
        },
        distribute::PerReplica<Tensor>(xs), distribute::PerReplica<Tensor>(ys));
  }
}

// fit over steps [0, steps): the same global batches, mean squared error.
inline void train_fit(model::Sequential& m, std::shared_ptr<optimizers::Optimizer> opt, int steps) {
  std::vector<Tensor> xs, ys;
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch(s);
    xs.push_back(x);
    ys.push_back(y);
  }
  m.compile(std::move(opt), std::make_shared<losses::MeanSquaredError>());
  m.fit(data::Dataset::from_tensor_slices({ops::concat(xs, 0), ops::concat(ys, 0)}).batch(kGlobalRows),
        {.epochs = 1, .verbose = 0});
}

inline std::vector<unsigned char> bytes_of(const Tensor& t) {
  Tensor host = t.to("/cpu:0");
  std::vector<unsigned char> out(host.nbytes());
  if (!out.empty()) host.copy_to_host(out.data());
  return out;
}

// Every component of `v` (one per replica), raw bytes.
inline std::vector<std::vector<unsigned char>> component_bytes(const Variable& v) {
  std::vector<std::vector<unsigned char>> out;
  const DistributedVariable* d = as_distributed(v);
  EXPECT_NE(d, nullptr) << v.name();
  if (d == nullptr) return out;
  for (const Variable& c : d->components()) out.push_back(bytes_of(c.read_value()));
  return out;
}

inline Tensor checkpoint_value(const Variable& v) {
  const DistributedVariable* d = as_distributed(v);
  EXPECT_NE(d, nullptr) << v.name();
  return d->checkpoint_value().clone();
}

// max |a − b| / max |b| over the elements (the per-variable relative difference of parity.h).
inline double relative_difference(const Tensor& a, const Tensor& b) {
  const auto da = a.to_vector<double>(), db = b.to_vector<double>();
  EXPECT_EQ(da.size(), db.size());
  double diff = 0.0, scale = 1e-30;
  for (std::size_t i = 0; i < da.size() && i < db.size(); ++i) {
    diff = std::max(diff, std::abs(da[i] - db[i]));
    scale = std::max(scale, std::abs(db[i]));
  }
  return diff / scale;
}

// A model and optimizer's state, host copies: the trainable variables (whole), every slot's
// checkpoint value, and the optimizer's iterations.
struct State {
  std::vector<Tensor> weights, slots;
  std::int64_t iterations = -1;
};

// Under MultiWorkerMirroredStrategy a collective (the slots' checkpoint values gather every
// worker's shards): every worker calls it.
inline State snapshot(const model::Sequential& m, const optimizers::Optimizer& opt) {
  State s;
  for (const Variable& v : m.trainable_variables()) s.weights.push_back(v.read_value().to("/cpu:0"));
  for (const auto& ref : opt.slot_variables()) s.slots.push_back(checkpoint_value(ref.slot).to("/cpu:0"));
  s.iterations = opt.iterations().read_value().item<std::int64_t>();
  return s;
}

// A fresh model and Adam in `strategy`'s scope, `path` restored into them (the slots on creation,
// at the first step; `first` iterations expected), then `train(model, optimizer)`; every value of
// the checkpoint must have been consumed by then. Returns the state after training.
inline State resume_and_train(distribute::Strategy& strategy, const std::string& path, int first,
                              const std::function<void(model::Sequential&, optimizers::Optimizer&)>& train) {
  std::unique_ptr<model::Sequential> m;
  std::shared_ptr<optimizers::Optimizer> opt;
  {
    auto scope = strategy.scope();
    m = make_model();
    opt = make_optimizer(Opt::kAdam);
  }
  train::Checkpoint ckpt({{"model", *m}, {"optimizer", *opt}});
  train::LoadStatus status = ckpt.read(path);
  EXPECT_EQ(opt->iterations().read_value().item<std::int64_t>(), first);
  train(*m, *opt);
  status.assert_consumed();  // the slots were created, and restored, by the first step
  return snapshot(*m, *opt);
}

// Iterations equal; weights and slots of equal shapes within `rel` relative (0: bit for bit).
inline void expect_states_equal(const State& got, const State& want, double rel, const std::string& what) {
  EXPECT_EQ(got.iterations, want.iterations) << what;
  ASSERT_EQ(got.weights.size(), want.weights.size()) << what;
  ASSERT_EQ(got.slots.size(), want.slots.size()) << what;
  auto check = [&](const Tensor& a, const Tensor& b, const std::string& name) {
    ASSERT_EQ(a.shape(), b.shape()) << what << " " << name;
    if (rel == 0.0) {
      EXPECT_EQ(bytes_of(a), bytes_of(b))
          << what << " " << name << " (relative difference " << relative_difference(a, b) << ")";
    } else {
      EXPECT_LE(relative_difference(a, b), rel) << what << " " << name;
    }
  };
  for (std::size_t i = 0; i < got.weights.size(); ++i)
    check(got.weights[i], want.weights[i], "weight " + std::to_string(i));
  for (std::size_t i = 0; i < got.slots.size(); ++i) check(got.slots[i], want.slots[i], "slot " + std::to_string(i));
}

}  // namespace chorus::sharding_testing
