#include <chorus/collective/host_reduce.h>

#include <gtest/gtest.h>

#include <vector>

#include <chorus/collective/in_process.h>
#include <chorus/core/error.h>

namespace chorus::collective {
namespace {

TEST(HostReduceTest, TilesAndAliasing) {
  // 3 inputs across several tiles; the output aliases input 1 (in place).
  const std::size_t n = 2048 * 2 + 5;
  std::vector<float> a(n), b(n), c(n), other(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = 1.0f;
    c[i] = -static_cast<float>(i) * 2;
  }
  const void* in[] = {a.data(), b.data(), c.data()};
  void* out[] = {b.data(), other.data()};
  reduce_range(DType::kFloat32, ReduceOp::kSum, in, 3, out, 2, 0, n, 3);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(b[i], 1.0f - static_cast<float>(i)) << i;
    ASSERT_EQ(other[i], b[i]);
  }
}

TEST(HostReduceTest, HalfAccumulatesInFloatAndRoundsOnce) {
  // 2048 + 1 + 1 in float16 step by step gives 2048 (each +1 rounds away); once in float: 2050.
  std::vector<float16> x = {float16(2048.0f)}, y = {float16(1.0f)}, z = {float16(1.0f)}, out(1);
  const void* in[] = {x.data(), y.data(), z.data()};
  void* o[] = {out.data()};
  reduce_range(DType::kFloat16, ReduceOp::kSum, in, 3, o, 1, 0, 1, 3);
  EXPECT_EQ(static_cast<float>(out[0]), 2050.0f);
}

TEST(HostReduceTest, IntegerMeanTruncates) {
  std::vector<std::int32_t> x = {1, -1}, y = {2, -2}, out(2);
  const void* in[] = {x.data(), y.data()};
  void* o[] = {out.data()};
  reduce_range(DType::kInt32, ReduceOp::kMean, in, 2, o, 1, 0, 2, 2);
  EXPECT_EQ(out[0], 1);   // 3 / 2
  EXPECT_EQ(out[1], -1);  // -3 / 2 truncates toward zero
}

TEST(HostReduceTest, RejectsUnsupportedDtypes) {
  std::uint8_t v = 0;
  const void* in[] = {&v};
  void* o[] = {&v};
  EXPECT_THROW(reduce_range(DType::kUInt8, ReduceOp::kSum, in, 1, o, 1, 0, 1, 1), InvalidArgumentError);
  EXPECT_THROW(check_collective_dtype(DType::kBool, "all_reduce"), InvalidArgumentError);
  EXPECT_THROW(check_collective_dtype(DType::kString, "all_reduce"), InvalidArgumentError);
}

TEST(PartitionTest, CoversEverythingOnceOnCacheLineBoundaries) {
  for (std::size_t n : {0u, 1u, 15u, 16u, 17u, 1000u, 1048579u})
    for (int k = 1; k <= 5; ++k) {
      std::size_t next = 0;
      for (int r = 0; r < k; ++r) {
        std::size_t b, e;
        partition(n, k, r, &b, &e);
        ASSERT_EQ(b, next) << n << " " << k << " " << r;
        ASSERT_LE(b, e);
        if (e < n) {
          ASSERT_EQ(e % 16, 0u);
        }
        next = e;
      }
      ASSERT_EQ(next, n);
    }
}

}  // namespace
}  // namespace chorus::collective
