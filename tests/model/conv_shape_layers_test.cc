// Conv2D with groups, DepthwiseConv2D, Conv1D (model/conv_layers.h) and the shape layers
// ZeroPadding2D, GlobalAveragePooling2D, GlobalMaxPooling2D, Reshape, Permute (model/shape_layers.h):
// - against tf_keras 2.21 (tests/model/keras_conv_shape_layers.py, run here in the interop Python)
//   with the same closed-form inputs and weights, in float64 and float32;
// - compute_output_shape against the shape of what the layer returns, for every case;
// - values checked here without TF (padding positions, Permute, Reshape with -1, the pools);
// - weights: Keras's names and shapes; gradients reach them;
// - bad arguments: InvalidArgumentError with the numbers;
// - a model of these layers under mixed_bfloat16 against the same model in float32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/core/interop_python.h"
#include "tests/core/test_util.h"
#include <chorus/model/conv_layers.h>
#include <chorus/model/layers.h>
#include <chorus/model/mixed_precision.h>
#include <chorus/model/shape_layers.h>
#include <chorus/ops/ops.h>

namespace chorus {
namespace {

using Dims = std::vector<std::int64_t>;

// Closed forms over the flat index, as in keras_conv_shape_layers.py.
Tensor closed(const Shape& shape, double a, double b, double scale, bool cosine, DType dtype = DType::kFloat64) {
  std::vector<double> v(static_cast<std::size_t>(shape.num_elements()));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double t = a * static_cast<double>(i) + b;
    v[i] = scale * (cosine ? std::cos(t) : std::sin(t));
  }
  return ops::cast(Tensor::from_vector(v, shape, "/CPU:0"), dtype);
}
Tensor input(const Dims& d, DType dtype = DType::kFloat64) { return closed(Shape(d), 0.913, 0.3, 1.0, false, dtype); }
const initializers::Initializer kKernel = [](const Shape& s, DType dtype) {
  return closed(s, 1.37, 0.1, 0.5, true, dtype);
};
const initializers::Initializer kBias = [](const Shape& s, DType dtype) {
  return closed(s, 0.7, 0.0, 0.1, false, dtype);
};

struct LayerCase {
  std::string name;
  Dims x;
  std::function<layers::LayerPtr()> make;
};

// The cases of keras_conv_shape_layers.py, by name.
std::vector<LayerCase> cases() {
  using namespace layers;  // NOLINT
  return {
      {"conv2d_groups2_same_relu",
       {2, 6, 5, 4},
       [] {
         return Conv2D(6, {3, 3}, {1, 1}, "same", "relu", {1, 1}, true, kKernel, kBias, "", 2);
       }},
      {"conv2d_groups4_valid_stride2x1",
       {1, 7, 6, 4},
       [] {
         return Conv2D(4, {3, 2}, {2, 1}, "valid", "", {1, 1}, false, kKernel, kBias, "", 4);
       }},
      {"depthwise_m2_stride2_same_tanh",
       {2, 6, 6, 3},
       [] { return DepthwiseConv2D(3, 2, "same", 2, "tanh", true, 1, kKernel, kBias); }},
      {"depthwise_dilated_valid",
       {1, 6, 5, 4},
       [] { return DepthwiseConv2D(2, 1, "valid", 1, "", true, 2, kKernel, kBias); }},
      {"conv1d_causal_dilated_relu",
       {2, 9, 4},
       [] { return Conv1D(5, 3, 1, "causal", "relu", true, 2, 1, kKernel, kBias); }},
      {"conv1d_same_stride2_groups2",
       {2, 9, 4},
       [] { return Conv1D(6, 3, 2, "same", "", true, 1, 2, kKernel, kBias); }},
      {"zero_padding_int", {1, 2, 3, 2}, [] { return ZeroPadding2D(1); }},
      {"zero_padding_pair",
       {1, 2, 3, 2},
       [] {
         return ZeroPadding2D({1, 2});
       }},
      {"zero_padding_tuples",
       {1, 2, 3, 2},
       [] {
         return ZeroPadding2D({1, 0}, {2, 3});
       }},
      {"global_average", {2, 3, 4, 5}, [] { return GlobalAveragePooling2D(); }},
      {"global_average_keepdims", {2, 3, 4, 5}, [] { return GlobalAveragePooling2D(true); }},
      {"global_max", {2, 3, 4, 5}, [] { return GlobalMaxPooling2D(); }},
      {"global_max_keepdims", {2, 3, 4, 5}, [] { return GlobalMaxPooling2D(true); }},
      {"reshape_inferred",
       {2, 3, 4, 2},
       [] {
         return Reshape({-1, 4});
       }},
      {"reshape_inferred_middle",
       {2, 3, 4, 2},
       [] {
         return Reshape({2, -1, 3});
       }},
      {"reshape_full",
       {2, 3, 4, 2},
       [] {
         return Reshape({4, 3, 2});
       }},
      {"permute_312",
       {2, 3, 4, 5},
       [] {
         return Permute({3, 1, 2});
       }},
      {"permute_21",
       {2, 3, 4},
       [] {
         return Permute({2, 1});
       }},
  };
}

class ConvShapeLayersTest : public testing::CoreTest {
 protected:
  void TearDown() override {
    mixed_precision::set_global_policy("float32");
    testing::CoreTest::TearDown();
  }
};

// ---- against tf_keras ------------------------------------------------------------------------

struct KerasCase {
  Dims shape;
  std::vector<double> y;
};

std::map<std::string, KerasCase> run_keras(const std::string& python) {
  const std::string cmd =
      "'" + python + "' '" + std::string(CHORUS_SOURCE_ROOT) + "/tests/model/keras_conv_shape_layers.py' 2>/dev/null";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr);
  std::string text;
  char buf[65536];
  while (p && std::fgets(buf, sizeof buf, p)) text += buf;
  EXPECT_EQ(p ? ::pclose(p) : -1, 0) << cmd;
  std::map<std::string, KerasCase> out;
  std::istringstream lines(text);
  std::string line, current;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    std::string tag;
    in >> tag;
    if (tag == "case") {
      std::string dims, part;
      in >> current >> dims;
      std::stringstream ds(dims);
      while (std::getline(ds, part, ',')) out[current].shape.push_back(std::stoll(part));
    } else if (tag == "y") {
      std::string v;
      while (in >> v) out[current].y.push_back(std::strtod(v.c_str(), nullptr));
    }
  }
  return out;
}

TEST_F(ConvShapeLayersTest, KerasInteropSameOutputsAsTfKeras) {
  std::string python;
  CHORUS_REQUIRE_INTEROP_PYTHON(python, "tensorflow, tf_keras");
  const auto keras = run_keras(python);
  ASSERT_EQ(keras.size(), cases().size()) << "the script printed " << keras.size() << " cases";
  for (const char* policy : {"float64", "float32"}) {
    mixed_precision::set_global_policy(policy);
    const double tol = std::string(policy) == "float64" ? 1e-12 : 2e-6;
    for (const LayerCase& c : cases()) {
      ASSERT_TRUE(keras.count(c.name)) << c.name;
      const KerasCase& want = keras.at(c.name);
      auto layer = c.make();
      const Tensor y = (*layer)(input(c.x));
      ASSERT_EQ(y.shape(), Shape(want.shape)) << c.name;
      const auto got = ops::cast(y, DType::kFloat64).to_vector<double>();
      ASSERT_EQ(got.size(), want.y.size()) << c.name;
      for (std::size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want.y[i], tol * (1 + std::abs(want.y[i]))) << c.name << " " << policy << " [" << i << "]";
    }
  }
}

// ---- shapes, values, weights -----------------------------------------------------------------

TEST_F(ConvShapeLayersTest, ComputeOutputShapeIsTheShapeOfTheOutput) {
  for (const LayerCase& c : cases()) {
    auto layer = c.make();
    const Tensor y = (*layer)(input(c.x, DType::kFloat32));
    EXPECT_EQ(layer->compute_output_shape(Shape(c.x)), y.shape()) << c.name;
    // Another batch size: the same per-example shape.
    Dims other = c.x;
    other[0] = 5;
    Dims want = y.shape().dims();
    want[0] = 5;
    EXPECT_EQ(layer->compute_output_shape(Shape(other)), Shape(want)) << c.name;
  }
}

TEST_F(ConvShapeLayersTest, ClassNamesAreKeras) {
  const std::map<std::string, std::string> want{{"conv2d_groups2_same_relu", "Conv2D"},
                                                {"depthwise_dilated_valid", "DepthwiseConv2D"},
                                                {"conv1d_causal_dilated_relu", "Conv1D"},
                                                {"zero_padding_int", "ZeroPadding2D"},
                                                {"global_average", "GlobalAveragePooling2D"},
                                                {"global_max", "GlobalMaxPooling2D"},
                                                {"reshape_full", "Reshape"},
                                                {"permute_21", "Permute"}};
  for (const LayerCase& c : cases())
    if (want.count(c.name)) EXPECT_EQ(c.make()->class_name(), want.at(c.name));
}

std::vector<double> values(const Tensor& t) { return ops::cast(t, DType::kFloat64).to_vector<double>(); }

TEST_F(ConvShapeLayersTest, ShapeLayerValuesByHand) {
  const Tensor x = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, Shape{1, 2, 3, 1}, "/CPU:0");
  // ((1, 0), (2, 1)): one row above, two columns left, one right.
  const Tensor p = (*layers::ZeroPadding2D({1, 0}, {2, 1}))(x);
  EXPECT_EQ(p.shape(), Shape({1, 3, 6, 1}));
  EXPECT_EQ(values(p), (std::vector<double>{0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 0, 4, 5, 6, 0}));
  EXPECT_EQ(values((*layers::GlobalAveragePooling2D())(x)), std::vector<double>{3.5});
  EXPECT_EQ(values((*layers::GlobalMaxPooling2D(true))(x)), std::vector<double>{6});
  // Permute((2, 1)) on [1, 2, 3] is the transpose of each example.
  const Tensor m = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, Shape{1, 2, 3}, "/CPU:0");
  const Tensor t = (*layers::Permute({2, 1}))(m);
  EXPECT_EQ(t.shape(), Shape({1, 3, 2}));
  EXPECT_EQ(values(t), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  // Reshape keeps the row-major order; -1 is inferred per example, the batch dim is kept.
  const Tensor r = (*layers::Reshape({-1}))(Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, Shape{2, 3, 1}, "/CPU:0"));
  EXPECT_EQ(r.shape(), Shape({2, 3}));
  EXPECT_EQ(values(r), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  // NaN propagates through both pools (TF's reduce_mean / reduce_max).
  const Tensor n = Tensor::from_vector<double>({1, NAN, 3, 4}, Shape{1, 2, 2, 1}, "/CPU:0");
  EXPECT_TRUE(std::isnan(values((*layers::GlobalAveragePooling2D())(n))[0]));
  EXPECT_TRUE(std::isnan(values((*layers::GlobalMaxPooling2D())(n))[0]));
}

std::map<std::string, Shape> weight_shapes(const layers::Layer& layer) {
  std::map<std::string, Shape> out;
  const auto children = layer.trackable_children();
  const auto weights = layer.weights();
  EXPECT_EQ(children.size(), weights.size());
  for (std::size_t i = 0; i < children.size() && i < weights.size(); ++i) out[children[i].name] = weights[i].shape();
  return out;
}

TEST_F(ConvShapeLayersTest, WeightsHaveKerasNamesAndShapes) {
  auto conv = layers::Conv2D(6, {3, 3}, {1, 1}, "same", "", {1, 1}, true, kKernel, kBias, "", 3);
  (*conv)(input({1, 5, 5, 9}, DType::kFloat32));
  EXPECT_EQ(weight_shapes(*conv), (std::map<std::string, Shape>{{"kernel", Shape{3, 3, 3, 6}}, {"bias", Shape{6}}}));
  auto dw = layers::DepthwiseConv2D(3, 1, "same", 2);
  (*dw)(input({1, 5, 5, 4}, DType::kFloat32));
  EXPECT_EQ(weight_shapes(*dw),
            (std::map<std::string, Shape>{{"depthwise_kernel", Shape{3, 3, 4, 2}}, {"bias", Shape{8}}}));
  auto c1 = layers::Conv1D(6, 5, 1, "valid", "", false, 1, 2);
  (*c1)(input({1, 9, 4}, DType::kFloat32));
  EXPECT_EQ(weight_shapes(*c1), (std::map<std::string, Shape>{{"kernel", Shape{5, 2, 6}}}));
  for (auto layer :
       {layers::ZeroPadding2D(), layers::GlobalAveragePooling2D(), layers::Reshape({-1}), layers::Permute({1})})
    EXPECT_FALSE(layer->has_weights()) << layer->class_name();
}

TEST_F(ConvShapeLayersTest, GradientsReachTheWeights) {
  auto dw = layers::DepthwiseConv2D(3, 1, "same", 2, "tanh");
  auto c1 = layers::Conv1D(4, 3, 1, "causal", "", true, 1, 2);
  const Tensor x = input({2, 6, 6, 4}, DType::kFloat32), s = input({2, 7, 4}, DType::kFloat32);
  ops::GradientTape tape;
  const Tensor loss = ops::add(ops::reduce_sum(ops::square((*dw)(x))), ops::reduce_sum(ops::square((*c1)(s))));
  std::vector<Variable> vars = dw->trainable_weights();
  for (const Variable& v : c1->trainable_weights()) vars.push_back(v);
  const std::vector<Tensor> g = tape.gradient(loss, vars);
  ASSERT_EQ(g.size(), 4u);
  for (std::size_t i = 0; i < g.size(); ++i) {
    ASSERT_TRUE(g[i].defined()) << vars[i].name();
    EXPECT_EQ(g[i].shape(), vars[i].shape()) << vars[i].name();
    double norm = 0;
    for (double v : values(g[i])) norm += v * v;
    EXPECT_GT(norm, 0) << vars[i].name();
  }
  // Causal: output step t does not depend on input steps after t.
  ops::GradientTape t2;
  t2.watch(s);
  const Tensor y = (*c1)(s);
  const Tensor first = ops::slice(y, {0, 0, 0}, {1, 1, -1});  // example 0, step 0
  const auto ds = values(t2.gradient(first, {s})[0]);
  for (std::size_t i = 4; i < 7 * 4; ++i) EXPECT_EQ(ds[i], 0.0) << "input element " << i;
}

// ---- errors ----------------------------------------------------------------------------------

TEST_F(ConvShapeLayersTest, BadArgumentsRaiseInvalidArgument) {
  using namespace layers;  // NOLINT
  EXPECT_THROW_WITH(Conv2D(6, {3, 3}, {1, 1}, "same", "", {1, 1}, true, kKernel, kBias, "", 4), InvalidArgumentError,
                    "Conv2D", "filters=6", "groups=4");
  EXPECT_THROW_WITH((*Conv2D(6, {3, 3}, {1, 1}, "same", "", {1, 1}, true, kKernel, kBias, "", 3))(input({1, 5, 5, 4})),
                    InvalidArgumentError, "Conv2D", "4 channels", "groups=3");
  EXPECT_THROW_WITH(DepthwiseConv2D(3, 1, "valid", 0), InvalidArgumentError, "DepthwiseConv2D", "depth_multiplier 0");
  EXPECT_THROW_WITH((*DepthwiseConv2D(3))(input({1, 5, 5})), InvalidArgumentError, "DepthwiseConv2D", "(1, 5, 5)");
  EXPECT_THROW_WITH((*DepthwiseConv2D(7))(input({1, 5, 5, 2})), InvalidArgumentError, "DepthwiseConv2D", "does not fit",
                    "(1, 5, 5, 2)");
  EXPECT_THROW_WITH(Conv1D(5, 3, 1, "valid", "", true, 1, 2), InvalidArgumentError, "Conv1D", "filters=5", "groups=2");
  EXPECT_THROW_WITH(Conv1D(4, 3, 1, "full"), InvalidArgumentError, "Conv1D", "'full'", "causal");
  EXPECT_THROW_WITH((*Conv1D(4, 3, 1, "valid", "", true, 1, 2))(input({1, 9, 3})), InvalidArgumentError, "Conv1D",
                    "3 channels", "groups=2");
  EXPECT_THROW_WITH((*Conv1D(4, 3))(input({1, 5, 5, 2})), InvalidArgumentError, "Conv1D", "[batch, steps, channels]");
  EXPECT_THROW_WITH(ZeroPadding2D({-1, 0}, {0, 0}), InvalidArgumentError, "ZeroPadding2D", ">= 0", "((-1, 0), (0, 0))");
  EXPECT_THROW_WITH((*ZeroPadding2D())(input({2, 3, 4})), InvalidArgumentError, "ZeroPadding2D", "rank 4", "(2, 3, 4)");
  EXPECT_THROW_WITH((*GlobalAveragePooling2D())(input({2, 3, 4})), InvalidArgumentError, "GlobalAveragePooling2D",
                    "rank 4");
  EXPECT_THROW_WITH(Reshape({-1, 2, -1}), InvalidArgumentError, "Reshape", "at most one -1", "(-1, 2, -1)");
  EXPECT_THROW_WITH(Reshape({-2, 2}), InvalidArgumentError, "Reshape", ">= 0 or -1");
  // The element count names both shapes.
  EXPECT_THROW_WITH((*Reshape({5, 5}))(input({2, 3, 4})), InvalidArgumentError, "Reshape", "input shape (2, 3, 4)",
                    "12 elements per example", "target shape (5, 5)");
  EXPECT_THROW_WITH((*Reshape({5, -1}))(input({2, 3, 4})), InvalidArgumentError, "(2, 3, 4)", "(5, -1)");
  EXPECT_THROW_WITH(Permute({0, 1}), InvalidArgumentError, "Permute", "permutation of 1..k", "(0, 1)");
  EXPECT_THROW_WITH(Permute({1, 1}), InvalidArgumentError, "Permute", "(1, 1)");
  EXPECT_THROW_WITH(Permute({}), InvalidArgumentError, "Permute");
  EXPECT_THROW_WITH((*Permute({2, 1}))(input({2, 3, 4, 5})), InvalidArgumentError, "Permute", "(2, 1)", "(2, 3, 4, 5)");
}

// ---- mixed precision -------------------------------------------------------------------------

// The layers under mixed_bfloat16: bfloat16 outputs, float32 variables; the same model in float32
// with the same weights agrees within bfloat16 rounding.
TEST_F(ConvShapeLayersTest, MixedBfloat16AgreesWithFloat32) {
  auto make = [] {
    using namespace layers;  // NOLINT
    return std::vector<LayerPtr>{Conv2D(8, {3, 3}, {1, 1}, "same", "relu", {1, 1}, true, kKernel, kBias, "", 2),
                                 ZeroPadding2D(1),
                                 DepthwiseConv2D(3, 2, "valid", 2, "", true, 1, kKernel, kBias),
                                 Permute({2, 1, 3}),
                                 Reshape({-1, 16}),
                                 Conv1D(4, 2, 1, "causal", "tanh", true, 1, 2, kKernel, kBias),
                                 Reshape({2, -1, 4}),
                                 GlobalMaxPooling2D(true),
                                 GlobalAveragePooling2D()};
  };
  const Tensor x = input({2, 8, 8, 4}, DType::kFloat32);
  std::vector<Tensor> outputs;
  for (const char* policy : {"float32", "mixed_bfloat16"}) {
    mixed_precision::set_global_policy(policy);
    const auto model = make();
    mixed_precision::set_global_policy("float32");
    Tensor h = x;
    for (const auto& layer : model) {
      h = (*layer)(h);
      if (std::string(policy) == "mixed_bfloat16") {
        EXPECT_EQ(h.dtype(), DType::kBFloat16) << layer->class_name();
        for (const Variable& v : layer->weights()) EXPECT_EQ(v.dtype(), DType::kFloat32) << v.name();
      }
    }
    outputs.push_back(h);
  }
  ASSERT_EQ(outputs[1].shape(), outputs[0].shape());
  const auto want = values(outputs[0]), got = values(outputs[1]);
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 0.05 * (1 + std::abs(want[i]))) << i;
}

}  // namespace
}  // namespace chorus
