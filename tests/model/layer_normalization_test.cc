// LayerNormalization and RMSNormalization (model/layer_normalization.h) and the activations added to
// layers::activate (model/layers.cc): weights and their names, outputs against float64 formulas
// written here (one and two trailing axes, center/scale off), gradients reaching the weights, the
// mixed_bfloat16 policy (float32 weights, normalized in float32, bfloat16 out), and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/core/test_util.h"
#include <chorus/model/layer_normalization.h>
#include <chorus/model/layers.h>
#include <chorus/model/mixed_precision.h>
#include <chorus/ops/ops.h>

namespace chorus {
namespace {

class LayerNormalizationTest : public testing::CoreTest {
 protected:
  void TearDown() override {
    mixed_precision::set_global_policy("float32");
    testing::CoreTest::TearDown();
  }
};

std::vector<double> f64(const Tensor& t) { return ops::cast(t, DType::kFloat64).to_vector<double>(); }

std::vector<double> seq(std::int64_t n, double scale, double shift) {
  std::vector<double> v;
  for (std::int64_t i = 0; i < n; ++i) v.push_back(std::sin(0.7 * static_cast<double>(i) + 0.3) * scale + shift);
  return v;
}

// Rows of `cols`: (x − mean)·rstd·gamma + beta (rms: x·rstd·gamma with rstd from mean(x²)).
std::vector<double> reference(bool rms, const std::vector<double>& x, std::size_t cols,
                              const std::vector<double>& gamma, const std::vector<double>& beta, double eps) {
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < x.size() / cols; ++r) {
    double m = 0, v = 0;
    for (std::size_t c = 0; c < cols && !rms; ++c) m += x[r * cols + c] / static_cast<double>(cols);
    for (std::size_t c = 0; c < cols; ++c)
      v += (x[r * cols + c] - m) * (x[r * cols + c] - m) / static_cast<double>(cols);
    for (std::size_t c = 0; c < cols; ++c)
      y[r * cols + c] = (x[r * cols + c] - m) / std::sqrt(v + eps) * (gamma.empty() ? 1.0 : gamma[c]) +
                        (beta.empty() ? 0.0 : beta[c]);
  }
  return y;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << "[" << i << "]";
}

TEST_F(LayerNormalizationTest, WeightsAreNamedAndShapedAsKeras) {
  auto ln = layers::LayerNormalization();
  ln->build(Shape{2, 5, 8});
  auto* l = dynamic_cast<layers::LayerNormalizationLayer*>(ln.get());
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(ln->name(), "layer_normalization");
  ASSERT_EQ(ln->weights().size(), 2u);
  EXPECT_EQ(l->gamma().shape(), Shape{8});
  EXPECT_EQ(l->beta().shape(), Shape{8});
  EXPECT_EQ(f64(l->gamma().value()), std::vector<double>(8, 1.0));
  EXPECT_EQ(f64(l->beta().value()), std::vector<double>(8, 0.0));
  std::vector<std::string> names;
  for (const auto& c : ln->trackable_children()) names.push_back(c.name);
  EXPECT_EQ(names, (std::vector<std::string>{"gamma", "beta"}));

  auto two = layers::LayerNormalization({-2, -1}, 1e-3, /*center=*/false);
  two->build(Shape{2, 5, 8});
  ASSERT_EQ(two->weights().size(), 1u);
  EXPECT_EQ(two->weights()[0].shape(), (Shape{5, 8}));

  auto rms = layers::RMSNormalization();
  rms->build(Shape{3, 6});
  EXPECT_EQ(rms->name(), "rms_normalization");
  std::vector<std::string> rnames;
  for (const auto& c : rms->trackable_children()) rnames.push_back(c.name);
  EXPECT_EQ(rnames, std::vector<std::string>{"scale"});
}

TEST_F(LayerNormalizationTest, OutputsMatchTheFormula) {
  const std::vector<double> xv = seq(2 * 5 * 8, 3.0, 1.5);
  const Tensor x = ops::cast(Tensor::from_vector<double>(xv, {2, 5, 8}), DType::kFloat32);
  const std::vector<double> xr = f64(x);
  // Non-trivial weights: gamma 0.5 + j/8, beta j/10 - 0.3.
  auto ln = layers::LayerNormalization();
  ln->build(x.shape());
  auto* l = dynamic_cast<layers::LayerNormalizationLayer*>(ln.get());
  std::vector<double> g, b;
  for (int j = 0; j < 8; ++j) {
    g.push_back(0.5 + j / 8.0);
    b.push_back(j / 10.0 - 0.3);
  }
  Variable gv = l->gamma(), bv = l->beta();
  gv.assign(ops::cast(Tensor::from_vector<double>(g, {8}), DType::kFloat32));
  bv.assign(ops::cast(Tensor::from_vector<double>(b, {8}), DType::kFloat32));
  expect_near_all(f64((*ln)(x)), reference(false, xr, 8, g, b, 1e-3), 2e-6, "LayerNormalization axis -1");

  auto two = layers::LayerNormalization({-1, -2}, 1e-5, false, false);  // any order of the trailing axes
  expect_near_all(f64((*two)(x)), reference(false, xr, 40, {}, {}, 1e-5), 2e-6, "LayerNormalization axes -2, -1");

  auto rms = layers::RMSNormalization(-1, 1e-6);
  expect_near_all(f64((*rms)(x)), reference(true, xr, 8, {}, {}, 1e-6), 2e-6, "RMSNormalization");
}

TEST_F(LayerNormalizationTest, GradientsReachTheWeights) {
  const Tensor x = ops::cast(Tensor::from_vector<double>(seq(4 * 6, 2.0, 0.5), {4, 6}), DType::kFloat32);
  auto ln = layers::LayerNormalization();
  auto rms = layers::RMSNormalization();
  ln->build(x.shape());
  rms->build(x.shape());
  ops::GradientTape tape;
  const Tensor loss = ops::reduce_sum(ops::square(ops::add((*ln)(x), (*rms)(x))));
  std::vector<Variable> vars = ln->trainable_weights();
  for (const Variable& v : rms->trainable_weights()) vars.push_back(v);
  const auto grads = tape.gradient(loss, vars);
  ASSERT_EQ(grads.size(), 3u);
  for (std::size_t i = 0; i < grads.size(); ++i) {
    ASSERT_TRUE(grads[i].defined()) << i;
    EXPECT_EQ(grads[i].shape(), Shape{6}) << i;
    double norm = 0;
    for (double v : f64(grads[i])) norm += std::abs(v);
    EXPECT_GT(norm, 0.0) << i;
  }
}

// Keras under mixed_bfloat16: float32 weights, x cast to float32, normalized, returned in bfloat16.
TEST_F(LayerNormalizationTest, MixedBfloat16NormalizesInFloat32AndReturnsBfloat16) {
  mixed_precision::set_global_policy("mixed_bfloat16");
  const Tensor x32 = ops::cast(Tensor::from_vector<double>(seq(3 * 64, 4.0, 100.0), {3, 64}), DType::kFloat32);
  auto ln = layers::LayerNormalization();
  auto rms = layers::RMSNormalization();
  const Tensor y = (*ln)(x32), z = (*rms)(x32);
  EXPECT_EQ(y.dtype(), DType::kBFloat16);
  EXPECT_EQ(z.dtype(), DType::kBFloat16);
  for (const auto& l : {ln, rms})
    for (const Variable& v : l->weights()) EXPECT_EQ(v.dtype(), DType::kFloat32) << l->name();
  // The layer sees x rounded to bfloat16 (the compute dtype); from there on float32: one rounding
  // of the output. |mean| = 100 >> std = 3: a bfloat16 normalization would be far off.
  const std::vector<double> xb = f64(ops::cast(x32, DType::kBFloat16));
  expect_near_all(f64(y), reference(false, xb, 64, {}, {}, 1e-3), std::ldexp(1.0, -8), "mixed LayerNormalization");
  expect_near_all(f64(z), reference(true, xb, 64, {}, {}, 1e-6), std::ldexp(1.0, -8), "mixed RMSNormalization");
  // Gradients reach the float32 weights in float32.
  ops::GradientTape tape;
  const Tensor loss = ops::reduce_sum(ops::cast((*ln)(x32), DType::kFloat32));
  const auto grads = tape.gradient(loss, ln->trainable_weights());
  ASSERT_EQ(grads.size(), 2u);
  EXPECT_EQ(grads[0].dtype(), DType::kFloat32);
  EXPECT_EQ(f64(grads[1]), std::vector<double>(64, 3.0));  // dbeta = rows
}

// Keras's LayerNormalization over axes that are not trailing ([1, 3] and 1 of a rank-4 input):
// statistics per (example, kept axes), gamma and beta of the normalized axes' shape in ascending
// order; the gradients equal those of the same layer run on an input transposed by hand.
TEST_F(LayerNormalizationTest, NonTrailingAxesNormalizeAsKeras) {
  const std::vector<double> xv = seq(2 * 3 * 4 * 5, 2.5, 0.75);
  const Tensor x = ops::cast(Tensor::from_vector<double>(xv, {2, 3, 4, 5}), DType::kFloat32);
  const std::vector<double> xr = f64(x);
  auto ln = layers::LayerNormalization({3, 1}, 1e-3);
  ln->build(x.shape());
  auto* l = dynamic_cast<layers::LayerNormalizationLayer*>(ln.get());
  ASSERT_EQ(l->gamma().shape(), (Shape{3, 5}));
  std::vector<double> g, b;
  for (int j = 0; j < 15; ++j) {
    g.push_back(0.5 + j / 15.0);
    b.push_back(j / 20.0 - 0.2);
  }
  Variable gv = l->gamma(), bv = l->beta();
  gv.assign(ops::cast(Tensor::from_vector<double>(g, {3, 5}), DType::kFloat32));
  bv.assign(ops::cast(Tensor::from_vector<double>(b, {3, 5}), DType::kFloat32));
  // Reference: for each (n, k) of axes 0 and 2, the 15 values x[n, j, k, m] over (j, m).
  std::vector<double> want(xr.size());
  auto at = [](int n, int j, int k, int m) { return static_cast<std::size_t>(((n * 3 + j) * 4 + k) * 5 + m); };
  for (int n = 0; n < 2; ++n)
    for (int k = 0; k < 4; ++k) {
      double mean = 0, var = 0;
      for (int j = 0; j < 3; ++j)
        for (int m = 0; m < 5; ++m) mean += xr[at(n, j, k, m)] / 15.0;
      for (int j = 0; j < 3; ++j)
        for (int m = 0; m < 5; ++m) var += (xr[at(n, j, k, m)] - mean) * (xr[at(n, j, k, m)] - mean) / 15.0;
      for (int j = 0; j < 3; ++j)
        for (int m = 0; m < 5; ++m)
          want[at(n, j, k, m)] =
              (xr[at(n, j, k, m)] - mean) / std::sqrt(var + 1e-3) * g[static_cast<std::size_t>(j * 5 + m)] +
              b[static_cast<std::size_t>(j * 5 + m)];
    }
  const Tensor y = (*ln)(x);
  EXPECT_EQ(y.shape(), x.shape());
  expect_near_all(f64(y), want, 2e-6, "LayerNormalization axes [1, 3]");

  // The same layer on x transposed by hand to [n, k, j, m] (axes -2, -1), gamma and beta shared.
  auto trailing = layers::LayerNormalization({-2, -1}, 1e-3);
  trailing->build(Shape{2, 4, 3, 5});
  auto* t = dynamic_cast<layers::LayerNormalizationLayer*>(trailing.get());
  Variable tg = t->gamma(), tb = t->beta();
  tg.assign(gv.value());
  tb.assign(bv.value());
  const Tensor w = ops::cast(Tensor::from_vector<double>(seq(120, 1.0, 0.1), {2, 3, 4, 5}), DType::kFloat32);
  ops::GradientTape tape1(/*persistent=*/true);
  tape1.watch(x);
  const Tensor loss1 = ops::reduce_sum(ops::mul((*ln)(x), w));
  const auto g1 = tape1.gradient(loss1, std::vector<Variable>{gv, bv});
  const Tensor dx1 = tape1.gradient(loss1, std::vector<Tensor>{x})[0];
  const Tensor xt = ops::transpose(x, {0, 2, 1, 3});
  ops::GradientTape tape2(/*persistent=*/true);
  tape2.watch(xt);
  const Tensor loss2 = ops::reduce_sum(ops::mul((*trailing)(xt), ops::transpose(w, {0, 2, 1, 3})));
  const auto g2 = tape2.gradient(loss2, std::vector<Variable>{tg, tb});
  const Tensor dx2 = ops::transpose(tape2.gradient(loss2, std::vector<Tensor>{xt})[0], {0, 2, 1, 3});
  EXPECT_NEAR(loss1.item<float>(), loss2.item<float>(), 1e-4);
  ASSERT_EQ(g1.size(), 2u);
  ASSERT_EQ(g2.size(), 2u);
  expect_near_all(f64(g1[0]), f64(g2[0]), 1e-5, "dgamma");
  expect_near_all(f64(g1[1]), f64(g2[1]), 1e-5, "dbeta");
  ASSERT_TRUE(dx1.defined());
  EXPECT_EQ(dx1.shape(), x.shape());
  expect_near_all(f64(dx1), f64(dx2), 1e-5, "dx");

  auto one = layers::LayerNormalization(1, 1e-5, false, false);  // a middle axis alone
  const std::vector<double> y1 = f64((*one)(x));
  for (int n = 0; n < 2; ++n)
    for (int k = 0; k < 4; ++k)
      for (int m = 0; m < 5; ++m) {
        double mean = 0, var = 0;
        for (int j = 0; j < 3; ++j) mean += xr[at(n, j, k, m)] / 3.0;
        for (int j = 0; j < 3; ++j) var += (xr[at(n, j, k, m)] - mean) * (xr[at(n, j, k, m)] - mean) / 3.0;
        for (int j = 0; j < 3; ++j)
          EXPECT_NEAR(y1[at(n, j, k, m)], (xr[at(n, j, k, m)] - mean) / std::sqrt(var + 1e-5), 2e-5);
      }
}

// RMSNormalization over a middle axis: x · rsqrt(mean over that axis of x²) · scale, the scale [3]
// multiplying that axis; its gradient equals the trailing-axis layer's on the transposed input.
TEST_F(LayerNormalizationTest, RmsOverNonTrailingAxesScalesTheNormalizedAxes) {
  const std::vector<double> xv = seq(2 * 3 * 4, 1.5, 0.25);
  const Tensor x = ops::cast(Tensor::from_vector<double>(xv, {2, 3, 4}), DType::kFloat32);
  const std::vector<double> xr = f64(x);
  auto rms = layers::RMSNormalization(1, 1e-6);
  rms->build(x.shape());
  auto* r = dynamic_cast<layers::RMSNormalizationLayer*>(rms.get());
  ASSERT_EQ(r->scale().shape(), (Shape{3}));
  Variable sv = r->scale();
  sv.assign(Tensor::from_vector<float>({0.5f, 1.0f, 2.0f}, {3}));
  std::vector<double> want(xr.size());
  auto at = [](int n, int j, int k) { return static_cast<std::size_t>((n * 3 + j) * 4 + k); };
  for (int n = 0; n < 2; ++n)
    for (int k = 0; k < 4; ++k) {
      double ms = 0;
      for (int j = 0; j < 3; ++j) ms += xr[at(n, j, k)] * xr[at(n, j, k)] / 3.0;
      for (int j = 0; j < 3; ++j)
        want[at(n, j, k)] = xr[at(n, j, k)] / std::sqrt(ms + 1e-6) * (j == 0 ? 0.5 : j == 1 ? 1.0 : 2.0);
    }
  expect_near_all(f64((*rms)(x)), want, 2e-6, "RMSNormalization axis 1");
  auto trailing = layers::RMSNormalization(-1, 1e-6);
  trailing->build(Shape{2, 4, 3});
  Variable tv = dynamic_cast<layers::RMSNormalizationLayer*>(trailing.get())->scale();
  tv.assign(sv.value());
  const Tensor w = ops::cast(Tensor::from_vector<double>(seq(24, 1.0, 0.1), {2, 3, 4}), DType::kFloat32);
  ops::GradientTape t1;
  const auto g1 = t1.gradient(ops::reduce_sum(ops::mul((*rms)(x), w)), std::vector<Variable>{sv});
  ops::GradientTape t2;
  const auto g2 =
      t2.gradient(ops::reduce_sum(ops::mul((*trailing)(ops::transpose(x, {0, 2, 1})), ops::transpose(w, {0, 2, 1}))),
                  std::vector<Variable>{tv});
  ASSERT_EQ(g1.size(), 1u);
  ASSERT_EQ(g2.size(), 1u);
  expect_near_all(f64(g1[0]), f64(g2[0]), 1e-5, "dscale");
}

TEST_F(LayerNormalizationTest, AxesExcludeTheBatchAxis) {
  const Tensor x = Tensor::ones({2, 3, 4}, DType::kFloat32);
  EXPECT_THROW_WITH((*layers::RMSNormalization(std::vector<int>{0, 1}))(x), InvalidArgumentError, "batch axis");
  EXPECT_THROW_WITH((*layers::LayerNormalization({0, 1, 2}))(x), InvalidArgumentError, "batch axis");
  EXPECT_THROW_WITH((*layers::LayerNormalization(-3))(x), InvalidArgumentError, "batch axis");
  EXPECT_THROW_WITH((*layers::RMSNormalization(3))(x), InvalidArgumentError, "out of range");
  EXPECT_THROW_WITH(layers::LayerNormalization(-1, -1e-3), InvalidArgumentError, "epsilon");
  EXPECT_THROW_WITH(layers::RMSNormalization(std::vector<int>{}), InvalidArgumentError, "at least one axis");
}

TEST_F(LayerNormalizationTest, NewActivationsByName) {
  const Tensor x = Tensor::from_vector<float>({-2.0f, -0.5f, 0.0f, 0.5f, 3.0f}, {5});
  const std::vector<double> xv = f64(x);
  auto expect = [&](const std::string& name, double (*f)(double)) {
    layers::check_activation(name);
    const std::vector<double> y = f64(layers::activate(name, x));
    for (std::size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(y[i], f(xv[i]), 1e-6) << name << "(" << xv[i] << ")";
  };
  auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  expect("silu", silu);
  expect("swish", silu);
  expect("leaky_relu", [](double v) { return v > 0 ? v : 0.2 * v; });
  expect("elu", [](double v) { return v < 0 ? std::expm1(v) : v; });
  expect("softplus", [](double v) { return std::log1p(std::exp(v)); });
  EXPECT_THROW_WITH(layers::check_activation("swishy"), InvalidArgumentError, "softplus");
  // Through a layer: Dense(…, "elu") is elu(xW + b).
  auto dense = layers::Dense(3, "elu", true, initializers::constant(-0.5));
  const std::vector<double> d = f64((*dense)(Tensor::ones({1, 2}, DType::kFloat32)));
  EXPECT_NEAR(d[0], std::expm1(-1.0), 1e-6);
}

}  // namespace
}  // namespace chorus
