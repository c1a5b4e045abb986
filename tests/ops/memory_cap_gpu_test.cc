// A virtual GPU's memory limit against the outputs of cuBLAS and cuDNN ops: two virtual GPUs of
// 64 MiB carved out of GPU:0; a matmul and a convolution whose outputs do not fit raise
// ResourceExhaustedError naming the device (never a CUDA error or an abort), leave the device's
// accounting as it was, and smaller ops on the same device then match float64 / the CPU kernels.
// Skips without a GPU (label gpu), with the CUDA runtime's reason.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "tests/core/test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/gpu.h>
#include <chorus/core/runtime.h>
#include <chorus/ops/ops.h>

namespace chorus::ops {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

class MemoryCapGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::device_count() == 0) GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason();
    chorus::internal::reset_runtime_for_testing();
  }
  void TearDown() override { chorus::internal::reset_runtime_for_testing(); }
};

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

TEST_F(MemoryCapGpu, OutputsPastAVirtualGpusLimitRaiseAndTheDeviceGoesOn) {
  config::set_logical_device_configuration(config::list_physical_devices("GPU").at(0),
                                           {{.memory_limit_mb = 64}, {.memory_limit_mb = 64}});
  // matmul: [4096, 8] x [8, 4096] needs a 64 MiB output — more than is left.
  const auto ha = random_floats(4096 * 8, 2), hb = random_floats(8 * 4096, 3);
  Tensor a = Tensor::from_vector<float>(ha, {4096, 8}, "/gpu:1"),
         b = Tensor::from_vector<float>(hb, {8, 4096}, "/gpu:1");
  const std::size_t inputs = config::get_memory_info("GPU:1").current;
  EXPECT_THROW_WITH(matmul(a, b), ResourceExhaustedError, "device:GPU:1", "limit 64.00 MiB");
  EXPECT_EQ(config::get_memory_info("GPU:1").current, inputs);
  // A smaller product on the same device: [512, 8] x [8, 512], against float64 on the host.
  Tensor c = matmul(slice(a, {0, 0}, {512, 8}), slice(b, {0, 0}, {8, 512}));
  const auto got = c.to_vector<float>();
  for (int i = 0; i < 512; i += 7)
    for (int j = 0; j < 512; j += 5) {
      double want = 0;
      for (int k = 0; k < 8; ++k)
        want +=
            static_cast<double>(ha[static_cast<std::size_t>(i * 8 + k)]) * hb[static_cast<std::size_t>(k * 4096 + j)];
      ASSERT_NEAR(got[static_cast<std::size_t>(i * 512 + j)], want, 1e-5 * (1 + std::abs(want))) << i << "," << j;
    }

  // conv2d: [16, 128, 128, 4] (4 MiB) → 64 filters needs a 64 MiB output on a 64 MiB device.
  const auto hx = random_floats(16 * 128 * 128 * 4, 4), hw = random_floats(3 * 3 * 4 * 64, 5);
  Tensor x = Tensor::from_vector<float>(hx, {16, 128, 128, 4}, "/gpu:0");
  Tensor w = Tensor::from_vector<float>(hw, {3, 3, 4, 64}, "/gpu:0");
  EXPECT_THROW_WITH(conv2d(x, w, {1, 1}, Padding::kSame), ResourceExhaustedError, "device:GPU:0");
  // A smaller convolution on the same device, against the CPU kernel.
  Tensor xs = slice(x, {0, 0, 0, 0}, {2, 32, 32, 4});
  Tensor y = conv2d(xs, w, {1, 1}, Padding::kSame);
  const auto gy = y.to_vector<float>();
  const auto cy = conv2d(xs.to("/cpu:0"), w.to("/cpu:0"), {1, 1}, Padding::kSame).to_vector<float>();
  ASSERT_EQ(gy.size(), cy.size());
  for (std::size_t i = 0; i < gy.size(); ++i) ASSERT_NEAR(gy[i], cy[i], 1e-4 * (1 + std::abs(cy[i]))) << i;
  // Every failed request left both devices' accounting as it was: what lives now is all there is.
  x = Tensor();
  xs = Tensor();
  y = Tensor();
  EXPECT_EQ(config::get_memory_info("GPU:0").current, std::size_t{3 * 3 * 4 * 64 * 4})
      << "only w should be alive: a failed or finished op left memory (a workspace, a temporary) allocated";
  EXPECT_LE(config::get_memory_info("GPU:0").peak, 64 * kMiB);
  EXPECT_LE(config::get_memory_info("GPU:1").peak, 64 * kMiB);
}

}  // namespace
}  // namespace chorus::ops
