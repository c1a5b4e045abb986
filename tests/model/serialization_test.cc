// Keras's architecture JSON (model/serialization.h, issue 43 item 4): to_json → model_from_json →
// the same JSON and, after load_weights, the same outputs; every layer class chorus has; shared
// layers and nested models; custom layers registered by their users; and the errors of a wrong or
// hostile JSON (more in serialization_hostile_test.cc). tf_keras's side (its to_json text, both directions) is in
// keras_interop_test.cc.
#include <gtest/gtest.h>

#include "tests/core/test_util.h"
#include "tests/model/json_models.h"
#include <chorus/core/runtime.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/model/conv_layers.h>
#include <chorus/model/functional.h>
#include <chorus/model/layers.h>
#include <chorus/model/merge_layers.h>
#include <chorus/model/mixed_precision.h>
#include <chorus/model/serialization.h>
#include <chorus/model/shape_layers.h>
#include <chorus/ops/ops.h>

namespace chorus {
namespace {

using layers::Input;
using layers::KerasTensor;
using layers::LayerConfig;
using testing::mixed_sequential;
using testing::two_input_model;

Tensor rand(std::vector<std::int64_t> shape, std::int64_t seed) {
  return ops::stateless_random_uniform(Shape(shape), {seed, seed}, {.minval = -1, .maxval = 1});
}

std::vector<Tensor> run(model::Model& m, const std::vector<Tensor>& xs) { return m(xs); }

void expect_same(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].shape(), b[i].shape());
    EXPECT_EQ(ops::cast(a[i], DType::kFloat32).to_vector<float>(), ops::cast(b[i], DType::kFloat32).to_vector<float>())
        << "output " << i;
  }
}

TEST(ModelJson, FunctionalRoundTripGivesTheSameJsonAndAfterLoadWeightsTheSameOutputs) {
  chorus::internal::reset_runtime_for_testing();
  testing::TempDir tmp;
  auto m = two_input_model();
  const std::string json = m->to_json();
  EXPECT_NE(json.find(R"({"class_name": "Functional", "config": {"name": "outer", "trainable": true, "layers": [)"),
            std::string::npos)
      << json.substr(0, 200);
  EXPECT_NE(json.find(R"("kernel_initializer": {"module": "keras.initializers", "class_name": "HeNormal", )"
                      R"("config": {"seed": 7}, "registered_name": null})"),
            std::string::npos);
  EXPECT_NE(json.find(R"("inbound_nodes": [[["shared", 0, 0, {}], ["shared", 1, 0, {}]]])"), std::string::npos)
      << "Add reads the shared layer's two calls";
  EXPECT_NE(json.find(R"("output_layers": [["inner", 1, 0], ["act", 0, 0]])"), std::string::npos)
      << "a nested model's first call in the outer model is its node 1 (Keras skips its own node 0)";
  EXPECT_NE(json.find(R"("keras_version": "2.21.0", "backend": "tensorflow"})"), std::string::npos);

  const Tensor img = rand({3, 8, 8, 3}, 1);
  const Tensor ids = Tensor::from_vector<std::int32_t>({1, 2, 3, 4, 5, 9, 8, 7, 6, 0, 0, 3, 3, 1, 9}, Shape{3, 5});
  const std::vector<Tensor> want = run(*m, {img, ids});
  m->save_weights(tmp.str("w"));

  std::unique_ptr<model::Model> back = model::model_from_json(json);
  ASSERT_EQ(back->class_name(), "Functional");
  EXPECT_EQ(back->name(), "outer");
  EXPECT_EQ(back->to_json(), json) << "to_json ∘ model_from_json is the identity on chorus's JSON";
  std::vector<std::string> names;
  for (const auto& l : back->layers()) names.push_back(l->name());
  std::vector<std::string> want_names;
  for (const auto& l : m->layers()) want_names.push_back(l->name());
  EXPECT_EQ(names, want_names) << "Keras's layer order, so the checkpoint numbering agrees";
  back->load_weights(tmp.str("w")).assert_consumed();
  expect_same(run(*back, {img, ids}), want);
}

TEST(ModelJson, SequentialRoundTripWithEveryOtherLayerAndMixedPrecision) {
  chorus::internal::reset_runtime_for_testing();
  testing::TempDir tmp;
  auto mp = mixed_sequential();
  model::Sequential& m = *mp;
  const std::string json = m.to_json();
  EXPECT_NE(json.find(R"({"class_name": "Sequential", "config": {"name": "seq", "layers": [{"module": "keras.layers", )"
                      R"("class_name": "InputLayer", "config": {"batch_input_shape": [null, 6, 5], "dtype": )"
                      R"("float32", "sparse": false, "ragged": false, "name": "c1_input", "optional": false}, )"
                      R"("registered_name": null}, )"),
            std::string::npos)
      << json.substr(0, 400);
  EXPECT_NE(json.find(R"("dtype": {"module": "keras.mixed_precision", "class_name": "Policy", "config": )"
                      R"({"name": "mixed_bfloat16"}, "registered_name": null})"),
            std::string::npos);
  EXPECT_NE(json.find(R"("padding": [[1, 0], [2, 3]])"), std::string::npos);
  EXPECT_NE(json.find(R"("padding": "causal")"), std::string::npos);
  const Tensor x = rand({2, 6, 5}, 4);
  const Tensor want = m(x);
  m.save_weights(tmp.str("w"));
  auto back = model::model_from_json(json);  // the global policy is float32 now: each layer's own is read
  ASSERT_EQ(back->class_name(), "Sequential");
  EXPECT_TRUE(back->built()) << "the InputLayer's shape builds it";
  EXPECT_EQ(back->layers()[0]->dtype_policy().name(), "mixed_bfloat16");
  EXPECT_EQ(back->layers().back()->dtype_policy().name(), "float32");
  EXPECT_EQ(back->to_json(), json);
  back->load_weights(tmp.str("w")).assert_consumed();
  expect_same({(*back)(x)}, {want});
}

TEST(ModelJson, ModelFromJsonBuildsInTheCurrentStrategyScope) {
  chorus::internal::reset_runtime_for_testing();
  const std::string json = two_input_model()->to_json();
  chorus::testing::make_cpus(2);
  distribute::MirroredStrategy strategy(chorus::testing::cpus(2));
  auto scope = strategy.scope();
  auto m = model::model_from_json(json);
  EXPECT_EQ(&m->strategy(), &strategy);
  EXPECT_EQ(m->layers()[0]->name(), "img");
}

// A custom layer: registered by its user, it round-trips with "registered_name" = its class.
class Scale : public layers::Layer {
 public:
  explicit Scale(double factor) : factor_(factor) {}
  std::string class_name() const override { return "Scale"; }
  bool creates_weights() const override { return false; }
  void get_config(LayerConfig& c) const override { c.set("factor", factor_); }

 protected:
  Tensor call(const Tensor& x, bool) override { return x * factor_; }

 private:
  double factor_;
};

TEST(ModelJson, ACustomLayerRegisteredByItsUserRoundTrips) {
  chorus::internal::reset_runtime_for_testing();
  layers::register_layer_class("Scale",
                               [](const LayerConfig& c) { return std::make_shared<Scale>(c.get_double("factor")); });
  auto x = Input({3}, DType::kFloat32, "x");
  model::Functional m({x}, {(*std::make_shared<Scale>(2.5))(x)}, "m");
  const std::string json = m.to_json();
  EXPECT_NE(json.find(R"("module": "chorus", "class_name": "Scale", "config": {"name": "scale", "trainable": true, )"
                      R"("dtype": "float32", "factor": 2.5}, "registered_name": "Scale")"),
            std::string::npos)
      << json;
  auto back = model::model_from_json(json);
  const Tensor in = rand({2, 3}, 1);
  expect_same({(*back)(in)}, {m(in)});
  const auto classes = layers::registered_layer_classes();
  EXPECT_NE(std::find(classes.begin(), classes.end(), "Scale"), classes.end());
}

TEST(ModelJson, ToJsonRefusesWhatItCannotWrite) {
  chorus::internal::reset_runtime_for_testing();
  class NoConfig : public layers::Layer {
   public:
    std::string class_name() const override { return "NoConfig"; }
    bool creates_weights() const override { return false; }

   protected:
    Tensor call(const Tensor& x, bool) override { return x; }
  };
  auto x = Input({3}, DType::kFloat32, "x");
  model::Functional a({x}, {(*std::make_shared<NoConfig>())(x)}, "a");
  EXPECT_THROW_WITH(a.to_json(), InvalidArgumentError, "(NoConfig) does not define get_config");
  auto y = Input({3}, DType::kFloat32, "y");
  auto lambda = [](const Shape& s, DType d) { return Tensor::zeros(s, d); };
  model::Functional b({y}, {(*layers::Dense(2, "", true, lambda, initializers::zeros(), "mine"))(y)}, "b");
  EXPECT_THROW_WITH(b.to_json(), InvalidArgumentError, "layer 'mine' (Dense): config key 'kernel_initializer'",
                    "function of your own");
  class Sub : public model::Model {
   public:
    Sub() : model::Model("sub") {}
  };
  EXPECT_THROW_WITH(Sub().to_json(), InvalidArgumentError, "Functional and Sequential models only");
}

// A small valid Keras JSON, x → Dense d (relu) → Dense e, for the error cases to break.
constexpr const char* kDenseD = R"("units": 3, "activation": "relu")";
std::string small(const std::string& d_keys = kDenseD, const std::string& d_inbound = R"([[["x", 0, 0, {}]]])",
                  const std::string& outputs = R"([["e", 0, 0]])") {
  return R"({"class_name": "Functional", "config": {"name": "m", "trainable": true, "layers": [)"
         R"({"module": "keras.layers", "class_name": "InputLayer", "config": {"batch_input_shape": [null, 4], )"
         R"("dtype": "float32", "sparse": false, "ragged": false, "name": "x"}, "name": "x", "inbound_nodes": []}, )"
         R"({"class_name": "Dense", "config": {"name": "d", )" +
         d_keys + R"(}, "name": "d", "inbound_nodes": )" + d_inbound +
         R"(}, {"class_name": "Dense", "config": {"name": "e", "units": 2}, "name": "e", )"
         R"("inbound_nodes": [[["d", 0, 0, {}]]]}], "input_layers": [["x", 0, 0]], "output_layers": )" +
         outputs + "}}";
}

TEST(ModelJson, AHandWrittenKerasJsonWithDefaultsLoads) {
  chorus::internal::reset_runtime_for_testing();
  auto m = model::model_from_json(small());
  EXPECT_EQ(m->layers().size(), 3u);
  EXPECT_EQ((*m)(rand({2, 4}, 1)).shape(), Shape({2, 2}));
}

TEST(ModelJson, ErrorsNameTheLayerTheKeyAndWhatWasWrong) {
  chorus::internal::reset_runtime_for_testing();
  using model::model_from_json;
  std::string unknown = small();
  unknown.replace(unknown.find(R"("class_name": "Dense")"), 21, R"("class_name": "Bogus")");
  EXPECT_THROW_WITH(model_from_json(unknown), InvalidArgumentError, "layer 'd' has class 'Bogus'",
                    "the classes chorus has: ", "Conv2D", "Dense", "Functional", "InputLayer");
  EXPECT_THROW_WITH(model_from_json(small(kDenseD, R"([[["e", 0, 0, {}]]])")), InvalidArgumentError, "cycle", "'d'",
                    "'e'");
  EXPECT_THROW_WITH(model_from_json(small(kDenseD, R"([[["nope", 0, 0, {}]]])")), InvalidArgumentError,
                    "layer 'd' inbound node 0 reads layer 'nope', which is not in config.layers");
  EXPECT_THROW_WITH(model_from_json(small(kDenseD, R"([[["x", 0, 0, {}]]])", R"([["e", 1, 0]])")), InvalidArgumentError,
                    "reads node 1 of layer 'e', which has nodes 0 to 0");
  EXPECT_THROW_WITH(model_from_json(small(kDenseD, R"([[["x", 0, 0, {}]]])", R"([["e", 0, 2]])")), InvalidArgumentError,
                    "reads tensor 2 of layer 'e', whose call gives 1 tensor(s)");
  EXPECT_THROW_WITH(model_from_json(small(kDenseD, R"([[["x", 0, 0, {"training": true}]]])")), InvalidArgumentError,
                    "passes keyword arguments");
  EXPECT_THROW_WITH(model_from_json(small(R"("activation": "relu")")), InvalidArgumentError,
                    "layer 'd' (Dense): config key 'units' is missing");
  EXPECT_THROW_WITH(model_from_json(small(R"("units": 3, "use_bias": "yes")")), InvalidArgumentError,
                    "layer 'd' (Dense): config key 'use_bias' must be a boolean, got a string");
  EXPECT_THROW_WITH(model_from_json(small(R"("units": 3, "kernel_regularizer": {"class_name": "L2"})")),
                    InvalidArgumentError, "config key 'kernel_regularizer'", "only null is accepted");
  EXPECT_THROW_WITH(model_from_json(small(R"("units": 3, "kernel_initializer": "orthogonal")")), InvalidArgumentError,
                    "names initializer 'orthogonal', which chorus does not have");
  EXPECT_THROW_WITH(model_from_json(small(R"("units": 3, "activation": "swishy")")), InvalidArgumentError,
                    "config key 'activation'", "unknown activation 'swishy'");
  EXPECT_THROW_WITH(model_from_json(small(R"("units": 3, "trainable": false)")), InvalidArgumentError,
                    "config key 'trainable' is false");
  EXPECT_THROW_WITH(model_from_json(small(R"("units": 3, "dtype": "bfloat16")")), InvalidArgumentError,
                    "config key 'dtype'");
  std::string twice = small();
  twice.replace(twice.find(R"("name": "e", "units": 2}, "name": "e")"), 37, R"("name": "d", "units": 2}, "name": "d")");
  EXPECT_THROW_WITH(model_from_json(twice), InvalidArgumentError, "two layers are named 'd'");
  EXPECT_THROW_WITH(model_from_json(small().substr(0, 60)), InvalidArgumentError, "the model JSON is not valid JSON");
  EXPECT_THROW_WITH(
      model_from_json(R"({"class_name": "Functional", "config": {"name": "m", "layers": [], "a": 1, "a": 2}})"),
      InvalidArgumentError, "appears twice");
  EXPECT_THROW_WITH(model_from_json(R"({"class_name": "Conv2D", "config": {}})"), InvalidArgumentError,
                    "class_name 'Conv2D' is not a model");
  EXPECT_THROW_WITH(model_from_json(std::string(model::kMaxModelJsonBytes + 1, ' ')), ResourceExhaustedError,
                    "kMaxModelJsonBytes");
}

}  // namespace
}  // namespace chorus
