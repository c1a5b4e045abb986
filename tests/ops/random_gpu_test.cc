// The GPU kernel of ops/random.h against the CPU loop: every distribution and dtype, from the same
// seed or generator state. Uniform must be bitwise equal; normal and truncated normal equal up to
// the math library (1e-5 relative for float32/float64, one ulp of the 16-bit types).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/core/test_util.h"
#include <chorus/core/dtype.h>
#include <chorus/core/gpu.h>
#include <chorus/ops/random.h>

namespace chorus::ops {
namespace {

class RandomGpuTest : public chorus::testing::CoreTest {
 protected:
  void SetUp() override {
    CoreTest::SetUp();
    if (gpu::device_count() == 0) GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason();
  }
};

// Relative tolerance per dtype for normal draws: the float32/float64 results differ by a few ulp
// of log/sin/cos; a 16-bit result may then round to the neighbouring value.
double tolerance(DType dt) {
  switch (dt) {
    case DType::kFloat16: return 1.0 / 1024;
    case DType::kBFloat16: return 1.0 / 128;
    default: return 1e-5;
  }
}

bool close(double a, double b, double rel) {
  return std::fabs(a - b) <= rel * std::max(std::fabs(a), std::fabs(b)) + 1e-6;
}

const DType kFloats[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16};

TEST_F(RandomGpuTest, UniformIsBitwiseEqualForEveryDtype) {
  // 2^20 + 3 elements: a partial last block for every dtype.
  const int n = (1 << 20) + 3;
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt32, DType::kInt64}) {
    UniformOptions o{.minval = -3, .maxval = 1000, .dtype = dt};
    o.device = "/CPU:0";
    const auto cpu = stateless_random_uniform({n}, {17, 18}, o);
    o.device = "/GPU:0";
    const auto gpu = stateless_random_uniform({n}, {17, 18}, o);
    ASSERT_NE(gpu.device_name().find("GPU"), std::string::npos);
    if (dt == DType::kInt64) {
      EXPECT_EQ(cpu.to_vector<std::int64_t>(), gpu.to_vector<std::int64_t>());
    } else {
      const auto a = cpu.to_vector<double>(), b = gpu.to_vector<double>();
      std::int64_t diff = 0;
      for (int i = 0; i < n; ++i) diff += a[i] != b[i];
      EXPECT_EQ(diff, 0) << dt << ": first values " << a[0] << " vs " << b[0];
    }
  }
}

TEST_F(RandomGpuTest, GridStrideCoversMoreBlocksThanTheGrid) {
  // 16384 × 256 threads, one block of 4 each: 2^24 elements per pass; this needs two passes.
  const std::int64_t n = (std::int64_t{1} << 24) * 2 + 5;
  const auto cpu = stateless_random_uniform({n}, {1, 1}, {.device = "/CPU:0"}).to_vector<float>();
  const auto gpu = stateless_random_uniform({n}, {1, 1}, {.device = "/GPU:0"}).to_vector<float>();
  EXPECT_TRUE(cpu == gpu);
}

TEST_F(RandomGpuTest, NormalAndTruncatedNormalMatchTheCpuForEveryFloatDtype) {
  const int n = 200003;
  for (DType dt : kFloats) {
    const NormalOptions cpu_o{.mean = 1, .stddev = 2, .dtype = dt, .device = "/CPU:0"};
    const NormalOptions gpu_o{.mean = 1, .stddev = 2, .dtype = dt, .device = "/GPU:0"};
    const auto a = stateless_random_normal({n}, {5, 6}, cpu_o).to_vector<double>();
    const auto b = stateless_random_normal({n}, {5, 6}, gpu_o).to_vector<double>();
    int bad = 0;
    for (int i = 0; i < n; ++i)
      if (!close(a[i], b[i], tolerance(dt)) && ++bad <= 5)
        ADD_FAILURE() << dt << " normal[" << i << "]: " << a[i] << " vs " << b[i];
    EXPECT_EQ(bad, 0) << dt;

    // Truncated: attempt 0 is the normal draw (z = (a - 1) / 2 on the CPU). An element whose z lies
    // within a few ulp of ±2 may be kept on one side and resampled on the other: only those may differ.
    const auto ta = stateless_truncated_normal({n}, {5, 6}, cpu_o).to_vector<double>();
    const auto tb = stateless_truncated_normal({n}, {5, 6}, gpu_o).to_vector<double>();
    int boundary = 0;
    bad = 0;
    for (int i = 0; i < n; ++i) {
      if (close(ta[i], tb[i], tolerance(dt))) continue;
      const double z = (a[i] - 1) / 2;
      if (std::fabs(std::fabs(z) - 2) < 1e-5 + 2 * tolerance(dt)) {
        ++boundary;
      } else if (++bad <= 5) {
        ADD_FAILURE() << dt << " truncated[" << i << "]: " << ta[i] << " vs " << tb[i];
      }
    }
    EXPECT_EQ(bad, 0) << dt;
    EXPECT_LE(boundary, 2) << dt;
  }
}

TEST_F(RandomGpuTest, GeneratorDrawsTheSameOnCpuAndGpu) {
  auto on_cpu = Generator::from_seed(77);
  auto on_gpu = Generator::from_seed(77);
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(on_cpu.uniform({1001}, {.device = "/CPU:0"}).to_vector<float>(),
              on_gpu.uniform({1001}, {.device = "/GPU:0"}).to_vector<float>());
    const auto a = on_cpu.normal({999}, {.dtype = DType::kFloat64, .device = "/CPU:0"}).to_vector<double>();
    const auto b = on_gpu.normal({999}, {.dtype = DType::kFloat64, .device = "/GPU:0"}).to_vector<double>();
    for (std::size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(close(a[i], b[i], 1e-12)) << i << ": " << a[i] << " vs " << b[i];
    EXPECT_EQ(on_cpu.state(), on_gpu.state());
  }
}

TEST_F(RandomGpuTest, DefaultPlacementIsTheGpu) {
  const auto t = stateless_random_normal({8}, {1, 2});
  EXPECT_NE(t.device_name().find("GPU:0"), std::string::npos) << t.device_name();
}

TEST_F(RandomGpuTest, ZeroElementsLaunchNothing) {
  EXPECT_EQ(stateless_truncated_normal({0}, {1, 2}, {.device = "/GPU:0"}).num_elements(), 0);
}

}  // namespace
}  // namespace chorus::ops
