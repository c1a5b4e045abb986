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
#include "tests/ops/nan_cases.h"
#include <chorus/ops/cpu/dnn.h>
#include <chorus/ops/ops.h>

namespace chorus {
namespace {
using ops::compute_output_size;
using ops::Conv2dGeometry;
using ops::Padding;
using namespace nan_cases;  // NOLINT: the shared cases

class NanTest : public testing::CoreTest {};

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
