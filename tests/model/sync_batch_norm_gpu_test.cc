// Synchronized BatchNormalization (Keras's synchronized=True) under MirroredStrategy on two virtual
// GPUs carved out of GPU:0: the statistics, outputs and gradients are those of the global batch,
// checked against a float64 reference computed here on the host — and, inside Model::fit, against
// the same training on one CPU device that sees the whole batch. Skips without a GPU (label gpu),
// with the CUDA runtime's reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "tests/core/virtual_gpus.h"
#include "tests/model/batch_norm_reference.h"
#include <chorus/core/config.h>
#include <chorus/core/gpu.h>
#include <chorus/core/runtime.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/distribute/mirrored_variable.h>
#include <chorus/model/layers.h>
#include <chorus/model/model.h>
#include <chorus/ops/ops.h>
#include <chorus/optimizer/sgd.h>

namespace chorus {
namespace {

using distribute::MirroredVariable;
using distribute::PerReplica;

class SyncBatchNormGpu : public chorus::testing::TwoVirtualGpusTest<512> {};

std::vector<double> host(const Tensor& t) { return ops::cast(t.to("/cpu:0"), DType::kFloat64).to_vector<double>(); }

// rows × c values (rows = batch × H × W, NHWC flattened), channel j drawn around offset[j] with
// scale[j]; `shift` is added to every value (so replicas' halves differ in distribution).
std::vector<float> draw(std::int64_t rows, std::int64_t c, const std::vector<double>& offset,
                        const std::vector<double>& scale, double shift, std::mt19937& rng) {
  std::normal_distribution<double> n(0.0, 1.0);
  std::vector<float> v(static_cast<std::size_t>(rows * c));
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < c; ++j)
      v[static_cast<std::size_t>(i * c + j)] =
          static_cast<float>(offset[static_cast<std::size_t>(j)] + shift + scale[static_cast<std::size_t>(j)] * n(rng));
  return v;
}

using chorus::testing::expect_close;
using chorus::testing::moments;
using chorus::testing::Moments;

// Batch sizes per replica: even, and uneven (the count is all-reduced too).
class SyncBatchNormSplit : public SyncBatchNormGpu, public ::testing::WithParamInterface<std::pair<int, int>> {};

TEST_P(SyncBatchNormSplit, StatisticsOutputsAndGradientsAreTheGlobalBatchs) {
  const auto [n0, n1] = GetParam();
  const std::int64_t h = 5, w = 4, c = 6;
  const double eps = 1e-3;
  std::mt19937 rng(20 + n0 * 31 + n1);
  std::uniform_real_distribution<double> u(-2.0, 2.0), s(0.5, 3.0);
  std::vector<double> offset(c), scale(c), gamma(c), beta(c);
  for (std::int64_t j = 0; j < c; ++j) {
    offset[static_cast<std::size_t>(j)] = u(rng);
    scale[static_cast<std::size_t>(j)] = s(rng);
    gamma[static_cast<std::size_t>(j)] = s(rng);
    beta[static_cast<std::size_t>(j)] = u(rng);
  }
  // Replica 1's rows are shifted: its own statistics differ clearly from the global ones.
  const std::vector<float> x0 = draw(n0 * h * w, c, offset, scale, 0.0, rng);
  const std::vector<float> x1 = draw(n1 * h * w, c, offset, scale, 1.5, rng);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<float> dy0(x0.size()), dy1(x1.size());
  for (auto& v : dy0) v = static_cast<float>(nd(rng));
  for (auto& v : dy1) v = static_cast<float>(nd(rng));

  distribute::MirroredStrategy strategy({"/gpu:0", "/gpu:1"});
  ASSERT_EQ(strategy.num_replicas_in_sync(), 2);
  layers::LayerPtr layer;
  layers::BatchNormalizationLayer* bn = nullptr;
  {
    auto scope = strategy.scope();
    // momentum 0: the moving statistics become exactly the batch statistics of the step.
    layer = layers::BatchNormalization(/*momentum=*/0.0, eps, true, true, /*synchronized=*/true);
    bn = dynamic_cast<layers::BatchNormalizationLayer*>(layer.get());
    ASSERT_NE(bn, nullptr);
    layer->build(Shape({n0, h, w, c}));
    std::vector<float> g32(gamma.begin(), gamma.end()), b32(beta.begin(), beta.end());
    Variable gv = bn->gamma(), bv = bn->beta();
    gv.assign(Tensor::from_vector<float>(g32, {c}));
    bv.assign(Tensor::from_vector<float>(b32, {c}));
    for (int j = 0; j < c; ++j) {  // what the layer reads is what the reference uses
      gamma[static_cast<std::size_t>(j)] = g32[static_cast<std::size_t>(j)];
      beta[static_cast<std::size_t>(j)] = b32[static_cast<std::size_t>(j)];
    }
  }
  const PerReplica<Tensor> xs({Tensor::from_vector<float>(x0, {n0, h, w, c}, "/gpu:0"),
                               Tensor::from_vector<float>(x1, {n1, h, w, c}, "/gpu:1")});
  const PerReplica<Tensor> dys({Tensor::from_vector<float>(dy0, {n0, h, w, c}, "/gpu:0"),
                                Tensor::from_vector<float>(dy1, {n1, h, w, c}, "/gpu:1")});
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

  // Reference: the global batch (both replicas' rows), in float64.
  std::vector<double> x(x0.begin(), x0.end()), dy(dy0.begin(), dy0.end());
  x.insert(x.end(), x1.begin(), x1.end());
  dy.insert(dy.end(), dy1.begin(), dy1.end());
  const Moments global = moments(x, c);
  const auto rows = static_cast<std::int64_t>(x.size()) / c;
  std::vector<double> xhat(x.size()), y(x.size()), mean_dxhat(c, 0.0), mean_dxhat_xhat(c, 0.0), dgamma(c, 0.0),
      dbeta(c, 0.0);
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
  std::vector<double> dx(x.size());
  double dx_scale = 0;
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < c; ++j) {
      const auto k = static_cast<std::size_t>(i * c + j), jj = static_cast<std::size_t>(j);
      dx[k] = (dy[k] * gamma[jj] - mean_dxhat[jj] - xhat[k] * mean_dxhat_xhat[jj]) / std::sqrt(global.var[jj] + eps);
      dx_scale = std::max(dx_scale, std::abs(dx[k]));
    }

  // The test can tell global from per-replica statistics: replica 1's own mean is far off.
  const Moments local1 = moments(std::vector<double>(x.begin() + static_cast<std::ptrdiff_t>(x0.size()), x.end()), c);
  double gap = 0;
  for (std::int64_t j = 0; j < c; ++j)
    gap = std::max(gap, std::abs(local1.mean[static_cast<std::size_t>(j)] - global.mean[static_cast<std::size_t>(j)]));
  ASSERT_GT(gap, 0.3);

  // Batch statistics: every replica's component of the moving statistics, on its own GPU.
  for (const Variable* v : {&bn->moving_mean(), &bn->moving_variance()}) {
    auto mv = std::dynamic_pointer_cast<MirroredVariable>(v->impl());
    ASSERT_NE(mv, nullptr) << v->name();
    ASSERT_EQ(mv->components().size(), 2u);
    for (std::size_t r = 0; r < 2; ++r) {
      EXPECT_EQ(mv->components()[r].device(), strategy.replica_devices()[r]) << v->name();
      // float32 count and sum (a shift K), then the shifted sums Σ(x − K), Σ(x − K)² of the global
      // batch (model/normalization.cc); the large-mean case is normalization_test.cc's.
      expect_close(host(mv->components()[r].read_value()), v == &bn->moving_mean() ? global.mean : global.var, 1e-5,
                   1e-4, v->name() + " replica " + std::to_string(r));
    }
  }
  // Outputs, with each replica's rows on its own GPU.
  const std::size_t split = x0.size();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(out[r].y.device_name(), runtime::find("/gpu:" + std::to_string(r))->name());
    const auto lo = r == 0 ? 0 : static_cast<std::ptrdiff_t>(split);
    const auto hi = r == 0 ? static_cast<std::ptrdiff_t>(split) : static_cast<std::ptrdiff_t>(x.size());
    expect_close(host(out[r].y), std::vector<double>(y.begin() + lo, y.begin() + hi), 1e-5, 1e-4,
                 "y replica " + std::to_string(r));
    // The input gradient goes through the all-reduce's backward (every replica's dy matters).
    expect_close(host(out[r].dx), std::vector<double>(dx.begin() + lo, dx.begin() + hi), 0, 2e-4 * dx_scale,
                 "dx replica " + std::to_string(r));
  }
  // gamma/beta gradients are per replica (the optimizer sums them): the sum is the global one.
  std::vector<double> dg(c), db(c);
  const auto g0 = host(out[0].dgamma), g1 = host(out[1].dgamma), b0 = host(out[0].dbeta), b1 = host(out[1].dbeta);
  for (std::size_t j = 0; j < static_cast<std::size_t>(c); ++j) {
    dg[j] = g0[j] + g1[j];
    db[j] = b0[j] + b1[j];
  }
  expect_close(dg, dgamma, 1e-4, 1e-3, "dgamma");
  expect_close(db, dbeta, 1e-4, 1e-3, "dbeta");
}

INSTANTIATE_TEST_SUITE_P(Splits, SyncBatchNormSplit, ::testing::Values(std::make_pair(8, 8), std::make_pair(9, 6)),
                         [](const auto& info) {
                           return "rows" + std::to_string(info.param.first) + "_" + std::to_string(info.param.second);
                         });

// A model with synchronized batch normalization trained with fit on two GPUs (each sees half of
// every batch) ends where the same training on one CPU device (the whole batch) ends.
std::unique_ptr<model::Sequential> make_model(distribute::Strategy& s) {
  auto scope = s.scope();
  auto m = std::make_unique<model::Sequential>(std::vector<layers::LayerPtr>{
      layers::Conv2D(4, 3, "", 1, "valid", true, initializers::glorot_uniform(5)),
      layers::BatchNormalization(0.8, 1e-3, true, true, /*synchronized=*/true), layers::Activation("relu"),
      layers::Flatten(), layers::Dense(3, "", true, initializers::glorot_uniform(6))});
  m->compile(std::make_shared<optimizers::SGD>(0.05), std::make_shared<losses::SparseCategoricalCrossentropy>(true));
  return m;
}

std::vector<std::vector<double>> values(const model::Model& m) {
  auto scope = m.strategy().scope();  // ON_READ moving statistics read as their aggregate
  std::vector<std::vector<double>> out;
  for (const auto& v : m.variables()) out.push_back(host(v.read_value().reshape(Shape{v.shape().num_elements()})));
  return out;
}

TEST_F(SyncBatchNormGpu, FitMatchesOneCpuReplicaOnTheWholeBatch) {
  std::mt19937 rng(7);
  std::normal_distribution<double> nd(0.0, 1.0);
  const std::int64_t n = 64;
  std::vector<float> x(static_cast<std::size_t>(n * 6 * 6 * 2));
  std::vector<std::int32_t> labels(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    labels[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(rng() % 3);
    // The second half of each batch is shifted: per-replica statistics would differ.
    const double shift = (i % 32) >= 16 ? 1.0 : -0.5;
    for (std::int64_t k = 0; k < 72; ++k) x[static_cast<std::size_t>(i * 72 + k)] = static_cast<float>(shift + nd(rng));
  }
  const auto ds = data::Dataset::from_tensor_slices(
                      {Tensor::from_vector<float>(x, {n, 6, 6, 2}), Tensor::from_vector<std::int32_t>(labels)})
                      .batch(32);

  distribute::MirroredStrategy on_gpus({"/gpu:0", "/gpu:1"});
  auto m = make_model(on_gpus);
  const auto h = m->fit(ds, {.epochs = 3, .verbose = 0});
  distribute::MirroredStrategy on_cpu({"/cpu:0"});
  auto ref = make_model(on_cpu);
  const auto h_ref = ref->fit(ds, {.epochs = 3, .verbose = 0});

  // Every component of every variable equal across the GPUs, bitwise.
  for (const auto& v : m->variables()) {
    auto mv = std::dynamic_pointer_cast<MirroredVariable>(v.impl());
    ASSERT_NE(mv, nullptr) << v.name();
    EXPECT_EQ(host(mv->components()[1].read_value()), host(mv->components()[0].read_value())) << v.name();
  }
  const auto a = values(*m), b = values(*ref);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), 8u);  // conv kernel, bias; gamma, beta, moving mean, moving variance; dense kernel, bias
  for (std::size_t i = 0; i < a.size(); ++i) expect_close(a[i], b[i], 1e-4, 1e-4, m->variables()[i].name());
  // The epoch losses too (each replica's loss is over the global batch, then summed).
  expect_close(h.history.at("loss"), h_ref.history.at("loss"), 1e-4, 1e-5, "loss per epoch");
  EXPECT_LT(h.history.at("loss").back(), h.history.at("loss").front());
}

}  // namespace
}  // namespace chorus
