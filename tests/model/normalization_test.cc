// Synchronized BatchNormalization (model/normalization.cc) on two logical CPU devices against
// float64 references computed here: the batch statistics stay accurate (and finite) in float32
// when |mean| >> std, where E[x²] − mean² cancels to noise; outputs and gradients are those of the
// global batch (even, uneven and empty per-replica batches); a global batch with no rows leaves the
// moving statistics alone. The GPU twin is sync_batch_norm_gpu_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>

#include "tests/core/test_util.h"
#include "tests/model/batch_norm_reference.h"
#include <chorus/core/config.h>
#include <chorus/core/runtime.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/distribute/mirrored_variable.h>
#include <chorus/model/layers.h>
#include <chorus/ops/ops.h>

namespace chorus {
namespace {

using distribute::MirroredVariable;
using distribute::PerReplica;

void make_cpus(int n) { chorus::testing::make_cpus(n, 128); }

std::vector<double> f64(const Tensor& t) { return ops::cast(t, DType::kFloat64).to_vector<double>(); }

// rows × c float32 values, channel j ~ N(offset[j] + shift, scale[j]²) (scale 0: constant).
std::vector<float> draw(std::int64_t rows, const std::vector<double>& offset, const std::vector<double>& scale,
                        double shift, std::mt19937& rng) {
  std::normal_distribution<double> n(0.0, 1.0);
  const auto c = static_cast<std::int64_t>(offset.size());
  std::vector<float> v(static_cast<std::size_t>(rows * c));
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < c; ++j) {
      const auto jj = static_cast<std::size_t>(j);
      v[static_cast<std::size_t>(i * c + j)] = static_cast<float>(offset[jj] + shift + scale[jj] * n(rng));
    }
  return v;
}

using chorus::testing::expect_close;
using chorus::testing::moments;
using chorus::testing::Moments;

// A synchronized layer built in `strategy`'s scope with momentum 0 (the moving statistics become
// the step's batch statistics exactly) and the given gamma/beta.
layers::LayerPtr make_sync_bn(distribute::MirroredStrategy& strategy, const Shape& input, double eps,
                              const std::vector<float>& gamma, const std::vector<float>& beta) {
  const std::int64_t c = input.dims().back();
  auto scope = strategy.scope();
  auto layer = layers::BatchNormalization(/*momentum=*/0.0, eps, true, true, /*synchronized=*/true);
  layer->build(input);
  auto* bn = dynamic_cast<layers::BatchNormalizationLayer*>(layer.get());
  Variable g = bn->gamma(), b = bn->beta();
  g.assign(Tensor::from_vector<float>(gamma, {c}));
  b.assign(Tensor::from_vector<float>(beta, {c}));
  return layer;
}

// Every replica's component of a moving statistic.
std::vector<std::vector<double>> components(const Variable& v) {
  auto mv = std::dynamic_pointer_cast<MirroredVariable>(v.impl());
  EXPECT_NE(mv, nullptr) << v.name();
  std::vector<std::vector<double>> out;
  if (mv != nullptr)
    for (const Variable& c : mv->components()) out.push_back(f64(c.read_value()));
  return out;
}

TEST(SyncBatchNormalization, LargeMeanSmallStdVarianceStaysAccurateInFloat32) {
  make_cpus(2);
  // Channels: mean 1e4 std 1 (the case of the report); mean −2e4 std 0.5; a constant channel
  // (variance 0: must not come out negative → NaN); mean 3e3 std 1e-2.
  const std::vector<double> offset{1e4, -2e4, 1e4 + 0.5, 3e3}, scale{1.0, 0.5, 0.0, 1e-2};
  const auto c = static_cast<std::int64_t>(offset.size());
  const double eps = 1e-3;
  const std::int64_t n0 = 64, n1 = 37;  // uneven: the count is reduced too
  std::mt19937 rng(1234);
  const std::vector<float> x0 = draw(n0, offset, scale, 0.0, rng), x1 = draw(n1, offset, scale, 0.0, rng);
  const std::vector<float> gamma{1.5f, 0.5f, 2.0f, 1.0f}, beta{0.1f, -0.2f, 0.3f, 0.0f};

  distribute::MirroredStrategy strategy({"/cpu:0", "/cpu:1"});
  auto layer = make_sync_bn(strategy, Shape({1, c}), eps, gamma, beta);
  auto* bn = dynamic_cast<layers::BatchNormalizationLayer*>(layer.get());
  const PerReplica<Tensor> xs(
      {Tensor::from_vector<float>(x0, {n0, c}, "/cpu:0"), Tensor::from_vector<float>(x1, {n1, c}, "/cpu:1")});
  auto ys = strategy.run([&](const Tensor& x) { return (*layer)(x, /*training=*/true); }, xs);

  std::vector<double> x(x0.begin(), x0.end());
  x.insert(x.end(), x1.begin(), x1.end());
  const Moments want = moments(x, c);
  // The batch variance (= the moving variance, momentum 0) within 1e-3 relative of float64, on
  // every replica; the constant channel's exactly 0. The mean within float32's resolution at 1e4.
  for (const auto& got : components(bn->moving_variance())) {
    for (std::int64_t j = 0; j < c; ++j) {
      const auto jj = static_cast<std::size_t>(j);
      ASSERT_TRUE(std::isfinite(got[jj])) << "channel " << j;
      EXPECT_GE(got[jj], 0.0) << "channel " << j;
      if (scale[jj] == 0.0) {
        EXPECT_EQ(got[jj], 0.0) << "constant channel";
      } else {
        EXPECT_NEAR(got[jj], want.var[jj], 1e-3 * want.var[jj]) << "channel " << j;
      }
    }
  }
  for (const auto& got : components(bn->moving_mean())) expect_close(got, want.mean, 2e-7, 0, "moving mean");
  // Outputs: γ (x − mean) / sqrt(var + eps) + β, every row, finite.
  std::vector<double> y(x.size());
  for (std::size_t k = 0; k < x.size(); ++k) {
    const auto j = k % static_cast<std::size_t>(c);
    y[k] = gamma[j] * (x[k] - want.mean[j]) / std::sqrt(want.var[j] + eps) + beta[j];
  }
  const auto got_y = f64(strategy.gather(ys, 0));
  expect_close(got_y, y, 0, 2e-3, "y");

  // Plain BatchNormalization on the global batch, one device: the same statistics and outputs.
  auto plain = layers::BatchNormalization(0.0, eps);
  auto* pbn = dynamic_cast<layers::BatchNormalizationLayer*>(plain.get());
  plain->build(Shape({1, c}));
  Variable(pbn->gamma()).assign(Tensor::from_vector<float>(gamma, {c}));
  Variable(pbn->beta()).assign(Tensor::from_vector<float>(beta, {c}));
  std::vector<float> xf(x0);
  xf.insert(xf.end(), x1.begin(), x1.end());
  const auto plain_y = f64((*plain)(Tensor::from_vector<float>(xf, {n0 + n1, c}), true));
  const auto plain_var = f64(pbn->moving_variance().value());
  for (std::int64_t j = 0; j < c; ++j) {
    const auto jj = static_cast<std::size_t>(j);
    EXPECT_NEAR(plain_var[jj], components(bn->moving_variance())[0][jj], 1e-3 * want.var[jj] + 1e-7) << "channel " << j;
  }
  // Plain subtracts its float32 mean, whose rounding (up to an ulp at |mean|, 2.4e-4 at 3e3) the
  // normalization magnifies by γ/sqrt(var + eps); the synchronized layer subtracts (x − K) −
  // (mean − K) and is closer to float64 (checked above).
  ASSERT_EQ(plain_y.size(), got_y.size());
  for (std::size_t k = 0; k < got_y.size(); ++k) {
    const auto j = k % static_cast<std::size_t>(c);
    const auto m = static_cast<float>(std::abs(want.mean[j]));
    const double ulp = std::nextafter(m, 2 * m) - m;
    EXPECT_NEAR(got_y[k], plain_y[k], 1e-4 + std::abs(gamma[j]) * ulp / std::sqrt(want.var[j] + eps))
        << "y against plain BatchNormalization at " << k;
  }
}

// (rows on replica 0, rows on replica 1, channel offset): outputs and gradients of the global batch.
class SyncBatchNormGradients : public ::testing::TestWithParam<std::tuple<int, int, double>> {};

TEST_P(SyncBatchNormGradients, AreTheGlobalBatchs) {
  const auto [n0, n1, base] = GetParam();
  make_cpus(2);
  const std::int64_t h = 3, w = 2, c = 4;
  const double eps = 1e-3;
  std::mt19937 rng(static_cast<unsigned>(20 + n0 * 31 + n1));
  std::uniform_real_distribution<double> u(-2.0, 2.0), s(0.5, 3.0);
  std::vector<double> offset(c), scale(c);
  std::vector<float> gamma(c), beta(c);
  for (std::size_t j = 0; j < static_cast<std::size_t>(c); ++j) {
    offset[j] = base + u(rng);
    scale[j] = s(rng);
    gamma[j] = static_cast<float>(s(rng));
    beta[j] = static_cast<float>(u(rng));
  }
  // Replica 1's rows are shifted: its own statistics differ clearly from the global ones.
  const std::vector<float> x0 = draw(n0 * h * w, offset, scale, 0.0, rng),
                           x1 = draw(n1 * h * w, offset, scale, 1.5, rng);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<float> dy0(x0.size()), dy1(x1.size());
  for (auto& v : dy0) v = static_cast<float>(nd(rng));
  for (auto& v : dy1) v = static_cast<float>(nd(rng));

  distribute::MirroredStrategy strategy({"/cpu:0", "/cpu:1"});
  auto layer = make_sync_bn(strategy, Shape({1, h, w, c}), eps, gamma, beta);
  auto* bn = dynamic_cast<layers::BatchNormalizationLayer*>(layer.get());
  const PerReplica<Tensor> xs({Tensor::from_vector<float>(x0, {n0, h, w, c}, "/cpu:0"),
                               Tensor::from_vector<float>(x1, {n1, h, w, c}, "/cpu:1")});
  const PerReplica<Tensor> dys({Tensor::from_vector<float>(dy0, {n0, h, w, c}, "/cpu:0"),
                                Tensor::from_vector<float>(dy1, {n1, h, w, c}, "/cpu:1")});
  struct Out {
    Tensor y, dx, dgamma, dbeta;
  };
  auto out = strategy.run(
      [&](const Tensor& x, const Tensor& dy) {
        ops::GradientTape tape(/*persistent=*/true);
        tape.watch(x);
        Tensor y = (*layer)(x, /*training=*/true);
        Tensor dx = tape.gradient(y, std::vector<Tensor>{x}, dy)[0];
        auto dvars = tape.gradient(y, std::vector<Variable>{bn->gamma(), bn->beta()}, dy);
        return Out{y, dx, dvars[0], dvars[1]};
      },
      xs, dys);

  // Reference: the global batch, in float64 (TF's batch-norm gradient).
  std::vector<double> x(x0.begin(), x0.end()), dy(dy0.begin(), dy0.end());
  x.insert(x.end(), x1.begin(), x1.end());
  dy.insert(dy.end(), dy1.begin(), dy1.end());
  const Moments global = moments(x, c);
  const auto rows = static_cast<std::int64_t>(x.size()) / c;
  std::vector<double> xhat(x.size()), y(x.size()), mean_dxhat(c, 0.0), mean_dxhat_xhat(c, 0.0), dgamma(c, 0.0),
      dbeta(c, 0.0), dx(x.size());
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < c; ++j) {
      const auto k = static_cast<std::size_t>(i * c + j), jj = static_cast<std::size_t>(j);
      xhat[k] = (x[k] - global.mean[jj]) / std::sqrt(global.var[jj] + eps);
      y[k] = gamma[jj] * xhat[k] + beta[jj];
      mean_dxhat[jj] += dy[k] * gamma[jj] / static_cast<double>(rows);
      mean_dxhat_xhat[jj] += dy[k] * gamma[jj] * xhat[k] / static_cast<double>(rows);
      dgamma[jj] += dy[k] * xhat[k];
      dbeta[jj] += dy[k];
    }
  double dx_scale = 0;
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < c; ++j) {
      const auto k = static_cast<std::size_t>(i * c + j), jj = static_cast<std::size_t>(j);
      dx[k] = (dy[k] * gamma[jj] - mean_dxhat[jj] - xhat[k] * mean_dxhat_xhat[jj]) / std::sqrt(global.var[jj] + eps);
      dx_scale = std::max(dx_scale, std::abs(dx[k]));
    }

  for (const auto& got : components(bn->moving_variance())) expect_close(got, global.var, 1e-4, 1e-6, "variance");
  for (const auto& got : components(bn->moving_mean())) expect_close(got, global.mean, 1e-6, 1e-5, "mean");
  const std::size_t split = x0.size();
  for (int r = 0; r < 2; ++r) {
    const auto lo = r == 0 ? 0 : static_cast<std::ptrdiff_t>(split);
    const auto hi = r == 0 ? static_cast<std::ptrdiff_t>(split) : static_cast<std::ptrdiff_t>(x.size());
    expect_close(f64(out[r].y), std::vector<double>(y.begin() + lo, y.begin() + hi), 1e-4, 1e-4,
                 "y replica " + std::to_string(r));
    // The input gradient goes through the all-reduce's backward (every replica's dy matters).
    expect_close(f64(out[r].dx), std::vector<double>(dx.begin() + lo, dx.begin() + hi), 0, 2e-4 * dx_scale,
                 "dx replica " + std::to_string(r));
  }
  // gamma/beta gradients are per replica (the optimizer sums them): the sum is the global one.
  std::vector<double> dg(c), db(c);
  const auto g0 = f64(out[0].dgamma), g1 = f64(out[1].dgamma), b0 = f64(out[0].dbeta), b1 = f64(out[1].dbeta);
  for (std::size_t j = 0; j < static_cast<std::size_t>(c); ++j) {
    dg[j] = g0[j] + g1[j];
    db[j] = b0[j] + b1[j];
  }
  expect_close(dg, dgamma, 1e-4, 1e-3, "dgamma");
  expect_close(db, dbeta, 1e-4, 1e-3, "dbeta");
}

INSTANTIATE_TEST_SUITE_P(Splits, SyncBatchNormGradients,
                         ::testing::Values(std::make_tuple(8, 8, 0.0), std::make_tuple(9, 6, 0.0),
                                           std::make_tuple(0, 7, 0.0), std::make_tuple(9, 6, 1e4)),
                         [](const auto& info) {
                           return "rows" + std::to_string(std::get<0>(info.param)) + "_" +
                                  std::to_string(std::get<1>(info.param)) +
                                  (std::get<2>(info.param) != 0.0 ? "_mean1e4" : "");
                         });

TEST(SyncBatchNormalization, NoRowsAnywhereLeavesTheMovingStatisticsAlone) {
  make_cpus(2);
  const std::int64_t c = 3;
  distribute::MirroredStrategy strategy({"/cpu:0", "/cpu:1"});
  auto layer = make_sync_bn(strategy, Shape({1, c}), 1e-3, {1, 1, 1}, {0, 0, 0});
  auto* bn = dynamic_cast<layers::BatchNormalizationLayer*>(layer.get());
  auto ys = strategy.run([&] { return (*layer)(Tensor::zeros({0, c}), /*training=*/true); });
  for (const Tensor& y : ys.values()) EXPECT_EQ(y.shape(), Shape({0, c}));
  for (const auto& got : components(bn->moving_mean())) EXPECT_EQ(got, (std::vector<double>{0, 0, 0}));
  for (const auto& got : components(bn->moving_variance())) EXPECT_EQ(got, (std::vector<double>{1, 1, 1}));
}

}  // namespace
}  // namespace chorus
