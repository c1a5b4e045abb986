// Dtype policies (model/mixed_precision.h): names and errors, what a layer does with its policy
// (autocast inputs, float32 variables read in the compute dtype, float32 softmax / batch norm /
// loss), summaries, and fit under mixed_bfloat16 on one and two replicas against float32.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/core/test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/runtime.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/distribute/mirrored_variable.h>
#include <chorus/model/layers.h>
#include <chorus/model/mixed_precision.h>
#include <chorus/model/model.h>
#include <chorus/ops/ops.h>
#include <chorus/optimizer/adam.h>
#include <chorus/optimizer/loss_scale_optimizer.h>
#include <chorus/optimizer/sgd.h>

namespace chorus {
namespace {

using chorus::testing::cpus;
void make_cpus(int n) { chorus::testing::make_cpus(n, 256); }

std::vector<float> as_floats(const Tensor& t) {
  return (t.dtype() == DType::kFloat32 ? t : ops::cast(t, DType::kFloat32)).to_vector<float>();
}

// Every test leaves the global policy as it found it ("float32").
class MixedPrecision : public ::testing::Test {
 protected:
  void TearDown() override { mixed_precision::set_global_policy("float32"); }
};

TEST_F(MixedPrecision, PolicyNamesAreKerasAndTheirDtypes) {
  const mixed_precision::Policy def;
  EXPECT_EQ(def.name(), "float32");
  EXPECT_EQ(def.compute_dtype(), DType::kFloat32);
  EXPECT_FALSE(def.is_mixed());
  const mixed_precision::Policy bf("mixed_bfloat16");
  EXPECT_EQ(bf.compute_dtype(), DType::kBFloat16);
  EXPECT_EQ(bf.variable_dtype(), DType::kFloat32);
  EXPECT_TRUE(bf.is_mixed());
  const mixed_precision::Policy fp("mixed_float16");
  EXPECT_EQ(fp.compute_dtype(), DType::kFloat16);
  EXPECT_EQ(fp.variable_dtype(), DType::kFloat32);
  const mixed_precision::Policy d("float64");
  EXPECT_EQ(d.compute_dtype(), DType::kFloat64);
  EXPECT_EQ(d.variable_dtype(), DType::kFloat64);
  EXPECT_EQ(mixed_precision::global_policy().name(), "float32");
}

TEST_F(MixedPrecision, UnknownAndPure16BitPoliciesAreRefusedWithTheNameThatWorks) {
  try {
    mixed_precision::Policy p("mixed_bf16");
    FAIL() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("mixed_bfloat16"), std::string::npos) << e.what();
  }
  try {
    mixed_precision::set_global_policy("bfloat16");
    FAIL() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("use \"mixed_bfloat16\""), std::string::npos) << e.what();
  }
  EXPECT_EQ(mixed_precision::global_policy().name(), "float32");  // unchanged by the failed set
}

TEST_F(MixedPrecision, ALayerTakesTheGlobalPolicyWhenConstructed) {
  make_cpus(1);
  auto before = layers::Dense(4);
  mixed_precision::set_global_policy("mixed_bfloat16");
  auto after = layers::Dense(4);
  mixed_precision::set_global_policy("float32");
  EXPECT_EQ(before->dtype_policy().name(), "float32");
  EXPECT_EQ(after->dtype_policy().name(), "mixed_bfloat16");
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor y = (*after)(x);
  EXPECT_EQ(y.dtype(), DType::kBFloat16);
  for (const auto& w : after->weights()) EXPECT_EQ(w.dtype(), DType::kFloat32) << w.name();
  EXPECT_EQ((*before)(x).dtype(), DType::kFloat32);
}

// Dense under mixed_bfloat16 computes matmul(bf16(x), bf16(W)) + bf16(b): exactly what the float32
// layer gives on the bf16-rounded operands, up to the bf16 rounding of the result.
TEST_F(MixedPrecision, DenseComputesOnBf16RoundedOperandsWithinBf16Rounding) {
  make_cpus(1);
  mixed_precision::set_global_policy("mixed_bfloat16");
  auto mixed = layers::Dense(16, "", true, initializers::glorot_uniform(3), initializers::random_uniform(-0.5, 0.5, 4));
  mixed_precision::set_global_policy("float32");
  std::vector<float> xv(8 * 32);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
  const Tensor x = Tensor::from_vector<float>(xv, {8, 32});
  const Tensor y = (*mixed)(x);
  ASSERT_EQ(y.dtype(), DType::kBFloat16);
  const auto round = [](const Tensor& t) { return ops::cast(ops::cast(t, DType::kBFloat16), DType::kFloat32); };
  const auto w = mixed->weights();
  const Tensor ref = ops::add(ops::matmul(round(x), round(w[0].value())), round(w[1].value()));
  const auto got = as_floats(y), want = as_floats(ref);
  ASSERT_EQ(got.size(), want.size());
  // One bf16 rounding of the matmul result (2^-8 relative; oneDNN accumulates in float32) and one
  // of the sum with the bias.
  int inexact = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 2 * std::ldexp(1.0, -8) * (std::abs(want[i]) + 1.0)) << i;
    inexact += got[i] != want[i];
  }
  EXPECT_GT(inexact, 0) << "the output is not bf16-rounded: was the layer computing in float32?";
}

TEST_F(MixedPrecision, GradientsReachTheFloat32VariablesThroughTheCasts) {
  make_cpus(1);
  mixed_precision::set_global_policy("mixed_bfloat16");
  auto mixed = layers::Dense(8, "relu", true, initializers::glorot_uniform(5));
  mixed_precision::set_global_policy("float32");
  auto exact = layers::Dense(8, "relu", true, initializers::glorot_uniform(5));
  std::vector<float> xv(4 * 16);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = std::cos(0.21f * static_cast<float>(i));
  const Tensor x = Tensor::from_vector<float>(xv, {4, 16});
  const auto grads = [&](layers::Layer& l) {
    ops::GradientTape tape;
    Tensor y = l(x);
    Tensor loss = ops::reduce_sum(ops::square(ops::cast(y, DType::kFloat32)));
    return tape.gradient(loss, {l.weights()[0], l.weights()[1]});
  };
  const auto gm = grads(*mixed), ge = grads(*exact);
  for (int k = 0; k < 2; ++k) {
    ASSERT_EQ(gm[k].dtype(), DType::kFloat32);
    const auto a = as_floats(gm[k]), b = as_floats(ge[k]);
    double num = 0, den = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      num += (a[i] - b[i]) * (a[i] - b[i]);
      den += b[i] * b[i];
    }
    EXPECT_GT(den, 0);
    EXPECT_LT(std::sqrt(num / den), 0.03) << "weight " << k;  // a few bf16 roundings deep
    EXPECT_GT(num, 0) << "weight " << k << ": bitwise the float32 gradient";
  }
}

TEST_F(MixedPrecision, SoftmaxAndBatchNormRunInFloat32AndIdsAreNotCast) {
  make_cpus(1);
  mixed_precision::set_global_policy("mixed_bfloat16");
  auto soft = layers::Dense(5, "softmax");
  auto bn = layers::BatchNormalization();
  auto emb = layers::Embedding(10, 3);
  mixed_precision::set_global_policy("float32");
  const Tensor x = Tensor::from_vector<float>({0.1f, 2, -3, 4, 0.5f, 6}, {2, 3});
  const Tensor p = (*soft)(x);
  EXPECT_EQ(p.dtype(), DType::kFloat32);
  for (int r = 0; r < 2; ++r) {
    double sum = 0;
    for (int c = 0; c < 5; ++c) sum += as_floats(p)[static_cast<std::size_t>(5 * r + c)];
    EXPECT_NEAR(sum, 1.0, 1e-6);  // normalized in float32, not bf16 (2^-8)
  }
  const Tensor z = (*bn)(x, true);
  EXPECT_EQ(z.dtype(), DType::kBFloat16);
  EXPECT_EQ(bn->weights()[2].dtype(), DType::kFloat32);  // moving_mean
  const auto zv = as_floats(z);
  EXPECT_NEAR(zv[0], -1.0, 0.01);  // (0.1 - 2.05) / 1.95, normalized in float32
  const Tensor ids = Tensor::from_vector<std::int32_t>({1, 7}, {2});
  const Tensor e = (*emb)(ids);
  EXPECT_EQ(e.dtype(), DType::kBFloat16);
  EXPECT_EQ(as_floats(e), as_floats(ops::cast(ops::gather(emb->weights()[0].value(), ids, 0), DType::kBFloat16)));
}

// mixed_float16 on a CPU whose oneDNN has no float16 kernels: the first matmul says which policy
// works here, and nothing is left half-built (the layer can still be rebuilt under another policy).
TEST_F(MixedPrecision, Float16OnACpuWithoutFloat16KernelsNamesTheWorkingPolicy) {
  make_cpus(1);
  mixed_precision::set_global_policy("mixed_float16");
  auto dense = layers::Dense(4);
  mixed_precision::set_global_policy("float32");
  const Tensor x = Tensor::ones({2, 3});
  try {
    const Tensor y = (*dense)(x);
    EXPECT_EQ(y.dtype(), DType::kFloat16);  // this CPU's oneDNN has float16 kernels: it just works
  } catch (const UnimplementedError& e) {
    EXPECT_NE(std::string(e.what()).find("mixed_bfloat16"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("float16"), std::string::npos) << e.what();
  }
}

TEST_F(MixedPrecision, WithDtypePolicyOverridesBeforeTheBuildOnly) {
  make_cpus(1);
  mixed_precision::set_global_policy("mixed_bfloat16");
  auto out = layers::with_dtype_policy(layers::Dense(3), "float32");
  mixed_precision::set_global_policy("float32");
  EXPECT_EQ(out->dtype_policy().name(), "float32");
  (*out)(Tensor::ones({1, 2}));
  EXPECT_THROW(out->set_dtype_policy(mixed_precision::Policy("mixed_bfloat16")), FailedPreconditionError);
  EXPECT_THROW(layers::with_dtype_policy(nullptr, "float32"), InvalidArgumentError);
}

TEST_F(MixedPrecision, SummaryShowsEachLayersPolicyWhenMixed) {
  make_cpus(1);
  mixed_precision::set_global_policy("mixed_bfloat16");
  model::Sequential m({layers::Dense(8, "relu"), layers::with_dtype_policy(layers::Dense(2), "float32")});
  mixed_precision::set_global_policy("float32");
  m.build(Shape{1, 4});
  const std::string s = m.summary();
  EXPECT_NE(s.find("Dtype policy"), std::string::npos) << s;
  EXPECT_NE(s.find("mixed_bfloat16"), std::string::npos) << s;
  EXPECT_NE(s.find("float32"), std::string::npos) << s;
  model::Sequential plain({layers::Dense(2)});
  plain.build(Shape{1, 4});
  EXPECT_EQ(plain.summary().find("Dtype policy"), std::string::npos) << plain.summary();
}

data::Dataset blobs(int n, std::uint64_t seed) {
  std::vector<float> x(static_cast<std::size_t>(2 * n));
  std::vector<std::int32_t> y(static_cast<std::size_t>(n));
  std::uint64_t s = seed;
  auto rnd = [&s] {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<float>((s >> 40) & 0xffff) / 65535.0f - 0.5f;
  };
  for (int i = 0; i < n; ++i) {
    const int c = i % 2;
    y[static_cast<std::size_t>(i)] = c;
    x[static_cast<std::size_t>(2 * i)] = (c ? 1.5f : -1.5f) + rnd();
    x[static_cast<std::size_t>(2 * i + 1)] = (c ? -1.0f : 1.0f) + rnd();
  }
  return data::Dataset::from_tensor_slices(
      {Tensor::from_vector<float>(x, {n, 2}), Tensor::from_vector<std::int32_t>(y)});
}

// fit under mixed_bfloat16 learns what float32 learns, on 1 and 2 replicas; the replicas' float32
// weights stay bitwise equal; the loss is float32 (the last layer outputs bf16).
class MixedFit : public ::testing::TestWithParam<int> {
 protected:
  void TearDown() override { mixed_precision::set_global_policy("float32"); }
};

TEST_P(MixedFit, Bf16LearnsWhatFloat32Learns) {
  const int n = GetParam();
  make_cpus(n);
  std::vector<std::string> devices;
  for (int i = 0; i < n; ++i) devices.push_back("/cpu:" + std::to_string(i));
  distribute::MirroredStrategy strategy(devices);
  const auto train = [&](const char* policy) {
    mixed_precision::set_global_policy(policy);
    auto scope = strategy.scope();
    auto m = std::make_unique<model::Sequential>(
        std::vector<layers::LayerPtr>{layers::Dense(16, "relu", true, initializers::glorot_uniform(1)),
                                      layers::Dense(2, "", true, initializers::glorot_uniform(2))});
    mixed_precision::set_global_policy("float32");
    m->compile(std::make_shared<optimizers::Adam>(0.05), std::make_shared<losses::SparseCategoricalCrossentropy>(true),
               {"accuracy"});
    auto h = m->fit(blobs(203, 5).batch(16), {.epochs = 4, .verbose = 0});
    auto eval = m->evaluate(blobs(64, 11).batch(20));
    for (const auto& v : m->trainable_variables()) {
      EXPECT_EQ(v.dtype(), DType::kFloat32);
      auto mv = std::dynamic_pointer_cast<distribute::MirroredVariable>(v.impl());
      if (mv) {
        for (const auto& c : mv->components())
          EXPECT_EQ(as_floats(c.value()), as_floats(mv->components()[0].value())) << v.name();
      }
    }
    return std::make_pair(h.history["loss"], eval["accuracy"]);
  };
  const auto [loss16, acc16] = train("mixed_bfloat16");
  const auto [loss32, acc32] = train("float32");
  EXPECT_LT(loss16.back(), loss16.front());
  EXPECT_GT(acc16, 0.95);
  EXPECT_NEAR(acc16, acc32, 0.02);
  EXPECT_NE(loss16.back(), loss32.back()) << "identical losses: bf16 compute did not happen";
}

INSTANTIATE_TEST_SUITE_P(Replicas, MixedFit, ::testing::Values(1, 2));

// A convolutional model (Conv2D, pooling, Flatten, Dense) trains under mixed_bfloat16 with a
// LossScaleOptimizer (harmless for bf16; required for float16), the common Keras recipe.
TEST_F(MixedPrecision, CnnTrainsUnderMixedBf16WithLossScaling) {
  make_cpus(2);
  distribute::MirroredStrategy strategy({"/cpu:0", "/cpu:1"});
  std::vector<float> x(64 * 6 * 6);
  std::vector<std::int32_t> y(64);
  for (int i = 0; i < 64; ++i) {
    y[static_cast<std::size_t>(i)] = i % 2;
    for (int p = 0; p < 36; ++p)  // class 1: bright left half; class 0: bright right half
      x[static_cast<std::size_t>(i * 36 + p)] =
          ((p % 6 < 3) == (i % 2 == 1) ? 1.0f : 0.0f) + 0.1f * std::sin(static_cast<float>(i * 36 + p));
  }
  auto ds = data::Dataset::from_tensor_slices(
      {Tensor::from_vector<float>(x, {64, 6, 6, 1}), Tensor::from_vector<std::int32_t>(y)});
  mixed_precision::set_global_policy("mixed_bfloat16");
  auto scope = strategy.scope();
  model::Sequential m({layers::Conv2D(4, 3, "relu"), layers::MaxPooling2D(2), layers::Flatten(),
                       layers::with_dtype_policy(layers::Dense(2), "float32")});
  mixed_precision::set_global_policy("float32");
  m.compile(std::make_shared<optimizers::LossScaleOptimizer>(std::make_shared<optimizers::Adam>(0.05)),
            std::make_shared<losses::SparseCategoricalCrossentropy>(true), {"accuracy"});
  auto h = m.fit(ds.batch(16), {.epochs = 6, .verbose = 0});
  EXPECT_LT(h.history["loss"].back(), h.history["loss"].front());
  EXPECT_GT(m.evaluate(ds.batch(16))["accuracy"], 0.95);
  EXPECT_EQ(m.layers()[0]->dtype_policy().compute_dtype(), DType::kBFloat16);
}

}  // namespace
}  // namespace chorus
