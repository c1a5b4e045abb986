// clip_by_norm, global_norm, clip_by_global_norm, clip_by_value, and the optimizers' clipnorm /
// global_clipnorm / clipvalue options against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/optimizer/test_util.h"
#include <chorus/optimizer/adam.h>
#include <chorus/optimizer/clipping.h>
#include <chorus/optimizer/sgd.h>

namespace chorus::optimizers {
namespace {

using testing::f64;
using testing::host;
using testing::OptimizerTest;

TEST_F(OptimizerTest, ClipByNorm) {
  // ‖(3, 4)‖ = 5: clipped to norm 1 → (0.6, 0.8); to norm 10 → unchanged.
  testing::expect_near_all(clip_by_norm(f64({3, 4}), 1.0).to_vector<double>(), {0.6, 0.8}, 1e-15, "clip 1");
  testing::expect_near_all(clip_by_norm(f64({3, 4}), 10.0).to_vector<double>(), {3, 4}, 0, "clip 10");
  testing::expect_near_all(clip_by_norm(f64({0, 0}), 1.0).to_vector<double>(), {0, 0}, 0, "zero stays zero");
  Tensor f = clip_by_norm(Tensor::from_vector<float>({3, 4}, {1, 2}), 2.5);
  EXPECT_EQ(f.dtype(), DType::kFloat32);
  EXPECT_EQ(f.shape(), Shape({1, 2}));
  testing::expect_near_all(f.to_vector<double>(), {1.5, 2.0}, 1e-7, "float32");
  EXPECT_FALSE(clip_by_norm(Tensor(), 1.0).defined());
  EXPECT_THROW_WITH(clip_by_norm(f64({1}), 0.0), InvalidArgumentError, "clip_norm", "> 0");
}

TEST_F(OptimizerTest, GlobalNormAndClipByGlobalNorm) {
  // Norms 5 and 12 → global norm 13.
  std::vector<Tensor> gs{f64({3, 4}), Tensor(), f64({12})};
  EXPECT_DOUBLE_EQ(global_norm(gs).item<double>(), 13.0);
  auto clipped = clip_by_global_norm(gs, 6.5);  // scale 0.5
  testing::expect_near_all(clipped[0].to_vector<double>(), {1.5, 2.0}, 1e-15, "g0");
  EXPECT_FALSE(clipped[1].defined());
  testing::expect_near_all(clipped[2].to_vector<double>(), {6.0}, 1e-15, "g2");
  auto same = clip_by_global_norm(gs, 20.0);
  testing::expect_near_all(same[0].to_vector<double>(), {3, 4}, 1e-15, "unclipped");
  auto zeros = clip_by_global_norm({f64({0, 0})}, 1.0);
  testing::expect_near_all(zeros[0].to_vector<double>(), {0, 0}, 0, "zero norm");
  auto inf = clip_by_global_norm({f64({INFINITY, 1.0})}, 1.0);  // Keras: NaN everywhere
  EXPECT_TRUE(std::isnan(inf[0].to_vector<double>()[1]));
}

TEST_F(OptimizerTest, ClipByValue) {
  testing::expect_near_all(clip_by_value(f64({-3, -0.5, 0.25, 7}), -1, 1).to_vector<double>(), {-1, -0.5, 0.25, 1}, 0,
                           "clip");
  EXPECT_THROW_WITH(clip_by_value(f64({1}), 1, -1), InvalidArgumentError, "clip_value_min");
}

TEST_F(OptimizerTest, SgdClipnormClipsEachGradientSeparately) {
  SGD sgd({.learning_rate = 1.0, .clipnorm = 1.0});
  Variable a = make_variable({.initial_value = f64({0, 0}), .name = "a"});
  Variable b = make_variable({.initial_value = f64({0}), .name = "b"});
  for (int k = 0; k < 3; ++k) sgd.apply_gradients({{f64({3, 4}), a}, {f64({0.5}), b}});
  testing::expect_near_all(host(a), {-1.8, -2.4}, 1e-15, "a: clipped to (0.6, 0.8) each step");
  testing::expect_near_all(host(b), {-1.5}, 1e-15, "b: below the norm, unchanged");
}

TEST_F(OptimizerTest, SgdGlobalClipnormScalesAllGradientsTogether) {
  SGD sgd({.learning_rate = 1.0, .global_clipnorm = 6.5});
  Variable a = make_variable({.initial_value = f64({0, 0}), .name = "a"});
  Variable b = make_variable({.initial_value = f64({0}), .name = "b"});
  for (int k = 0; k < 2; ++k) sgd.apply_gradients({{f64({3, 4}), a}, {f64({12}), b}});
  testing::expect_near_all(host(a), {-3.0, -4.0}, 1e-15, "a");
  testing::expect_near_all(host(b), {-12.0}, 1e-15, "b");
}

TEST_F(OptimizerTest, AdamClipnormFeedsClippedGradientsToTheMoments) {
  Adam adam({.learning_rate = 0.1, .clipnorm = 2.5});
  Variable w = make_variable({.initial_value = f64({1, 1}), .name = "w"});
  adam.apply_gradients({{f64({3, 4}), w}});
  // Clipped g = (1.5, 2); m = 0.1·g, v = 0.001·g²; w −= lr·sqrt(1−β₂)/(1−β₁)·m/(sqrt(v)+ε).
  testing::expect_near_all(host(adam.get_slot(w, "m")), {0.15, 0.2}, 1e-15, "m");
  testing::expect_near_all(host(adam.get_slot(w, "v")), {0.001 * 2.25, 0.001 * 4}, 1e-15, "v");
  const double lr_t = 0.1 * std::sqrt(0.001) / 0.1;
  testing::expect_near_all(
      host(w), {1 - lr_t * 0.15 / (std::sqrt(0.00225) + 1e-7), 1 - lr_t * 0.2 / (std::sqrt(0.004) + 1e-7)}, 1e-14, "w");
}

TEST_F(OptimizerTest, SgdClipvalue) {
  SGD sgd({.learning_rate = 1.0, .clipvalue = 0.5});
  Variable w = make_variable({.initial_value = f64({0, 0, 0}), .name = "w"});
  sgd.apply_gradients({{f64({3, -4, 0.25}), w}});
  testing::expect_near_all(host(w), {-0.5, 0.5, -0.25}, 0, "w");
}

TEST_F(OptimizerTest, OnlyOneClippingOption) {
  EXPECT_THROW_WITH(SGD({.clipnorm = 1.0, .global_clipnorm = 1.0}), InvalidArgumentError,
                    "Only one of `clipnorm`, `clipvalue` and `global_clipnorm` can be set", "clipnorm=1.0",
                    "global_clipnorm=1.0");
  EXPECT_THROW_WITH(Adam({.clipnorm = -1.0}), InvalidArgumentError, "clipnorm", "-1");
}

}  // namespace
}  // namespace chorus::optimizers
