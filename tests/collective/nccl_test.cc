// NCCL between distinct physical GPUs: runs with two or more GPUs, checks analytically like the
// other backends. With one GPU only the refusal of two ranks on one GPU is checked.
#include <gtest/gtest.h>

#include <algorithm>

#include "analytic.h"
#include "group_harness.h"
#include <chorus/collective/nccl/nccl.h>
#include <chorus/core/config.h>
#include <chorus/core/error.h>
#include <chorus/core/gpu.h>

namespace chorus::collective {
namespace {

TEST(NcclTest, RefusesTwoRanksOnOneGpuBeforeNcclSeesThem) {
  if (gpu::device_count() == 0) GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason();
  if (nccl_version().empty()) GTEST_SKIP() << "built without NCCL";
  internal::reset_runtime_for_testing();
  config::set_logical_device_configuration(config::list_physical_devices("GPU")[0],
                                           {{.memory_limit_mb = 256}, {.memory_limit_mb = 256}});
  try {
    make_nccl_group({"/gpu:0", "/gpu:1"});
    FAIL() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("make_virtual_gpu_group"), std::string::npos) << e.what();
  }
}

TEST(NcclTest, AllReduceAcrossPhysicalGpus) {
  if (gpu::device_count() < 2) GTEST_SKIP() << "needs 2 GPUs, this machine has " << gpu::device_count();
  internal::reset_runtime_for_testing();
  const int k = gpu::device_count();
  std::vector<std::string> devices;
  for (int r = 0; r < k; ++r) devices.push_back("/gpu:" + std::to_string(r));
  auto comms = make_nccl_group(devices);
  for (DType dt : kDtypes)
    for (ReduceOp op : kOps) {
      std::vector<Tensor> outs(k);
      testing::rethrow_first(testing::run_ranks(comms, [&](int r, Communicator& c) {
        Tensor t = make_input(r, 1001, dt, "gpu");
        c.all_reduce(t, t, {.op = op})->wait();
        outs[r] = t;
      }));
      for (int r = 0; r < k; ++r) {
        auto got = outs[r].to_vector<double>();
        for (int i = 0; i < 1001; ++i)
          ASSERT_NEAR(got[i], expected(op, k, i, dt), tolerance(dt, expected(op, k, i, dt)));
      }
    }
}

TEST(NcclTest, VersionIsReportedWhenBuilt) {
  const std::string v = nccl_version();
  if (v.empty()) GTEST_SKIP() << "built without NCCL";
  EXPECT_EQ(std::count(v.begin(), v.end(), '.'), 2) << v;
}

}  // namespace
}  // namespace chorus::collective
