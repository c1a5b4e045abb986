// Reduction to one device (collective/reference.h) over GPU tensors and over CPU and GPU devices
// mixed — the fallback when NCCL cannot serve the replicas — checked analytically like the other
// backends, and the automatic choice for mixed devices (distribute/cross_device_ops.h). Skips with
// the CUDA runtime's reason without a GPU.
#include <gtest/gtest.h>

#include "analytic.h"
#include "group_harness.h"
#include <chorus/collective/reference.h>
#include <chorus/core/config.h>
#include <chorus/core/error.h>
#include <chorus/core/gpu.h>

namespace chorus::collective {
namespace {

using testing::run_ranks;

class ReductionToOneDeviceGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::device_count() == 0) GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason();
    // Two virtual GPUs of 256 MiB on GPU:0, and the CPU.
    internal::reset_runtime_for_testing();
    config::set_logical_device_configuration(config::list_physical_devices("GPU")[0],
                                             {{.memory_limit_mb = 256}, {.memory_limit_mb = 256}});
  }
  // rank 0 on GPU:0, rank 1 on the CPU, rank 2 on GPU:1: rank 0 (the reducer) is a GPU.
  std::vector<std::string> devices_{"/gpu:0", "/cpu:0", "/gpu:1"};
};

TEST_F(ReductionToOneDeviceGpuTest, AllReduceOverMixedDevicesEveryOpAndDtype) {
  const int k = 3;
  auto comms = make_reference_group(k);
  for (DType dt : kDtypes)
    for (ReduceOp op : kOps)
      for (std::int64_t n : {1, 1000}) {
        std::vector<Tensor> outs(k);
        testing::rethrow_first(run_ranks(comms, [&](int r, Communicator& c) {
          Tensor in = make_input(r, n, dt, "cpu").to(devices_[r]);
          // GPU ranks reduce in place (rank 0) or into a fresh tensor (rank 2).
          Tensor out = r == 2 ? Tensor::full({n}, -7, dt, devices_[r]) : in;
          c.all_reduce(in, out, {.op = op})->wait();
          outs[r] = out;
        }));
        for (int r = 0; r < k; ++r) {
          EXPECT_EQ(outs[r].device_name().find(r == 1 ? "CPU" : "GPU") != std::string::npos, true)
              << outs[r].device_name();
          const auto got = outs[r].to_vector<double>();
          for (std::int64_t i = 0; i < n; ++i) {
            const double want = expected(op, k, i, dt);
            ASSERT_NEAR(got[i], want, tolerance(dt, want))
                << dtype_name(dt) << " " << reduce_op_name(op) << " n=" << n << " rank " << r << " i=" << i;
          }
        }
      }
}

TEST_F(ReductionToOneDeviceGpuTest, OtherCollectivesOverMixedDevices) {
  const int k = 3;
  auto comms = make_reference_group(k);
  const std::int64_t m = 1001;
  std::vector<Tensor> b(k), red(k), g(k), s(k);
  testing::rethrow_first(run_ranks(comms, [&](int r, Communicator& c) {
    const std::string& dev = devices_[r];
    b[r] = make_input(r, m, DType::kFloat32, "cpu").to(dev);
    c.broadcast(b[r], {.root = 2})->wait();  // from a GPU to the CPU and the other GPU
    red[r] = Tensor::full({m}, -1.0, DType::kFloat32, dev);
    c.reduce(make_input(r, m, DType::kFloat32, "cpu").to(dev), red[r], {.op = ReduceOp::kMax, .root = 1})->wait();
    g[r] = Tensor::zeros({k * m}, DType::kFloat32, dev);
    c.all_gather(make_input(r, m, DType::kFloat32, "cpu").to(dev), g[r])->wait();
    s[r] = Tensor::zeros({m}, DType::kFloat32, dev);
    c.reduce_scatter(make_input(r, k * m, DType::kFloat32, "cpu").to(dev), s[r])->wait();
    c.barrier()->wait();
  }));
  for (int r = 0; r < k; ++r) {
    auto bv = b[r].to_vector<double>(), rv = red[r].to_vector<double>(), gv = g[r].to_vector<double>(),
         sv = s[r].to_vector<double>();
    for (std::int64_t i = 0; i < m; ++i) {
      ASSERT_EQ(bv[i], x(2, i)) << "broadcast, rank " << r;
      ASSERT_EQ(rv[i], r == 1 ? expected(ReduceOp::kMax, k, i, DType::kFloat32) : -1.0) << "reduce, rank " << r;
      ASSERT_EQ(sv[i], expected(ReduceOp::kSum, k, r * m + i, DType::kFloat32)) << "reduce_scatter, rank " << r;
    }
    for (std::int64_t i = 0; i < k * m; ++i) ASSERT_EQ(gv[i], x(static_cast<int>(i / m), i % m)) << "all_gather";
  }
}

TEST_F(ReductionToOneDeviceGpuTest, AllReduceOverGpusOnly) {
  // Two virtual GPUs forced onto the fallback (what a build without NCCL does for distinct GPUs).
  const int k = 2;
  auto comms = make_reference_group(k);
  const std::int64_t n = (1 << 20) + 3;
  std::vector<Tensor> outs(k);
  testing::rethrow_first(run_ranks(comms, [&](int r, Communicator& c) {
    Tensor in = make_input(r, n, DType::kFloat32, "gpu");
    c.all_reduce(in, in, {.op = ReduceOp::kMean})->wait();
    outs[r] = in;
  }));
  for (int r = 0; r < k; ++r) {
    const auto got = outs[r].to_vector<double>();
    for (std::int64_t i = 0; i < n; i += 4099) ASSERT_EQ(got[i], expected(ReduceOp::kMean, k, i, DType::kFloat32));
  }
}

}  // namespace
}  // namespace chorus::collective
