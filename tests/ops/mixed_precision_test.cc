// bfloat16 / float16 at the op layer on the CPU (issue 16): which dtypes each op accepts, the
// float16 error, softmax / batch_norm / cross-entropy computed in float32, the Cast gradient, and
// the gradients of bf16 Dense-like, convolution and pooling chains against the float32 chain.
//
// Expected values: the float32 ops on the same bfloat16-representable inputs. Tolerances follow
// from bfloat16's unit roundoff u = 2^-8: each bf16 output is rounded once (u·|want|), the upstream
// gradient entering a bf16 chain is rounded once (u·S, S the reduction over absolute values, which
// the tests compute with the same float32 ops on |inputs|), plus float32 summation of K terms on
// either side (3·K·2^-24·S). ReLU's mask is a discontinuity rounding may flip where z ≈ 0: the
// tests zero the upstream gradient of the elements with |z| <= 2u·S(z), so a flip there changes
// nothing. The kernels' two paths (oneDNN bf16, float32 fallback) are both covered in
// dnn_bf16_test.cc; here whichever this machine takes runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "tests/core/test_util.h"
#include <chorus/ops/cpu/dnn.h>
#include <chorus/ops/ops.h>

namespace chorus {
namespace {

class MixedPrecisionTest : public testing::CoreTest {};

constexpr double kU = 1.0 / 256;             // 2^-8
constexpr double kEps32 = 1.0 / 16777216.0;  // 2^-24

// Random float32 tensor whose values are exactly representable in bfloat16.
Tensor bf16_exact(const Shape& shape, std::uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(shape.num_elements()));
  for (float& x : v) x = bfloat16_to_float(float_to_bfloat16(dist(gen)));
  return Tensor::from_vector<float>(v, shape, "/CPU:0");
}
Tensor bf16(const Tensor& t) { return ops::cast(t, DType::kBFloat16); }
Tensor f32(const Tensor& t) { return ops::cast(t, DType::kFloat32); }

// |got - want| <= u·|want|·1.01 + u·scale·rounded_upstream + 3·K·2^-24·scale, elementwise.
void expect_bf16_close(const Tensor& got, const Tensor& want, const Tensor& scale, double k, bool rounded_upstream,
                       const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const auto g = got.to_vector<double>(), w = want.to_vector<double>(), s = scale.to_vector<double>();
  int bad = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double tol = 1.01 * kU * std::abs(w[i]) + (rounded_upstream ? kU : 0.0) * s[i] + 3 * k * kEps32 * s[i];
    if (!(std::abs(g[i] - w[i]) <= tol) && ++bad <= 5)
      ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", expected " << w[i] << " (tolerance " << tol
                    << ")";
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << g.size() << " elements off";
}

// The upstream gradient r with the entries where |z| <= 2u·scale_z zeroed (see the file comment):
// the bf16 chain's pre-activation differs from z by at most one rounding of the matmul / conv
// output (u·scale_z) and one of the sum or of itself (u·|z|), plus float32 summation.
Tensor upstream_away_from_kinks(const Tensor& z, const Tensor& scale_z, std::uint32_t seed) {
  const Tensor r = bf16_exact(z.shape(), seed);
  const Tensor near = ops::less_equal(ops::abs(z), ops::mul(scale_z, Tensor::scalar<float>(2 * kU, "/CPU:0")));
  const auto n = ops::reduce_sum(ops::cast(near, DType::kFloat32)).item<float>();
  EXPECT_LT(n, 0.1f * static_cast<float>(z.num_elements())) << "too many pre-activations near 0: " << n;
  return ops::where(near, ops::zeros_like(r), r);
}

// ---- forward values and accepted dtypes --------------------------------------------------------

TEST_F(MixedPrecisionTest, MatmulInBfloat16MatchesFloat32OnTheSameInputs) {
  const Tensor a = bf16_exact({3, 17, 40}, 1), b = bf16_exact({40, 24}, 2);  // b broadcast over the batch
  const Tensor c = ops::matmul(bf16(a), bf16(b));
  EXPECT_EQ(c.dtype(), DType::kBFloat16);
  expect_bf16_close(c, ops::matmul(a, b), ops::matmul(ops::abs(a), ops::abs(b)), 40, false, "matmul");
  const Tensor ct = ops::matmul(bf16(b), bf16(a), true, true);  // [24, 40]^T... → [3, 24, 17]
  expect_bf16_close(ct, ops::matmul(b, a, true, true), ops::matmul(ops::abs(b), ops::abs(a), true, true), 40, false,
                    "matmul transposed");
}

TEST_F(MixedPrecisionTest, ConvolutionAndPoolingInBfloat16MatchFloat32) {
  const Tensor x = bf16_exact({2, 9, 9, 8}, 3), w = bf16_exact({3, 3, 8, 16}, 4);
  const ops::Conv2dOptions o{{2, 2}, ops::Padding::kSame, {1, 1}};
  const Tensor y = ops::conv2d(bf16(x), bf16(w), o);
  EXPECT_EQ(y.dtype(), DType::kBFloat16);
  expect_bf16_close(y, ops::conv2d(x, w, o), ops::conv2d(ops::abs(x), ops::abs(w), o), 72, false, "conv2d");
  const Tensor mp = ops::max_pool2d(bf16(x), {3, 3}, {2, 2}, ops::Padding::kSame);
  EXPECT_EQ(mp.dtype(), DType::kBFloat16);
  EXPECT_EQ(mp.to_vector<float>(), ops::max_pool2d(x, {3, 3}, {2, 2}, ops::Padding::kSame).to_vector<float>());
  const Tensor ap = ops::avg_pool2d(bf16(x), {2, 2}, {2, 2});
  expect_bf16_close(ap, ops::avg_pool2d(x, {2, 2}, {2, 2}), ops::avg_pool2d(ops::abs(x), {2, 2}, {2, 2}), 4, false,
                    "avg_pool2d");
}

TEST_F(MixedPrecisionTest, Float16OnTheCpuIsAClearErrorUnlessOneDnnHasKernels) {
  const Tensor x = ops::cast(bf16_exact({1, 4, 4, 2}, 5), DType::kFloat16);
  const Tensor w = ops::cast(bf16_exact({3, 3, 2, 2}, 6), DType::kFloat16);
  const Tensor m = ops::cast(bf16_exact({4, 4}, 7), DType::kFloat16);
  const std::vector<std::pair<std::string, std::function<Tensor()>>> calls = {
      {"BatchMatMulV2", [&] { return ops::matmul(m, m); }},
      {"Conv2D",
       [&] {
         return ops::conv2d(x, w, {1, 1}, ops::Padding::kSame);
       }},
      {"Conv2DBackpropInput",
       [&] {
         return ops::conv2d_backprop_input(x.shape(), w, x, {{1, 1}, ops::Padding::kSame, {1, 1}});
       }},
      {"MaxPool",
       [&] {
         return ops::max_pool2d(x, {2, 2}, {2, 2});
       }},
      {"AvgPool", [&] {
         return ops::avg_pool2d(x, {2, 2}, {2, 2});
       }}};
  for (const auto& [op, call] : calls) {
    if (ops::cpu::float16_supported()) {
      EXPECT_EQ(call().dtype(), DType::kFloat16) << op;
      continue;
    }
    try {
      call();
      ADD_FAILURE() << op << " accepted float16 although ops::cpu::float16_supported() is false";
    } catch (const UnimplementedError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(op + ": float16 is not supported on the CPU"), std::string::npos) << msg;
      EXPECT_NE(msg.find("mixed_bfloat16"), std::string::npos) << msg;
      EXPECT_NE(msg.find("GPU"), std::string::npos) << msg;
    }
  }
}

TEST_F(MixedPrecisionTest, NonFloatingDtypesStayInvalid) {
  const Tensor i = Tensor::from_vector<std::int32_t>({1, 2, 3, 4}, {2, 2}, "/CPU:0");
  EXPECT_THROW(ops::matmul(i, i), InvalidArgumentError);
  const Tensor x = Tensor::zeros({1, 2, 2, 1}, DType::kInt32, "/CPU:0");
  EXPECT_THROW(ops::conv2d(x, Tensor::zeros({1, 1, 1, 1}, DType::kInt32, "/CPU:0")), InvalidArgumentError);
  EXPECT_THROW(ops::max_pool2d(x, {1, 1}, {1, 1}), InvalidArgumentError);
  EXPECT_THROW(ops::softmax(i), InvalidArgumentError);
  EXPECT_THROW(ops::matmul(bf16(ops::cast(i, DType::kFloat32)), ops::cast(i, DType::kFloat32)), InvalidArgumentError);
}

// ---- softmax, batch norm, cross-entropy: float32 inside ----------------------------------------

TEST_F(MixedPrecisionTest, SoftmaxOfSixteenBitLogitsIsTheFloat32ResultRoundedOnce) {
  const Tensor x = bf16_exact({4, 10}, 8, -4.f, 4.f);
  for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
    const Tensor xl = ops::cast(x, dt);
    for (int axis : {-1, 0}) {
      const Tensor s = ops::softmax(xl, axis), ls = ops::log_softmax(xl, axis);
      EXPECT_EQ(s.dtype(), dt);
      EXPECT_EQ(ls.dtype(), dt);
      EXPECT_EQ(s.to_vector<float>(), ops::cast(ops::softmax(x, axis), dt).to_vector<float>());
      EXPECT_EQ(ls.to_vector<float>(), ops::cast(ops::log_softmax(x, axis), dt).to_vector<float>());
    }
  }
  // The gradient comes back in bfloat16, the float32 gradient rounded: dx = s·(r - Σ r·s).
  const Tensor xb = bf16(x), r = bf16_exact({4, 10}, 9);
  ops::GradientTape tape;
  tape.watch(xb);
  const Tensor loss = ops::reduce_sum(ops::mul(f32(ops::softmax(xb)), r));
  const Tensor g = tape.gradient(loss, std::vector<Tensor>{xb})[0];
  EXPECT_EQ(g.dtype(), DType::kBFloat16);
  ops::GradientTape tape32;
  tape32.watch(x);
  const Tensor g32 = tape32.gradient(ops::reduce_sum(ops::mul(ops::softmax(x), r)), std::vector<Tensor>{x})[0];
  // The softmax output is rounded once in the bf16 chain's forward... but its backward runs on the
  // float32 softmax (the cast's input), so only r's and dx's roundings remain: S = s·(|r| + Σ|r|·s).
  const Tensor s32 = ops::softmax(x);
  const Tensor scale = ops::mul(s32, ops::add(ops::abs(r), ops::reduce_sum(ops::mul(ops::abs(r), s32), -1, true)));
  expect_bf16_close(g, g32, scale, 10, true, "softmax gradient");
}

TEST_F(MixedPrecisionTest, BatchNormOfBfloat16TakesFloat32Parameters) {
  const Tensor x = bf16_exact({6, 3}, 10), gamma = bf16_exact({3}, 11, 0.5f, 2.f), beta = bf16_exact({3}, 12);
  const ops::BatchNormResult want = ops::batch_norm(x, gamma, beta, Tensor(), Tensor(), 1e-3, true);
  const ops::BatchNormResult got = ops::batch_norm(bf16(x), gamma, beta, Tensor(), Tensor(), 1e-3, true);
  EXPECT_EQ(got.y.dtype(), DType::kBFloat16);
  EXPECT_EQ(got.batch_mean.dtype(), DType::kFloat32);
  EXPECT_EQ(got.y.to_vector<float>(), bf16(want.y).to_vector<float>());
  EXPECT_EQ(got.batch_variance.to_vector<float>(), want.batch_variance.to_vector<float>());
  const ops::BatchNormResult inf =
      ops::batch_norm(bf16(x), gamma, beta, want.batch_mean, want.batch_variance, 1e-3, false);
  EXPECT_EQ(
      inf.y.to_vector<float>(),
      bf16(ops::batch_norm(x, gamma, beta, want.batch_mean, want.batch_variance, 1e-3, false).y).to_vector<float>());
  try {
    ops::batch_norm(bf16(x), bf16(gamma), bf16(beta), Tensor(), Tensor(), 1e-3, true);
    ADD_FAILURE() << "bfloat16 parameters were accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("must be float32"), std::string::npos) << e.what();
  }
  // Gradients: gamma and beta in float32, x in bfloat16.
  ops::GradientTape tape;
  const Tensor xb = bf16(x);
  tape.watch(xb);
  tape.watch(gamma);
  tape.watch(beta);
  const Tensor loss = ops::reduce_sum(f32(ops::batch_norm(xb, gamma, beta, Tensor(), Tensor(), 1e-3, true).y));
  const auto g = tape.gradient(loss, std::vector<Tensor>{xb, gamma, beta});
  EXPECT_EQ(g[0].dtype(), DType::kBFloat16);
  EXPECT_EQ(g[1].dtype(), DType::kFloat32);
  EXPECT_EQ(g[2].to_vector<float>(), (std::vector<float>{6, 6, 6}));  // d/dbeta of Σy = rows
}

TEST_F(MixedPrecisionTest, SparseCrossEntropyOfBfloat16Logits) {
  const Tensor logits = bf16_exact({5, 7}, 13, -3.f, 3.f);
  const Tensor labels = Tensor::from_vector<std::int32_t>({0, 6, 3, 2, 6}, {5}, "/CPU:0");
  const Tensor loss = ops::sparse_softmax_cross_entropy_with_logits(labels, bf16(logits));
  EXPECT_EQ(loss.dtype(), DType::kBFloat16);
  // Computed in double from the same inputs and rounded once: within u of the float64 loss.
  const Tensor want = ops::sparse_softmax_cross_entropy_with_logits(labels, ops::cast(logits, DType::kFloat64));
  expect_bf16_close(loss, want, ops::zeros_like(want), 0, false, "sparse cross-entropy");
}

// ---- gradients ---------------------------------------------------------------------------------

TEST_F(MixedPrecisionTest, CastGradientReturnsToTheSourceDtype) {
  const Tensor x = bf16_exact({5}, 14), c = bf16_exact({5}, 15);
  {  // float32 source through bfloat16: the upstream (c, exact in bf16) comes back as float32.
    ops::GradientTape tape;
    tape.watch(x);
    const Tensor loss = ops::reduce_sum(f32(ops::mul(bf16(x), bf16(c))));
    const Tensor g = tape.gradient(loss, std::vector<Tensor>{x})[0];
    EXPECT_EQ(g.dtype(), DType::kFloat32);
    EXPECT_EQ(g.to_vector<float>(), c.to_vector<float>());
  }
  {  // bfloat16 source through float32: the float32 upstream is rounded to bfloat16 once.
    const Tensor xb = bf16(x);
    const Tensor c32 = ops::mul(c, Tensor::scalar<float>(1.0f + 1.0f / 512, "/CPU:0"));  // not bf16-exact
    ops::GradientTape tape;
    tape.watch(xb);
    const Tensor g = tape.gradient(ops::reduce_sum(ops::mul(f32(xb), c32)), std::vector<Tensor>{xb})[0];
    EXPECT_EQ(g.dtype(), DType::kBFloat16);
    EXPECT_EQ(g.to_vector<float>(), bf16(c32).to_vector<float>());
  }
}

// A Dense layer under mixed_bfloat16: float32 variables cast to bfloat16, matmul, bias, relu, back
// to float32 for the loss.
TEST_F(MixedPrecisionTest, DenseChainInBfloat16GivesFloat32GradientsWithinBf16Tolerance) {
  const Tensor x = bf16_exact({8, 64}, 16), w = bf16_exact({64, 32}, 17), b = bf16_exact({32}, 18, -0.5f, 0.5f);
  const auto dense32 = [&] { return ops::add(ops::matmul(x, w), b); };
  const Tensor z32 = dense32();
  const Tensor r = upstream_away_from_kinks(z32, ops::add(ops::matmul(ops::abs(x), ops::abs(w)), ops::abs(b)), 19);

  ops::GradientTape tape32;
  tape32.watch(w);
  tape32.watch(b);
  const auto want = tape32.gradient(ops::reduce_sum(ops::mul(ops::relu(dense32()), r)), std::vector<Tensor>{w, b});

  ops::GradientTape tape;
  tape.watch(w);
  tape.watch(b);
  const Tensor h = ops::relu(ops::add(ops::matmul(bf16(x), bf16(w)), bf16(b)));
  EXPECT_EQ(h.dtype(), DType::kBFloat16);
  const auto got = tape.gradient(ops::reduce_sum(ops::mul(f32(h), r)), std::vector<Tensor>{w, b});
  ASSERT_TRUE(got[0].defined() && got[1].defined());
  EXPECT_EQ(got[0].dtype(), DType::kFloat32);
  EXPECT_EQ(got[1].dtype(), DType::kFloat32);

  const Tensor mask = ops::cast(ops::greater(z32, ops::zeros_like(z32)), DType::kFloat32);
  const Tensor g_abs = ops::mul(ops::abs(r), mask);
  expect_bf16_close(got[0], want[0], ops::matmul(ops::abs(x), g_abs, true, false), 8, true, "dense dW");
  expect_bf16_close(got[1], want[1], ops::reduce_sum(g_abs, 0), 8, true, "dense db");
}

TEST_F(MixedPrecisionTest, ConvolutionChainInBfloat16GivesFloat32GradientsWithinBf16Tolerance) {
  const Tensor x = bf16_exact({2, 8, 8, 4}, 20), w = bf16_exact({3, 3, 4, 8}, 21);
  const ops::Conv2dOptions o{{1, 1}, ops::Padding::kSame, {1, 1}};
  const Tensor z32 = ops::conv2d(x, w, o);
  const Tensor r = upstream_away_from_kinks(z32, ops::conv2d(ops::abs(x), ops::abs(w), o), 22);

  ops::GradientTape tape32;
  tape32.watch(x);
  tape32.watch(w);
  const auto want =
      tape32.gradient(ops::reduce_sum(ops::mul(ops::relu(ops::conv2d(x, w, o)), r)), std::vector<Tensor>{x, w});
  ops::GradientTape tape;
  tape.watch(x);
  tape.watch(w);
  const Tensor h = ops::relu(ops::conv2d(bf16(x), bf16(w), o));
  const auto got = tape.gradient(ops::reduce_sum(ops::mul(f32(h), r)), std::vector<Tensor>{x, w});
  EXPECT_EQ(got[0].dtype(), DType::kFloat32);
  EXPECT_EQ(got[1].dtype(), DType::kFloat32);

  const Tensor g_abs = ops::mul(ops::abs(r), ops::cast(ops::greater(z32, ops::zeros_like(z32)), DType::kFloat32));
  expect_bf16_close(got[0], want[0], ops::conv2d_backprop_input(x.shape(), ops::abs(w), g_abs, o), 3 * 3 * 8, true,
                    "conv dx");
  expect_bf16_close(got[1], want[1], ops::conv2d_backprop_filter(ops::abs(x), w.shape(), g_abs, o), 2 * 8 * 8, true,
                    "conv dw");
}

TEST_F(MixedPrecisionTest, PoolingGradientsInBfloat16) {
  // Distinct values (a shuffled ramp, exact in bf16): one maximum per window on both chains.
  std::vector<float> v(2 * 6 * 6 * 3);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = (static_cast<float>(i) - 100.f) / 64.f;
  std::shuffle(v.begin(), v.end(), std::mt19937(23));
  const Tensor x = Tensor::from_vector<float>(v, {2, 6, 6, 3}, "/CPU:0");
  const Tensor r = bf16_exact({2, 3, 3, 3}, 24);
  for (bool max : {true, false}) {
    const auto pool = [max](const Tensor& t) {
      return max ? ops::max_pool2d(t, {3, 3}, {2, 2}, ops::Padding::kSame)
                 : ops::avg_pool2d(t, {3, 3}, {2, 2}, ops::Padding::kSame);
    };
    ops::GradientTape tape32;
    tape32.watch(x);
    const Tensor want = tape32.gradient(ops::reduce_sum(ops::mul(pool(x), r)), std::vector<Tensor>{x})[0];
    ops::GradientTape tape;
    tape.watch(x);
    const Tensor got = tape.gradient(ops::reduce_sum(ops::mul(f32(pool(bf16(x))), r)), std::vector<Tensor>{x})[0];
    EXPECT_EQ(got.dtype(), DType::kFloat32);
    // S: the same backward on |r|, through the float32 chain.
    ops::GradientTape tape_abs;
    tape_abs.watch(x);
    const Tensor scale = tape_abs.gradient(ops::reduce_sum(ops::mul(pool(x), ops::abs(r))), std::vector<Tensor>{x})[0];
    expect_bf16_close(got, want, scale, 4, true, max ? "max_pool2d dx" : "avg_pool2d dx");
  }
}

TEST_F(MixedPrecisionTest, Bf16PathIsReported) {
  const std::string path = ops::cpu::bf16_path();
  EXPECT_TRUE(path == "float32 fallback" || path == "onednn " + ops::cpu::onednn_isa()) << path;
  std::cout << "bfloat16 CPU path: " << path << "\n";
}

}  // namespace
}  // namespace chorus
