// A small ResNet (He et al., 2015) in Keras's functional API, for 28×28×1 digits: the model of
// examples/resnet_mirrored.cc, also built by tests/model/resnet_parity_test.cc (whose tf_keras
// twin, tests/model/resnet_parity.py, builds the same graph with the same layer names in the same
// call order, so both sides number the layers alike and read each other's save_weights).
//
//   image (28, 28, 1)
//   stem:   Conv2D 3×3 (widths[0], no bias) → BatchNormalization → ReLU
//   stage s = 1..S, block b = 1..blocks_per_stage (a "basic block"):
//           main path: Conv2D 3×3, stride 2 in the first block of stages 2..S → BN → ReLU
//                      → Conv2D 3×3 → BN
//           shortcut:  the block's input, or — where the stride or the width changes — a
//                      projection: Conv2D 1×1 with that stride (no bias) → BN
//           Add(main, shortcut) → ReLU
//   GlobalAveragePooling2D → Dense(classes) (logits)
//
// Layers are named "stem_conv", "s2b1_conv1", "s2b1_proj_bn", "s2b1_add", ... Convolutions use
// padding "same" (TF's rule: with stride 2 on an even size the extra row and column of padding go
// at the bottom and right) and he_normal kernels; BN layers take `bn_momentum`, `bn_epsilon` and
// `synchronized_bn` (Keras's synchronized=True: the global batch's statistics under a strategy).
//
// Call inside the scope of the strategy the model will train under: layers build (create their
// weights) when called on the KerasTensors. Errors are those of the layers (model/layers.h).
#pragma once

#include <chorus/chorus.h>

#include <string>
#include <vector>

namespace resnet {

struct ResNetOptions {
  std::vector<std::int64_t> widths = {16, 32, 64};  // one stage per entry
  int blocks_per_stage = 1;
  std::int64_t classes = 10;
  double bn_momentum = 0.9;
  double bn_epsilon = 1e-3;
  bool synchronized_bn = false;
};

// The model's input and its logits: make a model of them with chorus::model::Functional (or a
// subclass of it).
struct ResNetGraph {
  chorus::layers::KerasTensor image, logits;
};

inline ResNetGraph build_resnet(const ResNetOptions& o) {
  namespace L = chorus::layers;
  using chorus::layers::KerasTensor;
  auto conv = [](std::int64_t filters, std::int64_t kernel, std::int64_t strides, const std::string& name) {
    return L::Conv2D(filters, kernel, "", strides, "same", /*use_bias=*/false, chorus::initializers::he_normal(),
                     chorus::initializers::zeros(), name);
  };
  auto bn = [&o](const std::string& name) {
    return L::BatchNormalization(o.bn_momentum, o.bn_epsilon, true, true, o.synchronized_bn, name);
  };
  const KerasTensor image = L::Input({28, 28, 1}, chorus::DType::kFloat32, "image");
  KerasTensor x = (*conv(o.widths.at(0), 3, 1, "stem_conv"))(image);
  x = (*L::Activation("relu", "stem_relu"))((*bn("stem_bn"))(x));
  std::int64_t channels = o.widths.at(0);
  for (std::size_t s = 0; s < o.widths.size(); ++s) {
    for (int b = 0; b < o.blocks_per_stage; ++b) {
      std::string p = "s";  // "s2b1_" (appended: GCC 12 misreads "s" + std::to_string(...) under -Wrestrict)
      p.append(std::to_string(s + 1)).append("b").append(std::to_string(b + 1)).append("_");
      const std::int64_t width = o.widths[s], stride = s > 0 && b == 0 ? 2 : 1;
      KerasTensor h = (*conv(width, 3, stride, p + "conv1"))(x);
      h = (*L::Activation("relu", p + "relu1"))((*bn(p + "bn1"))(h));
      h = (*bn(p + "bn2"))((*conv(width, 3, 1, p + "conv2"))(h));
      KerasTensor shortcut = x;
      if (stride != 1 || width != channels) shortcut = (*bn(p + "proj_bn"))((*conv(width, 1, stride, p + "proj"))(x));
      x = (*L::Activation("relu", p + "out"))((*L::Add(p + "add"))({h, shortcut}));
      channels = width;
    }
  }
  x = (*L::GlobalAveragePooling2D(false, "pool"))(x);
  return {image, (*L::Dense(o.classes, "", true, chorus::initializers::glorot_uniform(), chorus::initializers::zeros(),
                            "logits"))(x)};
}

}  // namespace resnet
