// Intra-op threads of logical CPU devices: the share each device gets, explicit overrides, the
// global setter's lifecycle, and that a device's ops really run with its share (the stream worker
// sets OpenMP's thread count before each kernel).
#include <gtest/gtest.h>

#include <omp.h>
#include <atomic>
#include <cmath>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "tests/core/test_util.h"
#include <chorus/core/config.h>
#include <chorus/ops/ops.h>

namespace chorus {
namespace {

class ThreadsTest : public testing::CoreTest {};

int half_of_the_cores() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 2); }

void two_cpu_devices(std::vector<LogicalDeviceConfiguration> configs = {{.memory_limit_mb = 256},
                                                                        {.memory_limit_mb = 256}}) {
  config::set_logical_device_configuration(config::list_physical_devices("CPU")[0], configs);
}

TEST_F(ThreadsTest, TwoLogicalDevicesShareTheCores) {
  two_cpu_devices();
  const auto cpus = config::list_logical_devices("CPU");
  ASSERT_EQ(cpus.size(), 2u);
  EXPECT_EQ(cpus[0].intra_op_threads, half_of_the_cores());
  EXPECT_EQ(cpus[1].intra_op_threads, half_of_the_cores());
}

TEST_F(ThreadsTest, OneDeviceGetsAllCores) {
  const auto cpus = config::list_logical_devices("CPU");
  ASSERT_EQ(cpus.size(), 1u);
  EXPECT_EQ(cpus[0].intra_op_threads, std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
}

TEST_F(ThreadsTest, ExplicitThreadsAreHonoured) {
  two_cpu_devices({{.memory_limit_mb = 256, .intra_op_threads = 3}, {.memory_limit_mb = 256}});
  const auto cpus = config::list_logical_devices("CPU");
  ASSERT_EQ(cpus.size(), 2u);
  EXPECT_EQ(cpus[0].intra_op_threads, 3);
  EXPECT_EQ(cpus[1].intra_op_threads, half_of_the_cores());
}

TEST_F(ThreadsTest, GlobalBudgetIsSplit) {
  config::set_intra_op_parallelism_threads(4);
  EXPECT_EQ(config::get_intra_op_parallelism_threads(), 4);
  two_cpu_devices();
  const auto cpus = config::list_logical_devices("CPU");
  ASSERT_EQ(cpus.size(), 2u);
  EXPECT_EQ(cpus[0].intra_op_threads, 2);
  EXPECT_EQ(cpus[1].intra_op_threads, 2);
}

TEST_F(ThreadsTest, BudgetSmallerThanDevicesGivesOneEach) {
  config::set_intra_op_parallelism_threads(1);
  two_cpu_devices();
  for (const auto& d : config::list_logical_devices("CPU")) EXPECT_EQ(d.intra_op_threads, 1);
}

TEST_F(ThreadsTest, SetterAfterInitializationFails) {
  config::list_logical_devices("CPU");
  EXPECT_THROW_WITH(config::set_intra_op_parallelism_threads(2), FailedPreconditionError, "initialized");
}

TEST_F(ThreadsTest, SetterAfterFirstOpFails) {
  const Tensor x = ops::add(Tensor::ones({2}, DType::kFloat32, "/CPU:0"), Tensor::ones({2}, DType::kFloat32, "/CPU:0"));
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{2, 2}));
  EXPECT_THROW(config::set_intra_op_parallelism_threads(2), FailedPreconditionError);
}

TEST_F(ThreadsTest, NegativeThreadsAreInvalid) {
  EXPECT_THROW_WITH(config::set_intra_op_parallelism_threads(-1), InvalidArgumentError, "-1");
  EXPECT_THROW(two_cpu_devices({{.memory_limit_mb = 256, .intra_op_threads = -2}, {.memory_limit_mb = 256}}),
               InvalidArgumentError);
  config::set_intra_op_parallelism_threads(0);  // 0 = the number of cores, allowed
  EXPECT_EQ(config::get_intra_op_parallelism_threads(), 0);
}

TEST_F(ThreadsTest, OpsRunWithTheirDeviceShare) {
  two_cpu_devices({{.memory_limit_mb = 256, .intra_op_threads = 3}, {.memory_limit_mb = 256, .intra_op_threads = 1}});
  const Tensor a = Tensor::ones({4}, DType::kFloat32, "/CPU:0");
  const Tensor b = Tensor::ones({4}, DType::kFloat32, "/CPU:1");
  a.device_context().stream().synchronize();
  b.device_context().stream().synchronize();
  // Idle streams: the kernel runs on the calling thread, with its device's share.
  (void)ops::exp(a);
  EXPECT_EQ(omp_get_max_threads(), 3);
  (void)ops::exp(b);
  EXPECT_EQ(omp_get_max_threads(), 1);
  // A busy stream: the op waits for the queued work, then runs here with the same share.
  (void)ops::exp(b);
  std::atomic<bool> go{false};
  a.device_context().stream().enqueue_host([&go] {
    while (!go.load()) std::this_thread::yield();
  });
  std::thread releaser([&go] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    go = true;
  });
  const Tensor queued = ops::exp(a);
  releaser.join();
  EXPECT_EQ(omp_get_max_threads(), 3);
  for (float v : queued.to_vector<float>()) EXPECT_NEAR(v, std::exp(1.0f), 1e-6f);
}

TEST_F(ThreadsTest, ConcurrentReplicasOnTwoDevicesComputeCorrectly) {
  // Large enough for the loops to split work across OpenMP threads, from two threads at once.
  two_cpu_devices();
  const std::int64_t n = 1 << 17;
  std::vector<float> ok(2, 0.0f);
  auto replica = [n, &ok](int d) {
    const std::string dev = d == 0 ? "/CPU:0" : "/CPU:1";
    const Tensor x = Tensor::full({n}, 1.0 + d, DType::kFloat32, dev);
    Tensor acc = Tensor::zeros({n}, DType::kFloat32, dev);
    for (int step = 0; step < 5; ++step) acc = ops::add(acc, ops::mul(x, x));
    const Tensor total = ops::reduce_sum(acc);
    ok[static_cast<std::size_t>(d)] = total.item<float>();
  };
  std::thread t0(replica, 0), t1(replica, 1);
  t0.join();
  t1.join();
  EXPECT_EQ(ok[0], 5.0f * n);
  EXPECT_EQ(ok[1], 20.0f * n);
}

}  // namespace
}  // namespace chorus
