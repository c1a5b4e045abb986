#include <chorus/core/config.h>

#include <gtest/gtest.h>
#include <stdlib.h>

#include "test_util.h"
#include <chorus/core/error.h>
#include <chorus/core/gpu.h>
#include <chorus/core/tensor.h>

namespace chorus {
namespace {

using testing::CoreTest;
namespace cfg = config;

PhysicalDevice cpu() { return cfg::list_physical_devices("CPU").at(0); }

TEST_F(CoreTest, ListsTheCpuAndEveryGpuTheRuntimeSees) {
  auto all = cfg::list_physical_devices();
  ASSERT_GE(all.size(), 1u);
  EXPECT_EQ(all[0].name, "/physical_device:CPU:0");
  EXPECT_EQ(all[0].device_type, "CPU");
  EXPECT_GT(all[0].memory_bytes, 0u);
  EXPECT_EQ(cfg::list_physical_devices("GPU").size(), static_cast<std::size_t>(gpu::device_count()));
  EXPECT_EQ(cfg::list_physical_devices("cpu").size(), 1u);  // case-insensitive
  EXPECT_THROW_WITH(cfg::list_physical_devices("TPU"), InvalidArgumentError, "TPU", "CPU and GPU");
}

TEST_F(CoreTest, DefaultIsOneLogicalDevicePerVisiblePhysicalDevice) {
  auto logical = cfg::list_logical_devices();
  ASSERT_EQ(logical.size(), 1u + static_cast<std::size_t>(gpu::device_count()));
  EXPECT_EQ(logical[0].name, "/job:localhost/replica:0/task:0/device:CPU:0");
  EXPECT_EQ(logical[0].physical_name, "/physical_device:CPU:0");
  EXPECT_EQ(logical[0].memory_limit, cpu().memory_bytes);
}

TEST_F(CoreTest, CarvesLogicalCpuDevicesWithTheirOwnLimits) {
  cfg::set_logical_device_configuration(cpu(),
                                        {{.memory_limit_mb = 100}, {.memory_limit_mb = 200}, {.memory_limit_mb = 50}});
  ASSERT_EQ(cfg::get_logical_device_configuration(cpu()).size(), 3u);
  auto logical = cfg::list_logical_devices("CPU");
  ASSERT_EQ(logical.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(logical[i].name, "/job:localhost/replica:0/task:0/device:CPU:" + std::to_string(i));
    EXPECT_EQ(logical[i].physical_name, "/physical_device:CPU:0");
    EXPECT_EQ(logical[i].index, i);
  }
  EXPECT_EQ(logical[0].memory_limit, std::size_t{100} << 20);
  EXPECT_EQ(logical[1].memory_limit, std::size_t{200} << 20);
  EXPECT_EQ(logical[2].memory_limit, std::size_t{50} << 20);
  EXPECT_EQ(cfg::get_memory_info("CPU:1").limit, std::size_t{200} << 20);
}

TEST_F(CoreTest, RejectsBadLogicalConfigurations) {
  EXPECT_THROW_WITH(cfg::set_logical_device_configuration(cpu(), {}), InvalidArgumentError, "empty");
  EXPECT_THROW_WITH(cfg::set_logical_device_configuration(cpu(), {{.memory_limit_mb = 0}}), InvalidArgumentError,
                    "memory_limit_mb=0");
  EXPECT_THROW_WITH(cfg::set_logical_device_configuration(cpu(), {{.memory_limit_mb = 10}, {.memory_limit_mb = -1}}),
                    InvalidArgumentError, "logical device 1", "memory_limit_mb=-1");
  const auto too_much = static_cast<std::int64_t>(cpu().memory_bytes >> 20) + 1;
  EXPECT_THROW_WITH(cfg::set_logical_device_configuration(cpu(), {{.memory_limit_mb = too_much}}), InvalidArgumentError,
                    std::to_string(too_much) + " MiB", "has " + std::to_string(cpu().memory_bytes >> 20) + " MiB");
  PhysicalDevice ghost{.name = "/physical_device:GPU:7", .device_type = "GPU", .index = 7};
  EXPECT_THROW_WITH(cfg::set_logical_device_configuration(ghost, {{.memory_limit_mb = 10}}), InvalidArgumentError,
                    "unknown physical device '/physical_device:GPU:7'", "/physical_device:CPU:0");
  // Nothing was stored by the failed calls.
  EXPECT_TRUE(cfg::get_logical_device_configuration(cpu()).empty());
}

TEST_F(CoreTest, ConfigurationIsFrozenAtFirstUse) {
  cfg::list_logical_devices();
  EXPECT_THROW_WITH(cfg::set_logical_device_configuration(cpu(), {{.memory_limit_mb = 10}}), FailedPreconditionError,
                    "must be set before devices are initialized", "list_logical_devices()");
  EXPECT_THROW_WITH(cfg::set_per_process_gpu_memory_fraction(0.5), FailedPreconditionError,
                    "must be set before devices are initialized");
  EXPECT_THROW_WITH(cfg::set_visible_devices({}, "GPU"), FailedPreconditionError,
                    "must be set before devices are initialized");
  // Placement settings stay changeable, as in TF.
  EXPECT_NO_THROW(cfg::set_soft_device_placement(false));
  EXPECT_NO_THROW(cfg::set_log_device_placement(true));
}

TEST_F(CoreTest, CreatingATensorAlsoFreezesTheConfiguration) {
  cfg::set_visible_devices({}, "GPU");  // keep this CPU test off a GPU other tests may be using
  Tensor t = Tensor::zeros({2}, DType::kFloat32, "/cpu:0");
  EXPECT_THROW_WITH(cfg::set_logical_device_configuration(cpu(), {{.memory_limit_mb = 10}}), FailedPreconditionError,
                    "must be set before devices are initialized");
}

TEST_F(CoreTest, AFailedInitializationLeavesTheConfigurationChangeable) {
  setenv("TF_FORCE_GPU_ALLOW_GROWTH", "maybe", 1);
  if (gpu::device_count() > 0) {
    EXPECT_THROW(cfg::list_logical_devices(), InvalidArgumentError);  // the bad value names itself
    cfg::set_visible_devices({}, "GPU");                              // ... and can be worked around
  }
  EXPECT_EQ(cfg::list_logical_devices().size(), 1u);  // without a visible GPU the variable is not read
  unsetenv("TF_FORCE_GPU_ALLOW_GROWTH");
}

TEST_F(CoreTest, VisibleDevices) {
  EXPECT_EQ(cfg::get_visible_devices().size(), cfg::list_physical_devices().size());
  EXPECT_THROW_WITH(cfg::set_visible_devices({}, "CPU"), InvalidArgumentError, "CPU cannot be hidden");
  cfg::set_visible_devices({}, "GPU");  // hide every GPU
  EXPECT_TRUE(cfg::get_visible_devices("GPU").empty());
  EXPECT_EQ(cfg::get_visible_devices("CPU").size(), 1u);
  EXPECT_TRUE(cfg::list_logical_devices("GPU").empty());
  EXPECT_EQ(cfg::list_physical_devices("GPU").size(), static_cast<std::size_t>(gpu::device_count()));
}

TEST_F(CoreTest, MemoryGrowthAppliesToGpusOnly) {
  EXPECT_THROW_WITH(cfg::set_memory_growth(cpu(), true), InvalidArgumentError, "applies to GPUs");
  EXPECT_THROW(cfg::get_memory_growth(cpu()), InvalidArgumentError);
}

TEST_F(CoreTest, GpuMemoryFractionIsValidated) {
  EXPECT_DOUBLE_EQ(cfg::get_per_process_gpu_memory_fraction(), 1.0);
  EXPECT_THROW_WITH(cfg::set_per_process_gpu_memory_fraction(0.0), InvalidArgumentError, "0 < fraction <= 1");
  EXPECT_THROW(cfg::set_per_process_gpu_memory_fraction(1.5), InvalidArgumentError);
  cfg::set_per_process_gpu_memory_fraction(0.4);
  EXPECT_DOUBLE_EQ(cfg::get_per_process_gpu_memory_fraction(), 0.4);
}

TEST_F(CoreTest, MemoryInfoOfUnknownDeviceListsTheDevices) {
  EXPECT_THROW_WITH(cfg::get_memory_info("/gpu:9"), InvalidArgumentError, "unknown device '/gpu:9'",
                    "/job:localhost/replica:0/task:0/device:CPU:0");
  EXPECT_THROW_WITH(cfg::get_memory_info("/physical_device:CPU:0"), InvalidArgumentError, "physical device");
  EXPECT_THROW(cfg::get_memory_info("/cpu:zero"), InvalidArgumentError);
}

// TensorFloat-32's switch (the GPU side: tests/ops/tf32_gpu_test.cc): on by default as in TF,
// off by NVIDIA's own override, changeable at any time — also after devices are initialized —
// and back to the default with the rest of the configuration.
TEST_F(CoreTest, TensorFloat32IsOnByDefaultAndFollowsNvidiasOverride) {
  unsetenv("NVIDIA_TF32_OVERRIDE");
  chorus::internal::reset_runtime_for_testing();
  EXPECT_TRUE(cfg::tensor_float_32_execution_enabled());
  (void)cfg::list_logical_devices();  // initialized: the switch still moves
  cfg::enable_tensor_float_32_execution(false);
  EXPECT_FALSE(cfg::tensor_float_32_execution_enabled());
  cfg::enable_tensor_float_32_execution(true);
  EXPECT_TRUE(cfg::tensor_float_32_execution_enabled());
  cfg::enable_tensor_float_32_execution(false);
  chorus::internal::reset_runtime_for_testing();
  EXPECT_TRUE(cfg::tensor_float_32_execution_enabled());
  setenv("NVIDIA_TF32_OVERRIDE", "0", 1);
  EXPECT_FALSE(cfg::tensor_float_32_execution_enabled()) << "NVIDIA_TF32_OVERRIDE=0 makes the default off";
  cfg::enable_tensor_float_32_execution(
      true);  // asked for explicitly: the setting says so (the libraries still obey the override)
  EXPECT_TRUE(cfg::tensor_float_32_execution_enabled());
  chorus::internal::reset_runtime_for_testing();
  setenv("NVIDIA_TF32_OVERRIDE", "1", 1);
  EXPECT_TRUE(cfg::tensor_float_32_execution_enabled());
  unsetenv("NVIDIA_TF32_OVERRIDE");
}

}  // namespace
}  // namespace chorus
