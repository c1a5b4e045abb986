// ZeRO stage 3 (distribute/parameter_gather.h): which variables become sharded parameters; a
// parameter read in a replica is its whole value and its gradient is this replica's shard of the
// summed gradient (uneven and empty shards); a layer call gathers its parameters once, frees their
// storage after the call when a tape records it, gathers them again for the backward pass and
// frees them after; a persistent tape can ask twice; without a tape nothing is released; a layer
// returning its own weight keeps it; released storage is an error to read, never garbage.
#include <gtest/gtest.h>

#include <array>

#include "tests/core/test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/distribution.h>
#include <chorus/core/sharded_variable.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/distribute/mirrored_variable.h>
#include <chorus/distribute/zero_variable.h>
#include <chorus/model/initializers.h>
#include <chorus/model/layer.h>
#include <chorus/model/layers.h>
#include <chorus/model/mixed_precision.h>
#include <chorus/ops/ops.h>
#include <chorus/optimizer/adam.h>

namespace chorus::distribute {
namespace {

using chorus::testing::cpus;
void make_cpus(int n) { chorus::testing::make_cpus(n, 64); }

std::vector<float> iota(int n, float from = 1) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = from + static_cast<float>(i);
  return v;
}

TEST(StageThree, TrainableFloatingOnWriteVariablesBecomeParameters) {
  make_cpus(3);
  MirroredStrategy s(cpus(3), {.sharding = {.stage = 3}});
  auto scope = s.scope();
  Variable w = make_variable({.initial_value = Tensor::from_vector<float>(iota(7), {7}), .name = "w"});
  Variable frozen =
      make_variable({.initial_value = Tensor::from_vector<float>(iota(7), {7}), .name = "frozen", .trainable = false});
  Variable count = make_variable({.initial_value = Tensor::scalar<std::int64_t>(0), .name = "count"});
  Variable slot = make_variable(
      {.initial_value = Tensor::zeros({7}), .name = "w/m", .trainable = false, .shard_over_replicas = true});
  ASSERT_NE(as_sharded(w), nullptr);
  EXPECT_TRUE(as_sharded(w)->gathers_parameters());
  EXPECT_EQ(as_sharded(w)->layout().length(2), 1);  // 7 over 3: 3, 3, 1
  EXPECT_NE(dynamic_cast<MirroredVariable*>(frozen.impl().get()), nullptr);
  EXPECT_NE(dynamic_cast<MirroredVariable*>(count.impl().get()), nullptr);
  ASSERT_NE(as_sharded(slot), nullptr);
  EXPECT_FALSE(as_sharded(slot)->gathers_parameters());
  // Cross-replica reads are whole, and the shards' components hold 3, 3 and 1 elements.
  EXPECT_EQ(w.value().to_vector<float>(), iota(7));
  EXPECT_EQ(w.value().shape(), Shape({7}));
  EXPECT_EQ(as_sharded(w)->components()[2].value().to_vector<float>(), std::vector<float>{7});
}

// loss_r = Σ w ⊙ c_r with c_r = (r + 1)·(1, 2, ..., E): the summed gradient is n(n+1)/2·(1..E);
// replica r receives its slice of it.
TEST(StageThree, ReadInReplicaIsWholeAndTheGradientIsTheShardOfTheSum) {
  for (const int n : {1, 2, 3, 4}) {
    make_cpus(n);
    MirroredStrategy s(cpus(n), {.sharding = {.stage = 3}});
    Variable w, b;
    {
      auto scope = s.scope();
      w = make_variable({.initial_value = Tensor::from_vector<float>(iota(35), {5, 7}), .name = "w"});
      b = make_variable({.initial_value = Tensor::from_vector<float>({0.5f}, {1}), .name = "b"});
    }
    const PerReplica<std::vector<Tensor>> out = s.run([&] {
      ReplicaContext* ctx = get_replica_context();
      const int r = ctx->replica_id_in_sync_group();
      ops::GradientTape tape;
      const Tensor whole = w.value();
      EXPECT_EQ(whole.shape(), Shape({5, 7}));
      EXPECT_EQ(whole.to_vector<float>(), iota(35));
      const Tensor c = Tensor::from_vector<float>(iota(35), {5, 7}, whole.device_name());
      const Tensor loss = ops::add(ops::reduce_sum(ops::mul(ops::mul(whole, c), ops::scalar_like(c, r + 1.0))),
                                   ops::reduce_sum(b.value()));
      return tape.gradient(loss, std::vector<Variable>{w, b});
    });
    const float total = static_cast<float>(n * (n + 1) / 2);
    const ShardLayout lw = ShardLayout::of(35, n), lb = ShardLayout::of(1, n);
    for (int r = 0; r < n; ++r) {
      const std::vector<Tensor>& g = out.values()[static_cast<std::size_t>(r)];
      ASSERT_EQ(g[0].shape(), Shape({lw.length(r)})) << "n=" << n << " r=" << r;
      std::vector<float> want;
      for (std::int64_t i = lw.begin(r); i < lw.begin(r) + lw.length(r); ++i)
        want.push_back(total * static_cast<float>(i + 1));
      EXPECT_EQ(g[0].to_vector<float>(), want) << "n=" << n << " r=" << r;
      ASSERT_EQ(g[1].shape(), Shape({lb.length(r)}));  // [1] on replica 0, [0] elsewhere
      if (lb.length(r) == 1) {
        EXPECT_EQ(g[1].to_vector<float>(), std::vector<float>{static_cast<float>(n)});
      }
    }
  }
}

// A layer that multiplies by its weight and keeps the value it read, to look at it afterwards.
class Scale final : public layers::Layer {
 public:
  explicit Scale(bool return_weight = false) : Layer("scale"), return_weight_(return_weight) {}
  std::string class_name() const override { return "Scale"; }
  // Per replica (every replica calls the layer): the weight's value during the last call, and
  // the value read a second time in the same call.
  std::array<Tensor, 4> seen, seen_again;

 protected:
  void build_weights(const Shape& input_shape) override {
    w_ = add_weight("w", {input_shape.dims().back()}, [](const Shape& shape, DType) {
      return Tensor::from_vector<float>(iota(static_cast<int>(shape.num_elements())), shape);
    });
  }
  Tensor call(const Tensor& x, bool) override {
    const auto r = static_cast<std::size_t>(get_replica_context()->replica_id_in_sync_group());
    seen[r] = read_weight(w_);
    seen_again[r] = read_weight(w_);
    return return_weight_ ? seen[r] : ops::mul(x, seen[r]);
  }

 private:
  bool return_weight_;
  Variable w_;
};

TEST(StageThree, ALayerCallGathersOnceAndFreesItsParametersUntilTheBackwardPass) {
  make_cpus(2);
  MirroredStrategy s(cpus(2), {.sharding = {.stage = 3}});
  Scale layer;
  {
    auto scope = s.scope();
    layer.build({1, 6});
  }
  const PerReplica<std::vector<float>> out = s.run([&] {
    std::vector<float> result;
    Variable w = layer.weights()[0];
    const auto r = static_cast<std::size_t>(get_replica_context()->replica_id_in_sync_group());
    const std::string device = s.replica_devices()[r];
    const Tensor x = Tensor::ones({2, 6}, DType::kFloat32, device);
    {
      // Without a tape the whole value is the layer's for the call and simply dies after it.
      const Tensor y = layer(x);
      EXPECT_EQ(layer.seen[r].buffer(), layer.seen_again[r].buffer()) << "one gather per call";
      EXPECT_FALSE(layer.seen[r].buffer()->released());
      EXPECT_EQ(y.to_vector<float>()[5], 6.0f);
    }
    for (const bool persistent : {false, true}) {
      ops::GradientTape tape(persistent);
      const Tensor y = layer(x);
      EXPECT_TRUE(layer.seen[r].buffer()->released()) << "freed after the call (persistent " << persistent << ")";
      EXPECT_THROW(layer.seen[r].data(), FailedPreconditionError);
      EXPECT_THROW(layer.seen[r].to_vector<float>(), FailedPreconditionError);
      const Tensor loss = ops::reduce_sum(y);
      std::vector<Tensor> g = tape.gradient(loss, std::vector<Variable>{w});
      EXPECT_TRUE(layer.seen[r].buffer()->released()) << "freed again once reduce-scattered";
      // Each replica's x is 2 rows of ones: the gradient of each element is 2, summed over 2 replicas.
      EXPECT_EQ(g[0].to_vector<float>(), std::vector<float>(3, 4.0f));
      if (persistent) {
        g = tape.gradient(loss, std::vector<Variable>{w});
        EXPECT_EQ(g[0].to_vector<float>(), std::vector<float>(3, 4.0f)) << "gathered again for a second gradient";
      }
      result = g[0].to_vector<float>();
    }
    // Outside the call value() is gathered for the read alone.
    result.push_back(w.value().to_vector<float>()[5]);
    return result;
  });
  for (const auto& v : out.values()) EXPECT_EQ(v, (std::vector<float>{4, 4, 4, 6}));
}

TEST(StageThree, ALayerReturningItsWeightKeepsIt) {
  make_cpus(2);
  MirroredStrategy s(cpus(2), {.sharding = {.stage = 3}});
  Scale layer(/*return_weight=*/true);
  {
    auto scope = s.scope();
    layer.build({1, 4});
  }
  s.run([&] {
    const auto r = static_cast<std::size_t>(get_replica_context()->replica_id_in_sync_group());
    ops::GradientTape tape;
    const Tensor y = layer(Tensor::ones({1, 4}, DType::kFloat32, s.replica_devices()[r]));
    EXPECT_FALSE(layer.seen[r].buffer()->released());
    EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
    const std::vector<Tensor> g = tape.gradient(ops::reduce_sum(y), std::vector<Variable>{layer.weights()[0]});
    EXPECT_EQ(g[0].to_vector<float>(), (std::vector<float>{2, 2}));  // ones, summed over 2 replicas
    EXPECT_FALSE(layer.seen[r].buffer()->released()) << "the output aliases the weight: kept after backward too";
    EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  });
}

// An input-gradient penalty (WGAN-GP's): an inner tape's d out / d x is part of the loss an outer
// tape differentiates, so the outer backward pass runs the inner one's ops again on the gathered
// weights. Stage 3's summed gradient shards equal stage 0's local gradients summed over the
// replicas (2 replicas, a Dense layer of 4×3 + 3 parameters: shards 8 and 7).
std::vector<float> penalty_gradients(int stage) {
  make_cpus(2);
  MirroredStrategy s(cpus(2), {.sharding = {.stage = stage}});
  layers::LayerPtr dense = layers::Dense(3, "tanh", true, initializers::glorot_uniform(1));
  {
    auto scope = s.scope();
    dense->build({1, 4});
  }
  const PerReplica<std::vector<Tensor>> out = s.run([&] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    const Tensor x = ops::mul(Tensor::ones({2, 4}, DType::kFloat32, s.replica_devices()[static_cast<std::size_t>(r)]),
                              ops::scalar_like(Tensor::ones({}), 0.5 + r));
    ops::GradientTape outer;
    Tensor y, gx;
    {
      ops::GradientTape inner;
      inner.watch(x);
      y = ops::reduce_sum((*dense)(x, true));
      gx = inner.gradient(y, std::vector<Tensor>{x})[0];
    }
    const Tensor loss = ops::add(y, ops::reduce_sum(ops::square(gx)));
    return outer.gradient(loss, dense->trainable_weights());
  });
  // Whole summed gradients, kernel then bias.
  std::vector<float> total;
  for (std::size_t v = 0; v < 2; ++v) {
    std::vector<float> whole;
    for (int r = 0; r < 2; ++r) {
      const std::vector<float> g = out.values()[static_cast<std::size_t>(r)][v].to_vector<float>();
      if (stage == 3) {
        whole.insert(whole.end(), g.begin(), g.end());  // replica r's shard of the sum
      } else {
        if (whole.empty()) whole.assign(g.size(), 0.0f);
        for (std::size_t i = 0; i < g.size(); ++i) whole[i] += g[i];
      }
    }
    total.insert(total.end(), whole.begin(), whole.end());
  }
  return total;
}

TEST(StageThree, AnInputGradientPenaltyMatchesStageZero) {
  const std::vector<float> s0 = penalty_gradients(0), s3 = penalty_gradients(3);
  ASSERT_EQ(s0.size(), 15u);
  ASSERT_EQ(s3.size(), s0.size());
  for (std::size_t i = 0; i < s0.size(); ++i) EXPECT_NEAR(s3[i], s0[i], 1e-6f * std::max(1.0f, std::abs(s0[i]))) << i;
}

// A shared Dense layer called twice in one step (two gathers, two reduce-scatters summed into one
// shard gradient), a BatchNormalization layer (gamma and beta sharded, the moving statistics
// mirrored), under float32 and under mixed_bfloat16: 3 Adam steps at stage 3 end with stage 0's
// weights. float32: 1e-5 relative — the shared layer's two uses are summed over the replicas one
// use at a time ((u1 + u1') + (u2 + u2')) where stage 0 sums each replica's uses first
// ((u1 + u2) + (u1' + u2')), another association; 2e-6 measured. bfloat16 compute: 1e-2.
std::vector<std::vector<float>> shared_and_bn_weights(int stage, const std::string& policy) {
  make_cpus(2);
  mixed_precision::set_global_policy(policy);
  MirroredStrategy s(cpus(2), {.sharding = {.stage = stage}});
  layers::LayerPtr shared = layers::Dense(6, "tanh", true, initializers::glorot_uniform(3));
  layers::LayerPtr bn = layers::BatchNormalization();
  layers::LayerPtr head =
      layers::with_dtype_policy(layers::Dense(1, "", true, initializers::glorot_uniform(4)), "float32");
  mixed_precision::set_global_policy("float32");
  std::shared_ptr<optimizers::Adam> adam;
  {
    auto scope = s.scope();
    shared->build({1, 6});
    bn->build({1, 6});
    head->build({1, 6});
    adam = std::make_shared<optimizers::Adam>(0.05);
  }
  std::vector<Variable> vars;
  for (const auto& l : {shared, bn, head})
    for (const Variable& v : l->trainable_weights()) vars.push_back(v);
  for (int step = 0; step < 3; ++step) {
    s.run([&] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      const Tensor x = ops::stateless_random_uniform({4, 6}, {step, r}, {.minval = -1, .maxval = 1})
                           .to(s.replica_devices()[static_cast<std::size_t>(r)]);
      optimizers::GradsAndVars gv;
      {
        ops::GradientTape tape;
        const Tensor h = (*shared)((*shared)(x, true), true);  // the same layer twice
        const Tensor out = ops::cast((*head)((*bn)(h, true), true), DType::kFloat32);
        const Tensor loss = ops::div(ops::reduce_sum(ops::square(out)), ops::scalar_like(out, 8.0));
        const std::vector<Tensor> g = tape.gradient(loss, vars);
        for (std::size_t i = 0; i < vars.size(); ++i) gv.emplace_back(g[i], vars[i]);
      }
      adam->apply_gradients(std::move(gv));
    });
  }
  std::vector<std::vector<float>> out;
  for (const Variable& v : vars) out.push_back(v.read_value().to_vector<float>());
  for (const Variable& v : bn->non_trainable_weights()) out.push_back(v.read_value().to_vector<float>());
  return out;
}

TEST(StageThree, ASharedLayerBatchNormAndAMixedPolicyMatchStageZero) {
  for (const auto& [policy, tolerance] : {std::pair<std::string, float>{"float32", 1e-5f}, {"mixed_bfloat16", 1e-2f}}) {
    const auto s0 = shared_and_bn_weights(0, policy), s3 = shared_and_bn_weights(3, policy);
    ASSERT_EQ(s0.size(), s3.size());
    for (std::size_t v = 0; v < s0.size(); ++v) {
      ASSERT_EQ(s0[v].size(), s3[v].size());
      float scale = 1e-30f, diff = 0;
      for (std::size_t i = 0; i < s0[v].size(); ++i) {
        scale = std::max(scale, std::abs(s0[v][i]));
        diff = std::max(diff, std::abs(s3[v][i] - s0[v][i]));
      }
      EXPECT_LE(diff / scale, tolerance) << policy << ", variable " << v;
    }
  }
}

}  // namespace
}  // namespace chorus::distribute
