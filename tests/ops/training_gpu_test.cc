// ops::apply_fused_update (ops/training.h) on a GPU (ops/cuda/training.cu, one launch per 24
// variables): bitwise the op sequences it replaces, run with the GPU's own op kernels, for every
// rule and option, float32 and float64, NaN and ±Inf included (fused_update_util.h); a group of
// 30 variables takes two launches. Skips without a GPU.
#include "tests/ops/cuda_test_util.h"
#include "tests/ops/fused_update_util.h"

namespace chorus {
namespace {

#ifndef CHORUS_WITH_CUDA

TEST(FusedUpdateGpuTest, NeedsCuda) { GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason(); }

#else

class FusedUpdateGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::device_count() == 0) GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason();
  }
};

TEST_F(FusedUpdateGpuTest, EveryRuleMatchesItsOpSequenceBitwiseFloat32) {
  fused_testing::check_all<float>("/GPU:0", {1000, 37, 0, 197300});
}
TEST_F(FusedUpdateGpuTest, EveryRuleMatchesItsOpSequenceBitwiseFloat64) {
  fused_testing::check_all<double>("/GPU:0", {1000, 37, 0, 5000});
}
// The scalars from a block on the GPU (ops::write_fused_scalars), two steps: as by value, bitwise.
TEST_F(FusedUpdateGpuTest, ScalarsFromABlockMatchTheOpSequenceStepAfterStep) {
  fused_testing::check_all<float>("/GPU:0", {1000, 37, 0, 197300}, true);
  fused_testing::check_all<double>("/GPU:0", {1000, 37, 0, 5000}, true);
}
TEST_F(FusedUpdateGpuTest, ThirtyVariablesTakeTwoLaunchesAndMatch) {
  std::vector<std::int64_t> sizes;
  for (int k = 0; k < 30; ++k) sizes.push_back(1 + 97 * k);
  fused_testing::check_all<float>("/GPU:0", sizes);
}

#endif

}  // namespace
}  // namespace chorus
