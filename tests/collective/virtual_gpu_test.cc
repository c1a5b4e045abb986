// The virtual-GPU backend on logical GPUs carved out of GPU:0, checked analytically like the
// shared-memory backend, and against it. Skips with the CUDA runtime's reason without a GPU.
#include <gtest/gtest.h>

#include "analytic.h"
#include "group_harness.h"
#include <chorus/collective/virtual_gpu.h>
#include <chorus/core/config.h>
#include <chorus/core/error.h>
#include <chorus/core/gpu.h>

namespace chorus::collective {
namespace {

using testing::run_ranks;

class VirtualGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::device_count() == 0) GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason();
  }
  // k virtual GPUs of 512 MiB on GPU:0.
  std::vector<std::string> carve(int k) {
    internal::reset_runtime_for_testing();
    std::vector<LogicalDeviceConfiguration> cfgs(k, LogicalDeviceConfiguration{.memory_limit_mb = 512});
    config::set_logical_device_configuration(config::list_physical_devices("GPU")[0], cfgs);
    std::vector<std::string> names;
    for (int r = 0; r < k; ++r) names.push_back("/gpu:" + std::to_string(r));
    return names;
  }
};

TEST_F(VirtualGpuTest, AllReduceEveryOpDtypeCountAndSize) {
  for (int k = 1; k <= 4; ++k) {
    auto comms = make_virtual_gpu_group(carve(k));
    bool in_place = false;
    for (DType dt : kDtypes)
      for (std::int64_t n : {0, 1, 17, 1000, (1 << 20) + 3})
        for (ReduceOp op : kOps) {
          in_place = !in_place;
          std::vector<Tensor> outs(k);
          testing::rethrow_first(run_ranks(comms, [&](int r, Communicator& c) {
            Tensor in = make_input(r, n, dt, "gpu");
            Tensor out = in_place ? in : Tensor::zeros({n}, dt, "/gpu:" + std::to_string(r));
            c.all_reduce(in, out, {.op = op})->wait();
            outs[r] = out;
          }));
          for (int r = 0; r < k; ++r) {
            auto got = outs[r].to_vector<double>();
            for (std::int64_t i = 0; i < n; i += (n > 5000 ? 997 : 1)) {
              const double want = expected(op, k, i, dt);
              ASSERT_NEAR(got[i], want, tolerance(dt, want))
                  << "k=" << k << " " << dtype_name(dt) << " n=" << n << " op=" << reduce_op_name(op) << " rank " << r
                  << " i=" << i;
            }
          }
        }
  }
}

TEST_F(VirtualGpuTest, OtherCollectives) {
  const int k = 3;
  auto comms = make_virtual_gpu_group(carve(k));
  const std::int64_t m = 1001;
  std::vector<Tensor> b(k), red(k), g(k), s(k);
  testing::rethrow_first(run_ranks(comms, [&](int r, Communicator& c) {
    const std::string dev = "/gpu:" + std::to_string(r);
    b[r] = make_input(r, m, DType::kFloat32, "gpu");
    c.broadcast(b[r], {.root = 1})->wait();
    red[r] = Tensor::full({m}, -1.0, DType::kFloat32, dev);
    c.reduce(make_input(r, m, DType::kFloat32, "gpu"), red[r], {.op = ReduceOp::kMin, .root = 2})->wait();
    g[r] = Tensor::zeros({k * m}, DType::kFloat32, dev);
    c.all_gather(make_input(r, m, DType::kFloat32, "gpu"), g[r])->wait();
    s[r] = Tensor::zeros({m}, DType::kFloat32, dev);
    c.reduce_scatter(make_input(r, k * m, DType::kFloat32, "gpu"), s[r])->wait();
    c.barrier()->wait();
  }));
  for (int r = 0; r < k; ++r) {
    auto bv = b[r].to_vector<double>(), rv = red[r].to_vector<double>(), gv = g[r].to_vector<double>(),
         sv = s[r].to_vector<double>();
    for (std::int64_t i = 0; i < m; ++i) {
      ASSERT_EQ(bv[i], x(1, i));
      ASSERT_EQ(rv[i], r == 2 ? x(0, i) : -1.0);
      ASSERT_EQ(sv[i], expected(ReduceOp::kSum, k, r * m + i, DType::kFloat32));
    }
    for (std::int64_t i = 0; i < k * m; ++i) ASSERT_EQ(gv[i], x(static_cast<int>(i / m), i % m));
  }
}

TEST_F(VirtualGpuTest, StreamOrderWithoutHostWaits) {
  // Produce on the stream, reduce, consume on the stream, many times; read back only at the end.
  const int k = 2;
  auto comms = make_virtual_gpu_group(carve(k));
  std::vector<Tensor> acc(k);
  testing::rethrow_first(run_ranks(comms, [&](int r, Communicator& c) {
    const std::string dev = "/gpu:" + std::to_string(r);
    acc[r] = Tensor::zeros({1 << 16}, DType::kFloat32, dev);
    for (int step = 0; step < 50; ++step) {
      Tensor t = Tensor::full({1 << 16}, r + 1, DType::kFloat32, dev);
      c.all_reduce(t, t);  // not waited on: ordering comes from the streams
      acc[r].add_inplace(t);
    }
  }));
  for (int r = 0; r < k; ++r) EXPECT_EQ(acc[r].to_vector<float>()[12345], 50.0f * 3.0f);
}

TEST_F(VirtualGpuTest, MismatchAndTimeout) {
  const int k = 2;
  auto comms = make_virtual_gpu_group(carve(k));
  auto errors = run_ranks(comms, [&](int r, Communicator& c) {
    Tensor t = Tensor::zeros({r == 0 ? 4 : 5}, DType::kFloat32, "/gpu:" + std::to_string(r));
    c.all_reduce(t, t);
  });
  EXPECT_THROW(std::rethrow_exception(errors[0]), InvalidArgumentError);
  EXPECT_THROW(std::rethrow_exception(errors[1]), InvalidArgumentError);
  errors = run_ranks(comms, [&](int r, Communicator& c) {
    if (r == 1) return;
    Tensor t = Tensor::zeros({4}, DType::kFloat32, "/gpu:0");
    c.all_reduce(t, t, {.timeout = std::chrono::milliseconds(200)});
  });
  EXPECT_THROW(std::rethrow_exception(errors[0]), DeadlineExceededError);
}

TEST_F(VirtualGpuTest, RejectsWrongDevices) {
  auto names = carve(2);
  EXPECT_THROW(make_virtual_gpu_group({"/gpu:0", "/gpu:0"}), InvalidArgumentError);
  EXPECT_THROW(make_virtual_gpu_group({"/cpu:0", "/gpu:0"}), InvalidArgumentError);
  auto comms = make_virtual_gpu_group(names);
  Tensor on_other = Tensor::zeros({4}, DType::kFloat32, "/gpu:1");
  EXPECT_THROW(comms[0]->all_reduce(on_other, on_other), InvalidArgumentError);
}

TEST(VirtualGpuAvailabilityTest, WithoutAGpuTheErrorSaysWhy) {
  if (gpu::device_count() > 0) GTEST_SKIP() << "a GPU is present";
  internal::reset_runtime_for_testing();
  config::set_logical_device_configuration(config::list_physical_devices("CPU")[0],
                                           {{.memory_limit_mb = 64}, {.memory_limit_mb = 64}});
  if (gpu::compiled_with_cuda()) {
    EXPECT_THROW(make_virtual_gpu_group({"/cpu:0", "/cpu:1"}), InvalidArgumentError);  // not GPUs
    EXPECT_THROW(make_virtual_gpu_group({"/gpu:0", "/gpu:1"}), InvalidArgumentError);  // no such devices
  } else {
    EXPECT_THROW(make_virtual_gpu_group({"/gpu:0", "/gpu:1"}), UnavailableError);
  }
}

}  // namespace
}  // namespace chorus::collective
