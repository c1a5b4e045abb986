// Compressed all-reduce (distribute/communication_options.h) under MirroredStrategy on 2 and 3
// logical CPU devices (the shared-memory backend): the stated error bound against the exact sum,
// that compression really happened (results representable in 16 bits, different from float32's,
// half the bytes), kNone bitwise the uncompressed path, integers and 16-bit inputs untouched,
// float16 overflow to Inf and a LossScaleOptimizer skipping that step on every replica, the
// strategy default vs explicit options, validation, and fit training with compressed gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "tests/core/test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/distribution.h>
#include <chorus/core/runtime.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/distribute/replica_context.h>
#include <chorus/model/layers.h>
#include <chorus/model/losses.h>
#include <chorus/model/model.h>
#include <chorus/ops/ops.h>
#include <chorus/optimizer/loss_scale_optimizer.h>
#include <chorus/optimizer/sgd.h>

namespace chorus::distribute {
namespace {

using chorus::testing::cpus;
void make_cpus(int n) { chorus::testing::make_cpus(n, 128); }

StrategyReplicaContext& ctx() {
  auto* c = dynamic_cast<StrategyReplicaContext*>(get_replica_context());
  if (c == nullptr) throw InternalError("not in a strategy replica context");
  return *c;
}

// Replica r's element i of tensor t: magnitudes 2^-8 .. 2^9 with both signs and ~17 random
// mantissa bits (inside float16's normal range, mostly not representable in 16 bits).
double noisy(int r, std::int64_t i, int t) {
  std::uint64_t h = static_cast<std::uint64_t>(i) * 0x9E3779B97F4A7C15ull ^
                    (static_cast<std::uint64_t>(r) + 1) * 0xC2B2AE3D27D4EB4Full ^ static_cast<std::uint64_t>(t) << 50;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  const double mantissa = 1.0 + static_cast<double>(h % 131071) / 131071.0;
  const int exponent = static_cast<int>((h >> 20) % 18) - 8;
  return ((h >> 40) & 1 ? -1.0 : 1.0) * std::ldexp(mantissa, exponent);
}

Tensor noisy_tensor(int r, int t, const Shape& shape, DType dtype) {
  std::vector<double> v(static_cast<std::size_t>(shape.num_elements()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = noisy(r, static_cast<std::int64_t>(i), t);
  return ops::cast(Tensor::from_vector<double>(v, shape), dtype);
}

// The gradient list of the bound tests: float32 tensors packed together, one of float64.
const std::vector<std::pair<Shape, DType>> kGrads = {
    {Shape({1000}), DType::kFloat32}, {Shape({7, 13}), DType::kFloat32}, {Shape({300}), DType::kFloat64}};

std::vector<Tensor> grads_of(int r) {
  std::vector<Tensor> g;
  for (std::size_t t = 0; t < kGrads.size(); ++t)
    g.push_back(noisy_tensor(r, static_cast<int>(t), kGrads[t].first, kGrads[t].second));
  return g;
}

// Every replica's all_reduce(op, its grads_of(r), options) result.
PerReplica<std::vector<Tensor>> reduce_grads(MirroredStrategy& s, ReduceOp op,
                                             const std::optional<CommunicationOptions>& options) {
  return s.run([&] {
    const int r = ctx().replica_id_in_sync_group();
    return options ? ctx().all_reduce(op, grads_of(r), *options) : ctx().all_reduce(op, grads_of(r));
  });
}

// True when `v` is exactly a value of `c`'s 16-bit type.
bool representable(double v, Compression c) {
  const DType dt = c == Compression::kFloat16 ? DType::kFloat16 : DType::kBFloat16;
  Tensor t = ops::cast(ops::cast(Tensor::scalar<double>(v), dt), DType::kFloat64);
  return t.item<double>() == v;
}

struct Case {
  int replicas;
  Compression compression;
};

class CompressionBound : public ::testing::TestWithParam<Case> {};

TEST_P(CompressionBound, WithinTheStatedBoundAndReallyCompressed) {
  const auto [n, compression] = GetParam();
  make_cpus(n);
  MirroredStrategy plain(cpus(n));
  MirroredStrategy compressed(cpus(n), {.communication_options = {.compression = compression}});
  const double u = std::ldexp(1.0, compression == Compression::kFloat16 ? -11 : -8);
  const double factor = compression_error_bound(compression, /*roundings=*/2, n);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean}) {
    const auto exact32 = reduce_grads(plain, op, std::nullopt);
    const auto got = reduce_grads(compressed, op, std::nullopt);  // the strategy's default
    double worst_ratio = 0;                                       // max |error| / (u · Σ|g|)
    std::int64_t differ = 0, total = 0;
    for (std::size_t t = 0; t < kGrads.size(); ++t) {
      std::vector<std::vector<double>> inputs;
      for (int r = 0; r < n; ++r) inputs.push_back(ops::cast(grads_of(r)[t], DType::kFloat64).to_vector<double>());
      for (int r = 0; r < n; ++r) {
        const Tensor& res = got.values()[static_cast<std::size_t>(r)][t];
        ASSERT_EQ(res.dtype(), kGrads[t].second) << "cast back to the gradient's own dtype";
        ASSERT_EQ(res.shape(), kGrads[t].first);
        const auto v = ops::cast(res, DType::kFloat64).to_vector<double>();
        const auto f32 =
            ops::cast(exact32.values()[static_cast<std::size_t>(r)][t], DType::kFloat64).to_vector<double>();
        for (std::size_t i = 0; i < v.size(); ++i) {
          double sum = 0, abs_sum = 0;
          for (int q = 0; q < n; ++q) sum += inputs[q][i], abs_sum += std::abs(inputs[q][i]);
          const double scale = op == ReduceOp::kMean ? 1.0 / n : 1.0;
          const double err = std::abs(v[i] - sum * scale);
          ASSERT_LE(err, factor * abs_sum * scale)
              << compression_name(compression) << " n=" << n << " " << (op == ReduceOp::kSum ? "sum" : "mean")
              << " tensor " << t << " i=" << i;
          ASSERT_TRUE(representable(v[i], compression)) << v[i] << " was not reduced in 16 bits";
          worst_ratio = std::max(worst_ratio, err / (u * abs_sum * scale));
          differ += v[i] != f32[i] ? 1 : 0;
          ++total;
        }
      }
    }
    // Not trivially loose: some element comes within a factor 4 of u·Σ|g| (rounding twice can
    // reach 2u), and almost every result differs from the float32 all-reduce.
    EXPECT_GT(worst_ratio, 0.25) << compression_name(compression);
    EXPECT_LE(worst_ratio, 2.01);
    EXPECT_GT(differ, total * 9 / 10) << differ << " of " << total << " differ from float32";
  }
}

INSTANTIATE_TEST_SUITE_P(SharedMemory, CompressionBound,
                         ::testing::Values(Case{2, Compression::kFloat16}, Case{2, Compression::kBFloat16},
                                           Case{3, Compression::kFloat16}, Case{3, Compression::kBFloat16}),
                         [](const auto& info) {
                           return std::to_string(info.param.replicas) + "replicas_" +
                                  std::string(compression_name(info.param.compression));
                         });

void expect_bitwise_equal(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.nbytes(), b.nbytes()) << what;
  std::vector<std::uint8_t> x(a.nbytes()), y(b.nbytes());
  a.copy_to_host(x.data());
  b.copy_to_host(y.data());
  EXPECT_EQ(x, y) << what;
}

TEST(Compression, NoneIsBitwiseTheUncompressedPathAndExplicitOptionsOverride) {
  make_cpus(3);
  MirroredStrategy plain(cpus(3));
  MirroredStrategy fp16(cpus(3), {.communication_options = {.compression = Compression::kFloat16}});
  EXPECT_EQ(*plain.communication_options().compression, Compression::kNone);
  const auto ref = reduce_grads(plain, ReduceOp::kSum, std::nullopt);
  const auto none = reduce_grads(fp16, ReduceOp::kSum, CommunicationOptions{.compression = Compression::kNone});
  const auto none_small_packs = reduce_grads(
      plain, ReduceOp::kSum, CommunicationOptions{.bytes_per_pack = 64, .compression = Compression::kNone});
  // An explicit options struct without compression keeps the strategy's (float16).
  const auto inherited = reduce_grads(fp16, ReduceOp::kSum, CommunicationOptions{.bytes_per_pack = 1 << 20});
  const auto bf16 = reduce_grads(plain, ReduceOp::kSum, CommunicationOptions{.compression = Compression::kBFloat16});
  for (std::size_t r = 0; r < 3; ++r)
    for (std::size_t t = 0; t < kGrads.size(); ++t) {
      expect_bitwise_equal(none.values()[r][t], ref.values()[r][t], "explicit kNone, tensor " + std::to_string(t));
      expect_bitwise_equal(none_small_packs.values()[r][t], ref.values()[r][t], "kNone, small packs");
      for (double v : ops::cast(inherited.values()[r][t], DType::kFloat64).to_vector<double>())
        ASSERT_TRUE(representable(v, Compression::kFloat16)) << "the strategy's float16 was not applied";
      for (double v : ops::cast(bf16.values()[r][t], DType::kFloat64).to_vector<double>())
        ASSERT_TRUE(representable(v, Compression::kBFloat16)) << "the explicit bfloat16 was not applied";
    }
}

TEST(Compression, IntegersAndSixteenBitInputsAreNeverCast) {
  make_cpus(2);
  MirroredStrategy s(cpus(2), {.communication_options = {.compression = Compression::kFloat16}});
  auto out = s.run([&] {
    const int r = ctx().replica_id_in_sync_group();
    // 100001 + i is not representable in float16 (nor bfloat16); neither is 2^40 + 1.
    std::vector<std::int32_t> i32(50);
    std::vector<std::int64_t> i64(5, (std::int64_t{1} << 40) + 1 + r);
    for (int i = 0; i < 50; ++i) i32[static_cast<std::size_t>(i)] = 100001 + i + r;
    Tensor h = ops::cast(Tensor::from_vector<float>({1.5f, -2.25f, 1000.0f}, {3}), DType::kFloat16);
    return ctx().all_reduce(
        ReduceOp::kSum, {Tensor::from_vector<std::int32_t>(i32, {50}), Tensor::from_vector<std::int64_t>(i64, {5}), h});
  });
  for (const auto& v : out.values()) {
    auto a = v[0].to_vector<std::int32_t>();
    for (int i = 0; i < 50; ++i) EXPECT_EQ(a[static_cast<std::size_t>(i)], 2 * (100001 + i) + 1);
    for (std::int64_t x : v[1].to_vector<std::int64_t>()) EXPECT_EQ(x, 2 * ((std::int64_t{1} << 40) + 1) + 1);
    EXPECT_EQ(v[2].dtype(), DType::kFloat16);
    EXPECT_EQ(ops::cast(v[2], DType::kFloat32).to_vector<float>(), (std::vector<float>{3.0f, -4.5f, 2000.0f}));
  }
  // The integer and float16 packs moved their own bytes: nothing was compressed.
  const AllReduceCounters c = s.read_and_reset_all_reduce_counters();
  EXPECT_EQ(c.bytes, c.uncompressed_bytes);
  EXPECT_EQ(c.uncompressed_bytes, 2 * (50 * 4 + 5 * 8 + 3 * 2));
  EXPECT_EQ(c.collectives, 2 * 3);
}

TEST(Compression, CountersShowHalfTheBytesForFloat32AndAQuarterForFloat64) {
  make_cpus(2);
  for (Compression c : {Compression::kNone, Compression::kFloat16, Compression::kBFloat16}) {
    MirroredStrategy s(cpus(2), {.communication_options = {.compression = c}});
    reduce_grads(s, ReduceOp::kSum, std::nullopt);
    const std::int64_t f32 = (1000 + 7 * 13) * 4, f64 = 300 * 8;  // per replica: one float32 pack, one float64
    const AllReduceCounters got = s.read_and_reset_all_reduce_counters();
    EXPECT_EQ(got.collectives, 2 * 2);
    EXPECT_EQ(got.uncompressed_bytes, 2 * (f32 + f64));
    EXPECT_EQ(got.bytes, c == Compression::kNone ? 2 * (f32 + f64) : 2 * (f32 / 2 + f64 / 4)) << compression_name(c);
    EXPECT_EQ(s.all_reduce_counters().bytes, 0) << "read_and_reset resets";
    // The single-tensor form is never compressed, and is counted.
    s.run([&] { ctx().all_reduce(ReduceOp::kSum, Tensor::ones({10})); });
    EXPECT_EQ(s.all_reduce_counters().bytes, 2 * 40);
  }
}

TEST(Compression, Float16OverflowIsInfAndALossScaleOptimizerSkipsTheStepEverywhere) {
  make_cpus(2);
  for (Compression c : {Compression::kNone, Compression::kFloat16, Compression::kBFloat16}) {
    MirroredStrategy s(cpus(2), {.communication_options = {.compression = c}});
    std::shared_ptr<optimizers::LossScaleOptimizer> opt;
    Variable w;
    {
      auto scope = s.scope();
      w = make_variable({.initial_value = Tensor::zeros({4}), .name = "w"});
      opt = std::make_shared<optimizers::LossScaleOptimizer>(std::make_shared<optimizers::SGD>(1e-6));
    }
    // 40960 = 5·2^13 per replica: exact in float16 and bfloat16, but the sum 81920 exceeds 65504.
    auto sums =
        s.run([&] { return ctx().all_reduce(ReduceOp::kSum, std::vector<Tensor>{Tensor::full({4}, 40960.0f)})[0]; });
    for (const Tensor& t : sums.values())
      for (float v : t.to_vector<float>()) {
        if (c == Compression::kFloat16)
          EXPECT_EQ(v, std::numeric_limits<float>::infinity());
        else
          EXPECT_EQ(v, 81920.0f) << compression_name(c);  // 5·2^14: bfloat16 has float32's range
      }
    const double scale = opt->loss_scale();
    s.run([&] { opt->apply_gradients({{Tensor::full({4}, 40960.0f), w}}); });
    const bool skipped = c == Compression::kFloat16;
    s.run([&] {
      EXPECT_EQ(opt->loss_scale(), skipped ? scale / 2 : scale) << compression_name(c);
      for (float v : w.value().to_vector<float>()) EXPECT_EQ(v == 0.0f, skipped) << compression_name(c);
    });
  }
}

TEST(Compression, InvalidOptionsAreRefused) {
  make_cpus(2);
  const auto bad = static_cast<Compression>(7);
  EXPECT_THROW_WITH(MirroredStrategy(cpus(2), {.communication_options = {.compression = bad}}), InvalidArgumentError,
                    "compression is Compression(7), not one of");
  EXPECT_THROW_WITH(MirroredStrategy(cpus(2), {.communication_options = {.bytes_per_pack = -1}}), InvalidArgumentError,
                    "bytes_per_pack must be >= 0");
  EXPECT_THROW_WITH(
      MirroredStrategy(cpus(2), {.communication_options = {.implementation = CrossDeviceOps::kReductionToOneDevice}}),
      InvalidArgumentError, "differs from the strategy's shared_memory");
  EXPECT_THROW_WITH(MirroredStrategy(cpus(2), {.communication_options = {.timeout_seconds = std::nan("")}}),
                    InvalidArgumentError, "timeout_seconds must be a finite number");
  MirroredStrategy s(cpus(2));
  EXPECT_THROW_WITH(
      s.run([&] { ctx().all_reduce(ReduceOp::kSum, std::vector<Tensor>{Tensor::ones({1})}, {.compression = bad}); }),
      InvalidArgumentError, "compression is Compression(7)");
  EXPECT_EQ(compression_name(Compression::kBFloat16), "bfloat16");
  EXPECT_EQ(compression_name(Compression::kFloat16), "float16");
  EXPECT_EQ(compression_name(Compression::kNone), "none");
}

// Two separable blobs, labels 0/1.
data::Dataset blobs(int n) {
  std::vector<float> x(static_cast<std::size_t>(2 * n));
  std::vector<std::int32_t> y(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int c = i % 2;
    y[static_cast<std::size_t>(i)] = c;
    x[static_cast<std::size_t>(2 * i)] = static_cast<float>((c ? 1.5 : -1.5) + 0.4 * noisy(0, i, 9) / 512);
    x[static_cast<std::size_t>(2 * i + 1)] = static_cast<float>((c ? -1.0 : 1.0) + 0.4 * noisy(1, i, 9) / 512);
  }
  return data::Dataset::from_tensor_slices(
      {Tensor::from_vector<float>(x, {n, 2}), Tensor::from_vector<std::int32_t>(y)});
}

struct FitResult {
  model::History history;
  std::vector<std::vector<float>> weights;
  AllReduceCounters counters;
};

FitResult fit_with(Compression c) {
  MirroredStrategy s(cpus(2), {.communication_options = {.compression = c}});
  auto scope = s.scope();
  model::Sequential m(std::vector<layers::LayerPtr>{layers::Dense(8, "relu", true, initializers::glorot_uniform(1)),
                                                    layers::Dense(2, "", true, initializers::glorot_uniform(2))});
  m.compile(std::make_shared<optimizers::SGD>(0.1), std::make_shared<losses::SparseCategoricalCrossentropy>(true));
  s.read_and_reset_all_reduce_counters();
  FitResult out;
  out.history = m.fit(blobs(96).batch(16), {.epochs = 3, .verbose = 0});
  out.counters = s.read_and_reset_all_reduce_counters();
  for (const auto& v : m.trainable_variables()) out.weights.push_back(v.read_value().to_vector<float>());
  return out;
}

TEST(Compression, FitTrainsWithTheStrategysCompressionAndTheOptimizerUsesIt) {
  make_cpus(2);
  const FitResult plain = fit_with(Compression::kNone);
  for (Compression c : {Compression::kBFloat16, Compression::kFloat16}) {
    const FitResult got = fit_with(c);
    const auto& loss = got.history.history.at("loss");
    ASSERT_EQ(loss.size(), 3u);
    EXPECT_LT(loss.back(), 0.8 * loss.front()) << compression_name(c);
    ASSERT_EQ(got.weights.size(), plain.weights.size());
    bool any_differs = false;
    for (std::size_t v = 0; v < got.weights.size(); ++v)
      for (std::size_t i = 0; i < got.weights[v].size(); ++i) {
        EXPECT_NEAR(got.weights[v][i], plain.weights[v][i], 0.05 * (1 + std::abs(plain.weights[v][i])))
            << compression_name(c) << " variable " << v << " i=" << i;
        any_differs |= got.weights[v][i] != plain.weights[v][i];
      }
    EXPECT_TRUE(any_differs) << compression_name(c) << ": the weights are bitwise the uncompressed run's";
    // The gradients (2·8 + 8 + 8·2 + 2 = 42 float32 per replica and step, 2 replicas, 6 steps × 3
    // epochs) moved in 16 bits: exactly half their bytes fewer than without compression.
    const std::int64_t grad_bytes = 42 * 4 * 2 * 18;
    EXPECT_EQ(got.counters.uncompressed_bytes, plain.counters.uncompressed_bytes);
    EXPECT_EQ(plain.counters.bytes, plain.counters.uncompressed_bytes);
    EXPECT_EQ(plain.counters.bytes - got.counters.bytes, grad_bytes / 2) << compression_name(c);
  }
}

}  // namespace
}  // namespace chorus::distribute
