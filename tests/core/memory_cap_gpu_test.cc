// The per-process memory fraction on a GPU, enforced (per_process_gpu_memory_fraction caps the
// default logical GPU, with a fixed arena and with memory growth): a request past the cap raises
// ResourceExhaustedError naming the device, what was allocated before is intact, and the device
// keeps working, checked against host values. (A virtual GPU's memory_limit_mb: gpu_test.cc, and
// against op outputs tests/ops/memory_cap_gpu_test.cc.) Skips without a GPU (label gpu), with the
// CUDA runtime's reason.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/gpu.h>
#include <chorus/core/tensor.h>

namespace chorus {
namespace {

namespace cfg = config;
constexpr std::size_t kMiB = std::size_t{1} << 20;

class MemoryCapGpu : public testing::CoreTest {
 protected:
  void SetUp() override {
    if (gpu::device_count() == 0) GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason();
    CoreTest::SetUp();
  }
  PhysicalDevice gpu0() { return cfg::list_physical_devices("GPU").at(0); }
  // Sets a fraction that caps GPU:0 at about 256 MiB; returns the cap the runtime must compute.
  std::size_t set_fraction_for_256_mib() {
    std::size_t free_bytes = 0, total = 0;
    gpu::memory_info(0, &free_bytes, &total);
    const double fraction = static_cast<double>(256 * kMiB) / static_cast<double>(total);
    cfg::set_per_process_gpu_memory_fraction(fraction);
    EXPECT_EQ(cfg::get_per_process_gpu_memory_fraction(), fraction);
    // As core/runtime.cc: min(total × fraction, free − headroom); an idle GPU has far more free.
    EXPECT_GT(free_bytes, 2048 * kMiB) << "the GPU is busy: the cap would be the free memory, not the fraction";
    return static_cast<std::size_t>(static_cast<double>(total) * fraction);
  }
};

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-100.0f, 100.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// The checks shared by the fixed and the growing arena of GPU:0 capped at `cap` bytes.
void exercise_cap(std::size_t cap) {
  const std::vector<float> host = random_floats(1 << 20, 1);  // 4 MiB
  Tensor a = Tensor::from_vector<float>(host, {1 << 20}, "/gpu:0");
  Tensor filler = Tensor::zeros({static_cast<std::int64_t>(60 * kMiB)}, DType::kUInt8, "/gpu:0");
  MemoryInfo before = cfg::get_memory_info("GPU:0");
  EXPECT_EQ(before.current, 64 * kMiB);
  EXPECT_LE(before.reserved, cap);

  // Past the cap: refused with the device named, nothing changed.
  EXPECT_THROW_WITH(Tensor::zeros({static_cast<std::int64_t>(cap - 32 * kMiB)}, DType::kUInt8, "/gpu:0"),
                    ResourceExhaustedError, "OOM when allocating", "device:GPU:0", "/physical_device:GPU:0", "limit");
  // Far past the GPU itself: the same error, not a CUDA failure.
  EXPECT_THROW(Tensor::zeros({static_cast<std::int64_t>(cap) * 1024}, DType::kUInt8, "/gpu:0"), ResourceExhaustedError);
  MemoryInfo after = cfg::get_memory_info("GPU:0");
  EXPECT_EQ(after.current, before.current);
  EXPECT_LE(after.peak, cap);
  EXPECT_LE(after.reserved, cap);
  EXPECT_EQ(a.to_vector<float>(), host);

  // Still working: free the filler, allocate again (more than the filler held), compute.
  filler = Tensor();
  Tensor more = Tensor::full({static_cast<std::int64_t>(24 * kMiB)}, 0.5, DType::kFloat32, "/gpu:0");  // 96 MiB
  Tensor sum = a.clone();
  sum.add_inplace(a);
  sum.add_inplace(Tensor::full({1 << 20}, 0.25, DType::kFloat32, "/cpu:0"));  // host to GPU, then add
  const auto got = sum.to_vector<float>();
  for (std::size_t i = 0; i < host.size(); ++i) ASSERT_EQ(got[i], (host[i] + host[i]) + 0.25f) << i;
  const auto halves = more.to("/cpu:0").to_vector<float>();
  for (std::size_t i = 0; i < halves.size(); i += 9973) ASSERT_EQ(halves[i], 0.5f) << i;
  EXPECT_EQ(cfg::get_memory_info("GPU:0").current, 4 * kMiB + 96 * kMiB + 4 * kMiB);  // a, more, sum
  EXPECT_LE(cfg::get_memory_info("GPU:0").peak, cap);
}

TEST_F(MemoryCapGpu, FractionCapsAFixedArena) {
  cfg::set_memory_growth(gpu0(), false);  // overrides TF_FORCE_GPU_ALLOW_GROWTH, which CTest sets
  const std::size_t cap = set_fraction_for_256_mib();
  const auto logical = cfg::list_logical_devices("GPU");
  ASSERT_EQ(logical.size(), 1u);
  EXPECT_EQ(logical[0].memory_limit, cap);
  EXPECT_FALSE(logical[0].memory_growth);
  // The arena's limit is the cap rounded down to its 256-byte granularity (seen on an H100).
  EXPECT_LE(cfg::get_memory_info("GPU:0").limit, cap);
  EXPECT_GT(cfg::get_memory_info("GPU:0").limit + 256, cap);
  exercise_cap(cap);
  EXPECT_EQ(cfg::get_memory_info("GPU:0").reserved, cfg::get_memory_info("GPU:0").limit);  // one region, all of it
}

TEST_F(MemoryCapGpu, FractionCapsAGrowingArena) {
  cfg::set_memory_growth(gpu0(), true);
  const std::size_t cap = set_fraction_for_256_mib();
  EXPECT_TRUE(cfg::list_logical_devices("GPU").at(0).memory_growth);
  // The arena's limit is the cap rounded down to its 256-byte granularity (seen on an H100).
  EXPECT_LE(cfg::get_memory_info("GPU:0").limit, cap);
  EXPECT_GT(cfg::get_memory_info("GPU:0").limit + 256, cap);
  Tensor small = Tensor::zeros({1024}, DType::kFloat32, "/gpu:0");
  EXPECT_LT(cfg::get_memory_info("GPU:0").reserved, cap);  // grows on demand
  small = Tensor();
  exercise_cap(cap);
}

}  // namespace
}  // namespace chorus
