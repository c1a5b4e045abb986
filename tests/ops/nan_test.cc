// NaN and Inf through relu, silu, leaky_relu, elu, softplus, maximum/minimum, max pooling (forward and gradient), the
// reductions, arg-max/min, softmax/log-softmax and the fused sparse softmax cross-entropy: TensorFlow's semantics
// (docs/ops.md, "NaN and Inf"). Two kinds of check:
//   - analytic: the rule of each op on inputs chosen to exercise it (NaN in → NaN out, NaN skipped
//     by max pooling and arg-max, ...), on every CPU path (float32: chorus's loops or oneDNN;
//     float64: the reference loops; bfloat16 where it applies);
//   - TfInterop: the same inputs through the real TensorFlow (tests/ops/tf_nan_semantics.py, in the
//     test venv), compared element by element; skipped with the reason when the venv is missing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/core/interop_python.h"
#include "tests/core/test_util.h"
#include <chorus/ops/cpu/dnn.h>
#include <chorus/ops/ops.h>

namespace chorus {
namespace {
using ops::compute_output_size;
using ops::Conv2dGeometry;
using ops::Padding;

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
const double kLowest = static_cast<double>(std::numeric_limits<float>::lowest());

class NanTest : public testing::CoreTest {};

Tensor make(const std::vector<double>& v, const Shape& s, DType dtype = DType::kFloat32) {
  return ops::cast(Tensor::from_vector<double>(v, s, "/CPU:0"), dtype);
}

// NaN where `want` is NaN, equal infinities, else within 16 float32 roundings (2^-24 each) of the
// largest magnitude the computation holds: |want| plus 3 (the inputs are at most 2 and a log-sum of
// three terms at most 2 + log 3; oneDNN's log_softmax is 2-3 roundings of it off, measured).
void expect_same(const Tensor& got_t, const std::vector<double>& want, const std::string& what) {
  const std::vector<double> got = ops::cast(got_t, DType::kFloat64).to_vector<double>();
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << "[" << i << "] = " << got[i] << ", want NaN";
    } else if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << what << "[" << i << "]";
    } else {
      EXPECT_NEAR(got[i], want[i], 16 * std::ldexp(1.0, -24) * (std::abs(want[i]) + 3)) << what << "[" << i << "]";
    }
  }
}

// ---- the ops, as the interop script computes them --------------------------------------------------

const std::vector<double> kReluX = {1, kNan, -1, kInf, -kInf, 0};
const std::vector<double> kA = {kNan, 0, kNan, 1, -kInf, kInf}, kB = {0, kNan, kNan, kInf, kNan, 2};
const std::vector<double> kR = {1,    kNan, 3, 1,    2, 3, -kInf, kInf,  0,     kNan, kNan, kNan,
                                kInf, kInf, 1, kNan, 5, 3, -kInf, -kInf, -kInf, 2,    kNan, 2};  // [8, 3]
const std::vector<double> kAr = {-kInf, -kInf, kNan, -kInf, -kInf, kNan, 2,    kNan,
                                 kNan,  kNan,  kNan, 5,     kInf,  kNan, kNan, kInf};  // [8, 2]
const std::vector<double> kPool = {1, kNan, -kInf, -kInf, 3, 4, -kInf, -kInf, 2, 1, 5, 6, kInf, 0, 7, kNan};
const std::vector<double> kPoolSame = {kNan, kNan, 1, kNan, kNan, -kInf, 2, -kInf, kNan};
const std::vector<double> kSoftmax = {1, kNan, 0, kInf, 0, 1, -kInf, 0, 1, kInf, kInf, 0, -kInf, -kInf, -kInf, 0, 1, 2};
const std::vector<std::int32_t> kLabels = {0, 1, 1, 2, 0, 2};

std::map<std::string, Tensor> chorus_outputs(DType dtype) {
  std::map<std::string, Tensor> o;
  {
    const Tensor x = make(kReluX, {6}, dtype);
    ops::GradientTape tape;
    tape.watch(x);
    const Tensor y = ops::relu(x);
    o["relu"] = y;
    o["relu_grad"] = tape.gradient(y, std::vector<Tensor>{x})[0];
  }
  const std::pair<const char*, Tensor (*)(const Tensor&)> activations[] = {
      {"silu", ops::silu},
      {"leaky_relu", [](const Tensor& t) { return ops::leaky_relu(t); }},
      {"elu", ops::elu},
      {"softplus", ops::softplus}};
  for (const auto& [name, f] : activations) {
    const Tensor x = make(kReluX, {6}, dtype);
    ops::GradientTape tape;
    tape.watch(x);
    const Tensor y = f(x);
    o[name] = y;
    o[std::string(name) + "_grad"] = tape.gradient(y, std::vector<Tensor>{x})[0];
  }
  {
    const Tensor a = make(kA, {6}, dtype), b = make(kB, {6}, dtype);
    ops::GradientTape tape(/*persistent=*/true);
    tape.watch(a);
    tape.watch(b);
    const Tensor mx = ops::maximum(a, b), mn = ops::minimum(a, b);
    o["maximum"] = mx;
    o["minimum"] = mn;
    const auto gmx = tape.gradient(mx, std::vector<Tensor>{a, b}), gmn = tape.gradient(mn, std::vector<Tensor>{a, b});
    o["maximum_grad_a"] = gmx[0];
    o["maximum_grad_b"] = gmx[1];
    o["minimum_grad_a"] = gmn[0];
    o["minimum_grad_b"] = gmn[1];
  }
  const Tensor r = make(kR, {8, 3}, dtype);
  {
    ops::GradientTape tape(/*persistent=*/true);
    tape.watch(r);
    const Tensor mx = ops::reduce_max(r, {1}), mn = ops::reduce_min(r, {1});
    o["reduce_max"] = mx;
    o["reduce_min"] = mn;
    o["reduce_max_grad"] = tape.gradient(mx, std::vector<Tensor>{r})[0];
    o["reduce_min_grad"] = tape.gradient(mn, std::vector<Tensor>{r})[0];
  }
  o["reduce_sum"] = ops::reduce_sum(r, {1});
  o["reduce_mean"] = ops::reduce_mean(r, {1});
  const Tensor ar = make(kAr, {8, 2}, dtype);
  o["argmax"] = ops::argmax(ar, 1);
  o["argmin"] = ops::argmin(ar, 1);
  o["argmax_r"] = ops::argmax(r, 1);
  o["argmin_r"] = ops::argmin(r, 1);
  {
    const Tensor p = make(kPool, {1, 4, 4, 1}, dtype);
    ops::GradientTape tape;
    tape.watch(p);
    const Tensor y = ops::max_pool2d(p, {2, 2}, {2, 2}, Padding::kValid);
    o["max_pool"] = y;
    o["max_pool_grad"] = tape.gradient(y, std::vector<Tensor>{p})[0];
    o["max_pool_same"] = ops::max_pool2d(make(kPoolSame, {1, 3, 3, 1}, dtype), {2, 2}, {1, 1}, Padding::kSame);
  }
  {
    const Tensor s = make(kSoftmax, {6, 3}, dtype);
    o["softmax"] = ops::softmax(s);
    o["log_softmax"] = ops::log_softmax(s);
    const Tensor labels = Tensor::from_vector<std::int32_t>(kLabels, {6}, "/CPU:0");
    ops::GradientTape tape;
    tape.watch(s);
    const Tensor loss = ops::sparse_softmax_cross_entropy_with_logits(labels, s);
    o["xent"] = loss;
    o["xent_grad"] = tape.gradient(loss, std::vector<Tensor>{s})[0];
  }
  return o;
}

// ---- analytic --------------------------------------------------------------------------------------

// The rules, written out for the inputs above (docs/ops.md's table).
std::map<std::string, std::vector<double>> analytic() {
  const double e1 = 1 / (1 + std::exp(-1.0)), l1 = std::log(1 + std::exp(-1.0));
  const double z = std::exp(0.0) + std::exp(1.0) + std::exp(2.0);
  return {
      {"relu", {1, kNan, 0, kInf, 0, 0}},  // NaN stays NaN
      {"relu_grad", {1, 0, 0, 1, 0, 0}},   // x > 0: false for NaN
      // x·sigmoid(x): -inf·0 is NaN; the gradient s·(1 + x·(1 − s)) is NaN at ±inf (inf·0).
      {"silu", {e1, kNan, -(1 - e1), kInf, kNan, 0}},
      {"silu_grad", {e1 * (2 - e1), kNan, (1 - e1) * (1 - e1), kNan, kNan, 0.5}},
      // x > 0 ? x : 0.2·x, alpha in float32 (TF's attr); NaN and 0 take the alpha branch.
      {"leaky_relu", {1, kNan, -0.2, kInf, -kInf, 0}},
      {"leaky_relu_grad", {1, 0.2, 0.2, 1, 0.2, 0.2}},
      // EluGrad tests the output y < 0: NaN is not, so a NaN input gets the gradient dy.
      {"elu", {1, kNan, std::exp(-1.0) - 1, kInf, -1, 0}},
      {"elu_grad", {1, 1, std::exp(-1.0), 1, 0, 1}},
      {"softplus", {1 + l1, kNan, l1, kInf, 0, std::log(2.0)}},
      {"softplus_grad", {e1, kNan, 1 - e1, 1, 0, 0.5}},
      {"maximum", {kNan, kNan, kNan, kInf, kNan, kInf}},
      {"minimum", {kNan, kNan, kNan, 1, kNan, 2}},
      {"maximum_grad_a", {0, 0, 0, 0, 0, 1}},  // to a where a >= b, else to b
      {"maximum_grad_b", {1, 1, 1, 1, 1, 0}},
      {"minimum_grad_a", {0, 0, 0, 1, 0, 0}},
      {"minimum_grad_b", {1, 1, 1, 0, 1, 1}},
      {"reduce_max", {kNan, 3, kInf, kNan, kInf, kNan, -kInf, kNan}},  // any NaN → NaN
      {"reduce_min", {kNan, 1, -kInf, kNan, 1, kNan, -kInf, kNan}},
      // TF's _MinOrMaxGrad: dy split over the elements equal to the result; a row holding NaN has
      // none (NaN == NaN is false), so 0/0: the whole row's gradient is NaN.
      {"reduce_max_grad", {kNan, kNan, kNan, 0,    0,    1,    0,       1,       0,       kNan, kNan, kNan,
                           0.5,  0.5,  0,    kNan, kNan, kNan, 1.0 / 3, 1.0 / 3, 1.0 / 3, kNan, kNan, kNan}},
      {"reduce_min_grad", {kNan, kNan, kNan, 1,    0,    0,    1,       0,       0,       kNan, kNan, kNan,
                           0,    0,    1,    kNan, kNan, kNan, 1.0 / 3, 1.0 / 3, 1.0 / 3, kNan, kNan, kNan}},
      {"reduce_sum", {kNan, 6, kNan, kNan, kInf, kNan, -kInf, kNan}},
      {"reduce_mean", {kNan, 2, kNan, kNan, kInf, kNan, -kInf, kNan}},
      // From index 0 and the lowest (highest) float, strictly greater (less) wins: NaN never does.
      {"argmax", {0, 0, 0, 0, 0, 1, 0, 1}},
      {"argmin", {0, 1, 0, 0, 0, 1, 0, 0}},
      {"argmax_r", {2, 2, 1, 0, 0, 1, 0, 0}},
      {"argmin_r", {0, 0, 0, 0, 2, 2, 0, 0}},
      // NaN skipped; a window of NaN and -inf gives the lowest float, its gradient on the first tap.
      {"max_pool", {4, kLowest, kInf, 7}},
      {"max_pool_grad", {0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0}},
      {"max_pool_same", {kLowest, 1, 1, 2, kLowest, kLowest, 2, kLowest, kLowest}},
      // A row with NaN or +inf, or only -inf: all NaN. -inf alone: probability 0.
      {"softmax",
       {kNan, kNan, kNan, kNan, kNan, kNan, 0, 1 - e1, e1, kNan, kNan, kNan, kNan, kNan, kNan, 1 / z, std::exp(1.0) / z,
        std::exp(2.0) / z}},
      {"log_softmax",
       {kNan, kNan, kNan, kNan, kNan, kNan, -kInf, -1 - l1, -l1, kNan, kNan, kNan, kNan, kNan, kNan, -std::log(z),
        1 - std::log(z), 2 - std::log(z)}},
      {"xent", {kNan, kNan, 1 + l1, kNan, kNan, std::log(z) - 2}},
      {"xent_grad",
       {kNan, kNan, kNan, kNan, kNan, kNan, 0, -e1, e1, kNan, kNan, kNan, kNan, kNan, kNan, 1 / z, std::exp(1.0) / z,
        std::exp(2.0) / z - 1}},
  };
}

TEST_F(NanTest, Float32AndFloat64FollowTensorFlowsRules) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const auto got = chorus_outputs(dtype);
    for (const auto& [name, want] : analytic()) {
      std::vector<double> w = want;
      // The lowest float64 where float64 max pooling starts (the same rule, the type's own lowest).
      if (dtype == DType::kFloat64)
        for (double& v : w)
          if (v == kLowest) v = std::numeric_limits<double>::lowest();
      expect_same(got.at(name), w, std::string(dtype_name(dtype)) + " " + name);
    }
  }
}

// The activations in bfloat16 (computed in float32, rounded once): NaN and ±inf where float32 has
// them, forward and gradient.
TEST_F(NanTest, ActivationsKeepTheirNanAndInfRulesInBfloat16) {
  const auto b = chorus_outputs(DType::kBFloat16);
  const auto want = analytic();
  for (const char* name :
       {"silu", "silu_grad", "leaky_relu", "leaky_relu_grad", "elu", "elu_grad", "softplus", "softplus_grad"}) {
    const std::vector<double> got = ops::cast(b.at(name), DType::kFloat64).to_vector<double>();
    const std::vector<double>& w = want.at(name);
    ASSERT_EQ(got.size(), w.size()) << name;
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (std::isnan(w[i]) || std::isinf(w[i])) {
        EXPECT_TRUE(std::isnan(w[i]) ? std::isnan(got[i]) : got[i] == w[i]) << name << "[" << i << "] = " << got[i];
      } else {
        EXPECT_NEAR(got[i], w[i], std::ldexp(1.0, -7) * (std::abs(w[i]) + 1)) << name << "[" << i << "]";
      }
    }
  }
}

// Max pooling on every pooling path: float32 beyond chorus's loops' 255 taps (oneDNN), float64
// (reference loops), bfloat16 (oneDNN or the float32 fallback, dnn_dispatch()).
TEST_F(NanTest, MaxPoolingSkipsNanOnEveryPath) {
  // A 16x16 window (256 taps) over 16x16x20 channels: NaN at tap 0 and 7, the maximum 3 at tap 9.
  std::vector<double> x(16 * 16 * 20, -1.0);
  for (int c = 0; c < 20; ++c) {
    x[static_cast<std::size_t>(0 * 20 + c)] = kNan;
    x[static_cast<std::size_t>(7 * 20 + c)] = kNan;
    x[static_cast<std::size_t>(9 * 20 + c)] = 3.0;
  }
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    for (std::int64_t k : {2, 16}) {
      const Tensor p = make(x, {1, 16, 16, 20}, dtype);
      ops::GradientTape tape;
      tape.watch(p);
      const Tensor y = ops::max_pool2d(p, {k, k}, {k, k}, Padding::kValid);
      const Tensor dx = ops::cast(tape.gradient(y, std::vector<Tensor>{p})[0], DType::kFloat64);
      const std::vector<double> yv = ops::cast(y, DType::kFloat64).to_vector<double>();
      const std::vector<double> dxv = dx.to_vector<double>();
      const std::string what = std::string(dtype_name(dtype)) + " k=" + std::to_string(k);
      // First window: k=16 covers taps 0..255 (maximum 3 at tap 9); k=2 covers taps 0, 1, 16, 17 (NaN, -1, -1, -1).
      for (int c = 0; c < 20; ++c) {
        EXPECT_EQ(yv[static_cast<std::size_t>(c)], k == 16 ? 3.0 : -1.0) << what;
        EXPECT_EQ(dxv[static_cast<std::size_t>((k == 16 ? 9 : 1) * 20 + c)], 1.0) << what;
        EXPECT_EQ(dxv[static_cast<std::size_t>(c)], 0.0) << what << ": the gradient went to NaN";
      }
    }
  }
}

// relu on every path: the loop (float32, float64, bfloat16) and a convolution's fused epilogue.
TEST_F(NanTest, ReluAndFusedConvolutionReluKeepNan) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    expect_same(ops::relu(make(kReluX, {6}, dtype)), {1, kNan, 0, kInf, 0, 0}, std::string(dtype_name(dtype)));
  }
  // 1x1 convolution with weight 1, bias 0 and ReLU: y = relu(x) through ops/cpu/dnn.h's epilogue.
  Conv2dGeometry g;
  g.n = 1;
  g.in_h = 1;
  g.in_w = 6;
  g.in_c = g.out_c = 1;
  g.k_h = g.k_w = 1;
  ASSERT_TRUE(compute_output_size(g, Padding::kValid));
  const std::vector<float> xs(kReluX.begin(), kReluX.end());
  const float w = 1.f, bias = 0.f;
  std::vector<float> ys(6);
  ops::cpu::conv2d_forward(DType::kFloat32, g, xs.data(), &w, ys.data(), {&bias, true});
  EXPECT_TRUE(std::isnan(ys[1])) << ys[1];
  EXPECT_EQ(ys[0], 1.f);
  EXPECT_EQ(ys[2], 0.f);
}

// ---- against the real TensorFlow ----------------------------------------------------------------

TEST_F(NanTest, TfInteropSameOutputsAsTensorFlow) {
  std::string python;
  CHORUS_REQUIRE_INTEROP_PYTHON(python, "tensorflow");
  const std::string script = std::string(CHORUS_SOURCE_ROOT) + "/tests/ops/tf_nan_semantics.py";
  const std::string cmd = "'" + python + "' '" + script + "' 2>/dev/null";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::map<std::string, std::vector<double>> tf;
  char buf[8192];
  while (std::fgets(buf, sizeof buf, p)) {
    std::istringstream line(buf);
    std::string name, v;
    line >> name;
    while (line >> v) tf[name].push_back(std::strtod(v.c_str(), nullptr));
  }
  ASSERT_EQ(::pclose(p), 0) << cmd;
  ASSERT_EQ(tf.size(), analytic().size()) << "the script printed " << tf.size() << " cases";
  const auto got = chorus_outputs(DType::kFloat32);
  for (const auto& [name, want] : tf) {
    ASSERT_TRUE(got.count(name)) << name;
    expect_same(got.at(name), want, "TensorFlow " + name);
  }
}

}  // namespace
}  // namespace chorus
