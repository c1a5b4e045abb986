// Model::train_step, Keras's override point (issue 41, item 1): fit runs it on every replica, a
// subclass that delegates to the default trains bitwise as the model itself, and a custom step
// (here: only the last layer learns, with the step's loss the compiled one) is what fit runs —
// under the default strategy and under MirroredStrategy on 2 logical CPU devices.
#include <gtest/gtest.h>

#include <atomic>

#include "tests/core/test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/runtime.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/model/layers.h>
#include <chorus/model/losses.h>
#include <chorus/model/model.h>
#include <chorus/ops/ops.h>
#include <chorus/ops/tape.h>
#include <chorus/optimizer/sgd.h>

namespace chorus {
namespace {

void make_cpus(int n) {
  chorus::internal::reset_runtime_for_testing();
  config::set_visible_devices({}, "GPU");
  if (n > 1)
    config::set_logical_device_configuration(
        config::list_physical_devices("CPU")[0],
        std::vector<LogicalDeviceConfiguration>(static_cast<std::size_t>(n), {.memory_limit_mb = 256}));
}

std::vector<layers::LayerPtr> two_dense() {
  return {layers::Dense(6, "relu", true, initializers::glorot_uniform(1)),
          layers::Dense(2, "", true, initializers::glorot_uniform(2))};
}

data::Dataset rows() {
  const Tensor x = ops::stateless_random_uniform({32, 4}, {7, 7});
  const Tensor y = ops::stateless_random_uniform({32, 2}, {8, 8});
  return data::Dataset::from_tensor_slices({x, y}).batch(8);
}

// Counts its steps and delegates to the default.
class CountingSequential : public model::Sequential {
 public:
  using model::Sequential::Sequential;
  void train_step(const data::Element& batch) override {
    calls.fetch_add(1);
    EXPECT_NE(get_replica_context(), nullptr) << "train_step runs in replica context";
    EXPECT_EQ(global_batch_size(), 8) << "every replica's rows of the step";
    model::Sequential::train_step(batch);
  }
  std::atomic<int> calls{0};
};

// A custom step: the same loss, but only the last layer's weights are updated.
class LastLayerOnly : public model::Model {
 public:
  LastLayerOnly() : model::Model("last_layer_only") {
    first_ = track(layers::Dense(6, "relu", true, initializers::glorot_uniform(1)));
    last_ = track(layers::Dense(2, "", true, initializers::glorot_uniform(2)));
  }
  void train_step(const data::Element& batch) override {
    const std::vector<Variable> vars = last_->trainable_weights();
    optimizers::Gradients g;
    {
      ops::GradientTape tape;
      const Tensor loss = compute_loss(batch[1], (*this)(batch[0], true));
      g = optimizer().compute_gradients(loss, vars, tape);
    }
    optimizer().apply_gradients(std::move(g));
  }
  layers::LayerPtr first_, last_;

 protected:
  Tensor call(const Tensor& x, bool training) override { return (*last_)((*first_)(x, training), training); }
};

std::vector<std::vector<float>> values(const std::vector<Variable>& vars) {
  std::vector<std::vector<float>> out;
  for (const Variable& v : vars) out.push_back(v.read_value().to_vector<float>());
  return out;
}

// `body` inside the strategy's scope, or under the default strategy when there is none.
template <typename F>
void in_scope(distribute::MirroredStrategy* s, F body) {
  if (s == nullptr) return body();
  auto scope = s->scope();
  body();
}

template <typename M>
std::vector<std::vector<float>> fit_under(int replicas, M& m, std::vector<float>* losses = nullptr) {
  m.compile(std::make_shared<optimizers::SGD>(0.1), std::make_shared<losses::MeanSquaredError>());
  const model::History h = m.fit(rows(), {.epochs = 2, .verbose = 0});
  if (losses != nullptr)
    for (double l : h.history.at("loss")) losses->push_back(static_cast<float>(l));
  (void)replicas;
  return values(m.variables());
}

TEST(TrainStep, FitRunsTheOverrideOnEveryReplicaAndTheDefaultTrainsAsTheModelItself) {
  for (const int replicas : {1, 2}) {
    make_cpus(replicas);
    std::unique_ptr<distribute::MirroredStrategy> s;
    if (replicas > 1) s = std::make_unique<distribute::MirroredStrategy>(chorus::testing::cpus(replicas));
    std::vector<std::vector<float>> plain, counted;
    int calls = 0;
    in_scope(s.get(), [&] {
      model::Sequential m(two_dense());
      plain = fit_under(replicas, m);
    });
    in_scope(s.get(), [&] {
      CountingSequential m(two_dense());
      counted = fit_under(replicas, m);
      calls = m.calls.load();
    });
    EXPECT_EQ(calls, 2 * 4 * replicas) << "2 epochs of 4 batches, on each of " << replicas << " replicas";
    EXPECT_EQ(counted, plain) << "a train_step that delegates trains bitwise as the model (" << replicas
                              << " replicas)";
  }
  chorus::internal::reset_runtime_for_testing();
}

TEST(TrainStep, ACustomStepIsWhatFitRuns) {
  for (const int replicas : {1, 2}) {
    make_cpus(replicas);
    std::unique_ptr<distribute::MirroredStrategy> s;
    if (replicas > 1) s = std::make_unique<distribute::MirroredStrategy>(chorus::testing::cpus(replicas));
    in_scope(s.get(), [&] {
      LastLayerOnly m;
      m.build(Shape{8, 4});
      const auto first_before = values(m.first_->trainable_weights());
      const auto last_before = values(m.last_->trainable_weights());
      std::vector<float> losses;
      fit_under(replicas, m, &losses);
      EXPECT_EQ(values(m.first_->trainable_weights()), first_before) << "the custom step never updates it";
      EXPECT_NE(values(m.last_->trainable_weights()), last_before);
      ASSERT_EQ(losses.size(), 2u);
      EXPECT_LT(losses[1], losses[0]) << "compute_loss feeds fit's loss metric, and the last layer learns";
    });
  }
  chorus::internal::reset_runtime_for_testing();
}

}  // namespace
}  // namespace chorus
