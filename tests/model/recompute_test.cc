// recompute_grad (ops/recompute.h) around Keras layers under MirroredStrategy on 2 logical CPU
// devices: at ZeRO stage 0 (mirrored weights) and stage 3 (sharded parameters, gathered by each
// layer call, again in the recomputation) the gradients of blocks of Dense → Dropout → Dense
// equal, bit for bit, those of the same blocks recorded normally; the Dropout layer's mask (a
// stateless seed from its call count on each replica) is replayed; and stage 3's shards are the
// shards of the gradient summed over the replicas that stage 0 computes.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "tests/core/test_util.h"
#include <chorus/core/distribution.h>
#include <chorus/core/sharded_variable.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/model/initializers.h>
#include <chorus/model/layers.h>
#include <chorus/ops/ops.h>

namespace chorus {
namespace {

using chorus::testing::cpus;
constexpr int kReplicas = 2, kBlocks = 3, kWidth = 24, kHidden = 48, kBatch = 8;

// kBlocks blocks of Dense(kHidden, relu) → Dropout(0.25) → Dense(kWidth, tanh), seeded.
struct Net {
  std::vector<std::vector<layers::LayerPtr>> blocks;
  std::vector<Variable> vars() const {
    std::vector<Variable> v;
    for (const auto& b : blocks)
      for (const auto& l : b)
        for (const Variable& w : l->trainable_weights()) v.push_back(w);
    return v;
  }
};

Net make_net() {
  Net net;
  for (int b = 0; b < kBlocks; ++b)
    net.blocks.push_back({layers::Dense(kHidden, "relu", true, initializers::glorot_uniform(10 * b + 1)),
                          layers::Dropout(0.25, 100 + b),
                          layers::Dense(kWidth, "tanh", true, initializers::glorot_uniform(10 * b + 2))});
  return net;
}

Tensor replica_input() {
  const int r = get_replica_context()->replica_id_in_sync_group();
  return ops::stateless_random_normal({kBatch, kWidth}, {r + 1, 3},
                                      {.device = cpus(kReplicas)[static_cast<std::size_t>(r)]});
}

// Each replica's gradients of sum(square(net(x_r))) (training: dropout on), blocks recomputed or not.
std::vector<std::vector<Tensor>> gradients(distribute::MirroredStrategy& s, const Net& net, bool recompute) {
  const std::vector<Variable> vars = net.vars();
  return s
      .run([&] {
        ops::GradientTape tape;
        Tensor h = replica_input();
        for (const auto& block : net.blocks) {
          ops::RecomputeFn1 fn = [&block](const Tensor& t) {
            Tensor y = t;
            for (const auto& l : block) y = (*l)(y, /*training=*/true);
            return y;
          };
          h = recompute ? ops::recompute_grad(fn)(h) : fn(h);
        }
        return tape.gradient(ops::reduce_sum(ops::square(h)), vars);
      })
      .values();
}

// Builds the layers (a call in every replica): recompute_grad needs built layers.
void build(distribute::MirroredStrategy& s, const Net& net) {
  s.run([&] {
    Tensor h = replica_input();
    for (const auto& block : net.blocks)
      for (const auto& l : block) h = (*l)(h, /*training=*/true);
  });
}

void expect_same_bits(const std::vector<std::vector<Tensor>>& got, const std::vector<std::vector<Tensor>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t r = 0; r < want.size(); ++r) {
    ASSERT_EQ(got[r].size(), want[r].size());
    for (std::size_t i = 0; i < want[r].size(); ++i) {
      ASSERT_TRUE(want[r][i].defined() && got[r][i].defined()) << "replica " << r << " gradient " << i;
      EXPECT_EQ(got[r][i].shape(), want[r][i].shape());
      EXPECT_EQ(got[r][i].to_vector<float>(), want[r][i].to_vector<float>()) << "replica " << r << " gradient " << i;
    }
  }
}

// Stage 0 and stage 3: recomputed equals recorded. Two nets with the same seeds, each built once,
// so each Dropout layer is at the same call count in both runs (the same masks).
std::vector<std::vector<Tensor>> recomputed_equals_recorded(int stage) {
  chorus::testing::make_cpus(kReplicas, 64);
  distribute::MirroredStrategy s(cpus(kReplicas), {.sharding = {.stage = stage}});
  Net plain, recomputed;
  {
    auto scope = s.scope();
    plain = make_net();
    recomputed = make_net();
  }
  build(s, plain);
  build(s, recomputed);
  if (stage == 3) {
    for (const Variable& v : recomputed.vars()) EXPECT_NE(as_sharded_parameter(v), nullptr) << v.name();
  }
  const auto want = gradients(s, plain, false);
  const auto got = gradients(s, recomputed, true);
  expect_same_bits(got, want);
  // And a second step, at the next call count of the Dropout layers.
  expect_same_bits(gradients(s, recomputed, true), gradients(s, plain, false));
  return want;
}

TEST(RecomputeUnderStrategy, StageZeroGradientsAreBitwiseEqual) { recomputed_equals_recorded(0); }

TEST(RecomputeUnderStrategy, StageThreeGradientsAreBitwiseEqualAndTheShardsOfTheSum) {
  const auto stage0 = recomputed_equals_recorded(0);  // each replica's own, whole gradients
  const auto stage3 = recomputed_equals_recorded(3);  // each replica's shard of the summed ones
  ASSERT_EQ(stage3.size(), static_cast<std::size_t>(kReplicas));
  for (std::size_t i = 0; i < stage0[0].size(); ++i) {
    const std::vector<float> a = stage0[0][i].to_vector<float>(), b = stage0[1][i].to_vector<float>();
    const ShardLayout layout = ShardLayout::of(static_cast<std::int64_t>(a.size()), kReplicas);
    for (int r = 0; r < kReplicas; ++r) {
      const std::vector<float> shard = stage3[static_cast<std::size_t>(r)][i].to_vector<float>();
      ASSERT_EQ(static_cast<std::int64_t>(shard.size()), layout.length(r)) << "gradient " << i;
      for (std::int64_t k = 0; k < layout.length(r); ++k) {
        const auto e = static_cast<std::size_t>(layout.begin(r) + k);
        EXPECT_NEAR(shard[static_cast<std::size_t>(k)], a[e] + b[e], 1e-5f * (1 + std::fabs(a[e] + b[e])))
            << "gradient " << i << " replica " << r << " element " << e;
      }
    }
  }
}

}  // namespace
}  // namespace chorus
