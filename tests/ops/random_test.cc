// Tests of ops/philox.h and ops/random.h on CPU devices. Expected values come from Random123's
// known-answer vectors, from the sampling rules written in ops/philox.h (re-derived here word by
// word), or from the distributions' analytic moments.
#include <chorus/ops/random.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <thread>
#include <vector>

#include "tests/core/test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/dtype.h>
#include <chorus/ops/philox.h>

namespace chorus::ops {
namespace {

using chorus::testing::CoreTest;

class RandomTest : public CoreTest {};

struct Moments {
  double mean = 0, var = 0, min = 0, max = 0;
};
Moments moments(const std::vector<double>& x) {
  Moments m;
  m.min = *std::min_element(x.begin(), x.end());
  m.max = *std::max_element(x.begin(), x.end());
  for (double v : x) m.mean += v;
  m.mean /= static_cast<double>(x.size());
  for (double v : x) m.var += (v - m.mean) * (v - m.mean);
  m.var /= static_cast<double>(x.size());
  return m;
}

// Variance of a standard normal truncated to (-2, 2): 1 - 2·2·φ(2) / (Φ(2) - Φ(-2)).
double truncated_variance() {
  const double pi = 3.14159265358979323846;
  const double phi2 = std::exp(-2.0) / std::sqrt(2 * pi);
  const double mass = std::erf(2 / std::sqrt(2.0));
  return 1 - 4 * phi2 / mass;
}

// The key/counter of a stateless seed, re-derived from TF's GenerateKey.
void tf_key_counter(std::uint64_t s0, std::uint64_t s1, PhiloxKey* key, PhiloxCounter* ctr) {
  const PhiloxCounter in = {{static_cast<std::uint32_t>(s0), static_cast<std::uint32_t>(s0 >> 32),
                             static_cast<std::uint32_t>(s1), static_cast<std::uint32_t>(s1 >> 32)}};
  const PhiloxCounter mix = philox4x32_10(in, PhiloxKey{{0x3ec8f720u, 0x02461e29u}});
  *key = PhiloxKey{{mix.v[0], mix.v[1]}};
  *ctr = PhiloxCounter{{0, 0, mix.v[2], mix.v[3]}};
}

// Block b of a draw: Philox at counter c + b (b small: no carry out of the lowest word here,
// checked by the tests that use it).
PhiloxCounter block(PhiloxKey key, PhiloxCounter c, std::uint32_t b, std::uint64_t lane = 0) {
  EXPECT_LE(static_cast<std::uint64_t>(c.v[0]) + b, 0xffffffffull);
  c.v[0] += b;
  const std::uint64_t hi = (static_cast<std::uint64_t>(c.v[2]) | static_cast<std::uint64_t>(c.v[3]) << 32) + lane;
  c.v[2] = static_cast<std::uint32_t>(hi);
  c.v[3] = static_cast<std::uint32_t>(hi >> 32);
  return philox4x32_10(c, key);
}

// ---- the generator itself ----

TEST(PhiloxTest, KnownAnswersFromRandom123) {
  struct Kat {
    PhiloxCounter ctr;
    PhiloxKey key;
    std::uint32_t want[4];
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, {{0, 0}}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       {{0xffffffff, 0xffffffff}},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       {{0xa4093822, 0x299f31d0}},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    const PhiloxCounter out = philox4x32_10(k.ctr, k.key);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out.v[i], k.want[i]) << "word " << i;
  }
}

TEST(PhiloxTest, SkipCarriesIntoTheHighWords) {
  PhiloxCounter c = {{0xffffffff, 0xffffffff, 0xffffffff, 0}};
  c = philox_skip(c, 1);
  EXPECT_EQ(c.v[0], 0u);
  EXPECT_EQ(c.v[1], 0u);
  EXPECT_EQ(c.v[2], 0u);
  EXPECT_EQ(c.v[3], 1u);
  c = philox_skip(PhiloxCounter{{5, 0, 7, 0}}, 0x100000000ull);
  EXPECT_EQ(c.v[0], 5u);
  EXPECT_EQ(c.v[1], 1u);
  EXPECT_EQ(c.v[2], 7u);
  c = philox_lane(PhiloxCounter{{1, 2, 0xffffffff, 3}}, 1);
  EXPECT_EQ(c.v[0], 1u);
  EXPECT_EQ(c.v[1], 2u);
  EXPECT_EQ(c.v[2], 0u);
  EXPECT_EQ(c.v[3], 4u);
}

TEST(PhiloxTest, WordToUnitIntervalMappings) {
  EXPECT_EQ(uint32_to_float(0), 0.0f);
  EXPECT_EQ(uint32_to_float(0x007fffff), 1.0f - std::ldexp(1.0f, -23));
  EXPECT_EQ(uint32_to_float(0xffffffff), 1.0f - std::ldexp(1.0f, -23));
  EXPECT_EQ(uint32_to_float(0xff800000), 0.0f);  // only the low 23 bits count
  EXPECT_EQ(uint32_to_float(0x00000001), std::ldexp(1.0f, -23));
  EXPECT_EQ(uint64_to_double(0, 0), 0.0);
  EXPECT_EQ(uint64_to_double(0x000fffff, 0xffffffff), 1.0 - std::ldexp(1.0, -52));
  EXPECT_EQ(uint64_to_double(0xfff00000, 0), 0.0);  // only the low 20 bits of x0 count
  EXPECT_EQ(uint64_to_double(0, 1), std::ldexp(1.0, -52));
  EXPECT_EQ(uint64_to_double(1, 0), std::ldexp(1.0, -20));
}

TEST(PhiloxTest, BoxMullerIsFiniteAtZeroAndMatchesTheFormula) {
  float z0, z1;
  box_muller_float(0, 0, &z0, &z1);  // u1 = 0 is floored at 1e-7
  EXPECT_TRUE(std::isfinite(z0));
  EXPECT_NEAR(z1, std::sqrt(-2 * std::log(1e-7)), 1e-4);  // v1 = 0: cos = 1
  EXPECT_EQ(z0, 0.0f);
  double d0, d1;
  box_muller_double(0, 0, 0, 0, &d0, &d1);
  EXPECT_NEAR(d1, std::sqrt(-2 * std::log(1e-7)), 1e-9);
  // u1 = 0.5, u2 = 0.25: z = sqrt(-2 ln 0.5) * (sin, cos)(π/2).
  box_muller_float(0x00400000, 0x00200000, &z0, &z1);
  EXPECT_NEAR(z0, std::sqrt(-2 * std::log(0.5)), 1e-6);
  EXPECT_NEAR(z1, 0.0, 1e-6);
}

// ---- the documented element → word scheme ----

TEST_F(RandomTest, StatelessUniformFloat32TakesWordIModFourOfBlockIOverFour) {
  PhiloxKey key;
  PhiloxCounter ctr;
  tf_key_counter(1, 2, &key, &ctr);
  const auto got = stateless_random_uniform({37}, {1, 2}).to_vector<float>();
  for (std::uint32_t i = 0; i < 37; ++i) {
    const std::uint32_t w = block(key, ctr, i / 4).v[i % 4];
    EXPECT_EQ(got[i], static_cast<float>(w & 0x7fffff) * std::ldexp(1.0f, -23)) << i;
  }
}

TEST_F(RandomTest, StatelessUniformFloat64AndIntegersFollowTheScheme) {
  PhiloxKey key;
  PhiloxCounter ctr;
  tf_key_counter(7, 0, &key, &ctr);
  const auto d =
      stateless_random_uniform({11}, {7, 0}, {.minval = -1, .maxval = 3, .dtype = DType::kFloat64}).to_vector<double>();
  for (std::uint32_t i = 0; i < 11; ++i) {
    const PhiloxCounter w = block(key, ctr, i / 2);
    const std::uint64_t man = (static_cast<std::uint64_t>(w.v[2 * (i % 2)] & 0xfffff) << 32) | w.v[2 * (i % 2) + 1];
    EXPECT_EQ(d[i], -1.0 + 4.0 * std::ldexp(static_cast<double>(man), -52)) << i;
  }
  const auto i32 = stateless_random_uniform({9}, {7, 0}, {.minval = -5, .maxval = 12, .dtype = DType::kInt32})
                       .to_vector<std::int32_t>();
  for (std::uint32_t i = 0; i < 9; ++i)
    EXPECT_EQ(i32[i], -5 + static_cast<std::int32_t>(block(key, ctr, i / 4).v[i % 4] % 17u)) << i;
  const auto i64 = stateless_random_uniform({5}, {7, 0}, {.minval = -1000, .maxval = 1e15, .dtype = DType::kInt64})
                       .to_vector<std::int64_t>();
  const std::uint64_t range = 1000000000001000ull;
  for (std::uint32_t i = 0; i < 5; ++i) {
    const PhiloxCounter w = block(key, ctr, i / 2);
    const std::uint64_t bits = w.v[2 * (i % 2)] | static_cast<std::uint64_t>(w.v[2 * (i % 2) + 1]) << 32;
    EXPECT_EQ(i64[i], -1000 + static_cast<std::int64_t>(bits % range)) << i;
  }
}

TEST_F(RandomTest, NormalPairsWordsAndTruncatedRetriesOnItsOwnLane) {
  PhiloxKey key;
  PhiloxCounter ctr;
  tf_key_counter(3, 4, &key, &ctr);
  const int n = 4000;
  const auto normal = stateless_random_normal({n}, {3, 4}).to_vector<float>();
  const auto trunc = stateless_truncated_normal({n}, {3, 4}).to_vector<float>();
  int retried = 0;
  for (std::uint32_t i = 0; i < static_cast<std::uint32_t>(n); ++i) {
    const PhiloxCounter w = block(key, ctr, i / 4);
    const std::uint32_t pair = 2 * ((i % 4) / 2);
    float z0, z1;
    box_muller_float(w.v[pair], w.v[pair + 1], &z0, &z1);
    ASSERT_EQ(normal[i], i % 2 == 0 ? z0 : z1) << i;
    // Truncated: attempt k uses the same block on lane k, until |z| < 2.
    float z = normal[i];
    std::uint64_t lane = 0;
    while (!(std::fabs(z) < 2.0f)) {
      ++lane;
      const PhiloxCounter r = block(key, ctr, i / 4, lane);
      box_muller_float(r.v[pair], r.v[pair + 1], &z0, &z1);
      z = i % 2 == 0 ? z0 : z1;
    }
    retried += lane > 0;
    ASSERT_EQ(trunc[i], z) << i << " after " << lane << " retries";
  }
  // P(|z| >= 2) = 4.55%: about 182 of 4000.
  EXPECT_GT(retried, 100);
  EXPECT_LT(retried, 280);
}

TEST_F(RandomTest, SixteenBitUniformIsTheRoundedFloat32DrawKeptBelowMaxval) {
  const int n = 100000;
  const auto f32 = stateless_random_uniform({n}, {9, 9}).to_vector<float>();
  const auto f16 = stateless_random_uniform({n}, {9, 9}, {.dtype = DType::kFloat16}).to_vector<float>();
  const auto bf16 = stateless_random_uniform({n}, {9, 9}, {.dtype = DType::kBFloat16}).to_vector<float>();
  int clamped = 0;
  for (int i = 0; i < n; ++i) {
    const float h = float16_to_float(float_to_float16(f32[i]));
    if (h == 1.0f) {
      ++clamped;
      EXPECT_EQ(f16[i], 1.0f - std::ldexp(1.0f, -11)) << i;  // the largest float16 below 1
    } else {
      EXPECT_EQ(f16[i], h) << i;
    }
    const float b = bfloat16_to_float(float_to_bfloat16(f32[i]));
    EXPECT_EQ(bf16[i], b == 1.0f ? 1.0f - std::ldexp(1.0f, -8) : b) << i;
  }
  // u >= 1 - 2^-12 rounds to 1 in float16: about n / 4096 ≈ 24 elements.
  EXPECT_GT(clamped, 5);
}

// ---- statistics ----

TEST_F(RandomTest, UniformMomentsAndRangesOfEveryFloatDtype) {
  const int n = 200000;
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}) {
    const auto x =
        stateless_random_uniform({n}, {11, 12}, {.minval = -2, .maxval = 3, .dtype = dt}).to_vector<double>();
    const Moments m = moments(x);
    EXPECT_NEAR(m.mean, 0.5, 0.02) << dt;  // se = 5/sqrt(12 n) = 0.0032
    EXPECT_NEAR(m.var, 25.0 / 12, 25.0 / 12 * 0.02) << dt;
    EXPECT_GE(m.min, -2.0) << dt;
    EXPECT_LT(m.max, 3.0) << dt;
  }
  // Large offset, small range: u * 8 + 1e8 rounds to 1e8 + 8 = maxval unless clamped.
  const auto y = stateless_random_uniform({10000}, {1, 1}, {.minval = 1e8, .maxval = 1e8 + 8}).to_vector<double>();
  for (double v : y) {
    EXPECT_GE(v, 1e8);
    EXPECT_LT(v, 1e8 + 8);
  }
}

TEST_F(RandomTest, IntegerUniformStaysInBoundsAndCoversThem) {
  const auto a = stateless_random_uniform({10000}, {5, 6}, {.minval = -5, .maxval = 5, .dtype = DType::kInt32})
                     .to_vector<std::int64_t>();
  std::set<std::int64_t> seen(a.begin(), a.end());
  EXPECT_EQ(seen.size(), 10u);
  EXPECT_EQ(*seen.begin(), -5);
  EXPECT_EQ(*seen.rbegin(), 4);
  // The full int32 range and a wide int64 range.
  const auto b = stateless_random_uniform({10000}, {5, 6},
                                          {.minval = -2147483648.0, .maxval = 2147483647.0, .dtype = DType::kInt32})
                     .to_vector<std::int64_t>();
  const Moments mb = moments(std::vector<double>(b.begin(), b.end()));
  EXPECT_LT(mb.min, -1.5e9);
  EXPECT_GT(mb.max, 1.5e9);
  const double big = std::ldexp(1.0, 62);
  const auto c = stateless_random_uniform({10000}, {5, 6}, {.minval = -big, .maxval = big, .dtype = DType::kInt64})
                     .to_vector<std::int64_t>();
  for (std::int64_t v : c) {
    EXPECT_GE(v, -(std::int64_t{1} << 62));
    EXPECT_LT(v, std::int64_t{1} << 62);
  }
  const Moments mc = moments(std::vector<double>(c.begin(), c.end()));
  EXPECT_NEAR(mc.mean / big, 0.0, 0.05);
  EXPECT_LT(mc.min, -0.9 * big);
}

TEST_F(RandomTest, NormalMomentsForEveryFloatDtype) {
  const int n = 200000;
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}) {
    const auto x = stateless_random_normal({n}, {21, 22}, {.mean = 2, .stddev = 3, .dtype = dt}).to_vector<double>();
    const Moments m = moments(x);
    EXPECT_NEAR(m.mean, 2.0, 0.04) << dt;  // se = 3 / sqrt(n) = 0.0067
    EXPECT_NEAR(m.var, 9.0, 9.0 * 0.03) << dt;
    EXPECT_LT(m.min, 2.0 - 3 * 3.5) << dt;  // tails exist (about 46 values past 3.5 sigma each side)
    EXPECT_GT(m.max, 2.0 + 3 * 3.5) << dt;
  }
}

TEST_F(RandomTest, TruncatedNormalStaysWithinTwoStddevWithTheTruncatedVariance) {
  const int n = 200000;
  const double want_var = truncated_variance();
  EXPECT_NEAR(want_var, 0.7737, 1e-4);
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}) {
    const double mean = 3, sd = 0.5;
    const auto x =
        stateless_truncated_normal({n}, {31, 32}, {.mean = mean, .stddev = sd, .dtype = dt}).to_vector<double>();
    const Moments m = moments(x);
    // 16-bit results are rounded after scaling: allow one ulp at the edge (float16 ulp at 4 is 2^-8).
    const double slack = dt == DType::kBFloat16 ? 1.0 / 32 : dt == DType::kFloat16 ? 1.0 / 256 : 1e-6;
    EXPECT_GE(m.min, mean - 2 * sd - slack) << dt;
    EXPECT_LE(m.max, mean + 2 * sd + slack) << dt;
    EXPECT_NEAR(m.mean, mean, 0.01) << dt;
    EXPECT_NEAR(m.var, want_var * sd * sd, want_var * sd * sd * 0.03) << dt;
  }
}

// ---- determinism ----

TEST_F(RandomTest, StatelessIsAFunctionOfTheSeed) {
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}) {
    const auto a = stateless_random_normal({1000}, {1, 2}, {.dtype = dt}).to_vector<double>();
    EXPECT_EQ(a, stateless_random_normal({1000}, {1, 2}, {.dtype = dt}).to_vector<double>());
    EXPECT_NE(a, stateless_random_normal({1000}, {1, 3}, {.dtype = dt}).to_vector<double>());
    EXPECT_NE(a, stateless_random_normal({1000}, {2, 1}, {.dtype = dt}).to_vector<double>());
  }
  const auto u = stateless_truncated_normal({2, 3, 4}, {-1, 9}).to_vector<float>();
  EXPECT_EQ(u, stateless_truncated_normal({24}, {-1, 9}).to_vector<float>());  // shape only reshapes
}

TEST_F(RandomTest, TheSameNumbersOnTwoLogicalCpuDevicesWithDifferentThreadCounts) {
  config::set_logical_device_configuration(
      config::list_physical_devices("CPU")[0],
      {{.memory_limit_mb = 256, .intra_op_threads = 1}, {.memory_limit_mb = 256, .intra_op_threads = 2}});
  const int n = 100003;  // large enough for the OpenMP path
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt32, DType::kInt64}) {
    UniformOptions o{.minval = -7, .maxval = 70, .dtype = dt};
    o.device = "/CPU:0";
    const auto a = stateless_random_uniform({n}, {4, 4}, o);
    o.device = "/CPU:1";
    const auto b = stateless_random_uniform({n}, {4, 4}, o);
    EXPECT_NE(a.device_name(), b.device_name());
    EXPECT_EQ(a.to_vector<double>(), b.to_vector<double>()) << dt;
  }
  auto g0 = Generator::from_seed(99);
  auto g1 = Generator::from_seed(99);
  EXPECT_EQ(g0.truncated_normal({n}, {.device = "/CPU:0"}).to_vector<float>(),
            g1.truncated_normal({n}, {.device = "/CPU:1"}).to_vector<float>());
}

// ---- Generator ----

TEST_F(RandomTest, GeneratorDrawsContinueOneStream) {
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kInt64}) {
    const UniformOptions o{.maxval = 1000, .dtype = dt};
    auto g = Generator::from_seed(5);
    auto a = g.uniform({1000}, o).to_vector<double>();
    const auto b = g.uniform({10, 100}, o).to_vector<double>();
    a.insert(a.end(), b.begin(), b.end());
    EXPECT_EQ(a, Generator::from_seed(5).uniform({2000}, o).to_vector<double>()) << dt;
  }
  for (auto draw : {&Generator::normal, &Generator::truncated_normal}) {
    for (DType dt : {DType::kFloat32, DType::kFloat64}) {
      auto g = Generator::from_seed(6);
      auto a = (g.*draw)({1000}, {.dtype = dt}).to_vector<double>();
      const auto b = (g.*draw)({1000}, {.dtype = dt}).to_vector<double>();
      a.insert(a.end(), b.begin(), b.end());
      auto h = Generator::from_seed(6);
      EXPECT_EQ(a, (h.*draw)({2000}, {.dtype = dt}).to_vector<double>()) << dt;
    }
  }
}

TEST_F(RandomTest, GeneratorDrawIsAPrefixAndAdvancesByWholeBlocks) {
  auto g = Generator::from_seed(8);
  const GeneratorState s0 = g.state();
  const auto small = g.normal({7}).to_vector<float>();
  EXPECT_EQ(g.state().counter_low, s0.counter_low + 2);  // ceil(7 / 4) blocks
  EXPECT_EQ(g.state().key, s0.key);
  g.uniform({5}, {.dtype = DType::kFloat64});
  EXPECT_EQ(g.state().counter_low, s0.counter_low + 2 + 3);  // ceil(5 / 2)
  g.uniform({0});
  EXPECT_EQ(g.state().counter_low, s0.counter_low + 5);  // nothing drawn, nothing consumed
  g.set_state(s0);
  const auto big = g.normal({13}).to_vector<float>();
  EXPECT_TRUE(std::equal(small.begin(), small.end(), big.begin()));
}

TEST_F(RandomTest, StateSaveAndRestoreReproduces) {
  auto g = Generator::from_seed(10);
  g.normal({100});
  const GeneratorState saved = g.state();
  const auto a = g.truncated_normal({333}, {.dtype = DType::kBFloat16}).to_vector<float>();
  const auto b = g.uniform({55}, {.maxval = 9, .dtype = DType::kInt32}).to_vector<std::int32_t>();
  Generator restored(saved);
  EXPECT_EQ(a, restored.truncated_normal({333}, {.dtype = DType::kBFloat16}).to_vector<float>());
  EXPECT_EQ(b, restored.uniform({55}, {.maxval = 9, .dtype = DType::kInt32}).to_vector<std::int32_t>());
  EXPECT_EQ(restored.state(), g.state());
  g.set_state(saved);
  EXPECT_EQ(a, g.truncated_normal({333}, {.dtype = DType::kBFloat16}).to_vector<float>());
  // The state's Philox view round-trips.
  const GeneratorState s{.counter_low = 0x0123456789abcdefull, .counter_high = 0xfedcba9876543210ull, .key = 42};
  EXPECT_EQ(GeneratorState::from_philox(s.philox_key(), s.philox_counter()), s);
  EXPECT_EQ(s.philox_counter().v[0], 0x89abcdefu);
  EXPECT_EQ(s.philox_counter().v[3], 0xfedcba98u);
  // reset_from_seed == from_seed.
  g.reset_from_seed(10);
  EXPECT_EQ(g.state(), Generator::from_seed(10).state());
}

TEST_F(RandomTest, SplitGivesDifferentDeterministicStreams) {
  auto g = Generator::from_seed(12);
  const GeneratorState before = g.state();
  auto kids = g.split(3);
  ASSERT_EQ(kids.size(), 3u);
  std::vector<GeneratorState> kid_states;
  for (const auto& k : kids) kid_states.push_back(k.state());
  EXPECT_EQ(g.state().counter_low, before.counter_low + 3);
  std::vector<std::vector<float>> draws;
  draws.push_back(g.uniform({64}).to_vector<float>());
  for (auto& k : kids) draws.push_back(k.uniform({64}).to_vector<float>());
  for (std::size_t i = 0; i < draws.size(); ++i)
    for (std::size_t j = i + 1; j < draws.size(); ++j) EXPECT_NE(draws[i], draws[j]) << i << " vs " << j;
  for (std::size_t i = 0; i < kids.size(); ++i)
    for (std::size_t j = i + 1; j < kids.size(); ++j) EXPECT_NE(kids[i].state().key, kids[j].state().key);
  // The same parent state splits the same way.
  auto again = Generator::from_seed(12).split(3);
  for (std::size_t i = 0; i < kids.size(); ++i) EXPECT_EQ(again[i].state(), kid_states[i]) << i;
  EXPECT_EQ(again[1].uniform({64}).to_vector<float>(), draws[2]);
  EXPECT_TRUE(g.split(0).empty());
  // Generators move (a vector of them reallocates).
  std::vector<Generator> moved;
  for (auto& k : again) moved.push_back(std::move(k));
  EXPECT_EQ(moved.size(), 3u);
}

TEST_F(RandomTest, SharedGeneratorGivesDisjointDrawsToThreads) {
  auto g = Generator::from_seed(13);
  std::vector<std::vector<float>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&g, &got, t] {
      for (int r = 0; r < 25; ++r) {
        const auto v = g.uniform({8}).to_vector<float>();
        got[t].insert(got[t].end(), v.begin(), v.end());
      }
    });
  for (auto& t : threads) t.join();
  // 100 draws of 2 blocks each: all 800 numbers are the stream's first 800, each used once.
  std::multiset<float> all;
  for (const auto& v : got) all.insert(v.begin(), v.end());
  const auto stream = Generator::from_seed(13).uniform({800}).to_vector<float>();
  EXPECT_EQ(all, std::multiset<float>(stream.begin(), stream.end()));
}

TEST_F(RandomTest, GlobalSeedMakesGlobalDrawsReproducible) {
  set_seed(3);
  const auto a = random_uniform({50}).to_vector<float>();
  const auto b = random_normal({50}).to_vector<float>();
  const auto c = truncated_normal({50}).to_vector<float>();
  set_seed(3);
  EXPECT_EQ(a, random_uniform({50}).to_vector<float>());
  EXPECT_EQ(b, random_normal({50}).to_vector<float>());
  EXPECT_EQ(c, truncated_normal({50}).to_vector<float>());
  EXPECT_EQ(a, Generator::from_seed(3).uniform({50}).to_vector<float>());
  EXPECT_EQ(&global_generator(), &global_generator());
  // A generator seed is unrelated to the stateless seed with the same number.
  EXPECT_NE(a, stateless_random_uniform({50}, {3, 0}).to_vector<float>());
}

TEST_F(RandomTest, NonDeterministicGeneratorsDiffer) {
  EXPECT_NE(Generator::from_non_deterministic_state().state(), Generator::from_non_deterministic_state().state());
}

// ---- errors ----

TEST_F(RandomTest, BadArgumentsThrowInvalidArgumentAndLeaveTheStateAlone) {
  auto g = Generator::from_seed(1);
  const GeneratorState s = g.state();
  EXPECT_THROW_WITH(g.uniform({4}, {.dtype = DType::kInt32}), InvalidArgumentError, "maxval", "int32");
  EXPECT_THROW_WITH(g.uniform({4}, {.minval = 5, .maxval = 5, .dtype = DType::kInt64}), InvalidArgumentError,
                    "minval < maxval", "5");
  EXPECT_THROW_WITH(g.uniform({4}, {.minval = 0.5, .maxval = 3, .dtype = DType::kInt32}), InvalidArgumentError,
                    "integer", "0.5");
  EXPECT_THROW_WITH(g.uniform({4}, {.maxval = 3e9, .dtype = DType::kInt32}), InvalidArgumentError, "outside", "int32");
  EXPECT_THROW_WITH(g.uniform({4}, {.minval = 2, .maxval = 1}), InvalidArgumentError, "minval < maxval");
  EXPECT_THROW_WITH(g.uniform({4}, {.minval = 1, .maxval = 1.0001, .dtype = DType::kFloat16}), InvalidArgumentError,
                    "float16", "round to 1");
  EXPECT_THROW_WITH(g.uniform({4}, {.maxval = NAN}), InvalidArgumentError, "finite");
  EXPECT_THROW_WITH(g.uniform({4}, {.minval = -3e38, .maxval = 3e38}), InvalidArgumentError, "overflows");
  EXPECT_THROW_WITH(g.uniform({4}, {.maxval = 1e6, .dtype = DType::kFloat16}), InvalidArgumentError, "overflows");
  EXPECT_THROW_WITH(g.uniform({4}, {.dtype = DType::kBool}), InvalidArgumentError, "bool", "allowed");
  EXPECT_THROW_WITH(g.normal({4}, {.dtype = DType::kInt32}), InvalidArgumentError, "int32", "allowed");
  EXPECT_THROW_WITH(g.normal({4}, {.stddev = -1}), InvalidArgumentError, "stddev", "-1");
  EXPECT_THROW_WITH(g.truncated_normal({4}, {.mean = INFINITY}), InvalidArgumentError, "mean");
  EXPECT_THROW_WITH(g.split(-2), InvalidArgumentError, "count", "-2");
  EXPECT_EQ(g.state(), s);
  EXPECT_THROW_WITH(stateless_random_normal({4}, {1, 2}, {.dtype = DType::kUInt8}), InvalidArgumentError, "uint8");
  EXPECT_THROW_WITH(stateless_random_uniform(Shape({3, -1}), {1, 2}), InvalidArgumentError, "-1");
  EXPECT_THROW(cpu::fill_random(Distribution::kNormal, DType::kInt32, {}, {}, 0, 1, nullptr, 4), InvalidArgumentError);
}

TEST_F(RandomTest, EmptyShapesAndScalars) {
  EXPECT_EQ(stateless_random_normal({0, 3}, {1, 1}).num_elements(), 0);
  const auto s = stateless_random_uniform({}, {1, 1});
  EXPECT_EQ(s.shape().rank(), 0);
  EXPECT_EQ(s.item<float>(), stateless_random_uniform({1}, {1, 1}).item<float>());
}

}  // namespace
}  // namespace chorus::ops
