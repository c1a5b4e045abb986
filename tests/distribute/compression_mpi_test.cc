// Compressed all-reduce (distribute/communication_options.h) under MultiWorkerMirroredStrategy,
// run by CTest as `mpirun -n 2` and `-n 3` (label mpi): one CPU device per worker (the MPI
// backend: 16 bits on the wire, float32 arithmetic, k = 2 roundings) and two (hierarchical:
// shared memory in the process, MPI between processes, k = 3). Every worker checks its replicas'
// results against the exact sum of every replica's gradient (each worker can compute any
// replica's values) and the stated bound; that compression happened (every result is a 16-bit
// value, most differ from the float32 all-reduce); and that the counters show half the bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "tests/collective/mpi_test_main.h"
#include <chorus/core/config.h>
#include <chorus/distribute/multi_worker_mirrored_strategy.h>
#include <chorus/distribute/replica_context.h>
#include <chorus/ops/ops.h>

namespace chorus::distribute {
namespace {

constexpr std::chrono::milliseconds kTimeout{30000};
constexpr int kCpuDevices = 2;

StrategyReplicaContext& ctx() {
  auto* c = dynamic_cast<StrategyReplicaContext*>(get_replica_context());
  if (c == nullptr) throw InternalError("not in a strategy replica context");
  return *c;
}

// Replica r's element i: magnitudes 2^-8 .. 2^9, both signs, ~17 random mantissa bits.
double noisy(int r, std::int64_t i) {
  std::uint64_t h = static_cast<std::uint64_t>(i) * 0x9E3779B97F4A7C15ull ^
                    (static_cast<std::uint64_t>(r) + 1) * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  const double mantissa = 1.0 + static_cast<double>(h % 131071) / 131071.0;
  return ((h >> 40) & 1 ? -1.0 : 1.0) * std::ldexp(mantissa, static_cast<int>((h >> 20) % 18) - 8);
}

// Replica r's gradients: two float32 tensors (one pack) and a float32 one of odd size alone.
std::vector<Tensor> grads_of(int r) {
  std::vector<Tensor> out;
  std::int64_t offset = 0;
  for (std::int64_t n : {std::int64_t{1000}, std::int64_t{91}, std::int64_t{4097}}) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(noisy(r, offset + i));
    out.push_back(Tensor::from_vector<float>(v, {n}));
    offset += n;
  }
  return out;
}

bool representable(float v, DType dt) {
  std::uint16_t b;
  float back;
  convert(&v, DType::kFloat32, &b, dt, 1);
  convert(&b, dt, &back, DType::kFloat32, 1);
  return back == v;
}

struct Case {
  int local_devices;
  Compression compression;
};

class CompressionMpi : public ::testing::TestWithParam<Case> {};

TEST_P(CompressionMpi, WithinTheBoundHalfTheBytesAndReallyCompressed) {
  const auto [k, compression] = GetParam();
  MultiWorkerMirroredStrategy plain({.cpu_devices_per_worker = k, .timeout = kTimeout});
  MultiWorkerMirroredStrategy compressed(
      {.cpu_devices_per_worker = k,
       .timeout = kTimeout,
       .communication_options = {.bytes_per_pack = 8000, .compression = compression}});
  const int n = compressed.num_replicas_in_sync();
  const int roundings = k == 1 ? 2 : 3;  // MPI; hierarchical (communication_options.h)
  const double factor = compression_error_bound(compression, roundings, n);
  const DType dt = compression == Compression::kFloat16 ? DType::kFloat16 : DType::kBFloat16;
  auto run = [](MultiWorkerMirroredStrategy& s) {
    return s.run([] { return ctx().all_reduce(ReduceOp::kSum, grads_of(ctx().replica_id_in_sync_group())); });
  };
  const auto f32 = run(plain);
  compressed.read_and_reset_all_reduce_counters();
  const auto got = run(compressed);
  const AllReduceCounters c = compressed.read_and_reset_all_reduce_counters();
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < n; ++r) {
    std::vector<float> all;
    for (const Tensor& t : grads_of(r))
      for (float v : t.to_vector<float>()) all.push_back(v);
    inputs.push_back(all);
  }
  std::int64_t differ = 0, total = 0;
  for (int local = 0; local < k; ++local) {
    std::vector<float> mine, ref;
    for (const Tensor& t : got.values()[static_cast<std::size_t>(local)])
      for (float v : t.to_vector<float>()) mine.push_back(v);
    for (const Tensor& t : f32.values()[static_cast<std::size_t>(local)])
      for (float v : t.to_vector<float>()) ref.push_back(v);
    ASSERT_EQ(mine.size(), inputs[0].size());
    for (std::size_t i = 0; i < mine.size(); ++i) {
      double sum = 0, abs_sum = 0;
      for (int q = 0; q < n; ++q) sum += inputs[q][i], abs_sum += std::abs(static_cast<double>(inputs[q][i]));
      ASSERT_LE(std::abs(mine[i] - sum), factor * abs_sum)
          << compression_name(compression) << " k=" << k << " local replica " << local << " i=" << i;
      ASSERT_TRUE(representable(mine[i], dt)) << mine[i];
      differ += mine[i] != ref[i] ? 1 : 0;
      ++total;
    }
  }
  EXPECT_GT(differ, total * 9 / 10) << differ << " of " << total << " differ from the float32 all-reduce";
  // Two collectives per replica (the 1000 + 91 pack, the 4097 tensor), 16-bit bytes.
  EXPECT_EQ(c.collectives, 2 * k);
  EXPECT_EQ(c.uncompressed_bytes, k * (1000 + 91 + 4097) * 4);
  EXPECT_EQ(c.bytes, c.uncompressed_bytes / 2);
}

INSTANTIATE_TEST_SUITE_P(Workers, CompressionMpi,
                         ::testing::Values(Case{1, Compression::kFloat16}, Case{1, Compression::kBFloat16},
                                           Case{2, Compression::kFloat16}, Case{2, Compression::kBFloat16}),
                         [](const auto& info) {
                           return (info.param.local_devices == 1 ? std::string("mpi_") : std::string("hierarchical_")) +
                                  std::string(compression_name(info.param.compression));
                         });

TEST(CompressionMpiErrors, UnknownCompressionIsRefusedOnEveryWorker) {
  EXPECT_THROW(MultiWorkerMirroredStrategy(
                   {.timeout = kTimeout, .communication_options = {.compression = static_cast<Compression>(3)}}),
               InvalidArgumentError);
}

}  // namespace
}  // namespace chorus::distribute

int main(int argc, char** argv) {
  return chorus::testing::run_tests_under_mpi_on_cpus(argc, argv, chorus::distribute::kCpuDevices, 512);
}
