// ops::apply_adam (ops/training.h) against the op sequence it replaces (optimizer/adam.cc's
// unfused update), bitwise, in float32 and float64, and its "no fused kernel" answers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/core/test_util.h"
#include <chorus/ops/ops.h>
#include <chorus/ops/training.h>

namespace chorus {
namespace {

class TrainingOpsTest : public testing::CoreTest {};

template <typename T>
std::vector<T> values(std::size_t n, double scale, double offset) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<T>(offset + scale * std::sin(0.37 * static_cast<double>(i) + 1.0));
  return v;
}

// n = 1000: the vectorized blocks of 16 and a scalar tail; n = 197,300: four chunks of 2^16, split
// over the device's threads.
template <typename T>
void check_bitwise(DType dtype, std::int64_t rows = 10) {
  const std::size_t n = static_cast<std::size_t>(rows) * 100;
  const Shape shape{rows, 100};
  const double alpha = 1e-3 * std::sqrt(1 - std::pow(0.999, 3)) / (1 - std::pow(0.9, 3)), b1 = 0.9, b2 = 0.999,
               eps = 1e-7;
  const auto w0 = values<T>(n, 1.0, 0.1), m0 = values<T>(n, 0.01, 0.0), g = values<T>(n, 0.5, -0.2);
  auto v0 = values<T>(n, 1e-4, 2e-4);
  // Reference: the op sequence, as adam.cc runs it without the fused kernel.
  Tensor gt = Tensor::from_vector<T>(g, shape, "/CPU:0");
  Tensor m = Tensor::from_vector<T>(m0, shape, "/CPU:0"), v = Tensor::from_vector<T>(v0, shape, "/CPU:0"),
         w = Tensor::from_vector<T>(w0, shape, "/CPU:0");
  m = ops::add(m, ops::mul(ops::sub(gt, m), ops::scalar_like(gt, 1.0 - b1)));
  v = ops::add(v, ops::mul(ops::sub(ops::square(gt), v), ops::scalar_like(gt, 1.0 - b2)));
  w = ops::sub(w, ops::div(ops::mul(m, ops::scalar_like(m, alpha)), ops::add(ops::sqrt(v), ops::scalar_like(m, eps))));
  // Fused, in place.
  Tensor fm = Tensor::from_vector<T>(m0, shape, "/CPU:0"), fv = Tensor::from_vector<T>(v0, shape, "/CPU:0"),
         fw = Tensor::from_vector<T>(w0, shape, "/CPU:0");
  ASSERT_EQ(fw.dtype(), dtype);
  ASSERT_TRUE(ops::apply_adam(fw, fm, fv, gt, alpha, b1, b2, eps));
  for (auto [got, want, what] : {std::tuple{fw, w, "w"}, std::tuple{fm, m, "m"}, std::tuple{fv, v, "v"}}) {
    const auto a = got.template to_vector<T>(), b = want.template to_vector<T>();
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(T)), 0) << what << " differs from the op sequence";
  }
}

// The fused update writes w, m and v in place: it waits for a write hold on any of them (an async
// checkpoint still copying it, core/tensor.h).
TEST_F(TrainingOpsTest, AdamWaitsForAWriteHoldOnItsSlots) {
  Tensor w = Tensor::ones({4}), m = Tensor::zeros({4}), v = Tensor::zeros({4}), g = Tensor::ones({4});
  v.buffer()->hold_writes();
  std::atomic<bool> done{false};
  std::thread step([&] {
    ASSERT_TRUE(ops::apply_adam(w, m, v, g, 0.1, 0.9, 0.999, 1e-7));
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(done.load());
  EXPECT_EQ(w.to_vector<float>(), std::vector<float>(4, 1.0f));  // not written yet
  v.buffer()->end_hold();
  step.join();
  EXPECT_NE(w.to_vector<float>(), std::vector<float>(4, 1.0f));
}

TEST_F(TrainingOpsTest, AdamMatchesTheOpSequenceBitwiseFloat32) { check_bitwise<float>(DType::kFloat32); }
TEST_F(TrainingOpsTest, AdamMatchesTheOpSequenceBitwiseFloat64) { check_bitwise<double>(DType::kFloat64); }
TEST_F(TrainingOpsTest, AdamMatchesTheOpSequenceBitwiseOverThreadedChunks) {
  check_bitwise<float>(DType::kFloat32, 3 * 65536 / 100 + 7);
}

TEST_F(TrainingOpsTest, AdamDeclinesWhatItHasNoKernelFor) {
  Tensor w = Tensor::ones({4}, DType::kFloat32, "/CPU:0");
  Tensor m = Tensor::zeros({4}, DType::kFloat32, "/CPU:0"), v = Tensor::zeros({4}, DType::kFloat32, "/CPU:0");
  const std::vector<float> before = w.to_vector<float>();
  Tensor g16 = Tensor::ones({4}, DType::kFloat16, "/CPU:0");
  EXPECT_FALSE(ops::apply_adam(w, m, v, g16, 0.1, 0.9, 0.999, 1e-7));  // mixed dtypes
  Tensor g3 = Tensor::ones({3}, DType::kFloat32, "/CPU:0");
  EXPECT_FALSE(ops::apply_adam(w, m, v, g3, 0.1, 0.9, 0.999, 1e-7));  // shapes differ
  Tensor undefined;
  EXPECT_FALSE(ops::apply_adam(w, m, v, undefined, 0.1, 0.9, 0.999, 1e-7));
  Tensor h = Tensor::ones({4}, DType::kFloat16, "/CPU:0");
  Tensor hm = Tensor::zeros({4}, DType::kFloat16, "/CPU:0"), hv = Tensor::zeros({4}, DType::kFloat16, "/CPU:0");
  EXPECT_FALSE(ops::apply_adam(h, hm, hv, g16, 0.1, 0.9, 0.999, 1e-7));  // no float16 kernel
  EXPECT_EQ(w.to_vector<float>(), before);                               // declined calls change nothing
}

}  // namespace
}  // namespace chorus
