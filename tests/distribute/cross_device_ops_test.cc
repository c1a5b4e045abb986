// The choice of cross-device reduction, from logical devices described directly (so every GPU
// layout is checked on a machine without GPUs), and the communicators it builds on CPU devices.
#include <chorus/distribute/cross_device_ops.h>

#include <gtest/gtest.h>

#include <chorus/collective/nccl/nccl.h>
#include <chorus/core/config.h>
#include <chorus/core/error.h>
#include <chorus/core/runtime.h>

namespace chorus::distribute {
namespace {

LogicalDevice dev(const std::string& type, int index, int physical) {
  LogicalDevice d;
  d.device_type = type;
  d.index = index;
  d.name = canonical_logical_name(type, index);
  d.physical_index = physical;
  d.physical_name = canonical_physical_name(type, physical);
  return d;
}

const bool kHaveNccl = !collective::nccl_version().empty();

TEST(CrossDeviceOpsTest, AutomaticChoiceFollowsPhysicalDevices) {
  EXPECT_EQ(choose_cross_device_ops({dev("CPU", 0, 0), dev("CPU", 1, 0)}).ops, CrossDeviceOps::kSharedMemory);
  // Two logical GPUs carved out of one physical GPU: virtual GPU, never NCCL.
  auto virt = choose_cross_device_ops({dev("GPU", 0, 0), dev("GPU", 1, 0)});
  EXPECT_EQ(virt.ops, CrossDeviceOps::kVirtualGpu);
  EXPECT_NE(virt.reason.find("one physical GPU"), std::string::npos) << virt.reason;
  // Distinct physical GPUs: NCCL when built — even if GPUs were hidden and indices are sparse.
  auto distinct = choose_cross_device_ops({dev("GPU", 0, 1), dev("GPU", 1, 3)});
  EXPECT_EQ(distinct.ops, kHaveNccl ? CrossDeviceOps::kNccl : CrossDeviceOps::kReductionToOneDevice);
  // Some GPUs shared, some not; CPU and GPU mixed.
  EXPECT_EQ(choose_cross_device_ops({dev("GPU", 0, 0), dev("GPU", 1, 0), dev("GPU", 2, 1)}).ops,
            CrossDeviceOps::kReductionToOneDevice);
  auto mixed = choose_cross_device_ops({dev("CPU", 0, 0), dev("GPU", 0, 0)});
  EXPECT_EQ(mixed.ops, CrossDeviceOps::kReductionToOneDevice);
  EXPECT_NE(mixed.reason.find("mixed"), std::string::npos);
  EXPECT_EQ(choose_cross_device_ops({dev("GPU", 0, 0)}).ops, CrossDeviceOps::kVirtualGpu);
}

TEST(CrossDeviceOpsTest, ForcingWhatCannotWorkIsAnErrorNotAHang) {
  const std::vector<LogicalDevice> virt = {dev("GPU", 0, 0), dev("GPU", 1, 0)};
  if (kHaveNccl) {
    try {
      choose_cross_device_ops(virt, CrossDeviceOps::kNccl);
      FAIL() << "forcing NCCL on virtual GPUs was accepted";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("NCCL refuses two ranks on one GPU"), std::string::npos) << e.what();
    }
    EXPECT_THROW(choose_cross_device_ops({dev("CPU", 0, 0)}, CrossDeviceOps::kNccl), InvalidArgumentError);
    EXPECT_EQ(choose_cross_device_ops({dev("GPU", 0, 0), dev("GPU", 1, 1)}, CrossDeviceOps::kNccl).ops,
              CrossDeviceOps::kNccl);
  } else {
    EXPECT_THROW(choose_cross_device_ops(virt, CrossDeviceOps::kNccl), UnavailableError);
  }
  EXPECT_THROW(choose_cross_device_ops({dev("GPU", 0, 0), dev("GPU", 1, 1)}, CrossDeviceOps::kVirtualGpu),
               InvalidArgumentError);
  EXPECT_THROW(choose_cross_device_ops({dev("CPU", 0, 0)}, CrossDeviceOps::kVirtualGpu), InvalidArgumentError);
  EXPECT_THROW(choose_cross_device_ops(virt, CrossDeviceOps::kSharedMemory), InvalidArgumentError);
  EXPECT_THROW(choose_cross_device_ops({}), InvalidArgumentError);
  auto forced = choose_cross_device_ops({dev("CPU", 0, 0), dev("CPU", 1, 0)}, CrossDeviceOps::kReductionToOneDevice);
  EXPECT_EQ(forced.ops, CrossDeviceOps::kReductionToOneDevice);
  EXPECT_NE(forced.reason.find("requested"), std::string::npos);
}

TEST(CrossDeviceOpsTest, BuildsWorkingCommunicatorsForCpuDevices) {
  internal::reset_runtime_for_testing();
  config::set_visible_devices({}, "GPU");
  config::set_logical_device_configuration(config::list_physical_devices("CPU")[0],
                                           {{.memory_limit_mb = 64}, {.memory_limit_mb = 64}, {.memory_limit_mb = 64}});
  auto devices = config::list_logical_devices("CPU");
  for (CrossDeviceOps ops : {CrossDeviceOps::kAuto, CrossDeviceOps::kReductionToOneDevice}) {
    auto choice = choose_cross_device_ops(devices, ops);
    auto comms = make_cross_device_communicators(devices, choice);
    ASSERT_EQ(comms.size(), 3u);
    EXPECT_EQ(comms[0]->backend(), ops == CrossDeviceOps::kAuto ? "shared_memory" : "reference");
    for (int r = 0; r < 3; ++r) EXPECT_EQ(comms[r]->rank(), r);
  }
  EXPECT_THROW(make_cross_device_communicators(devices, {}), InvalidArgumentError);  // still auto
  // CPU and GPU mixed: reduction to one device, which moves GPU tensors through host copies (its
  // data path on a GPU: tests/collective/reduction_to_one_device_gpu_test.cc).
  auto mixed = make_cross_device_communicators({dev("CPU", 0, 0), dev("GPU", 0, 0)},
                                               {CrossDeviceOps::kReductionToOneDevice, "mixed"});
  ASSERT_EQ(mixed.size(), 2u);
  EXPECT_EQ(mixed[1]->backend(), "reference");
}

}  // namespace
}  // namespace chorus::distribute
