#include <chorus/core/placement.h>

#include <gtest/gtest.h>

#include <thread>

#include "test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/gpu.h>
#include <chorus/core/tensor.h>

namespace chorus {
namespace {

namespace cfg = config;

class PlacementTest : public testing::CoreTest {
 protected:
  void SetUp() override {
    CoreTest::SetUp();
    cfg::set_visible_devices({}, "GPU");  // the same answers with or without a GPU
    cfg::set_logical_device_configuration(cfg::list_physical_devices("CPU")[0],
                                          {{.memory_limit_mb = 64}, {.memory_limit_mb = 64}});
  }
};

const std::string kCpu0 = "/job:localhost/replica:0/task:0/device:CPU:0";
const std::string kCpu1 = "/job:localhost/replica:0/task:0/device:CPU:1";

TEST_F(PlacementTest, DefaultIsTheFirstCpuWithoutGpus) {
  EXPECT_EQ(Tensor::zeros({1}).device_name(), kCpu0);
  EXPECT_EQ(place_op("MatMul")->name(), kCpu0);
}

TEST_F(PlacementTest, EveryTensorFlowSpellingPlacesOnTheNamedDevice) {
  for (const char* spec : {"/cpu:1", "/CPU:1", "CPU:1", "cpu:1", "/device:CPU:1", "/device:cpu:1",
                           "/job:localhost/replica:0/task:0/device:CPU:1", "/job:localhost/cpu:1"}) {
    DeviceScope scope(spec);
    EXPECT_EQ(Tensor::zeros({1}).device_name(), kCpu1) << spec;
  }
  DeviceScope scope("CPU");  // a type without index means index 0
  EXPECT_EQ(Tensor::zeros({1}).device_name(), kCpu0);
}

TEST_F(PlacementTest, ScopesNestAndRestore) {
  {
    DeviceScope outer("/cpu:1");
    EXPECT_EQ(Tensor::zeros({1}).device_name(), kCpu1);
    {
      DeviceScope inner("/cpu:0");
      EXPECT_EQ(Tensor::zeros({1}).device_name(), kCpu0);
    }
    EXPECT_EQ(Tensor::zeros({1}).device_name(), kCpu1);
    EXPECT_EQ(Tensor::zeros({1}, DType::kFloat32, "/cpu:0").device_name(), kCpu0);  // explicit wins
  }
  EXPECT_EQ(Tensor::zeros({1}).device_name(), kCpu0);
}

TEST_F(PlacementTest, ScopesArePerThread) {
  DeviceScope scope("/cpu:1");
  std::string other;
  std::thread t([&] { other = Tensor::zeros({1}).device_name(); });
  t.join();
  EXPECT_EQ(other, kCpu0);
}

TEST_F(PlacementTest, BadStringsAreRejectedAtTheScope) {
  EXPECT_THROW(DeviceScope("/cpu:x"), InvalidArgumentError);
  EXPECT_THROW(DeviceScope("/tpu:0"), InvalidArgumentError);
  EXPECT_THROW_WITH(DeviceScope("/physical_device:CPU:0"), InvalidArgumentError, "physical device");
}

TEST_F(PlacementTest, UnknownDeviceWithoutSoftPlacementListsTheDevices) {
  cfg::set_soft_device_placement(false);
  DeviceScope scope("/cpu:5");
  EXPECT_THROW_WITH(Tensor::zeros({1}), InvalidArgumentError, "Could not satisfy device specification", "CPU:5", "Fill",
                    kCpu0, kCpu1);
  DeviceScope gpu("/gpu:0");
  EXPECT_THROW_WITH(Tensor::zeros({1}), InvalidArgumentError, "GPU:0", "does not exist");
}

TEST_F(PlacementTest, SoftPlacementFallsBackWithOneWarning) {
  testing::LogCapture capture;
  cfg::set_soft_device_placement(true);
  DeviceScope scope("/gpu:3");
  EXPECT_EQ(Tensor::zeros({1}).device_name(), kCpu0);
  EXPECT_EQ(Tensor::zeros({1}).device_name(), kCpu0);
  int warnings = 0;
  for (const auto& l : capture.lines())
    if (l.find("soft placement: op Fill requested '/device:GPU:3'") != std::string::npos) ++warnings;
  EXPECT_EQ(warnings, 1);
}

TEST_F(PlacementTest, OpWithoutGpuKernelStaysOnCpu) {
  EXPECT_EQ(place_op("StringFormat", "", /*has_gpu_kernel=*/false)->name(), kCpu0);
}

TEST_F(PlacementTest, LogDevicePlacementNamesOpAndCanonicalDevice) {
  testing::LogCapture capture;
  set_log_level(LogLevel::kInfo);
  cfg::set_log_device_placement(true);
  Tensor t = Tensor::zeros({4}, DType::kFloat32, "/cpu:1");
  Tensor u = t.to("cpu:0");
  EXPECT_TRUE(capture.contains("Executing op Fill in device " + kCpu1));
  EXPECT_TRUE(capture.contains("Executing op Copy in device " + kCpu0));
  cfg::set_log_device_placement(false);
}

}  // namespace
}  // namespace chorus
