// MultiHeadAttention (model/multi_head_attention.h, issue 43 item 2): the layer computes Keras's
// formula (checked against the composed ops on the layer's own weights, and against tf_keras 2.21
// on weights tf_keras wrote), its gradients match finite differences, it trains under
// mixed_bfloat16 close to float32, and bad inputs raise InvalidArgumentError naming the layer.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <optional>

#include "tests/checkpoint/tf_interop_util.h"
#include "tests/core/interop_python.h"
#include "tests/core/test_util.h"
#include "tests/ops/gradient_check.h"
#include <chorus/core/runtime.h>
#include <chorus/model/functional.h>
#include <chorus/model/mixed_precision.h>
#include <chorus/model/multi_head_attention.h>
#include <chorus/model/serialization.h>
#include <chorus/ops/ops.h>

namespace chorus {
namespace {

using layers::MultiHeadAttentionLayer;

Tensor rand(std::vector<std::int64_t> shape, std::int64_t seed, DType dtype = DType::kFloat32) {
  return ops::stateless_random_uniform(Shape(shape), {seed, 17}, {.minval = -1, .maxval = 1, .dtype = dtype});
}

// Keras's MultiHeadAttention written out with the composed ops (einsums as matmuls, softmax with
// the mask as a large negative, as Keras's Softmax(mask) does).
Tensor reference(MultiHeadAttentionLayer& mha, const Tensor& q_in, const Tensor& v_in, const Tensor& mask,
                 bool causal) {
  const auto& o = mha.options();
  std::map<std::string, Tensor> w;
  for (const auto& [attribute, sub] : mha.sublayers())
    for (const auto& c : sub->trackable_children()) w[attribute + "/" + c.name] = c.ref.variable().read_value();
  auto project = [&](const Tensor& x, const std::string& a) {  // [B,T,D] x [D,H,K] + [H,K] → [B,H,T,K]
    const auto& k = w.at(a + "/kernel");
    Tensor y = ops::matmul(x, ops::reshape(k, {k.shape().dim(0), -1})) + ops::reshape(w.at(a + "/bias"), {-1});
    y = ops::reshape(y, {x.shape().dim(0), x.shape().dim(1), o.num_heads, k.shape().dim(2)});
    return ops::transpose(y, {0, 2, 1, 3});
  };
  const Tensor q = project(q_in, "_query_dense"), k = project(v_in, "_key_dense"), v = project(v_in, "_value_dense");
  Tensor logits = ops::matmul(q * (1.0 / std::sqrt(static_cast<double>(o.key_dim))), k, false, true);
  const std::int64_t t = q_in.shape().dim(1), s = v_in.shape().dim(1);
  Tensor keep;
  if (causal) {
    std::vector<std::uint8_t> tri;
    for (std::int64_t i = 0; i < t; ++i)
      for (std::int64_t j = 0; j < s; ++j) tri.push_back(j <= i);
    keep = ops::cast(Tensor::from_vector<std::uint8_t>(tri, {1, 1, t, s}), DType::kBool);
  }
  if (mask.defined()) {
    Tensor m = ops::reshape(mask, {mask.shape().dim(0), 1, 1, s});
    keep = keep.defined() ? ops::logical_and(keep, m) : m;
  }
  if (keep.defined()) logits = ops::where(keep, logits, logits - 1e9);
  Tensor out = ops::matmul(ops::softmax(logits), v);  // [B,H,T,V]
  out = ops::reshape(ops::transpose(out, {0, 2, 1, 3}), {q_in.shape().dim(0), t, -1});
  const auto& ok = w.at("_output_dense/kernel");
  return ops::matmul(out, ops::reshape(ok, {-1, ok.shape().dim(2)})) + w.at("_output_dense/bias");
}

void expect_near(const Tensor& got, const Tensor& want, double tol) {
  const auto g = ops::cast(got, DType::kFloat64).to_vector<double>();
  const auto w = ops::cast(want, DType::kFloat64).to_vector<double>();
  ASSERT_EQ(g.size(), w.size());
  double worst = 0;
  for (std::size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::abs(g[i] - w[i]));
  EXPECT_LE(worst, tol);
}

TEST(MultiHeadAttention, ComputesKerasFormulaWithCausalAndPaddingMasks) {
  chorus::internal::reset_runtime_for_testing();
  for (const bool causal : {false, true}) {
    auto layer = std::make_shared<MultiHeadAttentionLayer>(
        layers::MultiHeadAttentionOptions{.num_heads = 3,
                                          .key_dim = 5,
                                          .use_causal_mask = causal,
                                          .kernel_initializer = initializers::glorot_uniform(4)});
    const Tensor q = rand({2, 7, 8}, 1), v = rand({2, 7, 8}, 2);
    const Tensor y = (*layer)({q, v});
    EXPECT_EQ(y.shape(), Shape({2, 7, 8}));
    expect_near(y, reference(*layer, q, v, Tensor(), causal), 2e-5);
    // A key padding mask [batch, S]: the second example sees only its first 4 keys.
    std::vector<std::uint8_t> pad(14, 1);
    for (int j = 4; j < 7; ++j) pad[7 + j] = 0;
    const Tensor mask = ops::cast(Tensor::from_vector<std::uint8_t>(pad, {2, 7}), DType::kBool);
    expect_near((*layer)({q, v, v, mask}), reference(*layer, q, v, mask, causal), 2e-5);
  }
  // Self-attention from one input, and cross-attention with another length.
  auto layer = layers::MultiHeadAttention({.num_heads = 2, .key_dim = 4, .output_dim = 6});
  EXPECT_EQ((*layer)(rand({3, 5, 8}, 3)).shape(), Shape({3, 5, 6}));
  auto cross = layers::MultiHeadAttention({.num_heads = 2, .key_dim = 4});
  EXPECT_EQ((*cross)({rand({3, 5, 8}, 3), rand({3, 9, 10}, 4)})[0].shape(), Shape({3, 5, 8}));
}

TEST(MultiHeadAttention, WeightsAndKeysAreKeras) {
  chorus::internal::reset_runtime_for_testing();
  auto x = layers::Input({6, 8});
  auto mha = layers::MultiHeadAttention({.num_heads = 2, .key_dim = 4});
  model::Functional m({x}, {(*mha)({x, x})}, "m");
  std::vector<std::string> names;
  for (const Variable& v : m.trainable_variables()) names.push_back(v.name() + " " + v.shape().to_string());
  EXPECT_EQ(names, (std::vector<std::string>{
                       "multi_head_attention/query/kernel (8, 2, 4)", "multi_head_attention/query/bias (2, 4)",
                       "multi_head_attention/key/kernel (8, 2, 4)", "multi_head_attention/key/bias (2, 4)",
                       "multi_head_attention/value/kernel (8, 2, 4)", "multi_head_attention/value/bias (2, 4)",
                       "multi_head_attention/attention_output/kernel (2, 4, 8)",
                       "multi_head_attention/attention_output/bias (8,)"}));
}

TEST(MultiHeadAttention, GradientsMatchFiniteDifferences) {
  chorus::internal::reset_runtime_for_testing();
  auto layer = std::make_shared<MultiHeadAttentionLayer>(
      layers::MultiHeadAttentionOptions{.num_heads = 2, .key_dim = 3, .use_causal_mask = true});
  layer->set_dtype_policy(mixed_precision::Policy("float64"));
  const Tensor v = chorus::testing::random_tensor({2, 4, 5}, 9);
  EXPECT_TRUE(chorus::testing::check_gradients(
      [&](const std::vector<Tensor>& in) {
        return (*layer)({in[0], v});
      },
      {chorus::testing::random_tensor({2, 3, 5}, 8)}, {.eps = 1e-6, .tol = 1e-6}));
  // And with respect to the weights: the tape's gradient of every projection exists.
  ops::GradientTape tape;
  const Tensor loss = ops::reduce_sum(ops::square((*layer)({chorus::testing::random_tensor({2, 3, 5}, 8), v}, true)));
  for (const Tensor& g : tape.gradient(loss, layer->trainable_weights())) EXPECT_TRUE(g.defined());
}

TEST(MultiHeadAttention, MixedBfloat16StaysCloseToFloat32) {
  chorus::internal::reset_runtime_for_testing();
  auto f32 = std::make_shared<MultiHeadAttentionLayer>(layers::MultiHeadAttentionOptions{
      .num_heads = 2, .key_dim = 8, .kernel_initializer = initializers::glorot_uniform(1)});
  mixed_precision::set_global_policy("mixed_bfloat16");
  auto bf16 = std::make_shared<MultiHeadAttentionLayer>(layers::MultiHeadAttentionOptions{
      .num_heads = 2, .key_dim = 8, .kernel_initializer = initializers::glorot_uniform(1)});
  mixed_precision::set_global_policy("float32");
  const Tensor x = rand({2, 6, 16}, 5);
  const Tensor a = (*f32)(x), b = (*bf16)(x);
  EXPECT_EQ(b.dtype(), DType::kBFloat16);
  EXPECT_EQ(bf16->trainable_weights()[0].dtype(), DType::kFloat32) << "variables stay float32";
  expect_near(b, a, 0.05);  // bfloat16 keeps 8 bits: a few 1e-2 on values of order 1
}

TEST(MultiHeadAttention, BadInputsNameTheLayer) {
  chorus::internal::reset_runtime_for_testing();
  EXPECT_THROW_WITH(layers::MultiHeadAttention({.num_heads = 0, .key_dim = 4}), InvalidArgumentError, "num_heads");
  EXPECT_THROW_WITH(layers::MultiHeadAttention({.num_heads = 2, .key_dim = 4, .dropout = 1.0}), InvalidArgumentError,
                    "dropout must be in [0, 1)");
  auto mha = layers::MultiHeadAttention({.num_heads = 2, .key_dim = 4, .name = "attn"});
  EXPECT_THROW_WITH((void)(*mha)(rand({2, 8}, 1)), InvalidArgumentError, "'attn'",
                    "[batch, ..., features] of one rank");
  auto ok = layers::MultiHeadAttention({.num_heads = 2, .key_dim = 4, .name = "attn2"});
  const Tensor q = rand({2, 5, 8}, 2);
  EXPECT_THROW_WITH((void)(*ok)({q, q, q, rand({2, 5}, 3)}), InvalidArgumentError, "'attn2'", "must be bool");
  EXPECT_THROW_WITH(
      (void)(*ok)({q, q, q, ops::cast(Tensor::ones(Shape({2, 4}), DType::kFloat32, "/CPU:0"), DType::kBool)}),
      InvalidArgumentError, "'attn2'", "key padding mask [batch, 5]");
}

// Against tf_keras: tf_keras writes a model (MultiHeadAttention, causal, with a key padding mask
// input) with its save_weights and its outputs; chorus loads the weights and computes the outputs.
TEST(MultiHeadAttention, EqualsTfKeras) {
  std::string python;
  CHORUS_REQUIRE_INTEROP_PYTHON(python, "tensorflow, tf_keras");
  chorus::internal::reset_runtime_for_testing();
  chorus::testing::TempDir tmp;
  const std::string script = std::string(CHORUS_SOURCE_ROOT) + "/tests/model/keras_interop.py";
  ASSERT_EQ(chorus::testing::run_interop_command("'" + python + "' '" + script + "' mha-writes '" + tmp.path() + "'",
                                                 "tf_keras"),
            0);
  auto x = layers::Input({6, 8}, DType::kFloat32, "x");
  auto pad = layers::Input({6, 6}, DType::kBool, "pad");
  auto mha = layers::MultiHeadAttention({.num_heads = 2, .key_dim = 4, .use_causal_mask = true, .name = "mha"});
  model::Functional m({x, pad}, {(*mha)({x, x, x, pad})}, "m");
  m.load_weights(tmp.path() + "/weights").assert_consumed();
  const auto io = train::testing::read_dump(tmp.path() + "/io");
  const Tensor mask = ops::cast(train::testing::dumped_tensor(io.at("pad")), DType::kBool);
  expect_near(m({train::testing::dumped_tensor(io.at("x")), mask})[0], train::testing::dumped_tensor(io.at("y")), 2e-5);
}

// attention_axes (Keras's): on [B, X, Y, F] inputs, attention over (X, Y) jointly is attention over
// the X·Y positions of [B, X·Y, F]; over Y alone, X acts as another batch axis; the mask is Keras's
// [B, other axes..., query attention axes..., key attention axes...]. The same seeded weights in
// every layer, so each must equal the rank-3 layer on the rearranged input.
TEST(MultiHeadAttention, AttentionAxesAttendOverTheListedAxes) {
  chorus::internal::reset_runtime_for_testing();
  auto make = [](std::optional<std::vector<std::int64_t>> axes) {
    return std::static_pointer_cast<MultiHeadAttentionLayer>(
        layers::MultiHeadAttention({.num_heads = 2,
                                    .key_dim = 4,
                                    .attention_axes = std::move(axes),
                                    .kernel_initializer = initializers::glorot_uniform(5),
                                    .bias_initializer = initializers::random_uniform(-0.1, 0.1, 6)}));
  };
  const Tensor x = rand({2, 3, 4, 8}, 11);  // [B, X, Y, F]
  const auto flat = make(std::nullopt);
  // Unset: every middle axis, (X, Y) flattened in order.
  const Tensor joint = (*make(std::nullopt))(x);
  EXPECT_EQ(joint.shape(), Shape({2, 3, 4, 8}));
  expect_near(joint, ops::reshape((*flat)(ops::reshape(x, {2, 12, 8})), {2, 3, 4, 8}), 1e-6);
  expect_near((*make(std::vector<std::int64_t>{1, 2}))(x), joint, 0);
  expect_near((*make(std::vector<std::int64_t>{-3, -2}))(x), joint, 0);
  // Y alone: each of the B·X rows of Y positions attends within itself.
  expect_near((*make(std::vector<std::int64_t>{2}))(x),
              ops::reshape((*make(std::nullopt))(ops::reshape(x, {6, 4, 8})), {2, 3, 4, 8}), 1e-6);
  // X alone: Y is the batch-like axis.
  const Tensor xt = ops::reshape(ops::transpose(x, {0, 2, 1, 3}), {8, 3, 8});
  expect_near((*make(std::vector<std::int64_t>{1}))(x),
              ops::transpose(ops::reshape((*make(std::nullopt))(xt), {2, 4, 3, 8}), {0, 2, 1, 3}), 1e-6);
  // A mask [B, X, Y, X, Y] is the flattened [B, 12, 12] one.
  const Tensor keep = ops::greater(rand({2, 3, 4, 3, 4}, 12), Tensor::scalar<float>(-0.5f));
  auto masked = make(std::nullopt);
  expect_near((*masked)({x, x, x, keep}),
              ops::reshape((*make(std::nullopt))({ops::reshape(x, {2, 12, 8}), ops::reshape(x, {2, 12, 8}),
                                                  ops::reshape(x, {2, 12, 8}), ops::reshape(keep, {2, 12, 12})}),
                           {2, 3, 4, 8}),
              1e-6);
  // Keras's config carries the axes it built with.
  layers::LayerConfig c("MultiHeadAttention", masked->name());
  masked->get_config(c);
  EXPECT_EQ(c.get_int_list("attention_axes"), (std::vector<std::int64_t>{1, 2}));
}

TEST(MultiHeadAttention, BadAttentionAxesNameTheLayer) {
  chorus::internal::reset_runtime_for_testing();
  const Tensor x = rand({2, 3, 4, 8}, 13);
  for (const auto& [axes, what] : std::vector<std::pair<std::vector<std::int64_t>, std::string>>{
           {{0}, "attention axis 0 is not a middle axis of rank-4 inputs"},
           {{3}, "attention axis 3 is not a middle axis"},
           {{-1}, "attention axis -1 is not a middle axis"},
           {{1, -3}, "attention axis -3 is listed twice"},
           {{}, "attention_axes is empty"}}) {
    auto mha = layers::MultiHeadAttention({.num_heads = 2, .key_dim = 4, .attention_axes = axes, .name = "ax"});
    EXPECT_THROW_WITH((void)(*mha)(x), InvalidArgumentError, "'ax'", what);
  }
  auto causal = layers::MultiHeadAttention({.num_heads = 2, .key_dim = 4, .use_causal_mask = true, .name = "c"});
  EXPECT_THROW_WITH((void)(*causal)(x), InvalidArgumentError, "'c'", "use_causal_mask needs [batch, seq, features]");
  auto other = layers::MultiHeadAttention(
      {.num_heads = 2, .key_dim = 4, .attention_axes = std::vector<std::int64_t>{2}, .name = "o"});
  EXPECT_THROW_WITH((void)(*other)({x, rand({2, 5, 4, 8}, 14)}), InvalidArgumentError, "'o'",
                    "differ on axis 1, which is not an attention axis");
  auto masked = layers::MultiHeadAttention({.num_heads = 2, .key_dim = 4, .name = "m"});
  EXPECT_THROW_WITH((void)(*masked)({x, x, x, ops::greater(rand({2, 12, 12}, 15), Tensor::scalar<float>(0.f))}),
                    InvalidArgumentError, "'m'", "attention_mask must be (2, 3, 4, 3, 4)");
}

// Against tf_keras: MultiHeadAttention(2, 4, attention_axes=(2,)) on [B, 3, 5, 8] inputs with a mask
// [B, 3, 5, 5], written by tf_keras (weights and outputs); chorus loads the weights, computes the
// same outputs, and its JSON of the layer says attention_axes [2].
TEST(MultiHeadAttention, AttentionAxesEqualTfKeras) {
  std::string python;
  CHORUS_REQUIRE_INTEROP_PYTHON(python, "tensorflow, tf_keras");
  chorus::internal::reset_runtime_for_testing();
  chorus::testing::TempDir tmp;
  const std::string script = std::string(CHORUS_SOURCE_ROOT) + "/tests/model/keras_interop.py";
  ASSERT_EQ(chorus::testing::run_interop_command(
                "'" + python + "' '" + script + "' mha-axes-writes '" + tmp.path() + "'", "tf_keras"),
            0);
  auto x = layers::Input({3, 5, 8}, DType::kFloat32, "x");
  auto mask = layers::Input({3, 5, 5}, DType::kBool, "mask");
  auto mha = layers::MultiHeadAttention(
      {.num_heads = 2, .key_dim = 4, .attention_axes = std::vector<std::int64_t>{2}, .name = "mha"});
  model::Functional m({x, mask}, {(*mha)({x, x, x, mask})}, "m");
  m.load_weights(tmp.path() + "/weights").assert_consumed();
  const auto io = train::testing::read_dump(tmp.path() + "/io");
  const Tensor keep = ops::cast(train::testing::dumped_tensor(io.at("mask")), DType::kBool);
  expect_near(m({train::testing::dumped_tensor(io.at("x")), keep})[0], train::testing::dumped_tensor(io.at("y")), 2e-5);
  EXPECT_NE(m.to_json().find("\"attention_axes\": [2]"), std::string::npos);
  // And back: chorus reads the JSON it wrote (model/serialization.h) into the same layer.
  auto again = model::model_from_json(m.to_json());
  again->load_weights(tmp.path() + "/weights").assert_consumed();
  expect_near((*again)({train::testing::dumped_tensor(io.at("x")), keep})[0], train::testing::dumped_tensor(io.at("y")),
              2e-5);
}

}  // namespace
}  // namespace chorus
