// ZeRO stages 2 and 3 overlapped with the step (docs/sharding.md, "Prefetch and overlap"), on 2
// and 3 logical CPU devices (the shared-memory backend):
//   - stage 2 with overlap_gradient_all_reduce reduce-scatters (and all-reduces, for variables
//     without sharded slots) in buckets during the backward pass, on the communication threads:
//     fit ends with bitwise the weights and losses of the non-overlapped stage 2, with the same
//     collectives and bytes, for Adam, SGD with momentum, plain SGD (no slots: all-reduced),
//     clipnorm and global_clipnorm, several bucket sizes; with a LossScaleOptimizer and with
//     gradient accumulation nothing is reduced during backward and the weights are the same too;
//   - stage 3's prefetch (ShardingOptions::prefetch_limit) gives bitwise the weights without it,
//     and really takes its gathers (the prefetcher's counters), with and without overlap; steps
//     whose layer calls differ from the recorded ones (a skipped layer, a layer called twice, a
//     persistent tape asked twice) stay bitwise correct; the peak per replica grows by at most
//     `limit` layers' parameters; a limit outside 0..64 is an InvalidArgumentError.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "tests/core/test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/distribution.h>
#include <chorus/core/error.h>
#include <chorus/core/runtime.h>
#include <chorus/data/synthetic_digits.h>
#include <chorus/distribute/gather_prefetch.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/distribute/replica_context.h>
#include <chorus/model/layers.h>
#include <chorus/model/losses.h>
#include <chorus/model/model.h>
#include <chorus/ops/ops.h>
#include <chorus/ops/tape.h>
#include <chorus/optimizer/adam.h>
#include <chorus/optimizer/loss_scale_optimizer.h>
#include <chorus/optimizer/sgd.h>

namespace chorus::distribute {
namespace {

using chorus::testing::cpus;

struct Config {
  int replicas = 2;
  int stage = 2;
  bool overlap = false;
  int prefetch = 0;
  std::int64_t pack_bytes = 0;
  std::string optimizer = "adam";
};

struct Outcome {
  std::vector<std::vector<float>> weights;
  std::vector<double> loss;
  AllReduceCounters counters;
  internal::GatherPrefetcher::Stats prefetch;  // summed over the replicas
};

std::shared_ptr<optimizers::Optimizer> make_optimizer(const std::string& name) {
  using optimizers::AdamOptions;
  using optimizers::SGDOptions;
  if (name == "adam") return std::make_shared<optimizers::Adam>(AdamOptions{.learning_rate = 1e-2});
  if (name == "momentum") return std::make_shared<optimizers::SGD>(SGDOptions{.learning_rate = 0.05, .momentum = 0.9});
  if (name == "sgd") return std::make_shared<optimizers::SGD>(SGDOptions{.learning_rate = 0.05});
  if (name == "adam_clipnorm")
    return std::make_shared<optimizers::Adam>(AdamOptions{.learning_rate = 1e-2, .clipnorm = 0.05});
  if (name == "momentum_global_clipnorm")
    return std::make_shared<optimizers::SGD>(
        SGDOptions{.learning_rate = 0.05, .momentum = 0.9, .global_clipnorm = 0.1});
  if (name == "loss_scale")
    return std::make_shared<optimizers::LossScaleOptimizer>(
        std::make_shared<optimizers::Adam>(AdamOptions{.learning_rate = 1e-2}));
  if (name == "accumulate")
    return std::make_shared<optimizers::Adam>(AdamOptions{.learning_rate = 1e-2, .gradient_accumulation_steps = 2});
  throw InvalidArgumentError("unknown optimizer " + name);
}

std::vector<std::vector<float>> weights_of(const std::vector<Variable>& vars) {
  std::vector<std::vector<float>> w;
  for (const Variable& v : vars) w.push_back(v.read_value().to_vector<float>());
  return w;
}

void expect_bitwise(const Outcome& a, const Outcome& b, const std::string& what) {
  ASSERT_EQ(a.weights.size(), b.weights.size()) << what;
  for (std::size_t v = 0; v < a.weights.size(); ++v) {
    ASSERT_EQ(a.weights[v].size(), b.weights[v].size()) << what;
    for (std::size_t i = 0; i < a.weights[v].size(); ++i)
      ASSERT_EQ(a.weights[v][i], b.weights[v][i]) << what << ": variable " << v << " element " << i;
  }
  EXPECT_EQ(a.loss, b.loss) << what;
}

// The prefetchers' counters of every replica of `s`, summed.
internal::GatherPrefetcher::Stats prefetch_stats(MirroredStrategy& s) {
  std::atomic<std::int64_t> issued{0}, taken{0};
  s.run([&] {
    auto* ctx = dynamic_cast<StrategyReplicaContext*>(get_replica_context());
    ASSERT_NE(ctx, nullptr);
    if (internal::GatherPrefetcher* p = ctx->prefetcher()) {
      issued += p->stats().issued;
      taken += p->stats().taken;
    }
  });
  return {issued.load(), taken.load()};
}

// fit of a small CNN on 12×12 digits (48 rows, batches of 16: 3 steps per epoch, 2 epochs).
Outcome fit_cnn(const Config& c) {
  MirroredStrategy s(cpus(c.replicas), {.communication_options = {.bytes_per_pack = c.pack_bytes},
                                        .sharding = {.stage = c.stage, .prefetch_limit = c.prefetch},
                                        .overlap_gradient_all_reduce = c.overlap});
  auto scope = s.scope();
  ops::set_seed(42);  // the same initial weights in every run
  auto m = std::make_unique<model::Sequential>(
      std::vector<layers::LayerPtr>{layers::Conv2D(4, 3, "relu"), layers::MaxPooling2D(2), layers::Conv2D(6, 3, "relu"),
                                    layers::Flatten(), layers::Dense(16, "relu"), layers::Dense(10)});
  m->compile(make_optimizer(c.optimizer), std::make_shared<losses::SparseCategoricalCrossentropy>(true));
  auto ds = data::synthetic_digits(48, 7).map([](const data::Element& e) {
    return data::Element{ops::slice(e[0], {8, 8, 0}, {12, 12, 1}), e[1]};
  });
  s.read_and_reset_all_reduce_counters();
  Outcome out;
  out.loss = m->fit(ds.batch(16), {.epochs = 2, .verbose = 0}).history.at("loss");
  out.counters = s.read_and_reset_all_reduce_counters();
  out.weights = weights_of(m->trainable_variables());
  out.prefetch = prefetch_stats(s);
  return out;
}

class StageTwoOverlap : public ::testing::TestWithParam<std::tuple<int, std::int64_t, std::string>> {};

TEST_P(StageTwoOverlap, ReduceScattersDuringBackwardBitwiseAsAfterIt) {
  const auto [replicas, pack_bytes, optimizer] = GetParam();
  chorus::testing::make_cpus(replicas, 256);
  const Config off{.replicas = replicas, .stage = 2, .pack_bytes = pack_bytes, .optimizer = optimizer};
  Config on = off;
  on.overlap = true;
  const Outcome a = fit_cnn(off), b = fit_cnn(on);
  expect_bitwise(b, a, "stage 2, overlap on vs off");
  EXPECT_LT(b.loss.back(), b.loss.front());
  // The same collectives moved the same bytes; with overlap, from the second step on (the first
  // learns which gradients the slots shard), the gradients' were the communication threads'.
  EXPECT_EQ(b.counters.collectives, a.counters.collectives);
  EXPECT_EQ(b.counters.bytes, a.counters.bytes);
  EXPECT_EQ(a.counters.overlapped, 0);
  EXPECT_GE(b.counters.overlapped, 5 * replicas) << "at least one bucket per replica in steps 2-6";
  chorus::internal::reset_runtime_for_testing();
}

INSTANTIATE_TEST_SUITE_P(SharedMemory, StageTwoOverlap,
                         ::testing::Combine(::testing::Values(2, 3), ::testing::Values<std::int64_t>(256, 0),
                                            ::testing::Values("adam", "momentum", "sgd", "adam_clipnorm",
                                                              "momentum_global_clipnorm")));

// A LossScaleOptimizer unscales each replica's gradients before they are summed, and gradient
// accumulation sums the mean of several calls: neither begins a sum during the backward pass, at
// stage 2 as at stage 0, and the weights are those without overlap.
TEST(ZeroOverlap, ALossScaleOptimizerAndGradientAccumulationReduceAfterTheBackwardPass) {
  chorus::testing::make_cpus(2, 256);
  for (const std::string optimizer : {"loss_scale", "accumulate"}) {
    for (const int stage : {2, 3}) {
      const Config off{.replicas = 2, .stage = stage, .pack_bytes = 1024, .optimizer = optimizer};
      Config on = off;
      on.overlap = true;
      const Outcome a = fit_cnn(off), b = fit_cnn(on);
      expect_bitwise(b, a, optimizer + ", stage " + std::to_string(stage));
      EXPECT_EQ(b.counters.collectives, a.counters.collectives) << optimizer;
      EXPECT_EQ(b.counters.overlapped, 0) << optimizer;
    }
  }
  chorus::internal::reset_runtime_for_testing();
}

class StageThreePrefetch : public ::testing::TestWithParam<std::tuple<int, int, bool>> {};

TEST_P(StageThreePrefetch, GivesBitwiseTheWeightsWithoutAndTakesItsGathers) {
  const auto [replicas, limit, overlap] = GetParam();
  chorus::testing::make_cpus(replicas, 256);
  const Config plain{.replicas = replicas, .stage = 3, .prefetch = 0, .optimizer = "adam_clipnorm"};
  Config ahead = plain;
  ahead.prefetch = limit;
  ahead.overlap = overlap;
  ahead.pack_bytes = overlap ? 256 : 0;  // the pack size does not change a gather's bytes
  const Outcome a = fit_cnn(plain), b = fit_cnn(ahead);
  expect_bitwise(b, a, "stage 3, prefetch " + std::to_string(limit));
  EXPECT_EQ(a.prefetch.issued, 0);
  // 4 layers with parameters: from the second step on, 3 gathers ahead in forward and 3 in
  // backward per replica (the first of each pass is gathered by its own call), all taken.
  EXPECT_EQ(b.prefetch.issued, b.prefetch.taken);
  EXPECT_EQ(b.prefetch.taken, 5 * 2 * 3 * replicas);
  chorus::internal::reset_runtime_for_testing();
}

INSTANTIATE_TEST_SUITE_P(SharedMemory, StageThreePrefetch,
                         ::testing::Combine(::testing::Values(2, 3), ::testing::Values(1, 2), ::testing::Bool()));

// A custom loop whose steps call the layers differently from the recorded order: a layer skipped,
// a layer called twice, a persistent tape asked twice. Prefetches that do not match are dropped
// (the same on every replica); the weights stay those without prefetch.
std::pair<std::vector<std::vector<float>>, internal::GatherPrefetcher::Stats> irregular_steps(int limit) {
  MirroredStrategy s(cpus(2), {.sharding = {.stage = 3, .prefetch_limit = limit}});
  std::vector<layers::LayerPtr> d;
  std::shared_ptr<optimizers::Optimizer> opt;
  {
    auto scope = s.scope();
    ops::set_seed(7);
    for (int i = 0; i < 4; ++i) d.push_back(layers::Dense(8, "tanh"));
    opt = std::make_shared<optimizers::Adam>(optimizers::AdamOptions{.learning_rate = 1e-2});
  }
  std::vector<Variable> vars;
  for (int step = 0; step < 9; ++step) {
    s.run([&] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      const Tensor x = ops::stateless_random_uniform({4, 8}, {step, r});
      const int kind = step % 3;
      ops::GradientTape tape(/*persistent=*/kind == 2);
      Tensor y = (*d[0])(x);
      if (kind != 1) y = (*d[1])(y);  // kind 1 skips d1
      y = (*d[2])(y);
      if (kind == 1) y = (*d[2])(y);  // ... and calls d2 twice
      y = (*d[3])(y);
      const Tensor loss = ops::reduce_mean(ops::square(y));
      std::vector<Variable> all;
      for (const layers::LayerPtr& l : d)
        for (const Variable& v : l->trainable_weights()) all.push_back(v);
      std::vector<Tensor> g = tape.gradient(loss, all);
      if (kind == 2) {  // the persistent tape again: the parameters are gathered again
        const std::vector<Tensor> again = tape.gradient(loss, all);
        for (std::size_t i = 0; i < g.size(); ++i)
          if (g[i].defined()) g[i] = ops::mul(ops::add(g[i], again[i]), ops::scalar_like(g[i], 0.5));
      }
      optimizers::GradsAndVars gv;
      for (std::size_t i = 0; i < all.size(); ++i) gv.emplace_back(g[i], all[i]);
      opt->apply_gradients(std::move(gv));
      if (r == 0) vars = all;
    });
  }
  return {weights_of(vars), prefetch_stats(s)};
}

TEST(ZeroOverlap, PrefetchSurvivesStepsThatCallTheLayersDifferently) {
  chorus::testing::make_cpus(2, 128);
  const auto [plain, none] = irregular_steps(0);
  for (const int limit : {1, 3}) {
    const auto [ahead, stats] = irregular_steps(limit);
    ASSERT_EQ(ahead.size(), plain.size());
    for (std::size_t v = 0; v < plain.size(); ++v) EXPECT_EQ(ahead[v], plain[v]) << "variable " << v;
    EXPECT_GT(stats.taken, 0) << "limit " << limit;
    EXPECT_GT(stats.issued, stats.taken) << "some prefetches did not match their step and were dropped";
  }
  EXPECT_EQ(none.issued, 0);
  chorus::internal::reset_runtime_for_testing();
}

// The stated peak: whole parameters of at most limit + 1 layer calls. Six Dense(256→256) layers
// (257 KiB of parameters each): the step's peak per replica with limit L exceeds the one without
// prefetch by at most L layers' parameters (plus a small pack's slack).
TEST(ZeroOverlap, PrefetchAddsAtMostLimitLayersToThePeak) {
  chorus::testing::make_cpus(2, 256);
  const std::int64_t layer_bytes = (256 * 256 + 256) * 4;
  auto peak = [](int limit) {
    MirroredStrategy s(cpus(2), {.sharding = {.stage = 3, .prefetch_limit = limit}});
    std::unique_ptr<model::Sequential> m;
    {
      auto scope = s.scope();
      ops::set_seed(3);
      std::vector<layers::LayerPtr> l;
      for (int i = 0; i < 6; ++i) l.push_back(layers::Dense(256, "relu"));
      m = std::make_unique<model::Sequential>(l);
      m->compile(std::make_shared<optimizers::SGD>(0.01), std::make_shared<losses::MeanSquaredError>());
    }
    const Tensor x = ops::stateless_random_uniform({16, 256}, {1, 2});
    const Tensor y = ops::stateless_random_uniform({16, 256}, {3, 4});
    auto ds = data::Dataset::from_tensor_slices({x, y}).batch(16);
    m->fit(ds, {.epochs = 2, .verbose = 0});  // records the order, warms up
    for (const std::string& d : cpus(2)) config::reset_memory_stats(d);
    m->fit(ds, {.epochs = 2, .verbose = 0});
    std::int64_t p = 0;
    for (const std::string& d : cpus(2)) p = std::max(p, static_cast<std::int64_t>(config::get_memory_info(d).peak));
    return p;
  };
  const std::int64_t none = peak(0);
  for (const int limit : {1, 2}) {
    const std::int64_t with = peak(limit);
    EXPECT_LE(with, none + limit * layer_bytes + 64 * 1024) << "limit " << limit << ": " << with << " vs " << none;
  }
  chorus::internal::reset_runtime_for_testing();
}

TEST(ZeroOverlap, APrefetchLimitOutsideItsRangeIsRejected) {
  chorus::testing::make_cpus(2, 64);
  for (const int limit : {-1, kMaxPrefetchLimit + 1}) {
    try {
      MirroredStrategy s(cpus(2), {.sharding = {.stage = 3, .prefetch_limit = limit}});
      ADD_FAILURE() << "limit " << limit << " accepted";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("prefetch_limit"), std::string::npos) << e.what();
    }
  }
  MirroredStrategy zero(cpus(2), {.sharding = {.stage = 3, .prefetch_limit = 0}});
  EXPECT_EQ(zero.prefetch_limit(), 0);
  MirroredStrategy two(cpus(2), {.sharding = {.stage = 2, .prefetch_limit = 4}});
  EXPECT_EQ(two.prefetch_limit(), 0) << "prefetch is stage 3's";
  chorus::internal::reset_runtime_for_testing();
}

}  // namespace
}  // namespace chorus::distribute
