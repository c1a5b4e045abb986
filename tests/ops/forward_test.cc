// Forward values of the ops against expectations computed by hand or from the definition
// (std::exp, loops in the test), on the CPU, float32 (oneDNN where it applies) and float64
// (reference loops).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "tests/core/test_util.h"
#include <chorus/ops/finite.h>
#include <chorus/ops/ops.h>

namespace chorus {
namespace {

class ForwardTest : public testing::CoreTest {};

template <typename T>
Tensor T_(const std::vector<T>& v, const Shape& s) {
  return Tensor::from_vector<T>(v, s, "/CPU:0");
}
Tensor F(const std::vector<float>& v, const Shape& s) { return T_<float>(v, s); }
Tensor D(const std::vector<double>& v, const Shape& s) { return T_<double>(v, s); }
Tensor I(const std::vector<std::int32_t>& v, const Shape& s) { return T_<std::int32_t>(v, s); }
Tensor L(const std::vector<std::int64_t>& v, const Shape& s) { return T_<std::int64_t>(v, s); }
Tensor B(const std::vector<bool>& v, const Shape& s) { return T_<bool>(v, s); }

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}
void expect_values(const Tensor& t, const Shape& shape, const std::vector<double>& want, double tol = 1e-6) {
  EXPECT_EQ(t.shape(), shape);
  expect_near(t.to_vector<double>(), want, tol);
}

// ---- broadcasting ----

TEST_F(ForwardTest, BroadcastScalarRowColumn) {
  const Tensor x = F({1, 2, 3, 4, 5, 6}, {2, 3});
  expect_values(x + 10.0, {2, 3}, {11, 12, 13, 14, 15, 16});
  expect_values(ops::add(x, F({10}, {})), {2, 3}, {11, 12, 13, 14, 15, 16});
  expect_values(ops::sub(x, F({1, 2, 3}, {3})), {2, 3}, {0, 0, 0, 3, 3, 3});
  expect_values(ops::mul(x, F({10, 100}, {2, 1})), {2, 3}, {10, 20, 30, 400, 500, 600});
  expect_values(ops::div(F({10, 100}, {2, 1}), F({1, 2, 5}, {1, 3})), {2, 3}, {10, 5, 2, 100, 50, 20});
  expect_values(10.0 - x, {2, 3}, {9, 8, 7, 6, 5, 4});
}

TEST_F(ForwardTest, BroadcastRankMismatch) {
  // [2,1,3] + [4,1] → [2,4,3]: out[i][j][k] = a[i][0][k] + b[j][0].
  std::vector<double> av(6), bv(4), want;
  for (int i = 0; i < 6; ++i) av[static_cast<std::size_t>(i)] = i;
  for (int j = 0; j < 4; ++j) bv[static_cast<std::size_t>(j)] = 100.0 * j;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k)
        want.push_back(av[static_cast<std::size_t>(i * 3 + k)] + bv[static_cast<std::size_t>(j)]);
  expect_values(ops::add(D(av, {2, 1, 3}), D(bv, {4, 1})), {2, 4, 3}, want);
  // Operand order does not matter.
  expect_values(ops::add(D(bv, {4, 1}), D(av, {2, 1, 3})), {2, 4, 3}, want);
  // A broadcast in the middle of an otherwise contiguous operand.
  std::vector<double> cv(2 * 3 * 4), want2;
  for (std::size_t i = 0; i < cv.size(); ++i) cv[i] = static_cast<double>(i);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) want2.push_back(cv[static_cast<std::size_t>((i * 3 + j) * 4 + k)] * (i * 4 + k + 1));
  std::vector<double> dv(8);
  for (int i = 0; i < 8; ++i) dv[static_cast<std::size_t>(i)] = i + 1;
  expect_values(ops::mul(D(cv, {2, 3, 4}), D(dv, {2, 1, 4})), {2, 3, 4}, want2);
}

TEST_F(ForwardTest, BroadcastAllOnesAndScalars) {
  expect_values(ops::add(F({1}, {1, 1}), F({2}, {})), {1, 1}, {3});
  expect_values(ops::mul(F({3}, {}), F({2}, {})), {}, {6});
}

// ---- empty tensors ----

TEST_F(ForwardTest, EmptyElementwiseAndWhere) {
  const Tensor e = F({}, {0, 3});
  EXPECT_EQ(ops::add(e, F({1, 2, 3}, {3})).shape(), (Shape{0, 3}));
  EXPECT_EQ(ops::exp(e).shape(), (Shape{0, 3}));
  EXPECT_EQ(ops::relu(e).to_vector<float>().size(), 0u);
  const Tensor lt = ops::less(e, F({1}, {}));
  EXPECT_EQ(lt.dtype(), DType::kBool);
  EXPECT_EQ(lt.shape(), (Shape{0, 3}));
  EXPECT_EQ(ops::where(B({}, {0, 1}), e, F({0, 0, 0}, {3})).shape(), (Shape{0, 3}));
  EXPECT_EQ(ops::cast(e, DType::kFloat16).shape(), (Shape{0, 3}));
  // Broadcasting a 0 against 1 gives 0; against 2 is an error.
  EXPECT_EQ(ops::add(F({}, {0, 1}), F({1, 2}, {1, 2})).shape(), (Shape{0, 2}));
  EXPECT_THROW(ops::add(F({}, {0}), F({1, 2}, {2})), InvalidArgumentError);
}

TEST_F(ForwardTest, EmptyReductions) {
  const Tensor e = F({}, {0, 3});
  expect_values(ops::reduce_sum(e, 0), {3}, {0, 0, 0});
  EXPECT_EQ(ops::reduce_sum(e, 1).shape(), (Shape{0}));
  expect_values(ops::reduce_sum(e), {}, {0});
  const auto mean = ops::reduce_mean(e, 0).to_vector<float>();
  ASSERT_EQ(mean.size(), 3u);
  for (float v : mean) EXPECT_TRUE(std::isnan(v));
  const auto mx = ops::reduce_max(e).to_vector<float>();
  ASSERT_EQ(mx.size(), 1u);
  EXPECT_EQ(mx[0], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(ops::reduce_min(D({}, {2, 0}), 1).to_vector<double>(),
            (std::vector<double>{std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()}));
  EXPECT_EQ(ops::reduce_sum(I({}, {0}), 0).item<std::int32_t>(), 0);
  EXPECT_EQ(ops::argmax(e, 1).shape(), (Shape{0}));
  EXPECT_THROW(ops::argmax(F({}, {3, 0}), 1), InvalidArgumentError);
}

TEST_F(ForwardTest, EmptyShapeOps) {
  const Tensor e = F({}, {0, 3});
  EXPECT_EQ(ops::reshape(e, {3, 0}).shape(), (Shape{3, 0}));
  EXPECT_EQ(ops::reshape(e, {-1, 3}).shape(), (Shape{0, 3}));
  EXPECT_EQ(ops::transpose(e).shape(), (Shape{3, 0}));
  expect_values(ops::concat({e, F({1, 2, 3}, {1, 3}), e}, 0), {1, 3}, {1, 2, 3});
  const auto parts = ops::split(F({1, 2, 3}, {3}), {0, 3, 0}, 0);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].shape(), (Shape{0}));
  expect_values(parts[1], {3}, {1, 2, 3});
  EXPECT_EQ(ops::slice(F({1, 2, 3}, {3}), {1}, {0}).shape(), (Shape{0}));
  expect_values(ops::pad(e, {{1, 0}, {0, 0}}, 7.0), {1, 3}, {7, 7, 7});
  EXPECT_EQ(ops::gather(F({1, 2, 3}, {3}), I({}, {0})).shape(), (Shape{0}));
  EXPECT_EQ(ops::gather(F({}, {2, 0}), I({1, 0, 1}, {3})).shape(), (Shape{3, 0}));
  EXPECT_EQ(ops::one_hot(I({}, {0}), 4).shape(), (Shape{0, 4}));
  EXPECT_EQ(ops::broadcast_to(F({1, 2, 3}, {3}), Shape{0, 3}).shape(), (Shape{0, 3}));
  EXPECT_EQ(ops::stack({e, e}, 1).shape(), (Shape{0, 2, 3}));
  EXPECT_EQ(ops::squeeze(F({}, {0, 1})).shape(), (Shape{0}));
}

TEST_F(ForwardTest, EmptyMatMulAndNN) {
  EXPECT_EQ(ops::matmul(F({}, {0, 3}), F({1, 2, 3, 4, 5, 6}, {3, 2})).shape(), (Shape{0, 2}));
  // k == 0: a sum of nothing.
  expect_values(ops::matmul(F({}, {2, 0}), F({}, {0, 3})), {2, 3}, {0, 0, 0, 0, 0, 0});
  expect_values(ops::matmul(D({}, {2, 0}), D({}, {0, 3})), {2, 3}, {0, 0, 0, 0, 0, 0});
  EXPECT_EQ(ops::matmul(F({}, {0, 2, 3}), F({1, 2, 3, 4, 5, 6}, {3, 2})).shape(), (Shape{0, 2, 2}));
  // Batch 0 through conv, pooling, softmax, losses and batch norm (inference).
  const Tensor x = F({}, {0, 4, 4, 2});
  const Tensor w = ops::ones_like(F(std::vector<float>(3 * 3 * 2 * 5), {3, 3, 2, 5}));
  EXPECT_EQ(ops::conv2d(x, w, {1, 1}, ops::Padding::kSame).shape(), (Shape{0, 4, 4, 5}));
  EXPECT_EQ(ops::max_pool2d(x, {2, 2}, {2, 2}).shape(), (Shape{0, 2, 2, 2}));
  EXPECT_EQ(ops::avg_pool2d(x, {2, 2}, {2, 2}).shape(), (Shape{0, 2, 2, 2}));
  EXPECT_EQ(ops::softmax(F({}, {0, 4})).shape(), (Shape{0, 4}));
  EXPECT_EQ(ops::log_softmax(F({}, {0, 4}), 0).shape(), (Shape{0, 4}));
  EXPECT_EQ(ops::sparse_softmax_cross_entropy_with_logits(I({}, {0}), F({}, {0, 4})).shape(), (Shape{0}));
  EXPECT_EQ(ops::softmax_cross_entropy_with_logits(F({}, {0, 4}), F({}, {0, 4})).shape(), (Shape{0}));
  const Tensor c = F({1, 1}, {2});
  EXPECT_EQ(ops::batch_norm(F({}, {0, 2}), c, c, c, c, 1e-3, false).y.shape(), (Shape{0, 2}));
  // Zero channels: softmax over an empty axis.
  EXPECT_EQ(ops::softmax(F({}, {3, 0})).shape(), (Shape{3, 0}));
}

// ---- integers, comparisons, logical, where, cast ----

TEST_F(ForwardTest, IntegerArithmeticTruncates) {
  const Tensor a = I({7, -7, 7, -7, 0, 9}, {6}), b = I({2, 2, -2, -2, 5, 3}, {6});
  EXPECT_EQ(ops::div(a, b).to_vector<std::int32_t>(), (std::vector<std::int32_t>{3, -3, -3, 3, 0, 3}));
  EXPECT_EQ(ops::add(a, b).to_vector<std::int32_t>(), (std::vector<std::int32_t>{9, -5, 5, -9, 5, 12}));
  EXPECT_EQ(ops::mul(a, b).to_vector<std::int32_t>(), (std::vector<std::int32_t>{14, -14, -14, 14, 0, 27}));
  EXPECT_EQ(ops::maximum(a, b).to_vector<std::int32_t>(), (std::vector<std::int32_t>{7, 2, 7, -2, 5, 9}));
  EXPECT_EQ(ops::minimum(a, b).to_vector<std::int32_t>(), (std::vector<std::int32_t>{2, -7, -2, -7, 0, 3}));
  EXPECT_EQ(ops::pow(L({2, -3, 5, 0}, {4}), L({10, 3, 0, 0}, {4})).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{1024, -27, 1, 1}));
  EXPECT_EQ(ops::neg(a).to_vector<std::int32_t>(), (std::vector<std::int32_t>{-7, 7, -7, 7, 0, -9}));
  EXPECT_EQ(ops::abs(a).to_vector<std::int32_t>(), (std::vector<std::int32_t>{7, 7, 7, 7, 0, 9}));
  EXPECT_EQ(ops::sign(a).to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, -1, 1, -1, 0, 1}));
  EXPECT_EQ(ops::relu(a).to_vector<std::int32_t>(), (std::vector<std::int32_t>{7, 0, 7, 0, 0, 9}));
  EXPECT_EQ(ops::square(L({-3, 4}, {2})).to_vector<std::int64_t>(), (std::vector<std::int64_t>{9, 16}));
  // uint8 wraps modulo 256.
  const Tensor u = T_<std::uint8_t>({250, 3}, {2});
  EXPECT_EQ(ops::add(u, T_<std::uint8_t>({10, 4}, {2})).to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{4, 7}));
  EXPECT_EQ(ops::div(u, T_<std::uint8_t>({100, 2}, {2})).to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{2, 1}));
  // Scalar operators keep the integer dtype.
  const Tensor h = a / 2.0;
  EXPECT_EQ(h.dtype(), DType::kInt32);
  EXPECT_EQ(h.to_vector<std::int32_t>(), (std::vector<std::int32_t>{3, -3, 3, -3, 0, 4}));
}

// Data errors are raised by the op when its kernel ran inline (idle stream, the usual case) and
// by the next read otherwise; either way the user sees them before using the result.
TEST_F(ForwardTest, IntegerDivisionByZeroIsRaised) {
  EXPECT_THROW_WITH(ops::div(I({1, 2, 3}, {3}), I({1, 0, 1}, {3})).to_vector<std::int32_t>(), InvalidArgumentError,
                    "Integer division by zero");
  // The error was reported once; the device works again.
  EXPECT_EQ(ops::add(I({1}, {1}), I({2}, {1})).item<std::int32_t>(), 3);
  EXPECT_THROW_WITH(ops::pow(I({2}, {1}), I({-1}, {1})).item<std::int32_t>(), InvalidArgumentError,
                    "negative integer powers");
}

TEST_F(ForwardTest, ComparisonsGiveBool) {
  const Tensor a = F({1, 2, 3}, {3}), b = F({2, 2, 2}, {3});
  auto bools = [](const Tensor& t) {
    EXPECT_EQ(t.dtype(), DType::kBool);
    return t.to_vector<bool>();
  };
  EXPECT_EQ(bools(ops::less(a, b)), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(bools(ops::less_equal(a, b)), (std::vector<bool>{true, true, false}));
  EXPECT_EQ(bools(ops::greater(a, b)), (std::vector<bool>{false, false, true}));
  EXPECT_EQ(bools(ops::greater_equal(a, b)), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(bools(ops::equal(a, b)), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(bools(ops::not_equal(a, b)), (std::vector<bool>{true, false, true}));
  // Broadcast, integers, bools (equality only), NaN.
  EXPECT_EQ(bools(ops::greater(I({1, 5}, {2, 1}), I({0, 3, 6}, {3}))),
            (std::vector<bool>{true, false, false, true, true, false}));
  EXPECT_EQ(bools(ops::equal(B({true, false}, {2}), B({true, true}, {2}))), (std::vector<bool>{true, false}));
  const Tensor nan = D({std::nan("")}, {1});
  EXPECT_EQ(bools(ops::equal(nan, nan)), (std::vector<bool>{false}));
  EXPECT_EQ(bools(ops::not_equal(nan, nan)), (std::vector<bool>{true}));
}

TEST_F(ForwardTest, LogicalOps) {
  const Tensor a = B({true, true, false, false}, {4}), b = B({true, false, true, false}, {4});
  EXPECT_EQ(ops::logical_and(a, b).to_vector<bool>(), (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(ops::logical_or(a, b).to_vector<bool>(), (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ(ops::logical_not(a).to_vector<bool>(), (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(ops::logical_and(B({true, false}, {2, 1}), B({true, true, false}, {3})).to_vector<bool>(),
            (std::vector<bool>{true, true, false, false, false, false}));
  EXPECT_THROW(ops::logical_and(F({1}, {1}), F({1}, {1})), InvalidArgumentError);
  EXPECT_THROW(ops::logical_not(I({1}, {1})), InvalidArgumentError);
}

TEST_F(ForwardTest, WhereBroadcasts) {
  const Tensor cond = B({true, false, true}, {3});
  expect_values(ops::where(cond, F({1, 2, 3, 4, 5, 6}, {2, 3}), F({-1}, {})), {2, 3}, {1, -1, 3, 4, -1, 6});
  expect_values(ops::where(B({false, true}, {2, 1}), F({1, 2, 3}, {3}), F({7, 8}, {2, 1})), {2, 3}, {7, 7, 7, 1, 2, 3});
  EXPECT_EQ(ops::where(cond, I({1, 2, 3}, {3}), I({0, 0, 0}, {3})).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{1, 0, 3}));
}

TEST_F(ForwardTest, AllFinite) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(ops::all_finite(Tensor::from_vector<float>({1, -2, 3e38f, 1e-45f})));
  for (float bad : {inf, -inf, nan}) EXPECT_FALSE(ops::all_finite(Tensor::from_vector<float>({1, bad, 2}))) << bad;
  EXPECT_FALSE(ops::all_finite(Tensor::from_vector<double>({std::numeric_limits<double>::infinity()})));
  EXPECT_TRUE(ops::all_finite(Tensor::from_vector<std::int32_t>({1, 2})));  // integers are always finite
  EXPECT_TRUE(ops::all_finite(Tensor::zeros({0, 3})));
  EXPECT_THROW_WITH(ops::all_finite(Tensor()), InvalidArgumentError, "undefined");
}

TEST_F(ForwardTest, Cast) {
  EXPECT_EQ(ops::cast(F({1.7f, -1.7f, 0.0f, 300.5f}, {4}), DType::kInt32).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{1, -1, 0, 300}));
  EXPECT_EQ(ops::cast(F({0.0f, 0.5f, -2.0f}, {3}), DType::kBool).to_vector<bool>(),
            (std::vector<bool>{false, true, true}));
  expect_values(ops::cast(B({true, false}, {2}), DType::kFloat64), {2}, {1, 0});
  expect_values(ops::cast(L({-3, 1LL << 40}, {2}), DType::kFloat64), {2}, {-3, static_cast<double>(1LL << 40)});
  // float16: 0.1 rounds to 0.0999755859375; 2049 is a tie between 2048 and 2050 → even 2048;
  // 70000 overflows to +inf.
  const Tensor h = ops::cast(D({1.0, 0.1, 2049.0, 70000.0, -2.5}, {5}), DType::kFloat16);
  EXPECT_EQ(h.dtype(), DType::kFloat16);
  EXPECT_EQ(ops::cast(h, DType::kFloat64).to_vector<double>(),
            (std::vector<double>{1.0, 0.0999755859375, 2048.0, std::numeric_limits<double>::infinity(), -2.5}));
  // bfloat16 keeps 8 significant bits: 257 → 256 (tie to even), 0.1 → 0.10009765625.
  const Tensor bf = ops::cast(F({257.0f, 0.1f, 1.0f}, {3}), DType::kBFloat16);
  EXPECT_EQ(ops::cast(bf, DType::kFloat32).to_vector<float>(), (std::vector<float>{256.0f, 0.10009765625f, 1.0f}));
  // Arithmetic in 16-bit floats computes in float and rounds once: 2048 + 1 = 2048 in float16.
  const Tensor h2 = ops::add(ops::cast(F({2048}, {1}), DType::kFloat16), ops::cast(F({1}, {1}), DType::kFloat16));
  EXPECT_EQ(h2.to_vector<float>(), (std::vector<float>{2048.0f}));
  EXPECT_EQ(ops::reduce_sum(ops::cast(F({0.5f, 0.25f, 0.25f}, {3}), DType::kBFloat16)).to_vector<float>()[0], 1.0f);
}

// ---- reductions ----

TEST_F(ForwardTest, Reductions) {
  const Tensor x =
      D({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24}, {2, 3, 4});
  expect_values(ops::reduce_sum(x), {}, {300});
  expect_values(ops::reduce_sum(x, 1), {2, 4}, {15, 18, 21, 24, 51, 54, 57, 60});
  expect_values(ops::reduce_sum(x, {0, 2}), {3}, {68, 100, 132});
  expect_values(ops::reduce_sum(x, {0, 2}, true), {1, 3, 1}, {68, 100, 132});
  expect_values(ops::reduce_mean(x, {-1}), {2, 3}, {2.5, 6.5, 10.5, 14.5, 18.5, 22.5});
  expect_values(ops::reduce_max(x, {0, 1}), {4}, {21, 22, 23, 24});
  expect_values(ops::reduce_min(x, 2, true), {2, 3, 1}, {1, 5, 9, 13, 17, 21});
  expect_values(ops::reduce_sum(F({1, 2, 3}, {3}), ops::Axes(std::vector<int>{})), {3},
                {1, 2, 3});  // no axes: identity
  expect_values(ops::reduce_sum(F({5}, {})), {}, {5});
  EXPECT_THROW_WITH(ops::reduce_sum(x, {1, -2}), InvalidArgumentError, "twice");
  EXPECT_THROW_WITH(ops::reduce_sum(x, 3), InvalidArgumentError, "axis 3", "rank 3");
}

TEST_F(ForwardTest, IntegerReductions) {
  const Tensor x = I({1, 2, -1, -2, 7, 8}, {3, 2});
  EXPECT_EQ(ops::reduce_mean(x, 1).to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, -1, 7}));  // truncates
  EXPECT_EQ(ops::reduce_sum(x, 0).to_vector<std::int32_t>(), (std::vector<std::int32_t>{7, 8}));
  EXPECT_EQ(ops::reduce_max(x).item<std::int32_t>(), 8);
  EXPECT_EQ(ops::reduce_min(x).item<std::int32_t>(), -2);
  EXPECT_EQ(ops::reduce_max(x).dtype(), DType::kInt32);
}

TEST_F(ForwardTest, ArgMaxTakesTheFirstMaximum) {
  const Tensor x = F({3, 1, 3, 0, 0, 5}, {2, 3});
  const Tensor am = ops::argmax(x, 1);
  EXPECT_EQ(am.dtype(), DType::kInt64);
  EXPECT_EQ(am.to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 2}));
  EXPECT_EQ(ops::argmin(x, 1).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 0}));
  EXPECT_EQ(ops::argmax(x, 0).to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 0, 1}));
  EXPECT_EQ(ops::argmin(x, -2).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 1, 0}));
  EXPECT_EQ(ops::argmax(I({2, 2, 2}, {3})).item<std::int64_t>(), 0);
}

// ---- indexing and shape ops ----

TEST_F(ForwardTest, OneHot) {
  expect_values(ops::one_hot(I({0, 3, -1, 2}, {4}), 3), {4, 3}, {1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1});
  const Tensor t = ops::one_hot(L({1, 0}, {2, 1}), 2, 5.0, -1.0, DType::kInt32);
  EXPECT_EQ(t.shape(), (Shape{2, 1, 2}));
  EXPECT_EQ(t.to_vector<std::int32_t>(), (std::vector<std::int32_t>{-1, 5, 5, -1}));
  EXPECT_THROW(ops::one_hot(F({1}, {1}), 2), InvalidArgumentError);
}

TEST_F(ForwardTest, Gather) {
  const Tensor p = F({1, 2, 3, 4, 5, 6}, {3, 2});
  expect_values(ops::gather(p, I({2, 0, 2}, {3})), {3, 2}, {5, 6, 1, 2, 5, 6});
  expect_values(ops::gather(p, L({1, 0, 0, 1}, {2, 2}), 1), {3, 2, 2}, {2, 1, 1, 2, 4, 3, 3, 4, 6, 5, 5, 6});
  expect_values(ops::gather(p, I({1}, {})), {2}, {3, 4});
  // axis 1 of rank 3: params [2,3,2], indices [2] → [2,2,2].
  const Tensor q = F({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {2, 3, 2});
  expect_values(ops::gather(q, I({2, 0}, {2}), 1), {2, 2, 2}, {4, 5, 0, 1, 10, 11, 6, 7});
  EXPECT_EQ(ops::gather(I({10, 20, 30}, {3}), I({2, 2}, {2})).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{30, 30}));
}

TEST_F(ForwardTest, GatherOutOfRangeIsRaised) {
  EXPECT_THROW_WITH(ops::gather(F({1, 2, 3}, {3}), I({0, 5}, {2})).to_vector<float>(), InvalidArgumentError,
                    "indices[1] = 5 is not in [0, 3)");
  EXPECT_THROW_WITH(ops::gather(F({1, 2, 3}, {3}), L({-1}, {1})).to_vector<float>(), InvalidArgumentError,
                    "indices[0] = -1 is not in [0, 3)");
}

TEST_F(ForwardTest, PadSliceConcatSplit) {
  const Tensor x = F({1, 2, 3, 4, 5, 6}, {2, 3});
  expect_values(ops::pad(x, {{1, 0}, {0, 2}}), {3, 5}, {0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 4, 5, 6, 0, 0});
  expect_values(ops::pad(x, {{0, 1}, {1, 0}}, -1.0), {3, 4}, {-1, 1, 2, 3, -1, 4, 5, 6, -1, -1, -1, -1});
  expect_values(ops::slice(x, {0, 1}, {2, 2}), {2, 2}, {2, 3, 5, 6});
  expect_values(ops::slice(x, {1, 0}, {-1, -1}), {1, 3}, {4, 5, 6});
  expect_values(ops::concat({x, F({7, 8}, {2, 1})}, 1), {2, 4}, {1, 2, 3, 7, 4, 5, 6, 8});
  expect_values(ops::concat({x, x}, 0), {4, 3}, {1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6});
  const auto cols = ops::split(x, 3, 1);
  ASSERT_EQ(cols.size(), 3u);
  expect_values(cols[0], {2, 1}, {1, 4});
  expect_values(cols[2], {2, 1}, {3, 6});
  const auto parts = ops::split(x, {2, -1}, -1);
  expect_values(parts[0], {2, 2}, {1, 2, 4, 5});
  expect_values(parts[1], {2, 1}, {3, 6});
  expect_values(ops::transpose(x), {3, 2}, {1, 4, 2, 5, 3, 6});
  expect_values(ops::stack({F({1, 2}, {2}), F({3, 4}, {2})}, 1), {2, 2}, {1, 3, 2, 4});
  expect_values(ops::broadcast_to(F({1, 2}, {2, 1}), Shape{2, 3}), {2, 3}, {1, 1, 1, 2, 2, 2});
  expect_values(ops::expand_dims(x, -1), {2, 3, 1}, {1, 2, 3, 4, 5, 6});
  // Integer and bool tensors go through the same copies.
  EXPECT_EQ(ops::transpose(I({1, 2, 3, 4, 5, 6}, {2, 3})).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(ops::concat({B({true}, {1}), B({false, true}, {2})}, 0).to_vector<bool>(),
            (std::vector<bool>{true, false, true}));
}

TEST_F(ForwardTest, TransposeHighRank) {
  // A rank-5 permutation that merges nothing: out[a][b][c][d][e] = x[e][c][a][d][b]-style index math.
  const std::vector<std::int64_t> dims{2, 3, 2, 2, 3};
  std::vector<double> v(72);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  const std::vector<int> perm{4, 2, 0, 3, 1};
  const Tensor y = ops::transpose(D(v, Shape(dims)), perm);
  std::vector<std::int64_t> od;
  for (int p : perm) od.push_back(dims[static_cast<std::size_t>(p)]);
  EXPECT_EQ(y.shape(), Shape(od));
  const auto got = y.to_vector<double>();
  std::int64_t k = 0;
  std::int64_t in_idx[5];
  for (in_idx[4] = 0; in_idx[4] < 3; ++in_idx[4])
    for (in_idx[2] = 0; in_idx[2] < 2; ++in_idx[2])
      for (in_idx[0] = 0; in_idx[0] < 2; ++in_idx[0])
        for (in_idx[3] = 0; in_idx[3] < 2; ++in_idx[3])
          for (in_idx[1] = 0; in_idx[1] < 3; ++in_idx[1]) {
            const std::int64_t flat = (((in_idx[0] * 3 + in_idx[1]) * 2 + in_idx[2]) * 2 + in_idx[3]) * 3 + in_idx[4];
            EXPECT_EQ(got[static_cast<std::size_t>(k++)], static_cast<double>(flat));
          }
}

// ---- nn ----

std::vector<double> softmax_row(const std::vector<double>& x) {
  double mx = -INFINITY;
  for (double v : x) mx = std::max(mx, v);
  double s = 0;
  for (double v : x) s += std::exp(v - mx);
  std::vector<double> out;
  for (double v : x) out.push_back(std::exp(v - mx) / s);
  return out;
}

TEST_F(ForwardTest, SoftmaxIsStableForHugeLogits) {
  const std::vector<double> rows{1000, 1001, 1002, -1000, -1001, -1002, 0, 0, 0};
  std::vector<double> want, want_log;
  for (int r = 0; r < 3; ++r) {
    const auto s = softmax_row({rows[static_cast<std::size_t>(3 * r)], rows[static_cast<std::size_t>(3 * r + 1)],
                                rows[static_cast<std::size_t>(3 * r + 2)]});
    for (double v : s) {
      want.push_back(v);
      want_log.push_back(std::log(v));
    }
  }
  expect_values(ops::softmax(D(rows, {3, 3})), {3, 3}, want, 1e-12);
  expect_values(ops::log_softmax(D(rows, {3, 3})), {3, 3}, want_log, 1e-9);
  std::vector<float> rf(rows.begin(), rows.end());
  expect_values(ops::softmax(F(rf, {3, 3})), {3, 3}, want, 1e-6);
  expect_values(ops::log_softmax(F(rf, {3, 3})), {3, 3}, want_log, 1e-5);
  expect_values(ops::log_softmax(F({0, 1000}, {1, 2})), {1, 2}, {-1000, 0}, 1e-3);
  // axis 0 is softmax of the columns.
  expect_values(ops::softmax(D({0, 1000, 0, 1000}, {2, 2}), 0), {2, 2}, {0.5, 0.5, 0.5, 0.5}, 1e-12);
}

TEST_F(ForwardTest, CrossEntropyMatchesLogSoftmax) {
  const std::vector<double> logits{0.5, -1.0, 2.0, 0.0, 3.0, 3.0, -2.0, 1.0, 10.0, -10.0, 0.0, 5.0};
  const Tensor lsm = ops::log_softmax(D(logits, {3, 4}));
  const auto l = lsm.to_vector<double>();
  const std::vector<std::int64_t> labels{2, 0, 3};
  std::vector<double> want_sparse;
  for (int r = 0; r < 3; ++r)
    want_sparse.push_back(-l[static_cast<std::size_t>(r * 4 + labels[static_cast<std::size_t>(r)])]);
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    const Tensor lg = ops::cast(D(logits, {3, 4}), dt);
    expect_values(ops::sparse_softmax_cross_entropy_with_logits(L(labels, {3}), lg), {3}, want_sparse, 1e-5);
    expect_values(ops::sparse_softmax_cross_entropy_with_logits(ops::cast(L(labels, {3}), DType::kInt32), lg), {3},
                  want_sparse, 1e-5);
  }
  const std::vector<double> p{0.1, 0.2, 0.3, 0.4, 0.5, 0.5, 0, 0, 0, 0, 0, 1};
  std::vector<double> want_dense(3, 0.0);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c)
      want_dense[static_cast<std::size_t>(r)] -=
          p[static_cast<std::size_t>(r * 4 + c)] * l[static_cast<std::size_t>(r * 4 + c)];
  expect_values(ops::softmax_cross_entropy_with_logits(D(p, {3, 4}), D(logits, {3, 4})), {3}, want_dense, 1e-12);
}

TEST_F(ForwardTest, SparseLabelOutOfRange) {
  EXPECT_THROW_WITH(ops::sparse_softmax_cross_entropy_with_logits(I({1, 4}, {2}), F(std::vector<float>(8, 0.f), {2, 4}))
                        .to_vector<float>(),
                    InvalidArgumentError, "Received a label value of 4 which is outside the valid range of [0, 4)");
  EXPECT_THROW_WITH(ops::sparse_softmax_cross_entropy_with_logits(L({-1}, {1}), D({0, 0}, {1, 2})).to_vector<double>(),
                    InvalidArgumentError, "label value of -1", "[0, 2)");
}

TEST_F(ForwardTest, BatchNormStatistics) {
  // Channel 0: 1 3 5 7 (mean 4, biased variance 5); channel 1: 2 4 6 8 (mean 5, variance 5).
  const std::vector<double> xv{1, 2, 3, 4, 5, 6, 7, 8};
  const double eps = 1e-3, inv = 1.0 / std::sqrt(5.0 + eps);
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    const Tensor x = ops::cast(D(xv, {4, 2}), dt);
    const Tensor gamma = ops::cast(D({2, 0.5}, {2}), dt), beta = ops::cast(D({1, -1}, {2}), dt);
    const auto r = ops::batch_norm(x, gamma, beta, Tensor(), Tensor(), eps, true);
    expect_values(r.batch_mean, {2}, {4, 5}, 1e-5);
    expect_values(r.batch_variance, {2}, {5, 5}, 1e-5);
    std::vector<double> want;
    for (int i = 0; i < 4; ++i) {
      want.push_back(2 * (xv[static_cast<std::size_t>(2 * i)] - 4) * inv + 1);
      want.push_back(0.5 * (xv[static_cast<std::size_t>(2 * i + 1)] - 5) * inv - 1);
    }
    expect_values(r.y, {4, 2}, want, 1e-5);
    // Inference with given statistics.
    const auto ri =
        ops::batch_norm(x, gamma, beta, ops::cast(D({1, 2}, {2}), dt), ops::cast(D({4, 0.25}, {2}), dt), eps, false);
    std::vector<double> want_i;
    for (int i = 0; i < 4; ++i) {
      want_i.push_back(2 * (xv[static_cast<std::size_t>(2 * i)] - 1) / std::sqrt(4 + eps) + 1);
      want_i.push_back(0.5 * (xv[static_cast<std::size_t>(2 * i + 1)] - 2) / std::sqrt(0.25 + eps) - 1);
    }
    expect_values(ri.y, {4, 2}, want_i, 1e-5);
    EXPECT_FALSE(ri.batch_mean.defined());
  }
}

TEST_F(ForwardTest, MatMulValues) {
  // [[1,2,3],[4,5,6]] x [[7,8],[9,10],[11,12]] = [[58,64],[139,154]].
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    const Tensor a = ops::cast(D({1, 2, 3, 4, 5, 6}, {2, 3}), dt);
    const Tensor b = ops::cast(D({7, 8, 9, 10, 11, 12}, {3, 2}), dt);
    expect_values(ops::matmul(a, b), {2, 2}, {58, 64, 139, 154});
    expect_values(ops::matmul(ops::transpose(a), b, true, false), {2, 2}, {58, 64, 139, 154});
    expect_values(ops::matmul(a, ops::transpose(b), false, true), {2, 2}, {58, 64, 139, 154});
    expect_values(ops::matmul(ops::transpose(a), ops::transpose(b), true, true), {2, 2}, {58, 64, 139, 154});
    expect_values(ops::matmul(b, a), {3, 3}, {39, 54, 69, 49, 68, 87, 59, 82, 105});
    // Batched with broadcasting: [2,1,2,3] x [3,2] (one matrix for all) → [2,1,2,2].
    const Tensor a2 = ops::concat(
        {ops::reshape(a, {1, 1, 2, 3}), ops::reshape(ops::mul(a, ops::scalar_like(a, 2)), {1, 1, 2, 3})}, 0);
    expect_values(ops::matmul(a2, b), {2, 1, 2, 2}, {58, 64, 139, 154, 116, 128, 278, 308});
    // [2,1,2,3] x [3,3,2] → [2,3,2,2] with b's batch scaled 1, 0, -1.
    const Tensor b3 = ops::stack({b, ops::zeros_like(b), ops::neg(b)});
    expect_values(ops::matmul(a2, b3), {2, 3, 2, 2}, {58,  64,  139, 154, 0, 0, 0, 0, -58,  -64,  -139, -154,
                                                      116, 128, 278, 308, 0, 0, 0, 0, -116, -128, -278, -308});
  }
}

TEST_F(ForwardTest, Conv2dHandComputed) {
  // x = [[1,2,3],[4,5,6],[7,8,9]], a 2x2 filter of ones.
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    const Tensor x = ops::cast(D({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 3, 3, 1}), dt);
    const Tensor w = ops::cast(D({1, 1, 1, 1}, {2, 2, 1, 1}), dt);
    expect_values(ops::conv2d(x, w, {1, 1}, ops::Padding::kValid), {1, 2, 2, 1}, {12, 16, 24, 28});
    // SAME: total padding 1 per axis, all of it on the bottom/right.
    expect_values(ops::conv2d(x, w, {1, 1}, ops::Padding::kSame), {1, 3, 3, 1}, {12, 16, 9, 24, 28, 15, 15, 17, 9});
    expect_values(ops::conv2d(x, w, {2, 2}, ops::Padding::kSame), {1, 2, 2, 1}, {12, 9, 15, 9});
    // Dilation 2: taps at offsets 0 and 2 → corners of the 3x3 input.
    expect_values(ops::conv2d(x, w, ops::Conv2dOptions{{1, 1}, ops::Padding::kValid, {2, 2}}), {1, 1, 1, 1}, {20});
    // Channels: 1x1 filter mixing 2 input channels into 3 outputs (HWIO).
    const Tensor xc = ops::cast(D({1, 2, 3, 4}, {1, 1, 2, 2}), dt);
    const Tensor wc = ops::cast(D({1, 0, 1, 0, 1, -1}, {1, 1, 2, 3}), dt);
    expect_values(ops::conv2d(xc, wc, {1, 1}, ops::Padding::kValid), {1, 1, 2, 3}, {1, 2, -1, 3, 4, -1});
  }
}

TEST_F(ForwardTest, FusedConv2dIsConvPlusBiasThenActivation) {
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    const Tensor x = ops::cast(D({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 3, 3, 1}), dt);
    // HWIO, 2 outputs: channel 0 sums the 2x2 window, channel 1 is half its top row minus half its
    // bottom row.
    const Tensor w = ops::cast(D({1, 0.5, 1, 0.5, 1, -0.5, 1, -0.5}, {2, 2, 1, 2}), dt);
    const Tensor b = ops::cast(D({-13, 1}, {2}), dt);
    // VALID: channel 0 {12, 16, 24, 28} - 13, channel 1 -3 + 1 everywhere.
    expect_values(ops::fused_conv2d(x, w, b, ops::FusedActivation::kNone), {1, 2, 2, 2},
                  {-1, -2, 3, -2, 11, -2, 15, -2});
    expect_values(ops::fused_conv2d(x, w, b, ops::FusedActivation::kRelu), {1, 2, 2, 2}, {0, 0, 3, 0, 11, 0, 15, 0});
    // SAME, stride 2 (padding on the bottom/right): channel 0 {12, 9, 15, 9} - 13, channel 1
    // {-3, -1.5, 7.5, 4.5} + 1.
    expect_values(ops::fused_conv2d(x, w, b, ops::FusedActivation::kRelu, {{2, 2}, ops::Padding::kSame, {1, 1}}),
                  {1, 2, 2, 2}, {0, 0, 0, 0, 2, 8.5, 0, 5.5});
  }
  // Batch 0, and the errors: bias of the wrong length or dtype.
  const Tensor w = ops::ones_like(F(std::vector<float>(3 * 3 * 2 * 5), {3, 3, 2, 5}));
  const Tensor b = F({1, 2, 3, 4, 5}, {5});
  EXPECT_EQ(ops::fused_conv2d(F({}, {0, 4, 4, 2}), w, b, ops::FusedActivation::kRelu).shape(), (Shape{0, 2, 2, 5}));
  const Tensor x = ops::ones_like(F(std::vector<float>(4 * 4 * 2), {1, 4, 4, 2}));
  EXPECT_THROW_WITH(ops::fused_conv2d(x, w, F({1, 2}, {2}), ops::FusedActivation::kRelu), InvalidArgumentError,
                    "FusedConv2D", "bias has shape (2,)", "5 output channels");
  EXPECT_THROW_WITH(ops::fused_conv2d(x, w, D({1, 2, 3, 4, 5}, {5}), ops::FusedActivation::kNone), InvalidArgumentError,
                    "FusedConv2D");
}

TEST_F(ForwardTest, PoolingHandComputed) {
  std::vector<double> v(16);
  for (int i = 0; i < 16; ++i) v[static_cast<std::size_t>(i)] = i + 1;
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    const Tensor x = ops::cast(D(v, {1, 4, 4, 1}), dt);
    expect_values(ops::max_pool2d(x, {2, 2}, {2, 2}), {1, 2, 2, 1}, {6, 8, 14, 16});
    expect_values(ops::avg_pool2d(x, {2, 2}, {2, 2}), {1, 2, 2, 1}, {3.5, 5.5, 11.5, 13.5});
    // SAME 3x3 stride 2 on 4x4: out 2x2, padding 1 total → bottom/right. Averages count in-bounds only.
    expect_values(ops::avg_pool2d(x, {3, 3}, {2, 2}, ops::Padding::kSame), {1, 2, 2, 1}, {6, 7.5, 12, 13.5});
    expect_values(ops::max_pool2d(x, {3, 3}, {2, 2}, ops::Padding::kSame), {1, 2, 2, 1}, {11, 12, 15, 16});
    // Negative inputs: padding never wins a max.
    expect_values(ops::max_pool2d(ops::neg(x), {3, 3}, {2, 2}, ops::Padding::kSame), {1, 2, 2, 1}, {-1, -3, -9, -11});
  }
}

}  // namespace
}  // namespace chorus
