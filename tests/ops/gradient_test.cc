// Every differentiable op's GradientTape gradient against central finite differences (float64,
// CPU), through tests/ops/gradient_check.h. Shapes are small: each check evaluates the op
// 2 * elements + 1 times.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gradient_check.h"
#include "tests/core/test_util.h"
#include <chorus/ops/ops.h>

namespace chorus {
namespace {

using testing::check_gradients;
using testing::random_away_from_zero;
using testing::random_tensor;
using testing::TensorFn;
using In = std::vector<Tensor>;

class GradientTest : public testing::CoreTest {};

// The harness itself: a gradient that is wrong on purpose (stop_gradient hides half of d/dx x*x)
// and a missing one must both be reported.
TEST_F(GradientTest, HarnessDetectsWrongAndMissingGradients) {
  const auto wrong =
      check_gradients([](const In& x) { return ops::mul(x[0], ops::stop_gradient(x[0])); }, {random_tensor({3}, 99)});
  EXPECT_FALSE(wrong);
  EXPECT_NE(std::string(wrong.message()).find("3 gradient mismatches"), std::string::npos) << wrong.message();
  const auto missing =
      check_gradients([](const In& x) { return ops::square(ops::stop_gradient(x[0])); }, {random_tensor({3}, 98)});
  EXPECT_FALSE(missing);
  EXPECT_NE(std::string(missing.message()).find("no gradient"), std::string::npos) << missing.message();
  EXPECT_FALSE(check_gradients([](const In& x) { return x[0]; }, {Tensor::zeros({2}, DType::kFloat32, "/CPU:0")}));
}

// ---- elementwise, binary (with broadcasting) ----

TEST_F(GradientTest, AddSameShape) {
  EXPECT_TRUE(check_gradients([](const In& x) { return ops::add(x[0], x[1]); },
                              {random_tensor({2, 3}, 1), random_tensor({2, 3}, 2)}));
}

TEST_F(GradientTest, AddBroadcastColumnPlusRowReducesBack) {
  // [3,1] + [4] → [3,4]: the first gradient sums over columns, the second over rows.
  EXPECT_TRUE(check_gradients([](const In& x) { return ops::add(x[0], x[1]); },
                              {random_tensor({3, 1}, 3), random_tensor({4}, 4)}));
}

TEST_F(GradientTest, AddScalarAndRankMismatch) {
  EXPECT_TRUE(check_gradients([](const In& x) { return ops::add(ops::add(x[0], x[1]), x[2]); },
                              {random_tensor({}, 5), random_tensor({2, 1, 3}, 6), random_tensor({4, 1}, 7)}));
}

TEST_F(GradientTest, SubBroadcast) {
  EXPECT_TRUE(check_gradients([](const In& x) { return ops::sub(x[0], x[1]); },
                              {random_tensor({2, 3}, 8), random_tensor({3}, 9)}));
  EXPECT_TRUE(check_gradients([](const In& x) { return ops::sub(x[0], x[1]); },
                              {random_tensor({2, 1}, 10), random_tensor({2, 3}, 11)}));
}

TEST_F(GradientTest, MulBroadcast) {
  EXPECT_TRUE(check_gradients([](const In& x) { return ops::mul(x[0], x[1]); },
                              {random_tensor({2, 1, 3}, 12), random_tensor({4, 1}, 13)}));
}

TEST_F(GradientTest, DivBroadcast) {
  EXPECT_TRUE(check_gradients([](const In& x) { return ops::div(x[0], x[1]); },
                              {random_tensor({2, 3}, 14), random_away_from_zero({2, 1}, 15, 0.5, 1.5)}));
  EXPECT_TRUE(check_gradients([](const In& x) { return ops::div(x[0], x[1]); },
                              {random_tensor({3}, 16), random_away_from_zero({2, 3}, 17, 0.5, 1.5)}));
}

TEST_F(GradientTest, PowPositiveBase) {
  EXPECT_TRUE(check_gradients([](const In& x) { return ops::pow(x[0], x[1]); },
                              {random_tensor({2, 3}, 18, 0.5, 1.5), random_tensor({3}, 19, -1.0, 2.0)}));
}

TEST_F(GradientTest, MaximumMinimumWithoutTies) {
  const Tensor a = random_tensor({2, 3}, 20), b = random_tensor({3}, 21);
  EXPECT_TRUE(check_gradients([](const In& x) { return ops::maximum(x[0], x[1]); }, {a, b}));
  EXPECT_TRUE(check_gradients([](const In& x) { return ops::minimum(x[0], x[1]); }, {a, b}));
}

TEST_F(GradientTest, OperatorsWithDoubles) {
  EXPECT_TRUE(check_gradients([](const In& x) { return (2.0 - x[0]) * 3.0 + x[0] / 4.0 - 1.0 / (x[0] + 3.0); },
                              {random_tensor({4}, 22)}));
}

// ---- elementwise, unary ----

struct UnaryCase {
  const char* name;
  Tensor (*op)(const Tensor&);
  double lo, hi;        // input range
  bool away_from_zero;  // lo..hi in magnitude, random sign
};

void PrintTo(const UnaryCase& c, std::ostream* os) { *os << c.name; }

class UnaryGradientTest : public testing::CoreTest, public ::testing::WithParamInterface<UnaryCase> {};

TEST_P(UnaryGradientTest, MatchesFiniteDifferences) {
  const UnaryCase c = GetParam();
  const Tensor x =
      c.away_from_zero ? random_away_from_zero({2, 3}, 23, c.lo, c.hi) : random_tensor({2, 3}, 23, c.lo, c.hi);
  auto op = c.op;
  EXPECT_TRUE(check_gradients([op](const In& in) { return op(in[0]); }, {x})) << c.name;
}

INSTANTIATE_TEST_SUITE_P(
    Ops, UnaryGradientTest,
    ::testing::Values(UnaryCase{"neg", ops::neg, -2, 2, false}, UnaryCase{"exp", ops::exp, -2, 1, false},
                      UnaryCase{"log", ops::log, 0.3, 2, false}, UnaryCase{"sqrt", ops::sqrt, 0.3, 2, false},
                      UnaryCase{"rsqrt", ops::rsqrt, 0.3, 2, false}, UnaryCase{"square", ops::square, -2, 2, false},
                      UnaryCase{"abs", ops::abs, 0.2, 2, true}, UnaryCase{"reciprocal", ops::reciprocal, 0.3, 2, true},
                      UnaryCase{"relu", ops::relu, 0.2, 2, true}, UnaryCase{"sigmoid", ops::sigmoid, -3, 3, false},
                      UnaryCase{"tanh", ops::tanh, -2, 2, false}, UnaryCase{"gelu", ops::gelu, -3, 3, false}),
    [](const ::testing::TestParamInfo<UnaryCase>& info) { return std::string(info.param.name); });

// Second derivatives: f(x) = d sum(op(x)) / dx computed by an inner tape, checked through the
// outer tape of check_gradients (the gradient kernels of the activations are differentiable too).
TEST_P(UnaryGradientTest, SecondDerivative) {
  const UnaryCase c = GetParam();
  const Tensor x =
      c.away_from_zero ? random_away_from_zero({2, 3}, 23, c.lo, c.hi) : random_tensor({2, 3}, 23, c.lo, c.hi);
  auto op = c.op;
  const std::string name = c.name;
  if (name == "relu" || name == "abs" || name == "neg") {
    // Piecewise linear: no second derivative (none, or zeros through Sign's gradient, as TF).
    ops::GradientTape outer;
    outer.watch(x);
    Tensor d1;
    {
      ops::GradientTape inner;
      inner.watch(x);
      d1 = inner.gradient(op(x), {x})[0];
    }
    const Tensor d2 = outer.gradient(d1, {x})[0];
    if (d2.defined()) {
      EXPECT_EQ(d2.to_vector<double>(), std::vector<double>(6, 0.0)) << name;
    }
    return;
  }
  EXPECT_TRUE(check_gradients(
      [op](const In& in) {
        ops::GradientTape inner;
        inner.watch(in[0]);
        return inner.gradient(op(in[0]), {in[0]})[0];
      },
      {x}))
      << c.name;
}

// TF's SqrtGrad, RsqrtGrad and ReciprocalGrad return 0 where the upstream gradient is 0, whatever
// the output is: d/dx sum(m * sqrt(x)) at x = 0 with m = 0 is 0, not 0/0 (values from TF 2.21:
// x = [0, 0, 4, nan], m = [0, 1, 1, 0]).
TEST_F(GradientTest, SqrtRsqrtReciprocalGiveZeroForAZeroUpstreamGradient) {
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor x = Tensor::from_vector<float>({0, 0, 4, std::nanf("")}, "/CPU:0");
  const Tensor m = Tensor::from_vector<float>({0, 1, 1, 0}, "/CPU:0");
  const struct {
    const char* name;
    Tensor (*op)(const Tensor&);
    std::vector<double> expected;
  } cases[] = {{"sqrt", ops::sqrt, {0, inf, 0.25, 0}},
               {"rsqrt", ops::rsqrt, {0, -inf, -0.0625, 0}},
               {"reciprocal", ops::reciprocal, {0, -inf, -0.0625, 0}}};
  for (const auto& c : cases) {
    ops::GradientTape tape;
    tape.watch(x);
    const Tensor loss = ops::reduce_sum(ops::mul(c.op(x), m));
    EXPECT_EQ(tape.gradient(loss, {x})[0].to_vector<double>(), c.expected) << c.name;
  }
}

TEST_F(GradientTest, WhereBroadcastsAndRoutesGradients) {
  const Tensor cond = Tensor::from_vector<bool>({true, false, true, false, false, true}, {2, 3}, "/CPU:0");
  EXPECT_TRUE(check_gradients([cond](const In& x) { return ops::where(cond, x[0], x[1]); },
                              {random_tensor({2, 3}, 24), random_tensor({3}, 25)}));
  const Tensor row = Tensor::from_vector<bool>({true, false, true}, {3}, "/CPU:0");
  EXPECT_TRUE(check_gradients([row](const In& x) { return ops::where(row, x[0], x[1]); },
                              {random_tensor({2, 1}, 26), random_tensor({}, 27)}));
}

TEST_F(GradientTest, CastBetweenFloat64) {
  EXPECT_TRUE(check_gradients([](const In& x) { return ops::mul(ops::cast(x[0], DType::kFloat64), x[0]); },
                              {random_tensor({5}, 28)}));
}

// ---- reductions ----

TEST_F(GradientTest, ReduceSumAndMean) {
  const Tensor x = random_tensor({2, 3, 4}, 29);
  for (bool keep : {false, true}) {
    for (auto op : {ops::reduce_sum, ops::reduce_mean}) {
      EXPECT_TRUE(check_gradients([op, keep](const In& in) { return op(in[0], {}, keep); }, {x}));
      EXPECT_TRUE(check_gradients([op, keep](const In& in) { return op(in[0], 1, keep); }, {x}));
      EXPECT_TRUE(check_gradients([op, keep](const In& in) { return op(in[0], {0, 2}, keep); }, {x}));  // non-adjacent
      EXPECT_TRUE(check_gradients([op, keep](const In& in) { return op(in[0], {-1, -2}, keep); }, {x}));
    }
  }
}

TEST_F(GradientTest, ReduceMaxAndMinWithoutTies) {
  const Tensor x = random_tensor({2, 3, 4}, 30);
  for (bool keep : {false, true}) {
    for (auto op : {ops::reduce_max, ops::reduce_min}) {
      EXPECT_TRUE(check_gradients([op, keep](const In& in) { return op(in[0], {}, keep); }, {x}));
      EXPECT_TRUE(check_gradients([op, keep](const In& in) { return op(in[0], 1, keep); }, {x}));
      EXPECT_TRUE(check_gradients([op, keep](const In& in) { return op(in[0], {0, 2}, keep); }, {x}));
    }
  }
}

TEST_F(GradientTest, ReduceMaxSplitsTiesEvenly) {
  // Not a finite-difference case (ties are a kink): TF's rule gives each of the k maxima g / k.
  const Tensor x = Tensor::from_vector<double>({1, 3, 3, 2, 5, 5, 5, 0}, {2, 4}, "/CPU:0");
  ops::GradientTape tape;
  tape.watch(x);
  const Tensor y = ops::reduce_max(x, 1);
  const auto g = tape.gradient(y, {x})[0].to_vector<double>();
  EXPECT_EQ(g, (std::vector<double>{0, 0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3, 0}));
}

// ---- shape ops ----

TEST_F(GradientTest, Reshape) {
  EXPECT_TRUE(check_gradients(
      [](const In& x) {
        return ops::reshape(ops::square(x[0]), {3, -1});
      },
      {random_tensor({2, 3, 2}, 31)}));
}

TEST_F(GradientTest, Transpose) {
  const Tensor x = random_tensor({2, 3, 4}, 32);
  EXPECT_TRUE(check_gradients([](const In& in) { return ops::transpose(in[0], {2, 0, 1}); }, {x}));
  EXPECT_TRUE(check_gradients([](const In& in) { return ops::transpose(in[0]); }, {x}));
}

TEST_F(GradientTest, Concat) {
  const In xs{random_tensor({2, 3}, 33), random_tensor({1, 3}, 34), random_tensor({2, 3}, 35)};
  EXPECT_TRUE(check_gradients([](const In& x) { return ops::concat({x[0], x[1], x[2]}, 0); }, xs));
  const In ys{random_tensor({2, 1}, 36), random_tensor({2, 3}, 37)};
  EXPECT_TRUE(check_gradients([](const In& x) { return ops::concat({x[0], x[1], x[0]}, -1); }, ys));
}

TEST_F(GradientTest, Split) {
  const Tensor x = random_tensor({2, 6}, 38);
  // Parts reordered, one scaled, one unused (its gradient is zero).
  EXPECT_TRUE(check_gradients(
      [](const In& in) {
        auto p = ops::split(in[0], {1, -1, 2}, 1);
        return ops::concat({p[2], p[0] * 2.0}, 1);
      },
      {x}));
  EXPECT_TRUE(check_gradients(
      [](const In& in) {
        auto p = ops::split(in[0], 3, 1);
        return ops::mul(p[0], p[2]);
      },
      {x}));
}

TEST_F(GradientTest, Slice) {
  EXPECT_TRUE(check_gradients(
      [](const In& x) {
        return ops::slice(x[0], {1, 0, 1}, {2, -1, 2});
      },
      {random_tensor({3, 2, 4}, 39)}));
}

TEST_F(GradientTest, GatherAxis0RepeatedIndices) {
  const Tensor idx = Tensor::from_vector<std::int32_t>({0, 2, 0, 2, 1}, {5}, "/CPU:0");
  EXPECT_TRUE(check_gradients([idx](const In& x) { return ops::gather(x[0], idx, 0); }, {random_tensor({4, 3}, 40)}));
  const Tensor idx2 = Tensor::from_vector<std::int64_t>({3, 3, 0, 1}, {2, 2}, "/CPU:0");
  EXPECT_TRUE(check_gradients([idx2](const In& x) { return ops::gather(x[0], idx2); }, {random_tensor({4, 2, 2}, 41)}));
}

TEST_F(GradientTest, GatherAxis1RepeatedIndices) {
  const Tensor idx = Tensor::from_vector<std::int64_t>({1, 1, 0, 3}, {2, 2}, "/CPU:0");
  EXPECT_TRUE(
      check_gradients([idx](const In& x) { return ops::gather(x[0], idx, 1); }, {random_tensor({2, 4, 3}, 42)}));
  EXPECT_TRUE(check_gradients([idx](const In& x) { return ops::gather(x[0], idx, -1); }, {random_tensor({3, 4}, 43)}));
}

TEST_F(GradientTest, Pad) {
  EXPECT_TRUE(check_gradients(
      [](const In& x) {
        return ops::pad(x[0], {{1, 0}, {2, 1}}, 0.5);
      },
      {random_tensor({2, 3}, 44)}));
}

TEST_F(GradientTest, BroadcastTo) {
  EXPECT_TRUE(check_gradients(
      [](const In& x) {
        return ops::broadcast_to(x[0], Shape{2, 3, 4});
      },
      {random_tensor({3, 1}, 45)}));
  EXPECT_TRUE(check_gradients(
      [](const In& x) {
        return ops::broadcast_to(x[0], Shape{2, 3});
      },
      {random_tensor({}, 46)}));
}

TEST_F(GradientTest, ExpandDimsSqueezeStack) {
  EXPECT_TRUE(
      check_gradients([](const In& x) { return ops::square(ops::expand_dims(x[0], 1)); }, {random_tensor({2, 3}, 47)}));
  EXPECT_TRUE(
      check_gradients([](const In& x) { return ops::square(ops::squeeze(x[0])); }, {random_tensor({2, 1, 3, 1}, 48)}));
  EXPECT_TRUE(check_gradients([](const In& x) { return ops::squeeze(x[0], {-1}); }, {random_tensor({2, 1, 3, 1}, 49)}));
  const In xs{random_tensor({2, 3}, 50), random_tensor({2, 3}, 51)};
  EXPECT_TRUE(check_gradients([](const In& x) { return ops::stack({x[0], x[1], x[0]}, 0); }, xs));
  EXPECT_TRUE(check_gradients([](const In& x) { return ops::stack({x[0], x[1]}, 1); }, xs));
  EXPECT_TRUE(check_gradients([](const In& x) { return ops::stack({x[0], x[1]}, -1); }, xs));
}

// ---- matmul ----

TEST_F(GradientTest, MatMulAllTransposeCombinations) {
  const int m = 2, k = 3, n = 4;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, 52);
      const Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, 53);
      EXPECT_TRUE(check_gradients([ta, tb](const In& x) { return ops::matmul(x[0], x[1], ta, tb); }, {a, b}))
          << "transpose_a " << ta << " transpose_b " << tb;
    }
  }
}

TEST_F(GradientTest, MatMulBatched) {
  EXPECT_TRUE(check_gradients([](const In& x) { return ops::matmul(x[0], x[1]); },
                              {random_tensor({2, 2, 3}, 54), random_tensor({2, 3, 2}, 55)}));
  EXPECT_TRUE(check_gradients([](const In& x) { return ops::matmul(x[0], x[1], true, true); },
                              {random_tensor({2, 3, 2}, 56), random_tensor({2, 2, 3}, 57)}));
}

TEST_F(GradientTest, MatMulBroadcastBatch) {
  // [2,1,m,k] x [3,k,n] → [2,3,m,n]: both operands' gradients sum over the stretched batch dims.
  EXPECT_TRUE(check_gradients([](const In& x) { return ops::matmul(x[0], x[1]); },
                              {random_tensor({2, 1, 2, 3}, 58), random_tensor({3, 3, 2}, 59)}));
  // One matrix against a batch.
  EXPECT_TRUE(check_gradients([](const In& x) { return ops::matmul(x[0], x[1], false, true); },
                              {random_tensor({2, 3}, 60), random_tensor({2, 4, 3}, 61)}));
}

// ---- nn ----

struct ConvCase {
  const char* name;
  ops::Conv2dOptions options;
};

void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }

class Conv2dGradientTest : public testing::CoreTest, public ::testing::WithParamInterface<ConvCase> {};

TEST_P(Conv2dGradientTest, InputAndFilters) {
  const ops::Conv2dOptions o = GetParam().options;
  EXPECT_TRUE(check_gradients([o](const In& x) { return ops::conv2d(x[0], x[1], o); },
                              {random_tensor({2, 5, 5, 2}, 62), random_tensor({3, 3, 2, 2}, 63)}));
}

INSTANTIATE_TEST_SUITE_P(Ops, Conv2dGradientTest,
                         ::testing::Values(ConvCase{"Stride1Valid", {{1, 1}, ops::Padding::kValid, {1, 1}}},
                                           ConvCase{"Stride1Same", {{1, 1}, ops::Padding::kSame, {1, 1}}},
                                           ConvCase{"Stride2Valid", {{2, 2}, ops::Padding::kValid, {1, 1}}},
                                           ConvCase{"Stride2Same", {{2, 2}, ops::Padding::kSame, {1, 1}}},
                                           ConvCase{"Stride2x1Same", {{2, 1}, ops::Padding::kSame, {1, 1}}},
                                           ConvCase{"Dilation2Valid", {{1, 1}, ops::Padding::kValid, {2, 2}}},
                                           ConvCase{"Dilation2Same", {{1, 1}, ops::Padding::kSame, {2, 2}}}),
                         [](const ::testing::TestParamInfo<ConvCase>& info) { return std::string(info.param.name); });

// FusedConv2D (conv + bias [+ relu]) on float64: the epilogue's loop and its one-pass gradient.
TEST_P(Conv2dGradientTest, FusedWithBiasAndActivation) {
  const ops::Conv2dOptions o = GetParam().options;
  for (const auto act : {ops::FusedActivation::kNone, ops::FusedActivation::kRelu}) {
    EXPECT_TRUE(check_gradients(
        [o, act](const In& x) { return ops::fused_conv2d(x[0], x[1], x[2], act, o); },
        {random_tensor({2, 5, 5, 2}, 62), random_tensor({3, 3, 2, 2}, 63), random_tensor({2}, 64, -0.3, 0.3)}));
  }
}

TEST_F(GradientTest, Conv2dRectangularFilter) {
  EXPECT_TRUE(check_gradients(
      [](const In& x) {
        return ops::conv2d(x[0], x[1], {2, 2}, ops::Padding::kSame);
      },
      {random_tensor({1, 4, 5, 3}, 64), random_tensor({2, 3, 3, 2}, 65)}));
}

TEST_F(GradientTest, MaxPool) {
  const Tensor x = random_tensor({2, 4, 5, 2}, 66);  // distinct values: no ties in a window
  EXPECT_TRUE(check_gradients(
      [](const In& in) {
        return ops::max_pool2d(in[0], {2, 2}, {2, 2}, ops::Padding::kValid);
      },
      {x}));
  EXPECT_TRUE(check_gradients(
      [](const In& in) {
        return ops::max_pool2d(in[0], {3, 3}, {2, 2}, ops::Padding::kSame);
      },
      {x}));
  EXPECT_TRUE(check_gradients(
      [](const In& in) {
        return ops::max_pool2d(in[0], {2, 2}, {1, 1}, ops::Padding::kSame);
      },
      {x}));
}

TEST_F(GradientTest, AvgPool) {
  const Tensor x = random_tensor({2, 4, 5, 2}, 67);
  EXPECT_TRUE(check_gradients(
      [](const In& in) {
        return ops::avg_pool2d(in[0], {2, 2}, {2, 2}, ops::Padding::kValid);
      },
      {x}));
  EXPECT_TRUE(check_gradients(
      [](const In& in) {
        return ops::avg_pool2d(in[0], {3, 3}, {2, 2}, ops::Padding::kSame);
      },
      {x}));
  EXPECT_TRUE(check_gradients(
      [](const In& in) {
        return ops::avg_pool2d(in[0], {2, 3}, {1, 1}, ops::Padding::kSame);
      },
      {x}));
}

TEST_F(GradientTest, SoftmaxAndLogSoftmax) {
  const Tensor x = random_tensor({3, 4}, 68, -2, 2);
  for (int axis : {-1, 0}) {
    EXPECT_TRUE(check_gradients([axis](const In& in) { return ops::softmax(in[0], axis); }, {x})) << axis;
    EXPECT_TRUE(check_gradients([axis](const In& in) { return ops::log_softmax(in[0], axis); }, {x})) << axis;
  }
  const Tensor y = random_tensor({2, 3, 2}, 69, -2, 2);
  EXPECT_TRUE(check_gradients([](const In& in) { return ops::softmax(in[0], 1); }, {y}));
}

TEST_F(GradientTest, SparseSoftmaxCrossEntropy) {
  const Tensor labels = Tensor::from_vector<std::int32_t>({3, 0, 1}, {3}, "/CPU:0");
  EXPECT_TRUE(
      check_gradients([labels](const In& x) { return ops::sparse_softmax_cross_entropy_with_logits(labels, x[0]); },
                      {random_tensor({3, 4}, 70, -2, 2)}));
  const Tensor labels64 = Tensor::from_vector<std::int64_t>({1, 1}, {2}, "/CPU:0");
  EXPECT_TRUE(check_gradients(
      [labels64](const In& x) { return ops::sparse_softmax_cross_entropy_with_logits(labels64, ops::square(x[0])); },
      {random_tensor({2, 3}, 71, -2, 2)}));
}

TEST_F(GradientTest, SoftmaxCrossEntropy) {
  const Tensor labels =
      Tensor::from_vector<double>({0.1, 0.2, 0.3, 0.4, 1.0, 0.0, 0.0, 0.0, 0.25, 0.25, 0.25, 0.25}, {3, 4}, "/CPU:0");
  EXPECT_TRUE(check_gradients([labels](const In& x) { return ops::softmax_cross_entropy_with_logits(labels, x[0]); },
                              {random_tensor({3, 4}, 72, -2, 2)}));
}

TEST_F(GradientTest, BatchNormTraining) {
  // y depends on x through the batch statistics too: dx is the full fused-backward formula.
  for (const Shape& s : {Shape{5, 3}, Shape{2, 2, 2, 3}}) {
    EXPECT_TRUE(
        check_gradients([](const In& x) { return ops::batch_norm(x[0], x[1], x[2], Tensor(), Tensor(), 1e-3, true).y; },
                        {random_tensor(s, 73, -2, 2), random_tensor({3}, 74, 0.5, 1.5), random_tensor({3}, 75)}))
        << s.to_string();
  }
}

TEST_F(GradientTest, BatchNormInference) {
  const Tensor mean = random_tensor({3}, 76), var = random_tensor({3}, 77, 0.5, 2.0);
  EXPECT_TRUE(
      check_gradients([mean, var](const In& x) { return ops::batch_norm(x[0], x[1], x[2], mean, var, 1e-3, false).y; },
                      {random_tensor({2, 2, 3}, 78, -2, 2), random_tensor({3}, 79, 0.5, 1.5), random_tensor({3}, 80)}));
}

// float32 runs other kernels (oneDNN forward and backward); its tape gradients must agree with the
// float64 ones checked above to float32 precision.
TEST_F(GradientTest, Float32GradientsMatchFloat64) {
  const Tensor labels = Tensor::from_vector<std::int32_t>({1, 0}, {2}, "/CPU:0");
  const TensorFn f = [labels](const In& x) {
    Tensor h = ops::conv2d(x[0], x[1], {1, 1}, ops::Padding::kSame);
    h = ops::batch_norm(h, x[4], x[5], Tensor(), Tensor(), 1e-3, true).y;
    h = ops::gelu(ops::sigmoid(h) + ops::tanh(h));
    h = ops::max_pool2d(h, {2, 2}, {1, 1}, ops::Padding::kSame) +
        ops::avg_pool2d(h, {2, 3}, {1, 1}, ops::Padding::kSame);
    h = ops::reduce_mean(h, {1, 2});                           // [2, 3]
    Tensor logits = ops::matmul(h, x[2], false, true) + x[3];  // [2, 4]
    return ops::add(ops::sparse_softmax_cross_entropy_with_logits(labels, logits),
                    ops::reduce_sum(ops::log_softmax(logits, 0) * ops::softmax(logits), 1));
  };
  const In in64{random_tensor({2, 4, 4, 2}, 90), random_tensor({3, 3, 2, 3}, 91),  random_tensor({4, 3}, 92),
                random_tensor({4}, 93),          random_tensor({3}, 94, 0.5, 1.5), random_tensor({3}, 95)};
  In in32;
  for (const Tensor& t : in64) in32.push_back(ops::cast(t, DType::kFloat32));
  auto grads = [&f](const In& in) {
    ops::GradientTape tape;
    for (const Tensor& t : in) tape.watch(t);
    const Tensor loss = ops::reduce_sum(f(in));
    return tape.gradient(loss, in);
  };
  const auto g64 = grads(in64), g32 = grads(in32);
  for (std::size_t i = 0; i < in64.size(); ++i) {
    ASSERT_TRUE(g32[i].defined() && g64[i].defined()) << i;
    EXPECT_EQ(g32[i].dtype(), DType::kFloat32);
    const auto a = g32[i].to_vector<double>(), b = g64[i].to_vector<double>();
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t k = 0; k < a.size(); ++k)
      EXPECT_NEAR(a[k], b[k], 1e-4 * (1 + std::abs(b[k]))) << "input " << i << " element " << k;
  }
}

// ---- compositions ----

TEST_F(GradientTest, SmallNetworkEndToEnd) {
  // conv → relu-free smooth activation → pool → dense → loss: gradients chain through every family.
  const Tensor labels = Tensor::from_vector<std::int64_t>({2, 0}, {2}, "/CPU:0");
  EXPECT_TRUE(check_gradients(
      [labels](const In& x) {
        Tensor h = ops::tanh(ops::conv2d(x[0], x[1], {1, 1}, ops::Padding::kSame));
        h = ops::avg_pool2d(h, {2, 2}, {2, 2}, ops::Padding::kValid);
        h = ops::reshape(h, {2, -1});
        Tensor logits = ops::matmul(h, x[2]) + x[3];
        return ops::reduce_mean(ops::sparse_softmax_cross_entropy_with_logits(labels, logits));
      },
      {random_tensor({2, 4, 4, 1}, 81), random_tensor({3, 3, 1, 2}, 82), random_tensor({8, 3}, 83),
       random_tensor({3}, 84)}));
}

}  // namespace
}  // namespace chorus
