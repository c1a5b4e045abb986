// GPU checks: the same device runtime on virtual GPUs carved out of GPU:0. Every test skips with
// the CUDA runtime's reason when this machine has no usable GPU.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/gpu.h>
#include <chorus/core/placement.h>
#include <chorus/core/tensor.h>
#include <chorus/core/variable.h>

namespace chorus {
namespace {

namespace cfg = config;

class GpuTest : public testing::CoreTest {
 protected:
  void SetUp() override {
    if (gpu::device_count() == 0) GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason();
    CoreTest::SetUp();
  }
  PhysicalDevice gpu0() { return cfg::list_physical_devices("GPU").at(0); }
  void carve_two(std::int64_t mb) {
    cfg::set_logical_device_configuration(gpu0(), {{.memory_limit_mb = mb}, {.memory_limit_mb = mb}});
  }
};

TEST_F(GpuTest, PhysicalGpuIsDescribed) {
  auto g = gpu0();
  EXPECT_EQ(g.name, "/physical_device:GPU:0");
  EXPECT_GT(g.memory_bytes, 0u);
  EXPECT_FALSE(g.pci_bus_id.empty());
  EXPECT_NE(g.description.find("compute capability"), std::string::npos);
}

TEST_F(GpuTest, VirtualGpusShareOnePhysicalGpu) {
  carve_two(256);
  auto gpus = cfg::list_logical_devices("GPU");
  ASSERT_GE(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].name, "/job:localhost/replica:0/task:0/device:GPU:0");
  EXPECT_EQ(gpus[1].name, "/job:localhost/replica:0/task:0/device:GPU:1");
  EXPECT_EQ(gpus[0].physical_name, gpus[1].physical_name);
  EXPECT_EQ(gpus[1].memory_limit, std::size_t{256} << 20);
  EXPECT_FALSE(gpus[1].memory_growth);
}

TEST_F(GpuTest, DefaultPlacementPrefersTheGpu) {
  EXPECT_EQ(Tensor::zeros({1}).device_name(), "/job:localhost/replica:0/task:0/device:GPU:0");
  EXPECT_EQ(place_op("PrintV2", "", /*has_gpu_kernel=*/false)->name(), "/job:localhost/replica:0/task:0/device:CPU:0");
}

TEST_F(GpuTest, FillCopyAndAddOnVirtualGpusMatchTheHost) {
  carve_two(256);
  std::vector<float> host(100000);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 1000) - 500.0f;
  Tensor a = Tensor::from_vector(host, "/gpu:0");
  Tensor b = a.to("/gpu:1");  // logical to logical on one GPU
  EXPECT_EQ(b.to_vector<float>(), host);
  b.add_inplace(Tensor::full({100000}, 0.5, DType::kFloat32, "/gpu:0"));
  auto sum = b.to("/cpu:0").to_vector<float>();
  for (std::size_t i = 0; i < host.size(); ++i) ASSERT_EQ(sum[i], host[i] + 0.5f) << i;
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt32, DType::kInt64,
                   DType::kUInt8, DType::kBool}) {
    for (double v : Tensor::full({1000}, 3.0, dt, "/gpu:1").to_vector<double>())
      ASSERT_EQ(v, dt == DType::kBool ? 1.0 : 3.0) << dtype_name(dt);
  }
  Variable var = make_variable({.initial_value = Tensor::ones({4}, DType::kBFloat16, "/gpu:1")});
  var.assign_add(Tensor::ones({4}, DType::kBFloat16, "/cpu:0"));
  EXPECT_EQ(var.value().to_vector<float>(), (std::vector<float>{2, 2, 2, 2}));
}

TEST_F(GpuTest, VirtualGpuLimitIsEnforcedAndRecoverable) {
  carve_two(64);
  Tensor keep = Tensor::zeros({40 << 20}, DType::kUInt8, "/gpu:1");
  try {
    Tensor big = Tensor::zeros({40 << 20}, DType::kUInt8, "/gpu:1");
    FAIL() << "no OOM";
  } catch (const ResourceExhaustedError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("device:GPU:1"), std::string::npos) << m;
    EXPECT_NE(m.find("/physical_device:GPU:0"), std::string::npos) << m;
  }
  Tensor small = Tensor::zeros({16 << 20}, DType::kUInt8, "/gpu:1");
  EXPECT_EQ(cfg::get_memory_info("GPU:1").current, std::size_t{56} << 20);
  EXPECT_EQ(cfg::get_memory_info("GPU:0").current, 0u);  // the sibling is independent
}

TEST_F(GpuTest, GrowthAndVirtualDevicesExcludeEachOther) {
  cfg::set_memory_growth(gpu0(), true);
  EXPECT_TRUE(cfg::get_memory_growth(gpu0()));
  EXPECT_THROW_WITH(carve_two(64), InvalidArgumentError, "memory growth");
  cfg::set_memory_growth(gpu0(), false);
  carve_two(64);
  EXPECT_THROW_WITH(cfg::set_memory_growth(gpu0(), true), InvalidArgumentError, "virtual devices");
}

TEST_F(GpuTest, LimitLargerThanTheGpuIsRejected) {
  const auto mb = static_cast<std::int64_t>(gpu0().memory_bytes >> 20);
  EXPECT_THROW_WITH(cfg::set_logical_device_configuration(gpu0(), {{.memory_limit_mb = mb}, {.memory_limit_mb = mb}}),
                    InvalidArgumentError, "add up to");
  cfg::set_per_process_gpu_memory_fraction(0.25);
  EXPECT_THROW_WITH(cfg::set_logical_device_configuration(gpu0(), {{.memory_limit_mb = mb / 2}}), InvalidArgumentError,
                    "per_process_gpu_memory_fraction");
}

TEST_F(GpuTest, GrowthModeReservesOnDemand) {
  cfg::set_memory_growth(gpu0(), true);
  Tensor t = Tensor::zeros({1 << 20}, DType::kUInt8, "/gpu:0");
  MemoryInfo m = cfg::get_memory_info("GPU:0");
  EXPECT_LT(m.reserved, m.limit);  // not the whole GPU
  EXPECT_GE(m.reserved, std::size_t{1} << 20);
}

TEST_F(GpuTest, EnvironmentForcesGrowth) {
  setenv("TF_FORCE_GPU_ALLOW_GROWTH", "true", 1);
  EXPECT_TRUE(cfg::get_memory_growth(gpu0()));
  EXPECT_TRUE(cfg::list_logical_devices("GPU").at(0).memory_growth);
  unsetenv("TF_FORCE_GPU_ALLOW_GROWTH");
}

// gpu::host_waits (issue 42): queued GPU work adds none, nor does making a scalar on the GPU
// (Tensor::scalar: its bits go into a fill kernel); reading a device value on the host adds at least one (the copy's
// stream synchronize); CPU work never counts.
TEST_F(GpuTest, HostWaitsCountReadsOfDeviceValuesNotQueuedWork) {
  const Tensor x = Tensor::ones({1024}, DType::kFloat32, "/GPU:0");
  std::int64_t before = gpu::host_waits();
  Tensor y = x.clone();
  y.add_inplace(x);                                        // queued on the GPU's stream
  const Tensor s = Tensor::scalar<float>(3.5f, "/GPU:0");  // a fill kernel, not a synchronized copy
  const Tensor d = Tensor::scalar<double>(-0.25, "/GPU:0");
  EXPECT_EQ(gpu::host_waits(), before);
  EXPECT_EQ(s.item<float>(), 3.5f);
  EXPECT_EQ(d.item<double>(), -0.25);
  before = gpu::host_waits();
  EXPECT_EQ(y.to_vector<float>(), std::vector<float>(1024, 2.0f));
  EXPECT_GE(gpu::host_waits(), before + 1);
  before = gpu::host_waits();
  Tensor h = Tensor::ones({1024}, DType::kFloat32, "/CPU:0");
  h.add_inplace(h.clone());
  EXPECT_EQ(h.to_vector<float>(), std::vector<float>(1024, 2.0f));
  EXPECT_EQ(gpu::host_waits(), before) << "CPU work is no host wait";
}

TEST(GpuProbeTest, NoHostWaitsWithoutAGpu) {
  if (gpu::device_count() > 0) GTEST_SKIP() << "a GPU is present";
  Tensor h = Tensor::ones({16}, DType::kFloat32, "/CPU:0");
  h.add_inplace(h.clone());
  EXPECT_EQ(h.to_vector<float>(), std::vector<float>(16, 2.0f));
  EXPECT_EQ(gpu::host_waits(), 0);
}

TEST(GpuProbeTest, ReportsAReasonWhenThereIsNoGpu) {
  if (gpu::device_count() > 0) GTEST_SKIP() << "a GPU is present";
  EXPECT_FALSE(gpu::unavailable_reason().empty());
  EXPECT_TRUE(cfg::list_physical_devices("GPU").empty());
  EXPECT_THROW(gpu::device_properties(0), Error);
}

}  // namespace
}  // namespace chorus
