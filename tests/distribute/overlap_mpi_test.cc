// The gradient all-reduce overlapped with the backward pass (distribute/overlapped_reduction.h)
// under MultiWorkerMirroredStrategy, run by CTest as `mpirun -n 2` and `-n 3` (label mpi): one CPU
// device per worker (the MPI backend, which picks its algorithm by message size, so the buckets
// must be exactly the non-overlapped packs) and two (hierarchical: shared memory in the process,
// MPI between processes). A custom loop with small buckets gives bitwise the weights of the
// same loop with overlap off, on every worker, and the buckets ran on the communication threads.
#include <gtest/gtest.h>

#include <cstdint>

#include "tests/collective/mpi_test_main.h"
#include "tests/distribute/overlap_util.h"
#include <chorus/core/config.h>
#include <chorus/distribute/multi_worker_mirrored_strategy.h>
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

}  // namespace
}  // namespace chorus::distribute

int main(int argc, char** argv) { return chorus::testing::run_tests_under_mpi_on_cpus(argc, argv, 2, 256); }
