// Grouped convolution (Conv2dOptions::groups), ops::depthwise_conv2d and ops::conv1d on the CPU.
//
// - Gradients: finite differences (gradient_check.h) in float64 (the reference loops) and in
//   float32 (oneDNN's grouped kernels, the op run in float32 between two casts).
// - Structure: a grouped convolution equals the concatenation of one convolution per group, and
//   float32 (oneDNN) agrees with float64 (the reference loops) on the same inputs.
// - TensorFlow: outputs and gradients against TF 2.21 in float64, from tests/ops/tf_conv_variants.py
//   (run by this test in the interop Python; it holds the cases).
// - bfloat16: the forward and both gradients against float64 on the same bfloat16 inputs, within
//   one bfloat16 rounding plus float32 summation (the bound of dnn_bf16_test.cc), on oneDNN's
//   bf16 path and on the float32 fallback.
// - Errors: InvalidArgumentError naming the op, the shapes and the groups.
#include <gtest/gtest.h>

#include <algorithm>
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
#include <chorus/ops/cpu/dnn.h>
#include <chorus/ops/ops.h>

namespace chorus {
namespace {

using testing::check_gradients;
using testing::GradCheckOptions;
using testing::random_tensor;
using In = std::vector<Tensor>;
using Dims = std::vector<std::int64_t>;

class ConvVariantsTest : public testing::CoreTest {};

// ---- gradients -----------------------------------------------------------------------------

struct GroupedCase {
  const char* name;
  Dims x, w;
  ops::Conv2dOptions options;
};
void PrintTo(const GroupedCase& c, std::ostream* os) { *os << c.name; }

class GroupedConvGradientTest : public testing::CoreTest, public ::testing::WithParamInterface<GroupedCase> {};

// float64: the reference loops' grouped forward, backward data and backward filter.
TEST_P(GroupedConvGradientTest, Float64) {
  const GroupedCase& c = GetParam();
  const ops::Conv2dOptions o = c.options;
  EXPECT_TRUE(check_gradients([o](const In& x) { return ops::conv2d(x[0], x[1], o); },
                              {random_tensor(Shape(c.x), 71), random_tensor(Shape(c.w), 72)}));
}

// float32: oneDNN's grouped kernels. The op is bilinear, so central differences are exact up to
// float32 rounding of the outputs: eps 1e-2 keeps that rounding small against the difference.
TEST_P(GroupedConvGradientTest, Float32) {
  const GroupedCase& c = GetParam();
  const ops::Conv2dOptions o = c.options;
  auto f = [o](const In& x) {
    return ops::cast(ops::conv2d(ops::cast(x[0], DType::kFloat32), ops::cast(x[1], DType::kFloat32), o),
                     DType::kFloat64);
  };
  GradCheckOptions opt;
  opt.eps = 1e-2;
  opt.tol = 2e-3;
  EXPECT_TRUE(check_gradients(f, {random_tensor(Shape(c.x), 73), random_tensor(Shape(c.w), 74)}, opt));
}

// Fused convolution + bias (+ relu) takes groups too (oneDNN's bias on the grouped primitive).
TEST_P(GroupedConvGradientTest, FusedWithBias) {
  const GroupedCase& c = GetParam();
  const ops::Conv2dOptions o = c.options;
  for (const auto act : {ops::FusedActivation::kNone, ops::FusedActivation::kRelu}) {
    EXPECT_TRUE(check_gradients(
        [o, act](const In& x) { return ops::fused_conv2d(x[0], x[1], x[2], act, o); },
        {random_tensor(Shape(c.x), 75), random_tensor(Shape(c.w), 76), random_tensor(Shape{c.w[3]}, 77, -0.3, 0.3)}));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Ops, GroupedConvGradientTest,
    ::testing::Values(GroupedCase{"Groups2Valid", {2, 5, 5, 4}, {3, 3, 2, 4}, {{1, 1}, ops::Padding::kValid, {1, 1}}},
                      GroupedCase{"Groups3Stride2Same", {1, 6, 5, 6}, {3, 3, 2, 3}, {{2, 2}, ops::Padding::kSame}},
                      GroupedCase{
                          "Groups2Dilation2Same", {1, 6, 6, 4}, {2, 2, 2, 6}, {{1, 1}, ops::Padding::kSame, {2, 2}, 2}},
                      GroupedCase{"Depthwise4Stride2x1", {1, 5, 6, 4}, {3, 2, 1, 8}, {{2, 1}, ops::Padding::kSame}}),
    [](const ::testing::TestParamInfo<GroupedCase>& info) { return std::string(info.param.name); });

TEST_F(ConvVariantsTest, DepthwiseGradients) {
  for (const auto& [o, w] :
       std::vector<std::pair<ops::Conv2dOptions, Dims>>{{{{1, 1}, ops::Padding::kValid}, {2, 2, 3, 2}},
                                                        {{{2, 2}, ops::Padding::kSame}, {3, 3, 3, 1}},
                                                        {{{1, 1}, ops::Padding::kSame, {2, 2}}, {2, 3, 3, 3}}}) {
    EXPECT_TRUE(check_gradients([o](const In& x) { return ops::depthwise_conv2d(x[0], x[1], o); },
                                {random_tensor({2, 5, 6, 3}, 81), random_tensor(Shape(w), 82)}))
        << "filter " << Shape(w).to_string();
    GradCheckOptions opt;
    opt.eps = 1e-2;
    opt.tol = 2e-3;
    EXPECT_TRUE(check_gradients(
        [o](const In& x) {
          return ops::cast(ops::depthwise_conv2d(ops::cast(x[0], DType::kFloat32), ops::cast(x[1], DType::kFloat32), o),
                           DType::kFloat64);
        },
        {random_tensor({2, 5, 6, 3}, 83), random_tensor(Shape(w), 84)}, opt))
        << "float32 filter " << Shape(w).to_string();
  }
}

TEST_F(ConvVariantsTest, Conv1dGradients) {
  struct Case {
    Dims x, w;
    std::int64_t stride, dilation;
    ops::Padding padding;
  };
  for (const Case& c :
       {Case{{2, 7, 3}, {3, 3, 4}, 1, 1, ops::Padding::kValid}, Case{{2, 8, 3}, {2, 3, 2}, 2, 1, ops::Padding::kSame},
        Case{{1, 9, 4}, {3, 2, 6}, 1, 2, ops::Padding::kSame}}) {  // grouped: 4 / 2
    const auto f64 = [c](const In& x) { return ops::conv1d(x[0], x[1], c.stride, c.padding, c.dilation); };
    EXPECT_TRUE(check_gradients(f64, {random_tensor(Shape(c.x), 85), random_tensor(Shape(c.w), 86)}))
        << "filter " << Shape(c.w).to_string();
    GradCheckOptions opt;
    opt.eps = 1e-2;
    opt.tol = 2e-3;
    const auto f32 = [c](const In& x) {
      return ops::cast(ops::conv1d(ops::cast(x[0], DType::kFloat32), ops::cast(x[1], DType::kFloat32), c.stride,
                                   c.padding, c.dilation),
                       DType::kFloat64);
    };
    EXPECT_TRUE(check_gradients(f32, {random_tensor(Shape(c.x), 87), random_tensor(Shape(c.w), 88)}, opt))
        << "float32 filter " << Shape(c.w).to_string();
  }
}

// ---- structure -------------------------------------------------------------------------------

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  EXPECT_EQ(va.size(), vb.size());
  double m = 0;
  for (std::size_t i = 0; i < va.size() && i < vb.size(); ++i) m = std::max(m, std::abs(va[i] - vb[i]));
  return m;
}

// conv2d(x, w, groups G) = concat over g of conv2d(x's channel block g, w's output block g).
TEST_F(ConvVariantsTest, GroupedEqualsOneConvolutionPerGroup) {
  const Tensor x = random_tensor({2, 7, 6, 6}, 91), w = random_tensor({3, 3, 2, 9}, 92);
  const ops::Conv2dOptions o{{2, 1}, ops::Padding::kSame};
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    const Tensor xd = ops::cast(x, dtype), wd = ops::cast(w, dtype);
    const Tensor y = ops::conv2d(xd, wd, o);
    const std::vector<Tensor> xs = ops::split(xd, 3, 3), ws = ops::split(wd, 3, 3);
    std::vector<Tensor> parts;
    for (std::size_t g = 0; g < 3; ++g) parts.push_back(ops::conv2d(xs[g], ws[g], o));
    EXPECT_LT(max_abs_diff(y, ops::concat(parts, 3)), dtype == DType::kFloat64 ? 1e-13 : 1e-5) << dtype_name(dtype);
  }
  // depthwise_conv2d is that with one input channel per group: the filter [kh,kw,C,M] as
  // [kh,kw,1,C·M].
  const Tensor f = random_tensor({3, 3, 6, 2}, 93);
  EXPECT_LT(max_abs_diff(ops::depthwise_conv2d(x, f, o), ops::conv2d(x, ops::reshape(f, {3, 3, 1, 12}), o)), 1e-14);
}

// float32 (oneDNN's grouped primitives) against float64 (the reference loops), forward and both
// gradients.
TEST_F(ConvVariantsTest, Float32OneDnnMatchesFloat64Reference) {
  const Tensor x = random_tensor({2, 9, 8, 8}, 94), w = random_tensor({3, 3, 2, 12}, 95);
  std::vector<std::vector<Tensor>> results;
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    const Tensor xd = ops::cast(x, dtype), wd = ops::cast(w, dtype);
    ops::GradientTape tape;
    tape.watch(xd);
    tape.watch(wd);
    const Tensor y = ops::conv2d(xd, wd, {{2, 2}, ops::Padding::kSame, {1, 1}, 4});
    const Tensor dy = ops::cast(random_tensor(y.shape(), 96), dtype);
    std::vector<Tensor> r = tape.gradient(y, {xd, wd}, dy);
    r.insert(r.begin(), y);
    results.push_back(r);
  }
  const char* names[] = {"y", "dx", "dw"};
  for (std::size_t i = 0; i < 3; ++i) EXPECT_LT(max_abs_diff(results[0][i], results[1][i]), 2e-5) << names[i];
}

// ---- against TensorFlow ----------------------------------------------------------------------

Dims parse_dims(const std::string& s) {
  Dims d;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, ',')) d.push_back(std::stoll(part));
  return d;
}

// The closed forms of tf_conv_variants.py over the flat index.
Tensor closed_form(const Dims& dims, double a, double b, double scale, bool cosine) {
  const Shape shape(dims);
  std::vector<double> v(static_cast<std::size_t>(shape.num_elements()));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double t = a * static_cast<double>(i) + b;
    v[i] = scale * (cosine ? std::cos(t) : std::sin(t));
  }
  return Tensor::from_vector(v, shape, "/CPU:0");
}

struct TfCase {
  std::string name, op, padding;
  Dims x, w, strides, dilations;
  std::map<std::string, std::vector<double>> values;  // y, dx, dw
};

std::vector<TfCase> run_tf_script(const std::string& python) {
  const std::string cmd = "'" + python + "' '" + CHORUS_SOURCE_ROOT "/tests/ops/tf_conv_variants.py' 2>/dev/null";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr);
  std::vector<TfCase> cases;
  std::string text;
  char buf[65536];
  while (p && std::fgets(buf, sizeof buf, p)) text += buf;
  EXPECT_EQ(p ? ::pclose(p) : -1, 0) << cmd;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    std::string tag;
    in >> tag;
    if (tag == "case") {
      TfCase c;
      std::string xs, ws, ss, ds;
      in >> c.name >> c.op >> xs >> ws >> ss >> c.padding >> ds;
      c.x = parse_dims(xs), c.w = parse_dims(ws), c.strides = parse_dims(ss), c.dilations = parse_dims(ds);
      cases.push_back(c);
    } else if (!cases.empty()) {
      std::string v;
      while (in >> v) cases.back().values[tag].push_back(std::strtod(v.c_str(), nullptr));
    }
  }
  return cases;
}

Tensor run_case(const TfCase& c, const Tensor& x, const Tensor& w) {
  const ops::Padding padding = c.padding == "SAME" ? ops::Padding::kSame : ops::Padding::kValid;
  if (c.op == "conv1d") return ops::conv1d(x, w, c.strides[0], padding, c.dilations[0]);
  const ops::Conv2dOptions o{{c.strides[0], c.strides[1]}, padding, {c.dilations[0], c.dilations[1]}};
  if (c.op == "depthwise_conv2d") return ops::depthwise_conv2d(x, w, o);
  EXPECT_EQ(c.op, "conv2d");
  return ops::conv2d(x, w, o);
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rel,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::abs(v));
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], rel * (1 + scale)) << what << " [" << i << "]";
}

TEST_F(ConvVariantsTest, TfInteropOutputsAndGradientsMatchTensorFlow) {
  std::string python;
  CHORUS_REQUIRE_INTEROP_PYTHON(python, "tensorflow");
  const std::vector<TfCase> cases = run_tf_script(python);
  ASSERT_GE(cases.size(), 8u) << "the script printed " << cases.size() << " cases";
  std::map<std::string, int> ops_seen;
  for (const TfCase& c : cases) {
    ++ops_seen[c.op];
    for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
      const Tensor x = ops::cast(closed_form(c.x, 0.913, 0.3, 1.0, false), dtype);
      const Tensor w = ops::cast(closed_form(c.w, 1.37, 0.1, 0.5, true), dtype);
      ops::GradientTape tape;
      tape.watch(x);
      tape.watch(w);
      const Tensor y = run_case(c, x, w);
      const Tensor u = ops::cast(closed_form(y.shape().dims(), 0.37, 0.5, 1.0, true), dtype);
      const std::vector<Tensor> g = tape.gradient(y, {x, w}, u);
      const double rel = dtype == DType::kFloat64 ? 1e-12 : 2e-6;
      const std::string what = c.name + " " + std::string(dtype_name(dtype));
      expect_close(y.to_vector<double>(), c.values.at("y"), rel, what + " y");
      expect_close(g[0].to_vector<double>(), c.values.at("dx"), rel, what + " dx");
      expect_close(g[1].to_vector<double>(), c.values.at("dw"), rel, what + " dw");
    }
  }
  EXPECT_EQ(ops_seen.size(), 3u);
}

// ---- bfloat16 --------------------------------------------------------------------------------

// |got - want| <= 2^-8·|want| + 2·K·2^-24·S per element (dnn_bf16_test.cc's bound), with want and
// S the float64 op on the inputs and on their absolute values, K the longest reduction.
void expect_bf16_close(const Tensor& got, const Tensor& want, const Tensor& abs_want, double k,
                       const std::string& what) {
  const auto g = got.to_vector<double>(), w = want.to_vector<double>(), s = abs_want.to_vector<double>();
  ASSERT_EQ(g.size(), w.size()) << what;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double bound = std::abs(w[i]) / 256 + 2 * k * s[i] / 16777216.0 + 1e-30;
    ASSERT_LE(std::abs(g[i] - w[i]), bound) << what << " [" << i << "] got " << g[i] << " want " << w[i];
  }
}

TEST_F(ConvVariantsTest, Bfloat16WithinOneRoundingOnBothPaths) {
  const bool saved = ops::cpu::onednn_bf16_enabled();
  const auto bf16 = [](const Tensor& t) { return ops::cast(t, DType::kBFloat16); };
  const auto widen = [](const Tensor& t) { return ops::cast(t, DType::kFloat64); };
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&, const Tensor&)> f;
    Dims x, w;
    double k;  // reduction length bound (taps × channels × batch-positions for the filter gradient)
  };
  const ops::Conv2dOptions o{{1, 1}, ops::Padding::kSame};
  const std::vector<Case> cases{
      {"grouped",
       [o](const Tensor& a, const Tensor& b) { return ops::conv2d(a, b, o); },
       {2, 8, 8, 16},
       {3, 3, 4, 16},
       2 * 8 * 8 * 9 * 4},
      {"depthwise",
       [o](const Tensor& a, const Tensor& b) { return ops::depthwise_conv2d(a, b, o); },
       {2, 8, 8, 16},
       {3, 3, 16, 2},
       2 * 8 * 8 * 9},
      {"conv1d",
       [](const Tensor& a, const Tensor& b) { return ops::conv1d(a, b, 2, ops::Padding::kSame); },
       {2, 16, 8},
       {3, 8, 8},
       2 * 8 * 3 * 8}};
  for (bool onednn : {true, false}) {
    ops::cpu::set_onednn_bf16_enabled(onednn);
    for (const Case& c : cases) {
      const Tensor x = bf16(random_tensor(Shape(c.x), 101)), w = bf16(random_tensor(Shape(c.w), 102));
      ops::GradientTape tape;
      tape.watch(x);
      tape.watch(w);
      const Tensor y = c.f(x, w);
      ASSERT_EQ(y.dtype(), DType::kBFloat16);
      const Tensor dy = bf16(random_tensor(y.shape(), 103));
      const std::vector<Tensor> g = tape.gradient(y, {x, w}, dy);
      // float64 on the same (exactly widened) values, and on their absolute values for S.
      const Tensor x64 = widen(x), w64 = widen(w), dy64 = widen(dy);
      ops::GradientTape t64, tabs;
      t64.watch(x64);
      t64.watch(w64);
      const Tensor want = c.f(x64, w64);
      const std::vector<Tensor> want_g = t64.gradient(want, {x64, w64}, dy64);
      const Tensor ax = ops::abs(x64), aw = ops::abs(w64);
      tabs.watch(ax);
      tabs.watch(aw);
      const Tensor s = c.f(ax, aw);
      const std::vector<Tensor> s_g = tabs.gradient(s, {ax, aw}, ops::abs(dy64));
      const std::string what = std::string(c.name) + (onednn ? " onednn-path " : " fallback ") + ops::cpu::bf16_path();
      expect_bf16_close(y, want, s, c.k, what + " forward");
      expect_bf16_close(g[0], want_g[0], s_g[0], c.k, what + " dx");
      expect_bf16_close(g[1], want_g[1], s_g[1], c.k, what + " dw");
    }
  }
  ops::cpu::set_onednn_bf16_enabled(saved);
}

// ---- errors ----------------------------------------------------------------------------------

Tensor zeros(const Dims& d) { return Tensor::zeros(Shape(d), DType::kFloat32, "/CPU:0"); }

TEST_F(ConvVariantsTest, BadShapesAndGroupsRaiseInvalidArgument) {
  EXPECT_THROW_WITH(ops::conv2d(zeros({1, 4, 4, 6}), zeros({3, 3, 4, 4})), InvalidArgumentError, "Conv2D",
                    "input depth 6", "multiple of the filters' input depth 4", "(1, 4, 4, 6)", "(3, 3, 4, 4)");
  EXPECT_THROW_WITH(ops::conv2d(zeros({1, 4, 4, 4}), zeros({3, 3, 2, 5})), InvalidArgumentError, "Conv2D",
                    "output depth 5", "number of groups 2");
  EXPECT_THROW_WITH(ops::conv2d(zeros({1, 4, 4, 4}), zeros({3, 3, 2, 4}), {{1, 1}, ops::Padding::kValid, {1, 1}, 4}),
                    InvalidArgumentError, "input depth 4 must be groups (4) x the filters' input depth 2");
  EXPECT_THROW_WITH(ops::conv2d(zeros({1, 4, 4, 4}), zeros({3, 3, 2, 4}), {{1, 1}, ops::Padding::kValid, {1, 1}, -1}),
                    InvalidArgumentError, "groups must be >= 0");
  EXPECT_THROW_WITH(
      ops::fused_conv2d(zeros({1, 4, 4, 4}), zeros({3, 3, 2, 3}), zeros({3}), ops::FusedActivation::kRelu),
      InvalidArgumentError, "FusedConv2D", "number of groups 2");
  EXPECT_THROW_WITH(ops::depthwise_conv2d(zeros({1, 4, 4, 3}), zeros({3, 3, 4, 1})), InvalidArgumentError,
                    "DepthwiseConv2dNative", "input depth 3", "filter's in-channels 4");
  EXPECT_THROW_WITH(ops::depthwise_conv2d(zeros({1, 4, 4, 3}), zeros({3, 3, 3})), InvalidArgumentError,
                    "DepthwiseConv2dNative", "[kh, kw, in_channels, multiplier]");
  EXPECT_THROW_WITH(
      ops::depthwise_conv2d(zeros({1, 4, 4, 3}), zeros({3, 3, 3, 1}), {{1, 1}, ops::Padding::kValid, {1, 1}, 2}),
      InvalidArgumentError, "groups must be 0 or the input depth 3");
  EXPECT_THROW_WITH(ops::conv1d(zeros({1, 4, 4, 3}), zeros({3, 3, 1})), InvalidArgumentError, "conv1d",
                    "[batch, width, channels]");
  EXPECT_THROW_WITH(ops::conv1d(zeros({1, 4, 3}), zeros({3, 3, 1, 1})), InvalidArgumentError, "conv1d",
                    "[width, in_channels, out_channels]");
  EXPECT_THROW_WITH(ops::conv1d(zeros({1, 4, 3}), zeros({3, 3, 1}), 0), InvalidArgumentError, "stride");
  EXPECT_THROW_WITH(ops::conv1d(zeros({1, 2, 3}), zeros({3, 3, 1})), InvalidArgumentError, "does not fit");
}

TEST_F(ConvVariantsTest, ShapesOfEveryVariant) {
  EXPECT_EQ(ops::conv2d(zeros({2, 5, 5, 6}), zeros({3, 3, 3, 4})).shape(), Shape({2, 3, 3, 4}));
  EXPECT_EQ(ops::depthwise_conv2d(zeros({2, 6, 6, 3}), zeros({3, 3, 3, 2}), {{2, 2}, ops::Padding::kSame}).shape(),
            Shape({2, 3, 3, 6}));
  EXPECT_EQ(ops::conv1d(zeros({2, 9, 4}), zeros({3, 4, 5}), 2, ops::Padding::kSame).shape(), Shape({2, 5, 5}));
  EXPECT_EQ(ops::conv1d(zeros({2, 10, 6}), zeros({3, 3, 4}), 1, ops::Padding::kValid, 2).shape(), Shape({2, 6, 4}));
  // An empty batch: empty outputs; the gradients of the filter are zeros.
  const Tensor x = zeros({0, 5, 5, 4}), w = Tensor::ones(Shape{3, 3, 2, 4}, DType::kFloat32, "/CPU:0");
  ops::GradientTape tape;
  tape.watch(w);
  const Tensor y = ops::conv2d(x, w, {{1, 1}, ops::Padding::kSame});
  EXPECT_EQ(y.shape(), Shape({0, 5, 5, 4}));
  EXPECT_EQ(tape.gradient(y, {w})[0].to_vector<double>(), std::vector<double>(72, 0.0));
}

}  // namespace
}  // namespace chorus
