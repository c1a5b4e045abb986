// Keras's functional API (model/functional.h, issue 43 item 1): Input, layers called on symbolic
// tensors, Functional models of several inputs and outputs, shared layers, nested models (a Model
// is a Layer), layers that own layers, the subclass route — and the errors a wrong graph raises.
// Keras's layer order and checkpoint keys are checked against tf_keras in keras_interop_test.cc.
#include <gtest/gtest.h>

#include "tests/core/test_util.h"
#include "tests/ops/gradient_check.h"
#include <chorus/core/config.h>
#include <chorus/core/runtime.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/model/functional.h>
#include <chorus/model/layers.h>
#include <chorus/model/losses.h>
#include <chorus/model/merge_layers.h>
#include <chorus/model/mixed_precision.h>
#include <chorus/ops/ops.h>
#include <chorus/ops/tape.h>
#include <chorus/optimizer/sgd.h>

namespace chorus {
namespace {

using layers::Input;
using layers::KerasTensor;

std::vector<float> vec(const Tensor& t) { return t.to_vector<float>(); }
std::vector<std::vector<float>> values(const std::vector<Variable>& vars) {
  std::vector<std::vector<float>> out;
  for (const Variable& v : vars) out.push_back(v.read_value().to_vector<float>());
  return out;
}

Tensor rand(std::vector<std::int64_t> shape, std::int64_t seed) {
  return ops::stateless_random_uniform(Shape(shape), {seed, seed}, {.minval = -1, .maxval = 1});
}

TEST(Functional, AChainComputesWhatItsLayersCompute) {
  chorus::internal::reset_runtime_for_testing();
  auto x = Input({4}, DType::kFloat32, "x");
  EXPECT_EQ(x.shape_string(), "(None, 4)");
  auto d1 = layers::Dense(6, "relu", true, initializers::glorot_uniform(1));
  auto d2 = layers::Dense(3, "", true, initializers::glorot_uniform(2));
  KerasTensor h = (*d1)(x);
  EXPECT_EQ(h.shape_string(), "(None, 6)");
  EXPECT_TRUE(d1->built()) << "a symbolic call builds the layer";
  model::Functional m({x}, {(*d2)(h)}, "chain");
  EXPECT_EQ(m.class_name(), "Functional");
  ASSERT_EQ(m.layers().size(), 3u) << "the InputLayer, then the two Dense";
  EXPECT_EQ(m.layers()[0]->class_name(), "InputLayer");
  EXPECT_EQ(m.trainable_variables().size(), 4u);
  const Tensor in = rand({5, 4}, 3);
  EXPECT_EQ(vec(m(in)), vec((*d2)((*d1)(in)))) << "the model runs the recorded calls";
  EXPECT_EQ(m(in).shape(), Shape({5, 3})) << "any batch size";
  const std::string summary = m.summary();
  EXPECT_NE(summary.find("(None, 6)"), std::string::npos) << summary;
  EXPECT_NE(summary.find("Total params: 51"), std::string::npos) << summary;  // 4·6+6 + 6·3+3
  const summary::GraphDef g = m.graph_def();
  ASSERT_EQ(g.node.size(), 3u);
  EXPECT_EQ(g.node[0].op, "Placeholder");
  EXPECT_EQ(g.node[2].input, std::vector<std::string>{g.node[1].name});
}

// Keras 2's logs of a model with several outputs: loss (the sum), <output>_loss per output, and
// each compiled metric per output, <output>_<metric>, named by the output layers. Each per-output
// value equals what the same output's predictions give on the data.
TEST(Functional, MetricsOfSeveralOutputsAreNamedPerOutputAsKeras) {
  chorus::internal::reset_runtime_for_testing();
  auto x = Input({4}, DType::kFloat32, "x");
  KerasTensor h = (*layers::Dense(6, "tanh", true, initializers::glorot_uniform(21)))(x);
  KerasTensor a = (*layers::Dense(3, "", true, initializers::glorot_uniform(22), initializers::zeros(), "head_a"))(h);
  KerasTensor b = (*layers::Dense(3, "", true, initializers::glorot_uniform(23), initializers::zeros(), "head_b"))(h);
  model::Functional m({x}, {a, b}, "two_heads");
  EXPECT_EQ(m.output_name(0), "head_a");
  EXPECT_EQ(m.output_name(1), "head_b");
  const Tensor xs = rand({24, 4}, 24);
  const Tensor ya =
      Tensor::from_vector<std::int32_t>({0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 2, 1, 0, 2, 1, 0, 2, 1, 0, 2, 1, 0}, {24});
  const Tensor yb =
      Tensor::from_vector<std::int32_t>({1, 1, 0, 0, 2, 2, 1, 1, 0, 0, 2, 2, 1, 1, 0, 0, 2, 2, 1, 1, 0, 0, 2, 2}, {24});
  auto ds = data::Dataset::from_tensor_slices({xs, ya, yb}).batch(24);
  m.compile(std::make_shared<optimizers::SGD>(0.1), std::make_shared<losses::SparseCategoricalCrossentropy>(true),
            {"accuracy"});
  const auto logs = m.evaluate(ds);
  std::vector<std::string> keys;
  for (const auto& [k, v] : logs) keys.push_back(k);
  EXPECT_EQ(keys,
            (std::vector<std::string>{"head_a_accuracy", "head_a_loss", "head_b_accuracy", "head_b_loss", "loss"}));
  EXPECT_NEAR(logs.at("head_a_loss") + logs.at("head_b_loss"), logs.at("loss"), 1e-5);
  // Each head's accuracy and loss from its own predictions.
  const std::vector<Tensor> preds = m(std::vector<Tensor>{xs});
  for (int o = 0; o < 2; ++o) {
    const std::string head = o == 0 ? "head_a" : "head_b";
    const std::vector<float> p = vec(preds[static_cast<std::size_t>(o)]);
    const std::vector<std::int32_t> y = (o == 0 ? ya : yb).to_vector<std::int32_t>();
    double correct = 0, loss = 0;
    for (int i = 0; i < 24; ++i) {
      const float* row = p.data() + i * 3;
      const int argmax = static_cast<int>(std::max_element(row, row + 3) - row);
      correct += argmax == y[static_cast<std::size_t>(i)] ? 1 : 0;
      const double mx = *std::max_element(row, row + 3);
      double z = 0;
      for (int c = 0; c < 3; ++c) z += std::exp(row[c] - mx);
      loss += -(row[y[static_cast<std::size_t>(i)]] - mx - std::log(z)) / 24.0;
    }
    EXPECT_NEAR(logs.at(head + "_accuracy"), correct / 24.0, 1e-9) << head;
    EXPECT_NEAR(logs.at(head + "_loss"), loss, 1e-5) << head;
  }
  const auto hist = m.fit(ds, {.epochs = 2, .verbose = 0});
  for (const char* k : {"loss", "head_a_loss", "head_b_loss", "head_a_accuracy", "head_b_accuracy"})
    EXPECT_EQ(hist.history.at(k).size(), 2u) << k;
}

TEST(Functional, SeveralInputsAndOutputsASharedLayerAndFit) {
  chorus::internal::reset_runtime_for_testing();
  auto a = Input({4}, DType::kFloat32, "a");
  auto b = Input({4}, DType::kFloat32, "b");
  auto shared = layers::Dense(5, "tanh", true, initializers::glorot_uniform(3));
  KerasTensor ha = (*shared)(a), hb = (*shared)(b);
  KerasTensor sum = (*layers::Add())({ha, hb});
  KerasTensor cat = (*layers::Concatenate())({ha, hb});
  EXPECT_EQ(cat.shape_string(), "(None, 10)");
  KerasTensor out1 = (*layers::Dense(2, "", true, initializers::glorot_uniform(4)))(sum);
  KerasTensor out2 = (*layers::Dense(1, "", true, initializers::glorot_uniform(5)))(cat);
  model::Functional m({a, b}, {out1, out2}, "two_heads");
  EXPECT_EQ(m.num_inputs(), 2u);
  EXPECT_EQ(m.num_outputs(), 2u);
  EXPECT_EQ(m.trainable_variables().size(), 6u) << "the shared Dense counts once";
  const Tensor xa = rand({4, 4}, 6), xb = rand({4, 4}, 7);
  std::vector<Tensor> ys = m({xa, xb});
  ASSERT_EQ(ys.size(), 2u);
  EXPECT_EQ(ys[0].shape(), Shape({4, 2}));
  EXPECT_EQ(ys[1].shape(), Shape({4, 1}));
  // Both inputs go through the same weights: swapping a and b leaves out1 (a sum) unchanged.
  std::vector<Tensor> swapped = m({xb, xa});
  const auto y0 = vec(ys[0]), s0 = vec(swapped[0]);
  for (std::size_t i = 0; i < y0.size(); ++i) EXPECT_NEAR(y0[i], s0[i], 1e-6f);

  // fit reads (a, b, y1, y2) and sums the two losses; the loss falls.
  const Tensor y1 = rand({32, 2}, 8), y2 = rand({32, 1}, 9);
  auto ds = data::Dataset::from_tensor_slices({rand({32, 4}, 10), rand({32, 4}, 11), y1, y2}).batch(8);
  m.compile(std::make_shared<optimizers::SGD>(0.1), std::make_shared<losses::MeanSquaredError>());
  const auto h = m.fit(ds, {.epochs = 8, .verbose = 0});
  EXPECT_LT(h.history.at("loss").back(), h.history.at("loss").front());
  EXPECT_EQ(m.evaluate(ds).count("loss"), 1u);
  // A dataset of (a, b, y1) is one component short: the message says what fit expects.
  auto short_ds = data::Dataset::from_tensor_slices({rand({8, 4}, 1), rand({8, 4}, 2), rand({8, 2}, 3)}).batch(8);
  EXPECT_THROW_WITH(m.fit(short_ds, {.verbose = 0}), InvalidArgumentError, "(x_1, ..., x_2, y_1, ..., y_2)");
}

TEST(Functional, UnderMirroredStrategyTrainsAsOnOneDevice) {
  std::vector<std::vector<float>> got[2];
  for (const int replicas : {1, 2}) {
    chorus::testing::make_cpus(replicas);
    auto strategy = std::make_unique<distribute::MirroredStrategy>(chorus::testing::cpus(replicas));
    auto scope = strategy->scope();
    auto x = Input({4});
    KerasTensor h = (*layers::Dense(8, "relu", true, initializers::glorot_uniform(1)))(x);
    KerasTensor r = (*layers::Add())({h, (*layers::Dense(8, "", true, initializers::glorot_uniform(2)))(h)});
    model::Functional m({x}, {(*layers::Dense(2, "", true, initializers::glorot_uniform(3)))(r)});
    m.compile(std::make_shared<optimizers::SGD>(0.05), std::make_shared<losses::MeanSquaredError>());
    auto ds = data::Dataset::from_tensor_slices({rand({32, 4}, 4), rand({32, 2}, 5)}).batch(8);
    m.fit(ds, {.epochs = 2, .verbose = 0});
    got[replicas - 1] = values(m.trainable_variables());
  }
  ASSERT_EQ(got[0].size(), got[1].size());
  for (std::size_t i = 0; i < got[0].size(); ++i)
    for (std::size_t j = 0; j < got[0][i].size(); ++j) EXPECT_NEAR(got[0][i][j], got[1][i][j], 1e-5f);
  chorus::internal::reset_runtime_for_testing();
}

TEST(Functional, AModelIsALayerAndNests) {
  chorus::internal::reset_runtime_for_testing();
  auto inner_in = Input({3});
  auto inner_dense = layers::Dense(2, "", true, initializers::glorot_uniform(1));
  auto inner = std::make_shared<model::Functional>(std::vector<KerasTensor>{inner_in},
                                                   std::vector<KerasTensor>{(*inner_dense)(inner_in)}, "inner");
  auto x = Input({4});
  KerasTensor h = (*layers::Dense(3, "relu", true, initializers::glorot_uniform(2)))(x);
  model::Functional outer({x}, {(*inner)(h)}, "outer");
  EXPECT_EQ(outer.layers().back().get(), inner.get());
  EXPECT_EQ(outer.trainable_variables().size(), 4u) << "the nested model's weights are the outer's too";
  // Gradients reach the nested model's weights.
  ops::GradientTape tape;
  const Tensor loss = ops::reduce_sum(ops::square(outer(rand({2, 4}, 3), true)));
  const auto g = tape.gradient(loss, outer.trainable_variables());
  for (const Tensor& t : g) EXPECT_TRUE(t.defined());
  // A Sequential nests as well (a model is a layer), in a Sequential.
  model::Sequential seq(
      {layers::Dense(3), std::make_shared<model::Sequential>(std::vector<layers::LayerPtr>{layers::Dense(2)}, "tail")});
  EXPECT_EQ(seq(rand({2, 5}, 4)).shape(), Shape({2, 2}));
  EXPECT_EQ(seq.trainable_variables().size(), 4u);
  EXPECT_EQ(seq.trainable_variables()[2].name(), "sequential/tail/dense/kernel");
}

// A layer that owns layers (Keras attribute tracking): a two-layer MLP block with a residual.
class ResidualBlock : public layers::Layer {
 public:
  ResidualBlock() : layers::Layer("") {
    up_ = track_layer(layers::Dense(8, "relu", true, initializers::glorot_uniform(1)), "up");
    down_ = track_layer(layers::Dense(4, "", true, initializers::glorot_uniform(2)), "down");
  }
  std::string class_name() const override { return "ResidualBlock"; }

 protected:
  Tensor call(const Tensor& x, bool training) override { return x + (*down_)((*up_)(x, training), training); }

 private:
  layers::LayerPtr up_, down_;
};

TEST(Functional, LayersThatOwnLayers) {
  chorus::internal::reset_runtime_for_testing();
  auto block = std::make_shared<ResidualBlock>();
  model::Sequential m({block}, "m");
  EXPECT_EQ(m(rand({2, 4}, 1)).shape(), Shape({2, 4}));
  const auto vars = m.trainable_variables();
  ASSERT_EQ(vars.size(), 4u);
  EXPECT_EQ(vars[0].name(), "m/residual_block/up/kernel");
  EXPECT_EQ(vars[3].name(), "m/residual_block/down/bias");
  const auto children = block->trackable_children();
  ASSERT_EQ(children.size(), 2u);
  EXPECT_EQ(children[0].name, "up");
  EXPECT_EQ(children[1].name, "down");
  // In a functional graph too.
  auto x = Input({4});
  auto block2 = std::make_shared<ResidualBlock>();
  model::Functional f({x}, {(*block2)(x)});
  EXPECT_EQ(f.trainable_variables().size(), 4u);
}

// Layer::set_recompute (layers::with_recompute): a block recomputed in the backward pass trains
// bit for bit as the same block recorded normally, under fit on 2 logical CPU devices, with a
// Dropout inside the block (its mask replayed).
TEST(Functional, ARecomputedLayerTrainsBitwiseAsARecordedOne) {
  std::vector<std::vector<float>> got[2];
  for (const bool recompute : {false, true}) {
    chorus::testing::make_cpus(2);
    distribute::MirroredStrategy strategy(chorus::testing::cpus(2));
    auto scope = strategy.scope();
    auto block = std::make_shared<model::Sequential>(
        std::vector<layers::LayerPtr>{layers::Dense(16, "relu", true, initializers::glorot_uniform(1)),
                                      layers::Dropout(0.3, 7),
                                      layers::Dense(4, "", true, initializers::glorot_uniform(2))},
        "block");
    model::Sequential m(
        {layers::with_recompute(block, recompute), layers::Dense(2, "", true, initializers::glorot_uniform(3))});
    EXPECT_EQ(block->recompute(), recompute);
    m.compile(std::make_shared<optimizers::SGD>(0.1), std::make_shared<losses::MeanSquaredError>());
    auto ds = data::Dataset::from_tensor_slices({rand({32, 4}, 1), rand({32, 2}, 2)}).batch(8);
    m.fit(ds, {.epochs = 2, .verbose = 0});
    got[recompute ? 1 : 0] = values(m.trainable_variables());
  }
  EXPECT_EQ(got[0], got[1]);
  chorus::internal::reset_runtime_for_testing();
}

// The subclass route: layers as members created with track(), call() composes them.
class TwoTower : public model::Model {
 public:
  TwoTower() : model::Model("two_tower") {
    left_ = track(layers::Dense(4, "relu", true, initializers::glorot_uniform(1)));
    right_ = track(layers::Dense(4, "tanh", true, initializers::glorot_uniform(2)));
    head_ = track(layers::Dense(1, "", true, initializers::glorot_uniform(3)));
  }

 protected:
  Tensor call(const Tensor& x, bool training) override {
    return (*head_)((*left_)(x, training) * (*right_)(x, training), training);
  }

 private:
  layers::LayerPtr left_, right_, head_;
};

TEST(Functional, TheSubclassRouteTrains) {
  chorus::internal::reset_runtime_for_testing();
  TwoTower m;
  m.compile(std::make_shared<optimizers::SGD>(0.1), std::make_shared<losses::MeanSquaredError>());
  const Tensor x = rand({64, 3}, 1);
  const Tensor y = ops::reduce_sum(x, {1}, true);
  const auto h = m.fit(data::Dataset::from_tensor_slices({x, y}).batch(16), {.epochs = 10, .verbose = 0});
  EXPECT_LT(h.history.at("loss").back(), 0.5 * h.history.at("loss").front());
  EXPECT_EQ(m.layers().size(), 3u);
  EXPECT_EQ(m.trainable_variables()[0].name(), "two_tower/dense/kernel");
  EXPECT_EQ(m.trainable_variables()[2].name(), "two_tower/dense_1/kernel");
}

TEST(Functional, AShapeMismatchNamesBothLayersAndBothShapes) {
  chorus::internal::reset_runtime_for_testing();
  auto x = Input({4});
  KerasTensor a = (*layers::Dense(5, "", true, initializers::zeros(), initializers::zeros(), "left"))(x);
  KerasTensor b = (*layers::Dense(6, "", true, initializers::zeros(), initializers::zeros(), "right"))(x);
  try {
    (void)(*layers::Add("sum"))({a, b});
    FAIL() << "no error";
  } catch (const InvalidArgumentError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'sum' (Add)"), std::string::npos) << m;
    EXPECT_NE(m.find("'left' (Dense) (None, 5)"), std::string::npos) << m;
    EXPECT_NE(m.find("'right' (Dense) (None, 6)"), std::string::npos) << m;
  }
  // A built layer called on another shape.
  auto d = layers::Dense(2, "", true, initializers::zeros(), initializers::zeros(), "d");
  (void)(*d)(a);
  EXPECT_THROW_WITH((void)(*d)(b), InvalidArgumentError, "'right' (Dense) (None, 6)");
}

TEST(Functional, ADisconnectedGraphNamesTheMissingInput) {
  chorus::internal::reset_runtime_for_testing();
  auto x = Input({4}, DType::kFloat32, "x");
  auto z = Input({4}, DType::kFloat32, "z");
  KerasTensor s = (*layers::Add("joined"))({x, z});
  EXPECT_THROW_WITH(model::Functional({x}, {s}), InvalidArgumentError,
                    "layer 'joined' (Add) reads Input 'z', which is not among the model's inputs ['x']");
  KerasTensor h = (*layers::Dense(2))(x);
  EXPECT_THROW_WITH(model::Functional({h}, {h}), InvalidArgumentError, "is not an Input");
  EXPECT_THROW_WITH(model::Functional({x}, {}), InvalidArgumentError, "at least one input and one output");
  // Two layers of one name.
  KerasTensor p = (*layers::Dense(2, "", true, initializers::zeros(), initializers::zeros(), "same"))(x);
  KerasTensor q = (*layers::Dense(2, "", true, initializers::zeros(), initializers::zeros(), "same"))(x);
  EXPECT_THROW_WITH(model::Functional({x}, {(*layers::Add())({p, q})}), InvalidArgumentError,
                    "two layers are named 'same'");
  // A layer not held by a shared_ptr cannot be called symbolically.
  layers::DenseLayer stack_layer(2, "", true, initializers::zeros(), initializers::zeros(), "");
  EXPECT_THROW_WITH((void)stack_layer(x), InvalidArgumentError, "must be held by a LayerPtr");
  // An Input with a non-positive dimension.
  EXPECT_THROW_WITH((void)Input({0, 3}), InvalidArgumentError, "every dimension must be >= 1");
}

TEST(Functional, MergeLayersCheckTheirInputs) {
  chorus::internal::reset_runtime_for_testing();
  const Tensor a = rand({2, 3}, 1), b = rand({2, 3}, 2), c = rand({2, 4}, 3);
  EXPECT_EQ(vec((*layers::Add())({a, b})[0]), vec(a + b));
  EXPECT_EQ(vec((*layers::Multiply())({a, b})[0]), vec(a * b));
  EXPECT_EQ((*layers::Concatenate())({a, c})[0].shape(), Shape({2, 7}));
  EXPECT_THROW_WITH((void)(*layers::Add())(std::vector<Tensor>{a}), InvalidArgumentError, "at least 2 inputs");
  EXPECT_THROW_WITH((void)(*layers::Multiply())({a, c}), InvalidArgumentError, "(2, 3), (2, 4)");
  EXPECT_THROW_WITH((void)(*layers::Concatenate(0))({a, b}), InvalidArgumentError, "batch axis 0");
  EXPECT_THROW_WITH((void)(*layers::Concatenate(1))({a, rand({2, 3, 1}, 4)}), InvalidArgumentError,
                    "match except along axis 1");
  EXPECT_THROW_WITH((void)(*layers::Add())(a), InvalidArgumentError, "needs at least 2 inputs, got 1");
}

// Finite differences through the merge layers (float64 policy) and under mixed_bfloat16: the
// merge layers cast their floating inputs to the compute dtype, as every Keras layer does.
TEST(Functional, MergeLayersGradientsAndMixedPrecision) {
  chorus::internal::reset_runtime_for_testing();
  const mixed_precision::Policy f64("float64");
  auto add = layers::with_dtype_policy(layers::Add(), f64);
  auto mul = layers::with_dtype_policy(layers::Multiply(), f64);
  auto cat = layers::with_dtype_policy(layers::Concatenate(1), f64);
  EXPECT_TRUE(chorus::testing::check_gradients(
      [&](const std::vector<Tensor>& in) {
        return Tensor((*cat)({(*add)({in[0], in[1]}), (*mul)({in[0], in[1], in[2]})}));
      },
      {chorus::testing::random_tensor({2, 3}, 1), chorus::testing::random_tensor({2, 3}, 2),
       chorus::testing::random_tensor({2, 3}, 3)}));
  mixed_precision::set_global_policy("mixed_bfloat16");
  auto add16 = layers::Add();
  auto cat16 = layers::Concatenate();
  mixed_precision::set_global_policy("float32");
  const Tensor a = rand({2, 3}, 4), b = rand({2, 3}, 5);
  const Tensor y = (*cat16)({(*add16)({a, b}), a});
  EXPECT_EQ(y.dtype(), DType::kBFloat16);
  const auto got = ops::cast(y, DType::kFloat32).to_vector<float>();
  const auto want = ops::concat({a + b, a}, 1).to_vector<float>();
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 0.02f * (1 + std::abs(want[i])));
}

}  // namespace
}  // namespace chorus
