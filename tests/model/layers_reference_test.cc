// Layers against float64 references computed here from the layers' own weights: Conv2D (SAME and
// VALID, strides, dilation, bias, activation), Dense, Embedding, BatchNormalization in inference,
// and synchronized BatchNormalization under MirroredStrategy against one replica on the whole
// batch.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/core/test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/runtime.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/model/layers.h>
#include <chorus/ops/ops.h>

namespace chorus {
namespace {

void make_cpus(int n) { chorus::testing::make_cpus(n, 128); }

std::vector<double> f64(const Tensor& t) { return ops::cast(t, DType::kFloat64).to_vector<double>(); }

Tensor random(const Shape& s, std::uint64_t seed) {
  return initializers::random_uniform(-1, 1, seed)(s, DType::kFloat32);
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << "at " << i;
}

// NHWC input, HWIO kernel, TF's SAME/VALID padding.
std::vector<double> conv_reference(const std::vector<double>& x, const Shape& xs, const std::vector<double>& k,
                                   const Shape& ks, const std::vector<double>& bias, int stride, int dilation,
                                   bool same, bool relu, Shape* out_shape) {
  const auto n = xs.dims()[0], h = xs.dims()[1], w = xs.dims()[2], c = xs.dims()[3];
  const auto kh = ks.dims()[0], kw = ks.dims()[1], f = ks.dims()[3];
  const auto ekh = (kh - 1) * dilation + 1, ekw = (kw - 1) * dilation + 1;
  const auto oh = same ? (h + stride - 1) / stride : (h - ekh) / stride + 1;
  const auto ow = same ? (w + stride - 1) / stride : (w - ekw) / stride + 1;
  const auto pad_h = same ? std::max<std::int64_t>((oh - 1) * stride + ekh - h, 0) / 2 : 0;
  const auto pad_w = same ? std::max<std::int64_t>((ow - 1) * stride + ekw - w, 0) / 2 : 0;
  *out_shape = Shape({n, oh, ow, f});
  std::vector<double> y(static_cast<std::size_t>(n * oh * ow * f));
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t i = 0; i < oh; ++i)
      for (std::int64_t j = 0; j < ow; ++j)
        for (std::int64_t o = 0; o < f; ++o) {
          double s = bias[static_cast<std::size_t>(o)];
          for (std::int64_t p = 0; p < kh; ++p)
            for (std::int64_t q = 0; q < kw; ++q) {
              const auto r = i * stride + p * dilation - pad_h, cc = j * stride + q * dilation - pad_w;
              if (r < 0 || r >= h || cc < 0 || cc >= w) continue;
              for (std::int64_t ch = 0; ch < c; ++ch)
                s += x[static_cast<std::size_t>(((b * h + r) * w + cc) * c + ch)] *
                     k[static_cast<std::size_t>(((p * kw + q) * c + ch) * f + o)];
            }
          y[static_cast<std::size_t>(((b * oh + i) * ow + j) * f + o)] = relu ? std::max(s, 0.0) : s;
        }
  return y;
}

struct ConvCase {
  int stride, dilation;
  bool same;
  const char* name;
};

class Conv2DReference : public ::testing::TestWithParam<ConvCase> {};

TEST_P(Conv2DReference, MatchesFloat64) {
  make_cpus(1);
  const ConvCase c = GetParam();
  auto layer =
      layers::Conv2D(4, {3, 3}, {c.stride, c.stride}, c.same ? "same" : "valid", "relu", {c.dilation, c.dilation}, true,
                     initializers::glorot_uniform(7), initializers::random_uniform(-0.5, 0.5, 8));
  const Shape xs({2, 9, 8, 3});
  Tensor x = random(xs, 1);
  Tensor y = (*layer)(x);
  const auto w = layer->weights();
  ASSERT_EQ(w.size(), 2u);
  Shape ys;
  const auto want = conv_reference(f64(x), xs, f64(w[0].value()), w[0].shape(), f64(w[1].value()), c.stride, c.dilation,
                                   c.same, /*relu=*/true, &ys);
  EXPECT_EQ(y.shape(), ys);
  EXPECT_EQ(layer->compute_output_shape(xs), ys);
  expect_close(f64(y), want, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Geometries, Conv2DReference,
                         ::testing::Values(ConvCase{1, 1, false, "valid"}, ConvCase{2, 1, true, "same_stride2"},
                                           ConvCase{1, 2, false, "valid_dilation2"}, ConvCase{1, 1, true, "same"}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(LayersReference, DenseWithActivationMatchesFloat64) {
  make_cpus(1);
  auto dense = layers::Dense(5, "relu", true, initializers::glorot_uniform(3), initializers::random_uniform(-1, 1, 4));
  Tensor x = random({4, 6}, 2);
  Tensor y = (*dense)(x);
  const auto w = dense->weights();
  const auto xv = f64(x), k = f64(w[0].value()), b = f64(w[1].value());
  std::vector<double> want(20);
  for (int i = 0; i < 4; ++i)
    for (int o = 0; o < 5; ++o) {
      double s = b[static_cast<std::size_t>(o)];
      for (int j = 0; j < 6; ++j) s += xv[static_cast<std::size_t>(i * 6 + j)] * k[static_cast<std::size_t>(j * 5 + o)];
      want[static_cast<std::size_t>(i * 5 + o)] = std::max(s, 0.0);
    }
  expect_close(f64(y), want, 1e-6);
}

TEST(LayersReference, EmbeddingReturnsTheTableRows) {
  make_cpus(1);
  auto emb = layers::Embedding(6, 3, initializers::random_uniform(-1, 1, 5));
  Tensor ids = Tensor::from_vector<std::int64_t>({5, 0, 2, 2}, {2, 2});
  Tensor y = (*emb)(ids);
  EXPECT_EQ(y.shape(), Shape({2, 2, 3}));
  const auto table = f64(emb->weights()[0].value());
  const auto got = f64(y);
  const std::vector<int> rows{5, 0, 2, 2};
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (std::size_t d = 0; d < 3; ++d) EXPECT_EQ(got[i * 3 + d], table[static_cast<std::size_t>(rows[i]) * 3 + d]);
}

TEST(LayersReference, BatchNormalizationInferenceUsesTheMovingStatistics) {
  make_cpus(1);
  auto bn_ptr = layers::BatchNormalization(0.9, 1e-3);
  auto* bn = dynamic_cast<layers::BatchNormalizationLayer*>(bn_ptr.get());
  Tensor x = random({8, 4}, 9);
  (*bn_ptr)(x, true);  // one training step moves the statistics
  bn->gamma().impl()->assign(Tensor::from_vector<float>({1.5f, 0.5f, 2.0f, 1.0f}, {4}));
  bn->beta().impl()->assign(Tensor::from_vector<float>({0.1f, -0.2f, 0.3f, 0.0f}, {4}));
  Tensor y = (*bn_ptr)(x, false);
  const auto xv = f64(x), mm = f64(bn->moving_mean().value()), mv = f64(bn->moving_variance().value());
  const auto g = f64(bn->gamma().value()), b = f64(bn->beta().value());
  std::vector<double> want(32);
  for (int i = 0; i < 8; ++i)
    for (int c = 0; c < 4; ++c) {
      const auto k = static_cast<std::size_t>(i * 4 + c), cc = static_cast<std::size_t>(c);
      want[k] = g[cc] * (xv[k] - mm[cc]) / std::sqrt(mv[cc] + 1e-3) + b[cc];
    }
  expect_close(f64(y), want, 1e-5);
}

TEST(LayersReference, SynchronizedBatchNormalizationSeesTheGlobalBatch) {
  make_cpus(2);
  Tensor x = random({8, 3}, 11);
  // Reference: one replica, the whole batch.
  auto plain = layers::BatchNormalization(0.5, 1e-3);
  const auto want = f64((*plain)(x, true));
  const auto want_mean = f64(dynamic_cast<layers::BatchNormalizationLayer*>(plain.get())->moving_mean().value());
  // Two replicas of 4 rows each, statistics all-reduced.
  distribute::MirroredStrategy strategy({"/cpu:0", "/cpu:1"});
  layers::LayerPtr sync;
  {
    auto scope = strategy.scope();
    sync = layers::BatchNormalization(0.5, 1e-3, true, true, /*synchronized=*/true);
  }
  auto it = strategy.experimental_distribute_dataset(data::Dataset::from_tensors({x})).make_iterator();
  auto out = strategy.run([&](const data::Element& e) { return (*sync)(e[0], true); }, *it.next());
  const auto got = f64(strategy.gather(out, 0));
  expect_close(got, want, 1e-5);
  {
    auto scope = strategy.scope();
    expect_close(f64(dynamic_cast<layers::BatchNormalizationLayer*>(sync.get())->moving_mean().value()), want_mean,
                 1e-6);
  }
}

}  // namespace
}  // namespace chorus
