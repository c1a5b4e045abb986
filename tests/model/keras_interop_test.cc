// Functional and nested models against tf_keras (issue 43 item 1 and item 4): the same graph built
// on both sides (tests/model/keras_interop.py says which) gives the same layer order and so the
// same checkpoint keys. tf_keras restores chorus's checkpoint and save_weights with
// assert_consumed() and computes chorus's outputs; chorus's load_weights restores tf_keras's
// save_weights with assert_consumed() and computes tf_keras's outputs. Runs in the interop
// Python (skipped without it outside CI, FAILED under CI=true).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "tests/checkpoint/tf_interop_util.h"
#include "tests/core/interop_python.h"
#include "tests/core/test_util.h"
#include "tests/model/json_models.h"
#include <chorus/core/runtime.h>
#include <chorus/model/functional.h>
#include <chorus/model/layer_normalization.h>
#include <chorus/model/layers.h>
#include <chorus/model/merge_layers.h>
#include <chorus/model/multi_head_attention.h>
#include <chorus/model/serialization.h>
#include <chorus/ops/ops.h>

namespace chorus {
namespace {

using layers::Input;
using layers::KerasTensor;

std::string script() { return std::string(CHORUS_SOURCE_ROOT) + "/tests/model/keras_interop.py"; }

int run_keras(const std::string& python, const std::string& mode, const std::string& dir) {
  return chorus::testing::run_interop_command("'" + python + "' '" + script() + "' " + mode + " '" + dir + "'",
                                              "tf_keras");
}

// Keras's ResidualBlock of keras_interop.py: owns Dense "up" (8, relu) and "down" (5).
class ResidualBlock : public layers::Layer {
 public:
  explicit ResidualBlock(std::string name) : layers::Layer(std::move(name)) {
    up_ =
        track_layer(layers::Dense(8, "relu", true, initializers::glorot_uniform(), initializers::zeros(), "up"), "up");
    down_ =
        track_layer(layers::Dense(5, "", true, initializers::glorot_uniform(), initializers::zeros(), "down"), "down");
  }
  std::string class_name() const override { return "ResidualBlock"; }

 protected:
  Tensor call(const Tensor& x, bool training) override { return x + (*down_)((*up_)(x, training), training); }

 private:
  layers::LayerPtr up_, down_;
};

layers::LayerPtr dense(std::int64_t units, const std::string& name, const std::string& activation = "") {
  return layers::Dense(units, activation, true, initializers::glorot_uniform(), initializers::zeros(), name);
}

std::unique_ptr<model::Functional> build() {
  auto x = Input({4}, DType::kFloat32, "x");
  auto y = Input({3}, DType::kFloat32, "y");
  auto shared = dense(5, "shared");
  KerasTensor a = (*shared)(x);
  KerasTensor b = (*dense(5, "dense_y"))(y);
  KerasTensor s = (*layers::Add("add"))({a, b});
  auto inner_in = Input({5}, DType::kFloat32, "inner_in");
  KerasTensor h = (*dense(5, "inner_hidden", "relu"))(inner_in);
  auto inner = std::make_shared<model::Functional>(std::vector<KerasTensor>{inner_in},
                                                   std::vector<KerasTensor>{(*dense(2, "inner_out"))(h)}, "inner");
  KerasTensor out0 = (*inner)(s);
  KerasTensor t = (*shared)((*dense(4, "to_shared"))(s));
  KerasTensor out1 = (*std::make_shared<ResidualBlock>("block"))(t);
  return std::make_unique<model::Functional>(std::vector<KerasTensor>{x, y}, std::vector<KerasTensor>{out0, out1},
                                             "outer");
}

// Each output i equals the dump's "out<i>" (or `key` for one output) within 1e-5.
void expect_outputs(const std::vector<Tensor>& out, const std::map<std::string, train::testing::Dumped>& io,
                    const std::string& key = "out") {
  for (std::size_t i = 0; i < out.size(); ++i) {
    const auto got = out[i].to_vector<float>();
    const std::string name = out.size() == 1 && io.count(key) ? key : key + std::to_string(i);
    const auto want = train::testing::dumped_tensor(io.at(name)).to_vector<float>();
    ASSERT_EQ(got.size(), want.size()) << name;
    for (std::size_t j = 0; j < got.size(); ++j) EXPECT_NEAR(got[j], want[j], 1e-5f) << name << " [" << j << "]";
  }
}

std::vector<std::string> names(const model::Model& m) {
  std::vector<std::string> out;
  for (const auto& l : m.layers()) out.push_back(l->name());
  return out;
}

TEST(KerasInterop, TfKerasRestoresChorusFunctionalAndNestedModels) {
  std::string python;
  CHORUS_REQUIRE_INTEROP_PYTHON(python, "tensorflow, tf_keras");
  chorus::internal::reset_runtime_for_testing();
  chorus::testing::TempDir tmp;
  const std::string dir = tmp.path();
  auto m = build();
  EXPECT_EQ(names(*m), (std::vector<std::string>{"x", "y", "shared", "dense_y", "add", "to_shared", "inner", "block"}));
  const Tensor a = ops::stateless_random_uniform({6, 4}, {1, 2}, {.minval = -1, .maxval = 1});
  const Tensor b = ops::stateless_random_uniform({6, 3}, {3, 4}, {.minval = -1, .maxval = 1});
  std::vector<Tensor> out = (*m)({a, b});
  train::Checkpoint({{"model", train::TrackableRef(*m)}}).write(dir + "/ckpt");
  m->save_weights(dir + "/weights");
  train::testing::write_text(dir + "/prefix", dir + "/ckpt");
  train::testing::write_dump(dir + "/io", {{"a", a}, {"b", b}, {"out0", out[0]}, {"out1", out[1]}});
  EXPECT_EQ(run_keras(python, "functional-reads", dir), 0);
}

TEST(KerasInterop, ChorusLoadsTfKerasSaveWeights) {
  std::string python;
  CHORUS_REQUIRE_INTEROP_PYTHON(python, "tensorflow, tf_keras");
  chorus::internal::reset_runtime_for_testing();
  chorus::testing::TempDir tmp;
  const std::string dir = tmp.path();
  ASSERT_EQ(run_keras(python, "functional-writes", dir), 0);
  auto m = build();
  m->load_weights(dir + "/weights").assert_consumed();
  const auto io = train::testing::read_dump(dir + "/io");
  std::vector<Tensor> out =
      (*m)({train::testing::dumped_tensor(io.at("a")), train::testing::dumped_tensor(io.at("b"))});
  expect_outputs(out, io);
}

// Architecture JSON (model/serialization.h): chorus's to_json is tf_keras's to_json of the same
// model, and tf_keras rebuilds it with model_from_json, restores chorus's weights and computes its
// outputs.
TEST(KerasInterop, TfKerasReadsChorusToJson) {
  std::string python;
  CHORUS_REQUIRE_INTEROP_PYTHON(python, "tensorflow, tf_keras");
  chorus::internal::reset_runtime_for_testing();
  chorus::testing::TempDir tmp;
  const std::string dir = tmp.path();
  auto m = chorus::testing::two_input_model();
  const Tensor img = ops::stateless_random_uniform({3, 8, 8, 3}, {5, 6}, {.minval = -1, .maxval = 1});
  const Tensor ids = Tensor::from_vector<std::int32_t>({1, 2, 3, 4, 5, 9, 8, 7, 6, 0, 0, 3, 3, 1, 9}, Shape{3, 5});
  std::vector<Tensor> out = (*m)({img, ids});
  train::testing::write_text(dir + "/model.json", m->to_json());
  train::testing::write_text(dir + "/seq.json", chorus::testing::mixed_sequential()->to_json());
  m->save_weights(dir + "/weights");
  train::testing::write_dump(dir + "/io", {{"img", img}, {"ids", ids}, {"out0", out[0]}, {"out1", out[1]}});
  EXPECT_EQ(run_keras(python, "json-reads", dir), 0);
}

// tf_keras's to_json and save_weights → chorus's model_from_json + load_weights(...).assert_consumed()
// computes tf_keras's outputs.
TEST(KerasInterop, ChorusReadsTfKerasToJson) {
  std::string python;
  CHORUS_REQUIRE_INTEROP_PYTHON(python, "tensorflow, tf_keras");
  chorus::internal::reset_runtime_for_testing();
  chorus::testing::TempDir tmp;
  const std::string dir = tmp.path();
  ASSERT_EQ(run_keras(python, "json-writes", dir), 0);
  std::ifstream f(dir + "/model.json");
  const std::string json((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto m = model::model_from_json(json);
  EXPECT_EQ(m->to_json(), json) << "chorus writes back the text tf_keras wrote";
  m->load_weights(dir + "/weights").assert_consumed();
  const auto io = train::testing::read_dump(dir + "/io");
  std::vector<Tensor> out =
      (*m)({train::testing::dumped_tensor(io.at("img")), train::testing::dumped_tensor(io.at("ids"))});
  expect_outputs(out, io);
}

// A transformer block's layers (LayerNormalization, MultiHeadAttention with use_causal_mask,
// Add, Dense gelu, and a LayerNormalization over the sequence axis, not the last one) through the
// architecture JSON, both ways: tf_keras's model_from_json reads
// chorus's to_json (the call's keyword arguments included) and computes chorus's outputs from its
// save_weights; chorus reads tf_keras's JSON and weights and computes tf_keras's outputs.
std::unique_ptr<model::Functional> attention_block() {
  auto x = Input({6, 8}, DType::kFloat32, "x");
  KerasTensor h = (*layers::LayerNormalization(-1, 1e-5, true, true, "ln"))(x);
  KerasTensor a =
      (*layers::MultiHeadAttention({.num_heads = 2, .key_dim = 4, .use_causal_mask = true, .name = "mha"}))({h, h});
  KerasTensor r = (*layers::Add("residual"))({x, a});
  KerasTensor y = (*dense(8, "mlp", "gelu"))(r);
  KerasTensor z = (*layers::LayerNormalization(std::vector<int>{1}, 1e-3, true, true, "ln_seq"))(y);
  return std::make_unique<model::Functional>(std::vector<KerasTensor>{x}, std::vector<KerasTensor>{z}, "block");
}

TEST(KerasInterop, AttentionBlockJsonBothWays) {
  std::string python;
  CHORUS_REQUIRE_INTEROP_PYTHON(python, "tensorflow, tf_keras");
  chorus::internal::reset_runtime_for_testing();
  chorus::testing::TempDir tmp;
  const std::string dir = tmp.path();
  auto m = attention_block();
  for (const auto& layer : m->layers()) {  // ln_seq's gamma and beta, shape [6]: not ones and zeros
    auto* ln = dynamic_cast<layers::LayerNormalizationLayer*>(layer.get());
    if (ln == nullptr || ln->name() != "ln_seq") continue;
    ASSERT_EQ(ln->gamma().shape(), Shape{6});
    Variable g = ln->gamma(), b = ln->beta();
    g.assign(Tensor::from_vector<float>({0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 2.0f}, {6}));
    b.assign(Tensor::from_vector<float>({-0.3f, -0.1f, 0.0f, 0.1f, 0.2f, 0.4f}, {6}));
  }
  const Tensor x = ops::stateless_random_uniform({3, 6, 8}, {7, 8}, {.minval = -1, .maxval = 1});
  train::testing::write_text(dir + "/model.json", m->to_json());
  m->save_weights(dir + "/weights");
  train::testing::write_dump(dir + "/io", {{"x", x}, {"y", (*m)(x)}});
  ASSERT_EQ(run_keras(python, "attention-json", dir), 0);  // reads ours, then writes its own beside
  std::ifstream f(dir + "/keras/model.json");
  const std::string json((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto k = model::model_from_json(json);
  k->load_weights(dir + "/keras/weights").assert_consumed();
  const auto io = train::testing::read_dump(dir + "/keras/io");
  expect_outputs({(*k)(train::testing::dumped_tensor(io.at("x")))}, io, "y");
}

}  // namespace
}  // namespace chorus
