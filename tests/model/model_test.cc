// Layers, initializers, losses, metrics, Sequential naming, fit/evaluate/predict (default strategy
// and MirroredStrategy on logical CPU devices), callbacks.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <sstream>

#include "tests/core/test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/runtime.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/distribute/mirrored_variable.h>
#include <chorus/model/layers.h>
#include <chorus/model/model.h>
#include <chorus/ops/ops.h>
#include <chorus/optimizer/adam.h>
#include <chorus/optimizer/loss_scale_optimizer.h>
#include <chorus/optimizer/sgd.h>

namespace chorus {
namespace {

void make_cpus(int n) {
  chorus::internal::reset_runtime_for_testing();
  config::set_visible_devices({}, "GPU");
  if (n > 1) {
    std::vector<LogicalDeviceConfiguration> cfgs(static_cast<std::size_t>(n),
                                                 LogicalDeviceConfiguration{.memory_limit_mb = 256});
    config::set_logical_device_configuration(config::list_physical_devices("CPU")[0], cfgs);
  }
}

std::vector<float> vals(const Tensor& t) { return t.to_vector<float>(); }

TEST(Initializers, FansLimitsAndSeeds) {
  make_cpus(1);
  EXPECT_EQ(initializers::compute_fans(Shape{3, 3, 8, 16}), (std::pair<double, double>{72, 144}));
  auto g = initializers::glorot_uniform(7);
  const auto a = vals(g(Shape{100, 50}, DType::kFloat32));
  const double limit = std::sqrt(6.0 / 150);
  for (float v : a) EXPECT_LE(std::abs(v), limit);
  EXPECT_EQ(a, vals(g(Shape{100, 50}, DType::kFloat32)));  // seeded: the same values
  EXPECT_NE(a, vals(initializers::glorot_uniform(8)(Shape{100, 50}, DType::kFloat32)));
  const auto h = vals(initializers::he_normal(1)(Shape{400, 100}, DType::kFloat32));
  double var = 0;
  for (float v : h) var += v * v;
  EXPECT_NEAR(var / static_cast<double>(h.size()), 2.0 / 400, 0.2 * 2.0 / 400);
  EXPECT_EQ(vals(initializers::constant(2.5)(Shape{2}, DType::kFloat32)), (std::vector<float>{2.5f, 2.5f}));
}

TEST(Layers, DenseComputesXWPlusBAndNamesItsWeights) {
  make_cpus(1);
  model::Sequential m({layers::Dense(2, "", true, initializers::constant(0.5), initializers::constant(1.0))}, "seq");
  Tensor y = m(Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  EXPECT_EQ(vals(y), (std::vector<float>{4, 4, 8.5f, 8.5f}));
  auto vars = m.trainable_variables();
  ASSERT_EQ(vars.size(), 2u);
  EXPECT_EQ(vars[0].name(), "seq/dense/kernel");
  EXPECT_EQ(vars[1].name(), "seq/dense/bias");
  EXPECT_THROW_WITH(m(Tensor::zeros({2, 4})), InvalidArgumentError, "was built for inputs");
}

TEST(Layers, UniqueNamesAndSeedCnnShapes) {
  make_cpus(1);
  model::Sequential m({layers::Conv2D(32, 3, "relu"), layers::MaxPooling2D(2), layers::Conv2D(64, 3, "relu"),
                       layers::MaxPooling2D(2), layers::Conv2D(64, 3, "relu"), layers::Flatten(),
                       layers::Dense(64, "relu"), layers::Dense(10)});
  Tensor y = m(Tensor::zeros({5, 28, 28, 1}));
  EXPECT_EQ(y.shape(), Shape({5, 10}));
  std::vector<std::string> names;
  for (const auto& l : m.layers()) names.push_back(l->name());
  EXPECT_EQ(names, (std::vector<std::string>{"conv2d", "max_pooling2d", "conv2d_1", "max_pooling2d_1", "conv2d_2",
                                             "flatten", "dense", "dense_1"}));
  const std::string s = m.summary();
  EXPECT_NE(s.find("conv2d_1 (Conv2D)"), std::string::npos) << s;
  EXPECT_NE(s.find("Total params: 93322"), std::string::npos) << s;  // the seed CNN's Keras count
}

TEST(Layers, PoolingFlattenActivationEmbeddingDropout) {
  make_cpus(1);
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4}, {1, 2, 2, 1});
  EXPECT_EQ(vals((*layers::MaxPooling2D(2))(x)), std::vector<float>{4});
  EXPECT_EQ(vals((*layers::AveragePooling2D(2))(x)), std::vector<float>{2.5f});
  EXPECT_EQ((*layers::Flatten())(x).shape(), Shape({1, 4}));
  EXPECT_EQ(vals((*layers::Activation("relu"))(Tensor::from_vector<float>({-1, 2}, {1, 2}))),
            (std::vector<float>{0, 2}));
  EXPECT_THROW_WITH(layers::Activation("swishy"), InvalidArgumentError, "unknown activation");
  auto emb = layers::Embedding(5, 3, initializers::constant(0.25));
  EXPECT_EQ((*emb)(Tensor::from_vector<std::int32_t>({1, 4}, {2})).shape(), Shape({2, 3}));
  auto drop = layers::Dropout(0.5, 3);
  Tensor ones = Tensor::ones({1000});
  EXPECT_EQ(vals((*drop)(ones, false)), vals(ones));  // inference: identity
  int zeros = 0;
  for (float v : vals((*drop)(ones, true))) zeros += v == 0.0f;
  EXPECT_NEAR(zeros, 500, 60);
}

TEST(Layers, BatchNormalizationTrainsAndTracksMovingStatistics) {
  make_cpus(1);
  auto bn_ptr = layers::BatchNormalization(0.5);
  auto* bn = dynamic_cast<layers::BatchNormalizationLayer*>(bn_ptr.get());
  Tensor x = Tensor::from_vector<float>({1, 10, 3, 20}, {2, 2});  // channel 0: 1, 3; channel 1: 10, 20
  Tensor y = (*bn_ptr)(x, true);
  auto v = vals(y);
  EXPECT_NEAR(v[0], -1.0f, 1e-3f);
  EXPECT_NEAR(v[2], 1.0f, 1e-3f);
  EXPECT_EQ(vals(bn->moving_mean().value()), (std::vector<float>{1.0f, 7.5f}));       // 0.5*0 + 0.5*(2, 15)
  EXPECT_EQ(vals(bn->moving_variance().value()), (std::vector<float>{1.0f, 13.0f}));  // 0.5*1 + 0.5*(1, 25)
  EXPECT_FALSE(bn->moving_mean().trainable());
}

TEST(Losses, MatchHandComputedValues) {
  make_cpus(1);
  Tensor logits = Tensor::from_vector<double>({2, 1, 0, 0, 0, 3}, {2, 3});
  Tensor labels = Tensor::from_vector<std::int32_t>({0, 2});
  auto lse = [](double a, double b, double c) { return std::log(std::exp(a) + std::exp(b) + std::exp(c)); };
  const double l0 = lse(2, 1, 0) - 2, l1 = lse(0, 0, 3) - 3;
  auto pe = losses::SparseCategoricalCrossentropy(true).per_example(labels, logits).to_vector<double>();
  EXPECT_NEAR(pe[0], l0, 1e-12);
  EXPECT_NEAR(pe[1], l1, 1e-12);
  EXPECT_NEAR(losses::SparseCategoricalCrossentropy(true)(labels, logits).item<double>(), (l0 + l1) / 2, 1e-12);
  Tensor probs = ops::softmax(logits);
  EXPECT_NEAR(losses::SparseCategoricalCrossentropy(false)(labels, probs).item<double>(), (l0 + l1) / 2, 1e-9);
  Tensor onehot = ops::one_hot(labels, 3, 1, 0, DType::kFloat64);
  EXPECT_NEAR(losses::CategoricalCrossentropy(true)(onehot, logits).item<double>(), (l0 + l1) / 2, 1e-12);
  Tensor z = Tensor::from_vector<double>({1, 0}, {2, 1}), x = Tensor::from_vector<double>({0.5, -2}, {2, 1});
  const double b0 = std::log(1 + std::exp(-0.5)), b1 = std::log(1 + std::exp(-2.0));
  EXPECT_NEAR(losses::BinaryCrossentropy(true)(z, x).item<double>(), (b0 + b1) / 2, 1e-12);
  EXPECT_NEAR(losses::BinaryCrossentropy(false)(z, ops::sigmoid(x)).item<double>(), (b0 + b1) / 2, 1e-9);
  EXPECT_NEAR(losses::MeanSquaredError()(z, x).item<double>(), (0.25 + 4) / 2, 1e-12);
  EXPECT_NEAR(losses::compute_average_loss(Tensor::from_vector<double>({1, 2, 3}), 6).item<double>(), 1.0, 1e-12);
  EXPECT_EQ(losses::compute_average_loss(Tensor::zeros({0}, DType::kFloat64), 8).item<double>(), 0.0);
}

TEST(Metrics, AccuracyAndMeanAccumulateAndReset) {
  make_cpus(1);
  metrics::SparseCategoricalAccuracy acc;
  acc.update_state(Tensor::from_vector<std::int32_t>({0, 1}),
                   Tensor::from_vector<float>({0.9f, 0.1f, 0.8f, 0.2f}, {2, 2}));
  acc.update_state(Tensor::from_vector<std::int32_t>({1}), Tensor::from_vector<float>({0.1f, 0.9f}, {1, 2}));
  EXPECT_NEAR(acc.result(), 2.0 / 3, 1e-12);
  acc.reset_state();
  EXPECT_EQ(acc.result(), 0.0);
  metrics::Mean mean;
  mean.add(Tensor::from_vector<float>({1, 2, 3}));
  EXPECT_DOUBLE_EQ(mean.result(), 2.0);
  EXPECT_THROW_WITH(metrics::get("f1"), InvalidArgumentError, "unknown metric");
}

// A learnable two-blob problem: x ~ class center ± noise, 2 features, 2 classes.
data::Dataset blobs(int n, std::uint64_t seed, float magnitude = 1.0f, bool swap_labels = false) {
  std::vector<float> x(static_cast<std::size_t>(2 * n));
  std::vector<std::int32_t> y(static_cast<std::size_t>(n));
  std::uint64_t s = seed;
  auto rnd = [&s] {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<float>((s >> 40) & 0xffff) / 65535.0f - 0.5f;
  };
  for (int i = 0; i < n; ++i) {
    const int c = i % 2;
    y[static_cast<std::size_t>(i)] = swap_labels ? 1 - c : c;
    x[static_cast<std::size_t>(2 * i)] = magnitude * ((c ? 1.5f : -1.5f) + rnd());
    x[static_cast<std::size_t>(2 * i + 1)] = magnitude * ((c ? -1.0f : 1.0f) + rnd());
  }
  return data::Dataset::from_tensor_slices(
      {Tensor::from_vector<float>(x, {n, 2}), Tensor::from_vector<std::int32_t>(y)});
}

class Fit : public ::testing::TestWithParam<int> {};

TEST_P(Fit, LearnsUnderTheStrategy) {
  const int n = GetParam();
  make_cpus(n);
  std::vector<std::string> devices;
  for (int i = 0; i < n; ++i) devices.push_back("/cpu:" + std::to_string(i));
  distribute::MirroredStrategy strategy(devices);
  std::unique_ptr<model::Sequential> m;
  {
    auto scope = strategy.scope();
    m = std::make_unique<model::Sequential>(
        std::vector<layers::LayerPtr>{layers::Dense(8, "relu", true, initializers::glorot_uniform(1)),
                                      layers::Dense(2, "", true, initializers::glorot_uniform(2))});
    m->compile(std::make_shared<optimizers::Adam>(0.05), std::make_shared<losses::SparseCategoricalCrossentropy>(true),
               {"accuracy"});
  }
  // 203 examples in batches of 16: the last global batch (11 rows) is uneven over the replicas.
  auto history =
      m->fit(blobs(203, 5).batch(16), {.epochs = 4, .validation_data = blobs(64, 9).batch(32), .verbose = 0});
  ASSERT_EQ(history.history["loss"].size(), 4u);
  EXPECT_LT(history.history["loss"].back(), history.history["loss"].front());
  EXPECT_GT(history.history["val_accuracy"].back(), 0.95);
  auto eval = m->evaluate(blobs(64, 11).batch(20));
  EXPECT_GT(eval["accuracy"], 0.95);
  Tensor pred = m->predict(blobs(10, 12).batch(4));
  EXPECT_EQ(pred.shape(), Shape({10, 2}));
  // Replicas stay bitwise equal.
  for (const auto& v : m->trainable_variables()) {
    auto mv = std::dynamic_pointer_cast<distribute::MirroredVariable>(v.impl());
    ASSERT_NE(mv, nullptr);
    for (const auto& c : mv->components()) EXPECT_EQ(vals(c.value()), vals(mv->components()[0].value())) << v.name();
  }
}

INSTANTIATE_TEST_SUITE_P(Replicas, Fit, ::testing::Values(1, 2, 3));

// fit with a LossScaleOptimizer: the loss is scaled by 2^15 before the gradient and the gradients
// unscaled after it. A power of two commutes with float32 rounding (no overflow here), so the
// weights are bit for bit those of the inner optimizer alone; the scale's counter counts the steps.
TEST(FitWithLossScaling, TrainsBitwiseAsTheInnerOptimizer) {
  make_cpus(2);
  distribute::MirroredStrategy strategy({"/cpu:0", "/cpu:1"});
  const auto train = [&](bool scaled) {
    auto scope = strategy.scope();
    auto m = std::make_unique<model::Sequential>(
        std::vector<layers::LayerPtr>{layers::Dense(8, "relu", true, initializers::glorot_uniform(1)),
                                      layers::Dense(2, "", true, initializers::glorot_uniform(2))});
    std::shared_ptr<optimizers::Optimizer> opt = std::make_shared<optimizers::SGD>(0.1);
    if (scaled) opt = std::make_shared<optimizers::LossScaleOptimizer>(opt);
    m->compile(opt, std::make_shared<losses::SparseCategoricalCrossentropy>(true));
    m->fit(blobs(96, 5).batch(16), {.epochs = 2, .verbose = 0});
    std::vector<std::vector<float>> weights;
    for (const auto& v : m->trainable_variables()) weights.push_back(vals(v.read_value()));
    if (scaled) {
      auto& lso = dynamic_cast<optimizers::LossScaleOptimizer&>(m->optimizer());
      EXPECT_EQ(lso.loss_scale(), 32768.0);
      EXPECT_EQ(lso.dynamic_counter(), 12);  // 2 epochs of 6 finite steps
    }
    EXPECT_EQ(m->optimizer().iterations().read_value().item<std::int64_t>(), 12);
    return weights;
  };
  EXPECT_EQ(train(true), train(false));
}

// The loss really is scaled inside fit: with a scale of 2^127, inputs of magnitude ~20 and labels
// the initial weights get confidently wrong, the scaled gradients overflow float32; those steps are
// skipped and the scale halved until they are finite, and training goes on.
TEST(FitWithLossScaling, AnOverflowingScaleIsHalvedUntilTheGradientsAreFinite) {
  make_cpus(2);
  distribute::MirroredStrategy strategy({"/cpu:0", "/cpu:1"});
  auto scope = strategy.scope();
  model::Sequential m(std::vector<layers::LayerPtr>{layers::Dense(8, "relu", true, initializers::glorot_uniform(1)),
                                                    layers::Dense(2, "", true, initializers::glorot_uniform(2))});
  const double huge = std::ldexp(1.0, 127);
  auto lso = std::make_shared<optimizers::LossScaleOptimizer>(std::make_shared<optimizers::SGD>(0.1),
                                                              optimizers::LossScaleOptions{.initial_scale = huge});
  m.compile(lso, std::make_shared<losses::SparseCategoricalCrossentropy>(true));
  auto history = m.fit(blobs(96, 5, 20.0f, true).batch(16), {.epochs = 2, .verbose = 0});
  EXPECT_LT(lso->loss_scale(), huge);
  EXPECT_GT(lso->dynamic_counter(), 0);  // finite steps since the last halving were applied
  EXPECT_LT(lso->dynamic_counter(), 12);
  EXPECT_TRUE(std::isfinite(history.history["loss"].back()));
  for (const auto& v : m.trainable_variables())
    for (float x : vals(v.read_value())) EXPECT_TRUE(std::isfinite(x)) << v.name();
}

// TF's pattern: model, compile and fit all inside `strategy.scope()`. build() and fit() open the
// scope again themselves; that must not mirror the variables twice.
std::unique_ptr<model::Sequential> make_bn_model(distribute::Strategy& s) {
  auto scope = s.scope();
  auto m = std::make_unique<model::Sequential>(std::vector<layers::LayerPtr>{
      layers::Dense(8, "relu", true, initializers::glorot_uniform(1)), layers::BatchNormalization(0.9),
      layers::Dense(2, "", true, initializers::glorot_uniform(2))});
  m->compile(std::make_shared<optimizers::Adam>(0.05), std::make_shared<losses::SparseCategoricalCrossentropy>(true),
             {"accuracy"});
  return m;
}

// Every variable of the model and its optimizer: mirrored once (plain components, one per replica
// device, in replica order); returns their values (ON_READ ones aggregated, as a checkpoint reads).
std::vector<std::vector<float>> expect_mirrored_once(const model::Model& m) {
  const distribute::Strategy& s = m.strategy();
  std::vector<Variable> all = m.variables();
  for (const Variable& v : m.optimizer().variables()) all.push_back(v);
  std::vector<std::vector<float>> out;
  auto scope = m.strategy().scope();
  for (const Variable& v : all) {
    auto mv = std::dynamic_pointer_cast<distribute::MirroredVariable>(v.impl());
    EXPECT_NE(mv, nullptr) << v.name();
    if (mv == nullptr) continue;
    EXPECT_EQ(mv->components().size(), s.replica_devices().size()) << v.name();
    for (std::size_t r = 0; r < mv->components().size(); ++r) {
      const Variable& c = mv->components()[r];
      EXPECT_TRUE(std::dynamic_pointer_cast<distribute::MirroredVariable>(c.impl()) == nullptr)
          << v.name() << " component " << r << " is itself a MirroredVariable";
      EXPECT_EQ(c.device(), s.replica_devices()[r]) << v.name() << " " << r;
    }
    out.push_back(ops::cast(v.read_value(), DType::kFloat32).to_vector<float>());
  }
  return out;
}

TEST(FitInsideScope, MirrorsOnceAndTrainsAsFitOutsideTheScope) {
  make_cpus(2);
  distribute::MirroredStrategy strategy({"/cpu:0", "/cpu:1"});
  const auto train = blobs(96, 5).batch(16);
  std::unique_ptr<model::Sequential> inside;
  model::History h_inside;
  {
    auto scope = strategy.scope();
    inside = make_bn_model(strategy);
    h_inside = inside->fit(train, {.epochs = 2, .verbose = 0});  // builds the model and optimizer here
  }
  auto outside = make_bn_model(strategy);
  const auto h_outside = outside->fit(train, {.epochs = 2, .verbose = 0});
  std::map<std::string, double> eval_inside;
  {
    auto scope = strategy.scope();
    eval_inside = inside->evaluate(blobs(40, 9).batch(16));
  }
  const auto eval_outside = outside->evaluate(blobs(40, 9).batch(16));
  for (const auto& [k, v] : eval_outside) EXPECT_NEAR(eval_inside.at(k), v, 1e-6) << k;

  const auto a = expect_mirrored_once(*inside), b = expect_mirrored_once(*outside);
  // 2 dense kernels and biases, gamma, beta, moving mean and variance; iterations + Adam's 2 slots each.
  ASSERT_EQ(a.size(), 8u + 1u + 2u * 6u);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size()) << i;
    for (std::size_t k = 0; k < a[i].size(); ++k) EXPECT_NEAR(a[i][k], b[i][k], 1e-6 * (1 + std::abs(b[i][k]))) << i;
  }
  for (const char* key : {"loss", "accuracy"}) {
    ASSERT_EQ(h_inside.history.at(key).size(), 2u) << key;
    for (std::size_t e = 0; e < 2; ++e)
      EXPECT_NEAR(h_inside.history.at(key)[e], h_outside.history.at(key)[e], 1e-6) << key;
  }
  EXPECT_LT(h_inside.history.at("loss").back(), h_inside.history.at("loss").front());
}

TEST(Callbacks, EarlyStoppingSchedulerTensorBoardProgress) {
  make_cpus(1);
  model::Sequential m({layers::Dense(2, "", true, initializers::glorot_uniform(3))});
  m.compile(std::make_shared<optimizers::SGD>(0.1), std::make_shared<losses::SparseCategoricalCrossentropy>(true),
            {"accuracy"});
  const auto dir = std::filesystem::temp_directory_path() / ("chorus_tb_" + std::to_string(::getpid()));
  auto early = std::make_shared<callbacks::EarlyStopping>("loss", 0, /*min_delta=*/100.0);  // never "improves"
  std::vector<int> seen;
  auto sched = std::make_shared<callbacks::LearningRateScheduler>([&](int epoch, double lr) {
    seen.push_back(epoch);
    return lr / 2;
  });
  auto h = m.fit(
      blobs(32, 1).batch(8),
      {.epochs = 5, .callbacks = {early, sched, std::make_shared<callbacks::TensorBoard>(dir.string())}, .verbose = 0});
  EXPECT_EQ(h.history["loss"].size(), 2u);  // stopped after patience 0 was exceeded at epoch 1
  EXPECT_EQ(early->stopped_epoch(), 1);
  EXPECT_EQ(seen, (std::vector<int>{0, 1}));
  EXPECT_NEAR(m.optimizer().learning_rate(), 0.025, 1e-12);
  int files = 0;
  for (auto& p : std::filesystem::recursive_directory_iterator(dir))
    files += p.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  EXPECT_EQ(files, 2);  // train/ and validation/
  std::filesystem::remove_all(dir);
  std::ostringstream out;
  callbacks::ProgressBar bar(1, &out, false);
  bar.on_epoch_begin(m, 0);
  bar.on_train_batch_end(m, 3, 3, {{"loss", 0.5}, {"accuracy", 0.75}});
  bar.on_epoch_end(m, 0, {{"loss", 0.5}, {"accuracy", 0.75}});
  EXPECT_NE(out.str().find("Epoch 1/1\n3/3 [==============================]"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("- loss: 0.5000 - accuracy: 0.7500"), std::string::npos) << out.str();
  EXPECT_EQ(out.str().find('\r'), std::string::npos) << "one line per epoch, no redraws";
}

// CHORUS_PROGRESS picks the form; without it, a bar only for a person's terminal: never under a
// launcher (mpirun's ranks get a pty even when its output goes to a file) or in CI.
TEST(ModelCallbacks, ProgressModeFollowsTheEnvironment) {
  make_cpus(1);
  model::Sequential m({layers::Dense(2)});
  unsetenv("CHORUS_PROGRESS");
  setenv("CI", "true", 1);
  EXPECT_EQ(callbacks::progress_mode_from_environment(), callbacks::ProgressMode::kEpoch);
  unsetenv("CI");
  setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  // launcher_rank() is read once per process: whatever it read first, ctest's stdout is no terminal.
  EXPECT_EQ(callbacks::progress_mode_from_environment(), callbacks::ProgressMode::kEpoch);
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  setenv("CHORUS_PROGRESS", "bar", 1);
  EXPECT_EQ(callbacks::progress_mode_from_environment(), callbacks::ProgressMode::kBar);
  setenv("CHORUS_PROGRESS", "epoch", 1);
  EXPECT_EQ(callbacks::progress_mode_from_environment(), callbacks::ProgressMode::kEpoch);
  setenv("CHORUS_PROGRESS", "none", 1);
  std::ostringstream out;
  callbacks::ProgressBar silent(1, &out);
  silent.on_epoch_begin(m, 0);
  silent.on_train_batch_end(m, 1, 1, {{"loss", 0.5}});
  silent.on_epoch_end(m, 0, {{"loss", 0.5}});
  EXPECT_EQ(out.str(), "");
  setenv("CHORUS_PROGRESS", "fancy", 1);
  EXPECT_THROW_WITH(callbacks::ProgressBar(1, &out), InvalidArgumentError, "CHORUS_PROGRESS='fancy'");
  unsetenv("CHORUS_PROGRESS");
  std::ostringstream bar_out;
  callbacks::ProgressBar bar(1, &bar_out, true);
  bar.on_epoch_begin(m, 0);
  bar.on_train_batch_end(m, 1, 2, {{"loss", 0.5}});
  EXPECT_NE(bar_out.str().find('\r'), std::string::npos) << "a terminal's bar redraws";
}

// steps_per_execution (Keras's compile option, here FitOptions): on_train_batch_end runs after
// every N-th step and after the epoch's last — including a dataset of unknown length that ends
// inside an execution — with the logs the N = 1 run has at those steps; the weights are the same.
struct BatchRecorder final : callbacks::Callback {
  std::vector<std::pair<std::int64_t, double>> calls;  // step, loss
  void on_train_batch_end(model::Model&, std::int64_t step, std::int64_t, const callbacks::Logs& logs) override {
    calls.emplace_back(step, logs.at("loss"));
  }
};

TEST(ModelCallbacks, StepsPerExecutionCallsBackEveryNthStepAndAtTheEpochsEnd) {
  make_cpus(2);
  auto run = [](int n, bool unknown_length) {
    distribute::MirroredStrategy strategy({"/cpu:0", "/cpu:1"});
    std::unique_ptr<model::Sequential> m;
    {
      auto scope = strategy.scope();
      m = std::make_unique<model::Sequential>(
          std::vector<layers::LayerPtr>{layers::Dense(2, "", true, initializers::glorot_uniform(1))});
      m->compile(std::make_shared<optimizers::Adam>(0.05),
                 std::make_shared<losses::SparseCategoricalCrossentropy>(true));
    }
    auto recorder = std::make_shared<BatchRecorder>();
    data::Dataset d = blobs(160, 5).batch(16);  // 10 steps
    if (unknown_length) d = d.filter([](const data::Element&) { return true; });
    m->fit(d, {.epochs = 1, .callbacks = {recorder}, .verbose = 0, .steps_per_execution = n});
    std::vector<float> w;
    for (const Variable& v : m->trainable_variables())
      for (float x : v.read_value().to_vector<float>()) w.push_back(x);
    return std::make_pair(recorder->calls, w);
  };
  const auto [every, w1] = run(1, false);
  ASSERT_EQ(every.size(), 10u);
  for (const bool unknown : {false, true}) {
    const auto [some, w4] = run(4, unknown);
    ASSERT_EQ(some.size(), 3u) << "after steps 4, 8 and 10";
    const std::int64_t want[] = {4, 8, 10};
    for (std::size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(some[k].first, want[k]);
      EXPECT_EQ(some[k].second, every[static_cast<std::size_t>(want[k] - 1)].second) << "the same running loss";
    }
    EXPECT_EQ(w4, w1);
  }
  make_cpus(1);
  model::Sequential m({layers::Dense(2)});
  m.compile(std::make_shared<optimizers::Adam>(0.05), std::make_shared<losses::SparseCategoricalCrossentropy>(true));
  EXPECT_THROW_WITH(m.fit(blobs(8, 1).batch(4), {.verbose = 0, .steps_per_execution = 0}), InvalidArgumentError,
                    "steps_per_execution must be >= 1");
}

TEST(ModelErrors, FitBeforeCompile) {
  make_cpus(1);
  model::Sequential m({layers::Dense(2)});
  EXPECT_THROW_WITH(m.fit(blobs(8, 1).batch(4)), FailedPreconditionError, "compile");
}

}  // namespace
}  // namespace chorus
