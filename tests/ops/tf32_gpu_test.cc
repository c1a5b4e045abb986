// TensorFloat-32 on the GPU (core/config.h): float32 matmuls and convolutions follow the switch.
// TF's own example made exact: fill(1 + 2^-12) times fill(1) summed over k <= 2048 terms is
// exactly k with TF32 (1 + 2^-12 rounds to 1 in TF32's 10 mantissa bits) and exactly
// k * (1 + 2^-12) in float32, whatever the order of the additions (every partial sum
// m * (1 + 2^-12), m <= k, fits float32's 24 bits) — on compute capability 8.0+; older GPUs
// compute float32 whatever the switch says. (TF's 1.0001 is not exact: cuBLAS's float32 sum of
// 1024 terms gave 1024.1123 on an H200, 0.0099 from 1024 * 1.0001, each addition rounding up.)
// Labels gpu and tf32: it runs with the default setting, not the NVIDIA_TF32_OVERRIDE=0 that the
// other gpu tests get (tests/CMakeLists.txt); skips without a GPU, or when the override is set
// anyway.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <chorus/core/config.h>
#include <chorus/core/gpu.h>
#include <chorus/core/runtime.h>
#include <chorus/ops/linalg.h>
#include <chorus/ops/nn.h>

namespace chorus {
namespace {

class Tf32Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::device_count() == 0) GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason();
    if (const char* o = std::getenv("NVIDIA_TF32_OVERRIDE"); o != nullptr && std::string(o) == "0")
      GTEST_SKIP() << "NVIDIA_TF32_OVERRIDE=0: cuBLAS and cuDNN never use TF32 here";
    internal::reset_runtime_for_testing();
    tensor_cores_ = gpu::device_properties(0).compute_capability_major >= 8;
  }
  bool tensor_cores_ = false;
};

constexpr double kOnePlus = 1.0 + 1.0 / 4096;  // 1 + 2^-12: float32, not TF32

TEST_F(Tf32Gpu, MatmulRoundsToTf32OnlyWhileEnabled) {
  ASSERT_TRUE(config::tensor_float_32_execution_enabled()) << "on by default, as in TF";
  const Tensor x = Tensor::full({1024, 1024}, kOnePlus, DType::kFloat32, "/GPU:0");
  const Tensor y = Tensor::full({1024, 1024}, 1.0, DType::kFloat32, "/GPU:0");
  const float on = ops::matmul(x, y).to_vector<float>()[0];
  config::enable_tensor_float_32_execution(false);
  const float off = ops::matmul(x, y).to_vector<float>()[0];
  EXPECT_EQ(off, 1024.25f) << "full float32: 1024 * (1 + 2^-12), exactly";
  if (tensor_cores_)
    EXPECT_EQ(on, 1024.0f) << "TF32: 1 + 2^-12 rounds to 1";
  else
    EXPECT_EQ(on, off) << "no TF32 before compute capability 8.0";
  config::enable_tensor_float_32_execution(true);
  EXPECT_EQ(ops::matmul(x, y).to_vector<float>()[0], on) << "the switch moves back";
}

TEST_F(Tf32Gpu, ConvolutionComputesFullFloat32WhileDisabled) {
  // 3x3 over 64 channels: 576 terms per output. cuDNN may pick a TF32 algorithm while enabled (the
  // fastest it measures); disabled, it must not.
  const Tensor x = Tensor::full({4, 16, 16, 64}, kOnePlus, DType::kFloat32, "/GPU:0");
  const Tensor w = Tensor::full({3, 3, 64, 64}, 1.0, DType::kFloat32, "/GPU:0");
  const float on = ops::conv2d(x, w, {1, 1}, ops::Padding::kValid).to_vector<float>()[0];
  config::enable_tensor_float_32_execution(false);
  const float off = ops::conv2d(x, w, {1, 1}, ops::Padding::kValid).to_vector<float>()[0];
  // Near, not equal: cuDNN may choose a Winograd or FFT algorithm, whose float32 is not exact.
  EXPECT_NEAR(off, 576.140625, 1e-3) << "full float32: 576 * (1 + 2^-12)";
  EXPECT_TRUE(on == 576.0f || std::abs(on - off) < 1e-3f) << on;
  if (tensor_cores_) std::printf("conv2d with TF32 enabled: %.4f (%s)\n", on, on == 576.0f ? "TF32" : "float32");
}

}  // namespace
}  // namespace chorus
