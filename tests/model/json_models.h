// The models of the architecture-JSON tests (model/serialization.h), built the same way by
// serialization_test.cc and keras_interop_test.cc; keras_interop.py's json_models() builds them in
// tf_keras with the same names, arguments and call order.
#pragma once

#include <memory>

#include <chorus/model/conv_layers.h>
#include <chorus/model/functional.h>
#include <chorus/model/layers.h>
#include <chorus/model/merge_layers.h>
#include <chorus/model/mixed_precision.h>
#include <chorus/model/shape_layers.h>

namespace chorus::testing {

using layers::Input;
using layers::KerasTensor;

// Two inputs (an image and ids), Conv2D/pooling/BatchNormalization/Flatten/Dropout, Embedding, a
// Dense shared by both branches, Add and Concatenate, a nested functional model.
inline std::unique_ptr<model::Functional> two_input_model() {
  auto img = Input({8, 8, 3}, DType::kFloat32, "img");
  auto ids = Input({5}, DType::kInt32, "ids");
  KerasTensor h =
      (*layers::Conv2D(4, 3, "relu", 1, "valid", true, initializers::he_normal(7), initializers::zeros(), "conv"))(img);
  h = (*layers::MaxPooling2D(2, 0, "valid", "pool"))(h);
  h = (*layers::BatchNormalization(0.9, 1e-3, true, true, false, "bn"))(h);
  h = (*layers::Flatten("flat"))(h);
  h = (*layers::Dropout(0.25, 3, "drop"))(h);
  h = (*layers::Dense(6, "", true, initializers::glorot_uniform(1), initializers::zeros(), "dense_img"))(h);
  KerasTensor e = (*layers::Embedding(10, 4, initializers::random_uniform(-0.1, 0.1, 2), "emb"))(ids);
  e = (*layers::Flatten("flat_ids"))(e);
  e = (*layers::Dense(6, "tanh", true, initializers::glorot_uniform(3), initializers::constant(0.5), "dense_ids"))(e);
  auto shared = layers::Dense(6, "relu", true, initializers::glorot_uniform(4), initializers::zeros(), "shared");
  KerasTensor a = (*shared)(h), b = (*shared)(e);
  KerasTensor sum = (*layers::Add("add"))({a, b});
  KerasTensor cat = (*layers::Concatenate(-1, "cat"))({a, b});
  auto inner_in = Input({6}, DType::kFloat32, "inner_in");
  auto inner = std::make_shared<model::Functional>(
      std::vector<KerasTensor>{inner_in},
      std::vector<KerasTensor>{(*layers::Dense(2, "sigmoid", true, initializers::glorot_uniform(5),
                                               initializers::zeros(), "inner_out"))(inner_in)},
      "inner");
  KerasTensor out0 = (*inner)(sum);
  KerasTensor out1 = (*layers::Activation("gelu", "act"))(cat);
  return std::make_unique<model::Functional>(std::vector<KerasTensor>{img, ids}, std::vector<KerasTensor>{out0, out1},
                                             "outer");
}

// Every other layer class, under mixed_bfloat16 with a float32 output layer, built for (6, 5).
inline std::unique_ptr<model::Sequential> mixed_sequential() {
  mixed_precision::set_global_policy("mixed_bfloat16");
  auto m = std::make_unique<model::Sequential>(
      std::vector<layers::LayerPtr>{
          layers::Conv1D(4, 3, 1, "causal", "relu", true, 1, 1, initializers::glorot_uniform(1), initializers::zeros(),
                         "c1"),
          layers::Reshape({6, 4, 1}, "reshape"), layers::ZeroPadding2D({1, 0}, {2, 3}, "pad"),
          layers::DepthwiseConv2D(3, 1, "same", 2, "", true, 1, initializers::glorot_uniform(2), initializers::zeros(),
                                  "dw"),
          layers::AveragePooling2D(1, 1, "same", "avg"), layers::Permute({2, 1, 3}, "perm"),
          layers::GlobalMaxPooling2D(true, "gmax"), layers::GlobalAveragePooling2D(false, "gavg"),
          layers::with_dtype_policy(
              layers::Dense(3, "softmax", true, initializers::glorot_uniform(3), initializers::zeros(), "out"),
              "float32")},
      "seq");
  mixed_precision::set_global_policy("float32");
  m->build(Shape{1, 6, 5});
  return m;
}

}  // namespace chorus::testing
