// The activations silu, leaky_relu, elu, softplus (ops/elementwise.h) and layer_norm / rms_norm
// (ops/normalization.h) on the CPU:
//   - gradients (first, and second for the activations) against central finite differences in
//     float64 (tests/ops/gradient_check.h), float32 tape gradients against the float64 ones;
//   - forward values against formulas written here in float64, bfloat16 within its rounding;
//   - TensorFlow's edge cases (softplus's thresholds per dtype, leaky_relu's alpha rounding);
//   - the errors;
//   - TfInterop: the real TensorFlow's values and gradients (tests/ops/tf_normalization_values.py,
//     in the test venv: tf.nn.*, tf_keras LayerNormalization, Keras 3 rms_normalization),
//     skipped with the reason when the venv is missing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gradient_check.h"
#include "tests/core/interop_python.h"
#include "tests/core/test_util.h"
#include <chorus/ops/ops.h>

namespace chorus {
namespace {

using testing::check_gradients;
using testing::random_away_from_zero;
using testing::random_tensor;
using In = std::vector<Tensor>;
using Fn = std::function<Tensor(const Tensor&)>;

class NormalizationOpsTest : public testing::CoreTest {};

std::vector<double> values(const Tensor& t) { return ops::cast(t, DType::kFloat64).to_vector<double>(); }

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double rel, double abs,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], abs + rel * std::abs(want[i])) << what << "[" << i << "]";
}

// ---- activations ----------------------------------------------------------------------------------

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

struct Act {
  const char* name;
  Fn op;
  std::function<double(double)> ref;
  double lo, hi;
  bool away_from_zero;  // |x| in [lo, hi], random sign: away from a kink at 0
};

std::vector<Act> activations() {
  return {
      {"silu", ops::silu, [](double x) { return x * sigmoid(x); }, -5, 5, false},
      {"leaky_relu", [](const Tensor& x) { return ops::leaky_relu(x); },
       [](double x) { return x > 0 ? x : static_cast<double>(0.2f) * x; }, 0.1, 3, true},  // alpha via float32, as TF
      {"leaky_relu_1p5", [](const Tensor& x) { return ops::leaky_relu(x, 1.5); },
       [](double x) { return x > 0 ? x : 1.5 * x; }, 0.1, 3, true},
      {"elu", ops::elu, [](double x) { return x < 0 ? std::expm1(x) : x; }, 0.1, 4, true},
      {"softplus", ops::softplus, [](double x) { return std::log1p(std::exp(x)); }, -6, 6, false},
  };
}

TEST_F(NormalizationOpsTest, ActivationGradientsMatchFiniteDifferences) {
  for (const Act& a : activations()) {
    const Tensor x =
        a.away_from_zero ? random_away_from_zero({3, 4}, 7, a.lo, a.hi) : random_tensor({3, 4}, 7, a.lo, a.hi);
    const Fn op = a.op;
    EXPECT_TRUE(check_gradients([op](const In& in) { return op(in[0]); }, {x})) << a.name;
    if (std::string(a.name).rfind("leaky_relu", 0) == 0) continue;  // piecewise linear: below
    // Second derivatives through the fused gradient kinds (SiluGrad, EluGrad, SoftplusGrad).
    EXPECT_TRUE(check_gradients(
        [op](const In& in) {
          ops::GradientTape inner;
          inner.watch(in[0]);
          return inner.gradient(op(in[0]), {in[0]})[0];
        },
        {x}))
        << a.name << " (second derivative)";
  }
}

TEST_F(NormalizationOpsTest, LeakyReluGradientOfGradientIsZeroForXAndTheSlopeForDy) {
  const Tensor x = random_away_from_zero({2, 3}, 5, 0.2, 2.0);
  ops::GradientTape outer(/*persistent=*/true);
  outer.watch(x);
  Tensor d1;
  {
    ops::GradientTape inner;
    inner.watch(x);
    d1 = inner.gradient(ops::leaky_relu(x, 0.3), {x})[0];
  }
  const Tensor d2 = outer.gradient(d1, {x})[0];
  if (d2.defined()) {
    EXPECT_EQ(d2.to_vector<double>(), std::vector<double>(6, 0.0));
  }
  // d1 = LeakyReluGrad(1, x): its value is the slope, 1 or 0.3 (alpha rounded through float32).
  const std::vector<double> xv = x.to_vector<double>(), dv = d1.to_vector<double>();
  for (std::size_t i = 0; i < xv.size(); ++i) EXPECT_EQ(dv[i], xv[i] > 0 ? 1.0 : static_cast<double>(0.3f)) << i;
}

TEST_F(NormalizationOpsTest, ActivationsFloat32AndBfloat16MatchTheFloat64Formulas) {
  for (const Act& a : activations()) {
    const Tensor x64 = random_tensor({257}, 3, -8, 8);
    std::vector<double> want;
    for (double v : x64.to_vector<double>()) want.push_back(a.ref(v));
    expect_near_all(values(a.op(x64)), want, 1e-14, 1e-15, std::string(a.name) + " float64");
    expect_near_all(values(a.op(ops::cast(x64, DType::kFloat32))), want, 4e-7, 1e-6, std::string(a.name) + " float32");
    // bfloat16: the input rounded to bfloat16 (the reference sees the same values), the output
    // within one rounding (2^-8 relative); leaky_relu's alpha is bfloat16's 0.2001953125 (TF), and
    // softplus takes TF's bfloat16 branches (e^x below -2.84375: up to e^x/2 ≈ 3% relative off).
    const std::string name = a.name;
    const Tensor xb = ops::cast(x64, DType::kBFloat16);
    std::vector<double> want_b;
    for (double v : values(xb)) want_b.push_back(name == "leaky_relu" ? (v > 0 ? v : 0.2001953125 * v) : a.ref(v));
    const double rel = name == "softplus" ? 0.03 : std::ldexp(1.0, -8);
    expect_near_all(values(a.op(xb)), want_b, rel, 1e-6, std::string(a.name) + " bfloat16");
  }
}

TEST_F(NormalizationOpsTest, Float32GradientsMatchFloat64) {
  for (const Act& a : activations()) {
    const Tensor x64 =
        a.away_from_zero ? random_away_from_zero({40}, 9, a.lo, a.hi) : random_tensor({40}, 9, a.lo, a.hi);
    auto grad = [&](const Tensor& x) {
      ops::GradientTape tape;
      tape.watch(x);
      return values(tape.gradient(ops::reduce_sum(ops::mul(a.op(x), x)), {x})[0]);
    };
    expect_near_all(grad(ops::cast(x64, DType::kFloat32)), grad(x64), 2e-6, 2e-6, std::string(a.name) + " float32");
  }
}

// TensorFlow's thresholds: x itself above −(log ε + 2), exp(x) below log ε + 2, with ε of the
// element type (bfloat16's is 2^-7: threshold 2.84375); no overflow for large |x|.
TEST_F(NormalizationOpsTest, SoftplusFollowsTensorFlowsThresholdsPerDtype) {
  auto sp = [](double v, DType d) { return values(ops::softplus(ops::cast(Tensor::scalar(v), d)))[0]; };
  EXPECT_EQ(sp(2.875, DType::kBFloat16), 2.875);                  // TF 2.21: 2.875
  EXPECT_EQ(sp(2.8125, DType::kBFloat16), 2.875);                 // log1p(exp(2.8125)) = 2.8708 → 2.875
  EXPECT_NEAR(sp(-3.0, DType::kBFloat16), std::exp(-3.0), 2e-4);  // exp branch: TF 0.0498046875
  EXPECT_EQ(sp(5.0, DType::kFloat16),
            static_cast<double>(static_cast<float>(float16(static_cast<float>(std::log1p(std::exp(5.0)))))));
  EXPECT_EQ(sp(14.0, DType::kFloat32), 14.0);
  EXPECT_EQ(sp(1000.0, DType::kFloat32), 1000.0);
  EXPECT_EQ(sp(-1000.0, DType::kFloat32), 0.0);
  EXPECT_DOUBLE_EQ(sp(-20.0, DType::kFloat32), static_cast<double>(std::exp(-20.0f)));
  EXPECT_EQ(sp(35.0, DType::kFloat64), 35.0);
  EXPECT_DOUBLE_EQ(sp(30.0, DType::kFloat64), std::log1p(std::exp(30.0)));
  EXPECT_EQ(sp(1e300, DType::kFloat64), 1e300);
}

// TF's LeakyRelu casts its float attr alpha to T: 0.2 becomes 0.2001953125 in bfloat16 and
// 0.20000000298 (float32's 0.2) in float64.
TEST_F(NormalizationOpsTest, LeakyReluRoundsAlphaAsTensorFlow) {
  EXPECT_EQ(values(ops::leaky_relu(ops::cast(Tensor::scalar(-1.0), DType::kBFloat16)))[0], -0.2001953125);
  EXPECT_EQ(values(ops::leaky_relu(Tensor::scalar(-1.0)))[0], -static_cast<double>(0.2f));
  EXPECT_EQ(values(ops::leaky_relu(Tensor::scalar(-2.0), -0.5))[0], 1.0);  // any alpha, also negative
}

TEST_F(NormalizationOpsTest, ActivationsRejectIntegers) {
  const Tensor i = Tensor::from_vector<std::int32_t>({1, -2}, {2}, "/CPU:0");
  EXPECT_THROW_WITH(ops::silu(i), InvalidArgumentError, "Silu");
  EXPECT_THROW_WITH(ops::leaky_relu(i), InvalidArgumentError, "LeakyRelu");
  EXPECT_THROW_WITH(ops::elu(i), InvalidArgumentError, "Elu");
  EXPECT_THROW_WITH(ops::softplus(i), InvalidArgumentError, "Softplus");
}

// ---- layer_norm / rms_norm --------------------------------------------------------------------------

// float64 reference: rows of `cols` elements.
std::vector<double> norm_ref(bool rms, const std::vector<double>& x, const std::vector<double>& gamma,
                             const std::vector<double>& beta, std::size_t cols, double eps) {
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < x.size() / cols; ++r) {
    const double* xr = x.data() + r * cols;
    double m = 0, v = 0;
    if (!rms) {
      for (std::size_t c = 0; c < cols; ++c) m += xr[c];
      m /= static_cast<double>(cols);
    }
    for (std::size_t c = 0; c < cols; ++c) v += (xr[c] - m) * (xr[c] - m);
    const double inv = 1 / std::sqrt(v / static_cast<double>(cols) + eps);
    for (std::size_t c = 0; c < cols; ++c)
      y[r * cols + c] = (xr[c] - m) * inv * (gamma.empty() ? 1 : gamma[c]) + (beta.empty() ? 0 : beta[c]);
  }
  return y;
}

TEST_F(NormalizationOpsTest, LayerNormGradientsMatchFiniteDifferences) {
  struct Case {
    Shape x;
    int begin_axis;
  };
  // One axis; two trailing axes; the whole tensor; a row longer than the 16 lanes with a tail;
  // more rows than one block of the backward's column sums (128).
  for (const Case& c : {Case{{3, 5}, -1}, Case{{2, 3, 4}, 1}, Case{{2, 3}, 0}, Case{{2, 37}, -1}, Case{{130, 3}, 1}}) {
    const int rank = c.x.rank();
    const int b = c.begin_axis < 0 ? c.begin_axis + rank : c.begin_axis;
    const Shape p(std::vector<std::int64_t>(c.x.dims().begin() + b, c.x.dims().end()));
    const Tensor x = random_tensor(c.x, 1, -2, 2), g = random_tensor(p, 2, 0.5, 1.5), be = random_tensor(p, 3);
    const int ax = c.begin_axis;
    EXPECT_TRUE(
        check_gradients([ax](const In& in) { return ops::layer_norm(in[0], in[1], in[2], 1e-3, ax); }, {x, g, be}))
        << "layer_norm " << c.x.to_string() << " from axis " << ax;
    EXPECT_TRUE(check_gradients([ax](const In& in) { return ops::rms_norm(in[0], in[1], 1e-6, ax); }, {x, g}))
        << "rms_norm " << c.x.to_string() << " from axis " << ax;
  }
  // No gamma / beta (Keras's scale=False, center=False).
  const Tensor x = random_tensor({4, 6}, 4, -2, 2);
  EXPECT_TRUE(check_gradients([](const In& in) { return ops::layer_norm(in[0], Tensor(), Tensor(), 1e-3); }, {x}));
  EXPECT_TRUE(check_gradients([](const In& in) { return ops::rms_norm(in[0], Tensor(), 1e-6); }, {x}));
  EXPECT_TRUE(check_gradients([](const In& in) { return ops::layer_norm(in[0], Tensor(), in[1], 1e-3); },
                              {x, random_tensor({6}, 5)}));
}

TEST_F(NormalizationOpsTest, NormForwardMatchesTheFloat64FormulaInEveryDtype) {
  const std::size_t cols = 300;  // 18 lanes of 16 and a tail
  const Tensor x64 = random_tensor({7, 300}, 11, -3, 5);
  const Tensor g64 = random_tensor({300}, 12, 0.5, 1.5), b64 = random_tensor({300}, 13);
  const std::vector<double> g = g64.to_vector<double>(), b = b64.to_vector<double>();
  for (bool rms : {false, true}) {
    auto run = [&](const Tensor& x, const Tensor& gamma, const Tensor& beta) {
      return rms ? ops::rms_norm(x, gamma, 1e-3) : ops::layer_norm(x, gamma, beta, 1e-3);
    };
    const std::string what = rms ? "rms_norm " : "layer_norm ";
    const std::vector<double> want =
        norm_ref(rms, x64.to_vector<double>(), g, rms ? std::vector<double>{} : b, cols, 1e-3);
    expect_near_all(values(run(x64, g64, b64)), want, 1e-13, 1e-13, what + "float64");
    const Tensor g32 = ops::cast(g64, DType::kFloat32), b32 = ops::cast(b64, DType::kFloat32);
    const std::vector<double> want32 = norm_ref(rms, values(ops::cast(x64, DType::kFloat32)), values(g32),
                                                rms ? std::vector<double>{} : values(b32), cols, 1e-3);
    expect_near_all(values(run(ops::cast(x64, DType::kFloat32), g32, b32)), want32, 1e-6, 1e-6, what + "float32");
    // 16-bit x with float32 parameters: normalized in float32, rounded once (2^-8 / 2^-11).
    for (DType d : {DType::kBFloat16, DType::kFloat16}) {
      const Tensor x16 = ops::cast(x64, d);
      const std::vector<double> want16 =
          norm_ref(rms, values(x16), values(g32), rms ? std::vector<double>{} : values(b32), cols, 1e-3);
      const Tensor y = run(x16, g32, b32);
      EXPECT_EQ(y.dtype(), d);
      const double ulp = d == DType::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
      expect_near_all(values(y), want16, ulp, 1e-6, what + std::string(dtype_name(d)));
      // 16-bit parameters are cast to float32 first: the same values, gradients in their dtype.
      const Tensor g16 = ops::cast(g32, d), b16 = ops::cast(b32, d);
      ops::GradientTape tape;
      tape.watch(x16);
      tape.watch(g16);
      const Tensor y16 = run(x16, g16, b16);
      expect_near_all(values(y16),
                      norm_ref(rms, values(x16), values(g16), rms ? std::vector<double>{} : values(b16), cols, 1e-3),
                      ulp, 1e-6, what + std::string(dtype_name(d)) + " with 16-bit gamma");
      const auto grads = tape.gradient(ops::reduce_sum(ops::cast(y16, DType::kFloat32)), {x16, g16});
      EXPECT_EQ(grads[0].dtype(), d);
      EXPECT_EQ(grads[1].dtype(), d);
    }
  }
}

TEST_F(NormalizationOpsTest, Float32NormGradientsMatchFloat64) {
  const Tensor x64 = random_tensor({150, 24}, 21, -2, 3), g64 = random_tensor({24}, 22, 0.5, 1.5),
               b64 = random_tensor({24}, 23), w64 = random_tensor({150, 24}, 24);
  auto grads = [&](DType d, bool rms) {
    const Tensor x = ops::cast(x64, d), g = ops::cast(g64, d), b = ops::cast(b64, d), w = ops::cast(w64, d);
    ops::GradientTape tape;
    tape.watch(x);
    tape.watch(g);
    tape.watch(b);
    const Tensor y = rms ? ops::rms_norm(x, g, 1e-3) : ops::layer_norm(x, g, b, 1e-3);
    return tape.gradient(ops::reduce_sum(ops::mul(y, w)), {x, g, b});
  };
  for (bool rms : {false, true}) {
    const auto g32 = grads(DType::kFloat32, rms), g64s = grads(DType::kFloat64, rms);
    for (std::size_t i = 0; i < (rms ? 2u : 3u); ++i)
      expect_near_all(values(g32[i]), values(g64s[i]), 1e-5, 1e-5,
                      std::string(rms ? "rms_norm" : "layer_norm") + " gradient " + std::to_string(i));
    if (rms) {
      EXPECT_FALSE(g32[2].defined());  // beta is not an input of rms_norm
    }
  }
}

TEST_F(NormalizationOpsTest, NanOrInfSpoilsOnlyItsRow) {
  const Tensor x = Tensor::from_vector<float>({1, NAN, 3, 1, 2, 3, INFINITY, 0, 1}, {3, 3}, "/CPU:0");
  const std::vector<double> y = values(ops::layer_norm(x, Tensor(), Tensor(), 1e-3));
  for (int c = 0; c < 3; ++c) {
    EXPECT_TRUE(std::isnan(y[static_cast<std::size_t>(c)])) << c;
    EXPECT_TRUE(std::isfinite(y[static_cast<std::size_t>(3 + c)])) << c;
    EXPECT_TRUE(std::isnan(y[static_cast<std::size_t>(6 + c)])) << c;  // inf - inf
  }
}

TEST_F(NormalizationOpsTest, EmptyInputsAndSecondDerivatives) {
  const Tensor e = Tensor::zeros({0, 4}, DType::kFloat32, "/CPU:0"), g = Tensor::ones({4}, DType::kFloat32, "/CPU:0");
  ops::GradientTape tape;
  tape.watch(g);
  const Tensor y = ops::layer_norm(e, g, Tensor(), 1e-3);
  EXPECT_EQ(y.shape(), e.shape());
  EXPECT_EQ(values(tape.gradient(ops::reduce_sum(y), {g})[0]), std::vector<double>(4, 0.0));
  // The fused backward is not differentiable again: an error, not a silently wrong result.
  const Tensor x = random_tensor({2, 3}, 8);
  ops::GradientTape outer;
  outer.watch(x);
  Tensor d1;
  {
    ops::GradientTape inner;
    inner.watch(x);
    d1 = inner.gradient(ops::reduce_sum(ops::square(ops::layer_norm(x, Tensor(), Tensor(), 1e-3))), {x})[0];
  }
  EXPECT_THROW_WITH(outer.gradient(ops::reduce_sum(d1), {x}), UnimplementedError, "LayerNormGrad");
}

TEST_F(NormalizationOpsTest, BadArgumentsAreInvalidArgumentErrors) {
  const Tensor x = Tensor::ones({2, 3}, DType::kFloat32, "/CPU:0");
  const Tensor g3 = Tensor::ones({3}, DType::kFloat32, "/CPU:0");
  EXPECT_THROW_WITH(ops::layer_norm(x, Tensor::ones({2}, DType::kFloat32, "/CPU:0"), Tensor()), InvalidArgumentError,
                    "gamma must have shape (3,)");
  EXPECT_THROW_WITH(ops::layer_norm(x, g3, Tensor::ones({2, 3}, DType::kFloat32, "/CPU:0"), 1e-3), InvalidArgumentError,
                    "beta must have shape (3,)");
  EXPECT_THROW_WITH(ops::layer_norm(x, Tensor::ones({3}, DType::kFloat64, "/CPU:0"), Tensor()), InvalidArgumentError,
                    "gamma must be float32");
  EXPECT_THROW_WITH(ops::rms_norm(x, g3, 1e-6, 2), InvalidArgumentError, "RMSNorm");
  EXPECT_THROW_WITH(ops::layer_norm(x, g3, Tensor(), -1.0), InvalidArgumentError, "epsilon must be >= 0");
  EXPECT_THROW_WITH(ops::layer_norm(Tensor::ones({2, 3}, DType::kInt32, "/CPU:0"), Tensor(), Tensor()),
                    InvalidArgumentError, "LayerNorm");
  EXPECT_THROW_WITH(ops::layer_norm(Tensor::scalar(1.0f), Tensor(), Tensor()), InvalidArgumentError, "rank >= 1");
}

// ---- against the real TensorFlow ----------------------------------------------------------------

// The inputs of tests/ops/tf_normalization_values.py (exact in float32 on both sides).
std::vector<double> formula_x(int n) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(((i * 37) % 101) / 10.0 - 5.0);
  return v;
}
std::vector<double> formula_w(int n) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(((i * 13) % 7 - 3) / 4.0);
  return v;
}
Tensor f32(const std::vector<double>& v, const Shape& s) {
  return ops::cast(Tensor::from_vector<double>(v, s, "/CPU:0"), DType::kFloat32);
}

std::map<std::string, Tensor> chorus_values() {
  std::map<std::string, Tensor> o;
  const Tensor x = f32(formula_x(40), {40}), w = f32(formula_w(40), {40});
  const std::map<std::string, Fn> acts = {{"silu", ops::silu},
                                          {"leaky_relu", [](const Tensor& t) { return ops::leaky_relu(t); }},
                                          {"leaky_relu_1p5", [](const Tensor& t) { return ops::leaky_relu(t, 1.5); }},
                                          {"elu", ops::elu},
                                          {"softplus", ops::softplus}};
  for (const auto& [name, f] : acts) {
    ops::GradientTape tape;
    tape.watch(x);
    const Tensor y = f(x);
    o[name] = y;
    o[name + "_grad"] = tape.gradient(ops::reduce_sum(ops::mul(w, y)), {x})[0];
  }
  const Shape shape{4, 3, 5};
  const Tensor xn = f32(formula_x(60), shape), wn = f32(formula_w(60), shape);
  for (const auto& [name, begin] :
       std::vector<std::pair<std::string, int>>{{"layer_norm", 2}, {"layer_norm_2axes", 1}}) {
    const Shape p(std::vector<std::int64_t>(shape.dims().begin() + begin, shape.dims().end()));
    std::vector<double> gv, bv;
    for (int j = 0; j < p.num_elements(); ++j) {
      gv.push_back(0.5 + ((j * 7) % 5) / 4.0);
      bv.push_back(((j * 3) % 4) / 4.0 - 0.25);
    }
    const Tensor g = f32(gv, p), b = f32(bv, p);
    ops::GradientTape tape;
    tape.watch(xn);
    tape.watch(g);
    tape.watch(b);
    const Tensor y = ops::layer_norm(xn, g, b, 1e-3, begin);
    const auto grads = tape.gradient(ops::reduce_sum(ops::mul(wn, y)), {xn, g, b});
    o[name] = y;
    o[name + "_dx"] = grads[0];
    o[name + "_dgamma"] = grads[1];
    o[name + "_dbeta"] = grads[2];
  }
  std::vector<double> sv;
  for (int j = 0; j < 5; ++j) sv.push_back(0.5 + ((j * 7) % 5) / 4.0);
  const Tensor s = f32(sv, {5});
  ops::GradientTape tape;
  tape.watch(xn);
  tape.watch(s);
  const Tensor y = ops::rms_norm(xn, s, 1e-6);
  const auto grads = tape.gradient(ops::reduce_sum(ops::mul(wn, y)), {xn, s});
  o["rms_norm"] = y;
  o["rms_norm_dx"] = grads[0];
  o["rms_norm_dscale"] = grads[1];
  return o;
}

TEST_F(NormalizationOpsTest, TfInteropSameValuesAndGradientsAsTensorFlow) {
  std::string python;
  CHORUS_REQUIRE_INTEROP_PYTHON(python, "tensorflow, tf_keras, keras");
  const std::string script = std::string(CHORUS_SOURCE_ROOT) + "/tests/ops/tf_normalization_values.py";
  const std::string cmd = "'" + python + "' '" + script + "' 2>/dev/null";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::map<std::string, std::vector<double>> tf;
  char buf[1 << 14];
  while (std::fgets(buf, sizeof buf, p)) {
    std::istringstream line(buf);
    std::string name, v;
    line >> name;
    while (line >> v) tf[name].push_back(std::strtod(v.c_str(), nullptr));
  }
  ASSERT_EQ(::pclose(p), 0) << cmd;
  const auto got = chorus_values();
  ASSERT_EQ(tf.size(), got.size()) << "the script printed " << tf.size() << " cases";
  for (const auto& [name, want] : tf) {
    ASSERT_TRUE(got.count(name)) << name;
    // float32 on both sides, different summation orders: a few roundings of the magnitudes involved
    // (inputs up to 5, normalized values up to ~3).
    expect_near_all(values(got.at(name)), want, 2e-6, 4e-6, "TensorFlow " + name);
  }
}

}  // namespace
}  // namespace chorus
