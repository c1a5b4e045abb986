// Mixed precision on the GPU (issue 16): a small CNN trained with fit under mixed_float16 (with a
// LossScaleOptimizer, as Keras prescribes) and under mixed_bfloat16 on two virtual GPUs carved out
// of GPU:0 — cuBLAS/cuDNN in 16 bits with float32 accumulation — learns the synthetic digits as
// float32 does, its float32 variables stay bitwise identical on both GPUs, and its logits agree
// with the same network's float32 logits within 16-bit rounding. Skips without a GPU (label gpu).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "tests/core/virtual_gpus.h"
#include <chorus/data/synthetic_digits.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/distribute/mirrored_variable.h>
#include <chorus/model/layers.h>
#include <chorus/model/mixed_precision.h>
#include <chorus/model/model.h>
#include <chorus/ops/ops.h>
#include <chorus/optimizer/adam.h>
#include <chorus/optimizer/loss_scale_optimizer.h>

namespace chorus {
namespace {

class MixedPrecisionGpu : public chorus::testing::TwoVirtualGpusTest<1024> {
 protected:
  void TearDown() override {
    mixed_precision::set_global_policy("float32");
    TwoVirtualGpusTest::TearDown();
  }
};

std::unique_ptr<model::Sequential> make_cnn(distribute::Strategy& s, const char* policy) {
  std::unique_ptr<model::Sequential> m;
  auto scope = s.scope();
  namespace L = layers;
  mixed_precision::set_global_policy(policy);
  m = std::make_unique<model::Sequential>(std::vector<L::LayerPtr>{
      L::Conv2D(16, 3, "relu", 1, "valid", true, initializers::glorot_uniform(11)), L::MaxPooling2D(2),
      L::Conv2D(32, 3, "relu", 1, "valid", true, initializers::glorot_uniform(12)), L::MaxPooling2D(2), L::Flatten(),
      L::with_dtype_policy(L::Dense(10, "", true, initializers::glorot_uniform(13)), "float32")});
  mixed_precision::set_global_policy("float32");
  m->compile(std::make_shared<optimizers::LossScaleOptimizer>(std::make_shared<optimizers::Adam>(2e-3)),
             std::make_shared<losses::SparseCategoricalCrossentropy>(/*from_logits=*/true), {"accuracy"});
  return m;
}

TEST_F(MixedPrecisionGpu, Float16AndBfloat16TrainLikeFloat32OnTwoVirtualGpus) {
  distribute::MirroredStrategy strategy({"/gpu:0", "/gpu:1"});
  const auto train = data::synthetic_digits(2048, 1).batch(64);
  const auto held_out = data::synthetic_digits(512, 2).batch(128);
  std::map<std::string, double> accuracy;
  for (const char* policy : {"float32", "mixed_float16", "mixed_bfloat16"}) {
    SCOPED_TRACE(policy);
    auto m = make_cnn(strategy, policy);
    auto h = m->fit(train, {.epochs = 2, .verbose = 0});
    EXPECT_LT(h.history["loss"].back(), h.history["loss"].front());
    accuracy[policy] = m->evaluate(held_out)["accuracy"];
    for (const auto& v : m->trainable_variables()) {
      EXPECT_EQ(v.dtype(), DType::kFloat32) << v.name();
      auto mv = std::dynamic_pointer_cast<distribute::MirroredVariable>(v.impl());
      ASSERT_NE(mv, nullptr);
      EXPECT_EQ(mv->components()[0].value().to_vector<float>(), mv->components()[1].value().to_vector<float>())
          << v.name();
    }
    // The same trained weights read in float32: the 16-bit network's logits within its rounding.
    if (std::string(policy) != "float32") {
      const auto x = data::synthetic_digits_arrays(32, 3).images.to("/gpu:0");
      const Tensor mixed = (*m)(x, false);
      ASSERT_EQ(mixed.dtype(), DType::kFloat32);  // the output layer is float32
      auto twin = make_cnn(strategy, "float32");
      twin->build(x.shape());
      const auto src = m->trainable_variables();
      auto dst = twin->trainable_variables();
      for (std::size_t i = 0; i < src.size(); ++i) dst[i].assign(src[i].read_value());
      const auto a = mixed.to_vector<float>(), b = (*twin)(x, false).to_vector<float>();
      double worst = 0, scale = 0;
      for (std::size_t i = 0; i < a.size(); ++i) {
        worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
        scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
      }
      EXPECT_LT(worst, (std::string(policy) == "mixed_float16" ? 0.01 : 0.05) * scale) << "max |logit| " << scale;
    }
  }
  EXPECT_GT(accuracy["float32"], 0.9);
  EXPECT_NEAR(accuracy["mixed_float16"], accuracy["float32"], 0.03);
  EXPECT_NEAR(accuracy["mixed_bfloat16"], accuracy["float32"], 0.03);
}

}  // namespace
}  // namespace chorus
