// Out of memory inside a replica of MirroredStrategy on two virtual GPUs of 64 MiB carved out of
// GPU:0: a replica whose allocation passes its device's limit — before a collective, or for the
// collective's own output — makes run() raise ResourceExhaustedError naming that replica and
// device, promptly (the other replica is released from the collective, not left to its timeout),
// and the next run() works: its all-reduce of random data matches the host's sum. Skips without a
// GPU (label gpu), with the CUDA runtime's reason.
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include <chorus/core/config.h>
#include <chorus/core/gpu.h>
#include <chorus/core/runtime.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/distribute/mirrored_variable.h>
#include <chorus/ops/ops.h>

namespace chorus::distribute {
namespace {

constexpr std::int64_t kMiB = std::int64_t{1} << 20;

class ReplicaOomGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::device_count() == 0) GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason();
    chorus::internal::reset_runtime_for_testing();
    config::set_logical_device_configuration(config::list_physical_devices("GPU")[0],
                                             {{.memory_limit_mb = 64}, {.memory_limit_mb = 64}});
  }
  void TearDown() override { chorus::internal::reset_runtime_for_testing(); }
};

std::vector<std::vector<float>> draw(std::int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<std::vector<float>> v(2, std::vector<float>(static_cast<std::size_t>(n)));
  for (auto& r : v)
    for (auto& x : r) x = u(rng);
  return v;
}

std::string gpu_name(int r) { return "/gpu:" + std::to_string(r); }

// A SUM all-reduce of v[r] on every replica; the results, on the host.
std::vector<std::vector<float>> all_reduce(MirroredStrategy& strategy, const std::vector<std::vector<float>>& v) {
  auto out = strategy.run([&] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    Tensor x = Tensor::from_vector<float>(v[static_cast<std::size_t>(r)], gpu_name(r));
    Tensor y = get_replica_context()->all_reduce(ReduceOp::kSum, x);
    EXPECT_EQ(y.device_name(), runtime::find(gpu_name(r))->name());
    return y.to_vector<float>();
  });
  return out.values();
}

void expect_sum(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& v) {
  for (std::size_t r = 0; r < got.size(); ++r) {
    ASSERT_EQ(got[r].size(), v[0].size());
    for (std::size_t i = 0; i < v[0].size(); ++i)
      ASSERT_EQ(got[r][i], v[0][i] + v[1][i]) << "replica " << r << " at " << i;
  }
}

// Runs `step` and expects ResourceExhaustedError naming replica 1 and GPU:1, within seconds.
template <typename F>
void expect_replica1_oom(F&& step) {
  const auto start = std::chrono::steady_clock::now();
  try {
    step();
    ADD_FAILURE() << "no ResourceExhaustedError";
  } catch (const ResourceExhaustedError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("replica 1"), std::string::npos) << m;
    EXPECT_NE(m.find("device:GPU:1"), std::string::npos) << m;
    EXPECT_NE(m.find("limit 64.00 MiB"), std::string::npos) << m;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30))
      << "the other replica waited for the collective's timeout instead of being released";
}

TEST_F(ReplicaOomGpu, OomBeforeACollectiveIsRaisedAndTheStrategyGoesOn) {
  MirroredStrategy strategy({"/gpu:0", "/gpu:1"});
  ASSERT_EQ(strategy.cross_device_ops().ops, CrossDeviceOps::kVirtualGpu);
  const auto v = draw(4099, 1);
  expect_sum(all_reduce(strategy, v), v);  // a first good step
  expect_replica1_oom([&] {
    strategy.run([&] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      Tensor x = Tensor::from_vector<float>(v[static_cast<std::size_t>(r)], gpu_name(r));
      if (r == 1) (void)Tensor::zeros({80 * kMiB}, DType::kUInt8, gpu_name(1));  // past 64 MiB
      get_replica_context()->all_reduce(ReduceOp::kSum, x);                      // replica 0 waits here
    });
  });
  const auto w = draw(4099, 2);
  expect_sum(all_reduce(strategy, w), w);
  EXPECT_LE(config::get_memory_info("GPU:1").peak, static_cast<std::size_t>(64 * kMiB));
}

TEST_F(ReplicaOomGpu, OomForTheCollectivesOutputIsRaisedAndTheStrategyGoesOn) {
  MirroredStrategy strategy({"/gpu:0", "/gpu:1"});
  Variable mean;
  {
    auto scope = strategy.scope();
    mean =
        make_variable({.initial_value = Tensor::zeros({4}), .name = "mean", .aggregation = VariableAggregation::kMean});
  }
  const std::int64_t n = kMiB;  // 4 MiB of float32 per replica
  const auto v = draw(n, 3);
  expect_replica1_oom([&] {
    strategy.run([&] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      Tensor x = Tensor::from_vector<float>(v[static_cast<std::size_t>(r)], gpu_name(r));
      // Replica 1 holds 58 MiB more: its 4 MiB input fits, the all-reduce's 4 MiB result does not.
      Tensor filler = r == 1 ? Tensor::zeros({58 * kMiB}, DType::kUInt8, gpu_name(1)) : Tensor();
      get_replica_context()->all_reduce(ReduceOp::kSum, x);
    });
  });
  // Everything goes on: the same all-reduce, and a MEAN variable written by both replicas.
  expect_sum(all_reduce(strategy, v), v);
  strategy.run([&] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    mean.assign_add(Tensor::full({4}, 2.0 * r + 1.0, DType::kFloat32, gpu_name(r)));
  });
  for (const Variable& c : std::dynamic_pointer_cast<MirroredVariable>(mean.impl())->components())
    EXPECT_EQ(c.read_value().to_vector<float>(), std::vector<float>(4, 2.0f));  // mean of 1 and 3
}

}  // namespace
}  // namespace chorus::distribute
