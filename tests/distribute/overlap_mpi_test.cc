// The gradient all-reduce overlapped with the backward pass (distribute/overlapped_reduction.h)
// under MultiWorkerMirroredStrategy, run by CTest as `mpirun -n 2` and `-n 3` (label mpi): one CPU
// device per worker (the MPI backend, which picks its algorithm by message size, so the buckets
// must be exactly the non-overlapped packs) and two (hierarchical: shared memory in the process,
// MPI between processes). A custom loop with small buckets gives bitwise the weights of the
// same loop with overlap off, on every worker, and the buckets ran on the communication threads.
// ZeRO: at stage 2 the reduce-scatter in buckets during backward gives bitwise the weights of
// stage 2 without overlap, and at stage 3 the prefetched gathers (with overlap on) those of
// stage 3 without either, on every worker.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "tests/collective/mpi_test_main.h"
#include "tests/distribute/overlap_util.h"
#include <chorus/core/config.h>
#include <chorus/core/error.h>
#include <chorus/distribute/cluster_resolver.h>
#include <chorus/distribute/gather_prefetch.h>
#include <chorus/distribute/multi_worker_mirrored_strategy.h>
#include <chorus/distribute/replica_context.h>
#include <chorus/model/layers.h>
#include <chorus/model/model.h>
#include <chorus/ops/ops.h>

namespace chorus::distribute {
namespace {

constexpr std::chrono::milliseconds kTimeout{30000};

using overlap_testing::Outcome;

// Three steps of a three-layer net on each replica's own rows, 2 KiB buckets.
Outcome train(int local_devices, bool overlap) {
  MultiWorkerMirroredStrategy s({.cpu_devices_per_worker = local_devices,
                                 .timeout = kTimeout,
                                 .communication_options = {.bytes_per_pack = 2048},
                                 .overlap_gradient_all_reduce = overlap});
  return overlap_testing::train_three_layers(s, {16, 64, 48, 3}, 10, 0.3);
}

class OverlapMpi : public ::testing::TestWithParam<int> {};

TEST_P(OverlapMpi, WeightsAreBitwiseTheNonOverlappedOnesOnEveryWorker) {
  const int k = GetParam();
  const Outcome off = train(k, false);
  const Outcome on = train(k, true);
  ASSERT_EQ(on.weights.size(), off.weights.size());
  for (std::size_t v = 0; v < on.weights.size(); ++v)
    for (std::size_t i = 0; i < on.weights[v].size(); ++i)
      ASSERT_EQ(on.weights[v][i], off.weights[v][i]) << "variable " << v << " element " << i;
  EXPECT_EQ(on.counters.collectives, off.counters.collectives);
  EXPECT_EQ(on.counters.bytes, off.counters.bytes);
  EXPECT_EQ(off.counters.overlapped, 0);
  EXPECT_EQ(on.counters.overlapped, on.counters.collectives) << "every gradient pack was a bucket";
  EXPECT_GE(on.counters.overlapped, 3 * k * 3) << "several buckets per step";
  // Every worker holds the same weights (the all-reduce made them so): compare with rank 0's.
  MultiWorkerMirroredStrategy s({.cpu_devices_per_worker = 1, .timeout = kTimeout});
  for (const std::vector<float>& w : on.weights) {
    const Tensor mine = Tensor::from_vector<float>(w);
    const std::vector<float> sum =
        s.run([&] { return get_replica_context()->all_reduce(ReduceOp::kSum, mine); }).values()[0].to_vector<float>();
    for (std::size_t i = 0; i < w.size(); ++i)
      ASSERT_EQ(sum[i], w[i] * static_cast<float>(s.num_replicas_in_sync())) << "workers disagree at " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Workers, OverlapMpi, ::testing::Values(1, 2), [](const auto& info) {
  return info.param == 1 ? std::string("mpi") : std::string("hierarchical");
});

// Four steps of a Sequential of three Dense layers (layer calls: what stage 3 gathers and
// prefetches), a custom loop with compute_gradients, 2 KiB buckets; the weights as checkpoints
// read them (every worker's shards), and the gathers taken from a prefetch on this worker.
struct Layered {
  Outcome outcome;
  std::int64_t prefetched = 0;
};
Layered train_layers(int local_devices, int stage, bool overlap, int prefetch) {
  MultiWorkerMirroredStrategy s({.cpu_devices_per_worker = local_devices,
                                 .timeout = kTimeout,
                                 .communication_options = {.bytes_per_pack = 2048},
                                 .sharding = {.stage = stage, .prefetch_limit = prefetch},
                                 .overlap_gradient_all_reduce = overlap});
  std::unique_ptr<model::Sequential> m;
  std::shared_ptr<optimizers::Adam> opt;
  {
    auto scope = s.scope();
    ops::set_seed(11);  // the chief's initial values are everyone's; the same in every run
    m = std::make_unique<model::Sequential>(
        std::vector<layers::LayerPtr>{layers::Dense(64, "relu"), layers::Dense(48, "relu"), layers::Dense(3)});
    m->build(Shape{1, 16});
    opt = std::make_shared<optimizers::Adam>(1e-2);
  }
  const std::vector<Variable> vars = m->trainable_variables();
  s.read_and_reset_all_reduce_counters();
  for (int step = 0; step < 4; ++step) {
    s.run([&] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      const Tensor x = ops::stateless_random_uniform({10, 16}, {100 + step, r});
      const Tensor y = ops::stateless_random_uniform({10, 3}, {200 + step, r});
      ops::GradientTape tape;
      const Tensor loss = ops::reduce_mean(ops::square((*m)(x, true) - y));
      opt->apply_gradients(opt->compute_gradients(loss, vars, tape));
    });
  }
  Layered out;
  out.outcome.counters = s.read_and_reset_all_reduce_counters();
  for (const Variable& v : vars) out.outcome.weights.push_back(v.read_value().to_vector<float>());
  std::atomic<std::int64_t> taken{0};
  s.run([&] {
    auto* ctx = dynamic_cast<StrategyReplicaContext*>(get_replica_context());
    if (internal::GatherPrefetcher* p = ctx != nullptr ? ctx->prefetcher() : nullptr) taken += p->stats().taken;
  });
  out.prefetched = taken.load();
  return out;
}

void expect_same_weights(const Outcome& a, const Outcome& b, const std::string& what) {
  ASSERT_EQ(a.weights.size(), b.weights.size()) << what;
  for (std::size_t v = 0; v < a.weights.size(); ++v) {
    ASSERT_EQ(a.weights[v].size(), b.weights[v].size()) << what;
    for (std::size_t i = 0; i < a.weights[v].size(); ++i)
      ASSERT_EQ(a.weights[v][i], b.weights[v][i]) << what << ": variable " << v << " element " << i;
  }
}

TEST_P(OverlapMpi, ZeroStageTwoReduceScattersDuringBackwardBitwiseAsAfterIt) {
  const int k = GetParam();
  const Layered off = train_layers(k, 2, false, 0);
  const Layered on = train_layers(k, 2, true, 0);
  expect_same_weights(on.outcome, off.outcome, "stage 2, overlap on vs off");
  EXPECT_EQ(on.outcome.counters.collectives, off.outcome.counters.collectives);
  EXPECT_EQ(on.outcome.counters.bytes, off.outcome.counters.bytes);
  EXPECT_EQ(off.outcome.counters.overlapped, 0);
  EXPECT_GE(on.outcome.counters.overlapped, 3 * k) << "buckets during backward in steps 2-4";
}

TEST_P(OverlapMpi, ZeroStageThreePrefetchGivesBitwiseTheWeightsWithout) {
  const int k = GetParam();
  const Layered plain = train_layers(k, 3, false, 0);
  const Layered ahead = train_layers(k, 3, true, 1);
  expect_same_weights(ahead.outcome, plain.outcome, "stage 3, prefetch and overlap vs neither");
  EXPECT_EQ(plain.prefetched, 0);
  // Three layer calls: from the second step on, 2 gathers ahead in forward and 2 in backward.
  EXPECT_EQ(ahead.prefetched, 3 * 4 * k);
}

// Workers that would prefetch differently would issue their gathers in another order: every
// worker refuses at construction, naming the option, instead of meeting in mismatched collectives.
TEST(OverlapMpiOptions, WorkersWithDifferentPrefetchLimitsAreRefused) {
  const int me = ClusterResolver::from_environment().worker_index();
  try {
    MultiWorkerMirroredStrategy s({.timeout = kTimeout, .sharding = {.stage = 3, .prefetch_limit = me == 0 ? 1 : 2}});
    ADD_FAILURE() << "worker " << me << ": different prefetch limits accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("prefetch_limit differs"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace chorus::distribute

int main(int argc, char** argv) { return chorus::testing::run_tests_under_mpi_on_cpus(argc, argv, 2, 256); }
