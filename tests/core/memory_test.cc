// Memory limits of logical devices seen through tensors: accounting, OOM and recovery.
#include <gtest/gtest.h>

#include "test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/tensor.h>

namespace chorus {
namespace {

namespace cfg = config;

class MemoryTest : public testing::CoreTest {
 protected:
  void SetUp() override {
    CoreTest::SetUp();
    cfg::set_visible_devices({}, "GPU");
    cfg::set_logical_device_configuration(cfg::list_physical_devices("CPU")[0],
                                          {{.memory_limit_mb = 8}, {.memory_limit_mb = 16}});
  }
};

TEST_F(MemoryTest, CurrentAndPeakFollowTensors) {
  const MemoryInfo before = cfg::get_memory_info("CPU:0");
  EXPECT_EQ(before.current, 0u);
  {
    Tensor t = Tensor::zeros({1024, 256}, DType::kFloat32, "/cpu:0");  // exactly 1 MiB
    EXPECT_EQ(cfg::get_memory_info("CPU:0").current, std::size_t{1} << 20);
    EXPECT_EQ(cfg::get_memory_info("CPU:1").current, 0u);  // the other device is untouched
  }
  MemoryInfo after = cfg::get_memory_info("/device:CPU:0");
  EXPECT_EQ(after.current, 0u);
  EXPECT_EQ(after.peak, std::size_t{1} << 20);
  EXPECT_EQ(after.limit, std::size_t{8} << 20);
  cfg::reset_memory_stats("CPU:0");
  EXPECT_EQ(cfg::get_memory_info("CPU:0").peak, 0u);
}

TEST_F(MemoryTest, OutOfMemoryNamesEverythingAndTheProcessRecovers) {
  Tensor keep = Tensor::zeros({3 << 20}, DType::kUInt8, "/cpu:0");  // 3 MiB live
  try {
    Tensor too_big = Tensor::zeros({6 << 20}, DType::kUInt8, "/cpu:0");  // 3 + 6 > 8 MiB
    FAIL() << "no OOM";
  } catch (const ResourceExhaustedError& e) {
    std::string m = e.what();
    for (const char* needle : {"/job:localhost/replica:0/task:0/device:CPU:0", "/physical_device:CPU:0", "limit",
                               "in use", "peak", "6291456", "largest free block", "Tensor uint8(3145728,)"})
      EXPECT_NE(m.find(needle), std::string::npos) << "missing '" << needle << "' in: " << m;
  }
  // Smaller retry works; the live tensor is intact.
  Tensor fits = Tensor::full({4 << 20}, 1.0, DType::kUInt8, "/cpu:0");
  EXPECT_EQ(fits.to_vector<int>()[0], 1);
  EXPECT_EQ(keep.to_vector<int>()[0], 0);
  // The second device has its own, larger limit.
  Tensor other = Tensor::zeros({12 << 20}, DType::kUInt8, "/cpu:1");
  EXPECT_EQ(other.num_elements(), 12 << 20);
}

TEST_F(MemoryTest, CopyIntoAFullDeviceFailsCleanly) {
  Tensor a = Tensor::zeros({7 << 20}, DType::kUInt8, "/cpu:1");
  Tensor hog = Tensor::zeros({7 << 20}, DType::kUInt8, "/cpu:0");
  EXPECT_THROW(a.to("/cpu:0"), ResourceExhaustedError);
  EXPECT_EQ(cfg::get_memory_info("CPU:0").current, std::size_t{7} << 20);
}

}  // namespace
}  // namespace chorus
