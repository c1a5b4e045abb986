// ops::scaled_dot_product_attention on the CPU against the composed ops (attention_reference.h:
// matmul, where, softmax, dropout, matmul), forward and gradients: no mask, causal, padding mask,
// both, a full [B, H, Tq, Tk] mask; Tq == Tk, Tq < Tk, Tq > Tk; head dims that are no multiple of
// anything and sequence lengths that cross the kernel's 64-query and 64-key tiles; float32,
// float64, bfloat16 (against float32 on the same bfloat16 values). Plus finite differences, rows
// with every key masked, dropout from one generator state, NaN/Inf propagation, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/core/test_util.h"
#include "tests/ops/attention_reference.h"
#include "tests/ops/gradient_check.h"
#include <chorus/ops/attention.h>
#include <chorus/ops/ops.h>

namespace chorus::ops {
namespace {

using chorus::testing::check_gradients;
using chorus::testing::random_tensor;
using chorus::testing::reference_attention;

enum class MaskKind { kNone, kPadding, kFull, kQueryKey };

struct Dims {
  std::int64_t b, h, tq, tk, d, dv;
};

// Bool mask of the kind, ~75% true, seeded. kPadding [B, 1, 1, Tk] keeps key 0 of every batch
// (Keras's padding masks never hide a whole sequence); kFull [B, H, Tq, Tk]; kQueryKey [Tq, Tk].
Tensor make_mask(MaskKind kind, const Dims& s, std::uint32_t seed) {
  std::mt19937 gen(seed);
  auto bits = [&](std::int64_t n) {
    std::vector<bool> m(static_cast<std::size_t>(n));
    for (auto&& x : m) x = gen() % 4 != 0;
    return m;
  };
  switch (kind) {
    case MaskKind::kNone: return Tensor();
    case MaskKind::kPadding: {
      std::vector<bool> m = bits(s.b * s.tk);
      for (std::int64_t b = 0; b < s.b; ++b) m[static_cast<std::size_t>(b * s.tk)] = true;
      return Tensor::from_vector(m, Shape{s.b, 1, 1, s.tk}, "/CPU:0");
    }
    case MaskKind::kFull:
      return Tensor::from_vector(bits(s.b * s.h * s.tq * s.tk), Shape{s.b, s.h, s.tq, s.tk}, "/CPU:0");
    case MaskKind::kQueryKey: return Tensor::from_vector(bits(s.tq * s.tk), Shape{s.tq, s.tk}, "/CPU:0");
  }
  return Tensor();
}

struct Inputs {
  Tensor q, k, v, w;  // w: the weighting of the output that makes the loss
};

Inputs make_inputs(const Dims& s, DType dtype, std::uint32_t seed) {
  // Logits of a few units (q, k in [-1.5, 1.5]): the softmax is neither flat nor one-hot.
  return {cast(random_tensor({s.b, s.h, s.tq, s.d}, seed, -1.5, 1.5), dtype),
          cast(random_tensor({s.b, s.h, s.tk, s.d}, seed + 1, -1.5, 1.5), dtype),
          cast(random_tensor({s.b, s.h, s.tk, s.dv}, seed + 2), dtype),
          cast(random_tensor({s.b, s.h, s.tq, s.dv}, seed + 3), dtype)};
}

struct Result {
  std::vector<double> out, dq, dk, dv;
};

template <typename F>
Result run(const Inputs& in, F attention) {
  GradientTape tape;
  tape.watch(in.q);
  tape.watch(in.k);
  tape.watch(in.v);
  Tensor out = attention(in.q, in.k, in.v);
  Tensor loss = reduce_sum(mul(out, cast(in.w, out.dtype())));
  std::vector<Tensor> g = tape.gradient(loss, {in.q, in.k, in.v});
  return {out.to_vector<double>(), g[0].to_vector<double>(), g[1].to_vector<double>(), g[2].to_vector<double>()};
}

// |got - want| <= atol + rtol * |want| everywhere, NaN exactly where the reference has NaN, and
// equal infinities.
::testing::AssertionResult near(const std::vector<double>& got, const std::vector<double>& want, double atol,
                                double rtol, const char* what) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": " << got.size() << " values vs " << want.size();
  for (std::size_t e = 0; e < got.size(); ++e) {
    const double g = got[e], w = want[e];
    const bool ok = std::isnan(w)   ? std::isnan(g)
                    : std::isinf(w) ? g == w
                                    : std::abs(g - w) <= atol + rtol * std::abs(w);
    if (!ok) return ::testing::AssertionFailure() << what << "[" << e << "]: fused " << g << " vs composed " << w;
  }
  return ::testing::AssertionSuccess();
}

void expect_match(const Result& got, const Result& want, double atol, double rtol) {
  EXPECT_TRUE(near(got.out, want.out, atol, rtol, "out"));
  EXPECT_TRUE(near(got.dq, want.dq, atol, rtol, "dq"));
  EXPECT_TRUE(near(got.dk, want.dk, atol, rtol, "dk"));
  EXPECT_TRUE(near(got.dv, want.dv, atol, rtol, "dv"));
}

struct Case {
  const char* name;
  Dims dims;
  MaskKind mask;
  bool causal;
};

// Sequence lengths cross the 64-query and 64-key tiles (and leave partial ones); head_dim 13 and
// value dim 7 are no multiple of any vector width.
const Case kCases[] = {
    {"no_mask", {2, 3, 37, 70, 13, 7}, MaskKind::kNone, false},
    {"causal_square", {2, 2, 70, 70, 13, 7}, MaskKind::kNone, true},
    {"causal_tq_lt_tk", {1, 2, 40, 130, 8, 9}, MaskKind::kNone, true},
    {"causal_tq_gt_tk", {1, 2, 100, 40, 8, 5}, MaskKind::kNone, true},
    {"padding", {3, 2, 33, 65, 13, 7}, MaskKind::kPadding, false},
    {"padding_causal", {3, 2, 66, 66, 5, 11}, MaskKind::kPadding, true},
    {"full_mask", {2, 2, 35, 67, 6, 6}, MaskKind::kFull, false},
    {"query_key_mask_causal", {2, 3, 20, 30, 4, 3}, MaskKind::kQueryKey, true},
    {"single_key", {2, 1, 5, 1, 3, 2}, MaskKind::kNone, true},
};

class AttentionCases : public chorus::testing::CoreTest, public ::testing::WithParamInterface<Case> {};

TEST_P(AttentionCases, MatchesComposedFloat64) {
  const Case& c = GetParam();
  Inputs in = make_inputs(c.dims, DType::kFloat64, 11);
  Tensor mask = make_mask(c.mask, c.dims, 5);
  AttentionOptions o{.causal = c.causal};
  expect_match(run(in, [&](auto q, auto k, auto v) { return scaled_dot_product_attention(q, k, v, mask, o); }),
               run(in, [&](auto q, auto k, auto v) { return reference_attention(q, k, v, mask, o); }), 1e-12, 1e-10);
}

TEST_P(AttentionCases, MatchesComposedFloat32) {
  const Case& c = GetParam();
  Inputs in = make_inputs(c.dims, DType::kFloat32, 21);
  Tensor mask = make_mask(c.mask, c.dims, 6);
  AttentionOptions o{.causal = c.causal};
  expect_match(run(in, [&](auto q, auto k, auto v) { return scaled_dot_product_attention(q, k, v, mask, o); }),
               run(in, [&](auto q, auto k, auto v) { return reference_attention(q, k, v, mask, o); }), 2e-5, 1e-4);
}

// bfloat16 q, k, v: computed in float32 and rounded once, so within one bfloat16 rounding (2^-8
// relative) of the float32 result on the same (bfloat16-valued) inputs.
TEST_P(AttentionCases, BFloat16MatchesFloat32OnTheSameValues) {
  const Case& c = GetParam();
  Inputs in16 = make_inputs(c.dims, DType::kBFloat16, 31);
  Inputs in32{cast(in16.q, DType::kFloat32), cast(in16.k, DType::kFloat32), cast(in16.v, DType::kFloat32), in16.w};
  Tensor mask = make_mask(c.mask, c.dims, 7);
  AttentionOptions o{.causal = c.causal};
  Result got = run(in16, [&](auto q, auto k, auto v) {
    Tensor out = scaled_dot_product_attention(q, k, v, mask, o);
    EXPECT_EQ(out.dtype(), DType::kBFloat16);
    return out;
  });
  Result want = run(in32, [&](auto q, auto k, auto v) { return reference_attention(q, k, v, mask, o); });
  // Gradients: dout is rounded to bfloat16 too (the loss weights), and sums of ~Tk terms.
  EXPECT_TRUE(near(got.out, want.out, 4e-3, 1.0 / 128, "out"));
  EXPECT_TRUE(near(got.dq, want.dq, 2e-2, 1.0 / 64, "dq"));
  EXPECT_TRUE(near(got.dk, want.dk, 2e-2, 1.0 / 64, "dk"));
  EXPECT_TRUE(near(got.dv, want.dv, 2e-2, 1.0 / 64, "dv"));
}

INSTANTIATE_TEST_SUITE_P(Attention, AttentionCases, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

class Attention : public chorus::testing::CoreTest {};

TEST_F(Attention, FiniteDifferences) {
  const Dims s{1, 2, 5, 6, 3, 2};
  Tensor mask = make_mask(MaskKind::kFull, s, 9);
  for (bool causal : {false, true}) {
    AttentionOptions o{.scale = 0.7, .causal = causal};
    EXPECT_TRUE(check_gradients(
        [&](const std::vector<Tensor>& x) { return scaled_dot_product_attention(x[0], x[1], x[2], mask, o); },
        {random_tensor({1, 2, 5, 3}, 1), random_tensor({1, 2, 6, 3}, 2), random_tensor({1, 2, 6, 2}, 3)},
        {.tol = 1e-6}))
        << "causal " << causal;
  }
}

TEST_F(Attention, ScaleOptionAndDefault) {
  const Dims s{1, 1, 4, 5, 9, 3};
  Inputs in = make_inputs(s, DType::kFloat64, 3);
  for (double scale : {0.0, 0.25, -1.5}) {
    AttentionOptions o{.scale = scale};
    EXPECT_TRUE(near(scaled_dot_product_attention(in.q, in.k, in.v, {}, o).to_vector<double>(),
                     reference_attention(in.q, in.k, in.v, {}, o).to_vector<double>(), 1e-13, 1e-12, "out"))
        << scale;
  }
}

// A row whose keys are all masked: uniform weights over all Tk keys (Keras's -1e9 masking gives
// softmax of equal logits), so its output is the mean of v, its q gets no gradient, and every key
// gets 1/Tk of its output gradient in dv. Causal rows of the same batch are unaffected.
TEST_F(Attention, RowWithEveryKeyMaskedIsUniform) {
  const Dims s{2, 1, 3, 70, 4, 2};
  std::vector<bool> m(static_cast<std::size_t>(2 * 3 * 70), true);
  for (int j = 0; j < 70; ++j) m[static_cast<std::size_t>(1 * 70 + j)] = false;  // batch 0, query 1
  Tensor mask = Tensor::from_vector(m, Shape{2, 1, 3, 70}, "/CPU:0");
  Inputs in = make_inputs(s, DType::kFloat64, 41);
  for (bool causal : {false, true}) {
    AttentionOptions o{.causal = causal};
    Result got = run(in, [&](auto q, auto k, auto v) { return scaled_dot_product_attention(q, k, v, mask, o); });
    const std::vector<double> v = in.v.to_vector<double>();
    for (int e = 0; e < 2; ++e) {
      double mean = 0;
      for (int j = 0; j < 70; ++j) mean += v[static_cast<std::size_t>(j * 2 + e)] / 70;
      EXPECT_NEAR(got.out[static_cast<std::size_t>(1 * 2 + e)], mean, 1e-14);
    }
    for (int e = 0; e < 4; ++e) EXPECT_EQ(got.dq[static_cast<std::size_t>(1 * 4 + e)], 0.0);
    expect_match(got, run(in, [&](auto q, auto k, auto v) { return reference_attention(q, k, v, mask, o); }), 1e-12,
                 1e-10);
  }
}

// Dropout: from equal generator states the fused op and ops::dropout on the composed weights
// (drawn from the generator's split(1) child) apply the same mask, so results and gradients agree;
// the generator moves on by one block; the stateless seed reproduces ops::dropout(x, rate, seed).
TEST_F(Attention, DropoutMatchesComposedFromTheSameGeneratorState) {
  const Dims s{2, 2, 37, 70, 5, 3};
  Tensor mask = make_mask(MaskKind::kPadding, s, 3);
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    Inputs in = make_inputs(s, dtype, 51);
    const double tol = dtype == DType::kFloat64 ? 1e-12 : 2e-5;
    auto fused_gen = Generator::from_seed(99);
    auto ref_gen = Generator::from_seed(99);
    AttentionOptions fused{.causal = true, .dropout_rate = 0.3, .generator = &fused_gen};
    AttentionOptions ref = fused;
    ref.generator = &ref_gen;
    Result got = run(in, [&](auto q, auto k, auto v) { return scaled_dot_product_attention(q, k, v, mask, fused); });
    Result want = run(in, [&](auto q, auto k, auto v) { return reference_attention(q, k, v, mask, ref); });
    expect_match(got, want, tol, 10 * tol);
    EXPECT_EQ(fused_gen.state(), ref_gen.state());
    auto fresh = Generator::from_seed(99);
    EXPECT_NE(fused_gen.state(), fresh.state());
    // A second call draws another mask.
    EXPECT_NE(scaled_dot_product_attention(in.q, in.k, in.v, mask, fused).to_vector<double>(), got.out);

    AttentionOptions seeded{.dropout_rate = 0.5, .seed = std::array<std::int64_t, 2>{7, 8}};
    expect_match(run(in, [&](auto q, auto k, auto v) { return scaled_dot_product_attention(q, k, v, {}, seeded); }),
                 run(in, [&](auto q, auto k, auto v) { return reference_attention(q, k, v, {}, seeded); }), tol,
                 10 * tol);
  }
}

// The weights of a row after dropout: about (1 - rate) of them kept. With v = one-hot columns the
// output is the weights themselves.
TEST_F(Attention, DropoutKeepsAboutOneMinusRate) {
  const std::int64_t tk = 64, tq = 64;
  std::vector<double> eye(static_cast<std::size_t>(tk * tk), 0.0);
  for (std::int64_t j = 0; j < tk; ++j) eye[static_cast<std::size_t>(j * tk + j)] = 1.0;
  Tensor v = Tensor::from_vector(eye, Shape{1, 1, tk, tk}, "/CPU:0");
  Tensor q = Tensor::zeros({1, 1, tq, 4}, DType::kFloat64, "/CPU:0");
  Tensor k = Tensor::zeros({1, 1, tk, 4}, DType::kFloat64, "/CPU:0");
  std::vector<double> w =
      scaled_dot_product_attention(q, k, v, {}, {.dropout_rate = 0.25, .seed = {{1, 2}}}).to_vector<double>();
  int kept = 0;
  for (double x : w) {
    ASSERT_TRUE(x == 0.0 || std::abs(x - 1.0 / 64 / 0.75) < 1e-15) << x;
    kept += x != 0.0;
  }
  EXPECT_NEAR(kept / static_cast<double>(tq * tk), 0.75, 0.03);
}

// NaN or Inf in q, k or v reach the result and the gradients exactly where they reach the
// composed ops' (masked pairs included: matmul's 0 * Inf is NaN).
TEST_F(Attention, NonFiniteInputsPropagateAsComposed) {
  const Dims s{1, 2, 40, 70, 3, 2};
  Tensor mask = make_mask(MaskKind::kPadding, s, 8);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  struct Poison {
    int input;  // 0 q, 1 k, 2 v
    std::int64_t index;
    double value;
  };
  const Poison poisons[] = {{0, 3 * 3 + 1, nan}, {1, 50 * 3, nan},     {1, 70 * 3 + 65 * 3, inf}, {2, 60 * 2 + 1, nan},
                            {2, 5 * 2, -inf},    {2, 66 * 2 + 1, inf}, {0, 70 * 3 + 2, inf}};
  for (const Poison& p : poisons) {
    for (bool causal : {false, true}) {
      Inputs in = make_inputs(s, DType::kFloat64, 61);
      Tensor* t = p.input == 0 ? &in.q : p.input == 1 ? &in.k : &in.v;
      std::vector<double> x = t->to_vector<double>();
      x[static_cast<std::size_t>(p.index)] = p.value;
      *t = Tensor::from_vector(x, t->shape(), "/CPU:0");
      AttentionOptions o{.causal = causal};
      SCOPED_TRACE(::testing::Message() << "input " << p.input << " index " << p.index << " value " << p.value
                                        << " causal " << causal);
      expect_match(run(in, [&](auto q, auto k, auto v) { return scaled_dot_product_attention(q, k, v, mask, o); }),
                   run(in, [&](auto q, auto k, auto v) { return reference_attention(q, k, v, mask, o); }), 1e-12,
                   1e-10);
    }
  }
}

TEST_F(Attention, NoKeysGivesZerosAndEmptyBatchWorks) {
  Tensor q = random_tensor({2, 1, 3, 4}, 1);
  Inputs none{q, Tensor::zeros({2, 1, 0, 4}, DType::kFloat64, "/CPU:0"),
              Tensor::zeros({2, 1, 0, 5}, DType::kFloat64, "/CPU:0"), random_tensor({2, 1, 3, 5}, 2)};
  Result r = run(none, [](auto a, auto b, auto c) { return scaled_dot_product_attention(a, b, c); });
  EXPECT_EQ(r.out, std::vector<double>(30, 0.0));
  EXPECT_EQ(r.dq, std::vector<double>(24, 0.0));
  Tensor e = Tensor::zeros({0, 2, 3, 4}, DType::kFloat32, "/CPU:0");
  EXPECT_EQ(scaled_dot_product_attention(e, e, e).shape(), Shape({0, 2, 3, 4}));
}

TEST_F(Attention, BadArgumentsRaiseNamingTheOpAndShapes) {
  Tensor q = Tensor::zeros({2, 3, 4, 8}), k = Tensor::zeros({2, 3, 5, 8}), v = Tensor::zeros({2, 3, 5, 6});
  EXPECT_THROW_WITH(
      scaled_dot_product_attention(Tensor::zeros({3, 4, 8}), k, v), InvalidArgumentError,
      "ScaledDotProductAttention: q, k and v must be [batch, heads, seq, head_dim] (rank 4), got (q (3, 4, 8)");
  EXPECT_THROW_WITH(scaled_dot_product_attention(q, Tensor::zeros({2, 3, 5, 7}), v), InvalidArgumentError,
                    "q and k must have the same head_dim (dim 3), got (q (2, 3, 4, 8), k (2, 3, 5, 7)");
  EXPECT_THROW_WITH(scaled_dot_product_attention(q, k, Tensor::zeros({2, 3, 6, 6})), InvalidArgumentError,
                    "k and v must have the same number of keys");
  EXPECT_THROW_WITH(scaled_dot_product_attention(q, Tensor::zeros({2, 2, 5, 8}), v), InvalidArgumentError,
                    "must agree in batch and heads");
  EXPECT_THROW_WITH(scaled_dot_product_attention(q, cast(k, DType::kFloat64), v), InvalidArgumentError,
                    "ScaledDotProductAttention");
  EXPECT_THROW_WITH(
      scaled_dot_product_attention(cast(q, DType::kInt32), cast(k, DType::kInt32), cast(v, DType::kInt32)),
      InvalidArgumentError, "int32");
  EXPECT_THROW_WITH(scaled_dot_product_attention(q, k, v, Tensor::ones({2, 1, 4, 5})), InvalidArgumentError, "mask");
  EXPECT_THROW_WITH(scaled_dot_product_attention(q, k, v, cast(Tensor::ones({2, 1, 4, 4}), DType::kBool)),
                    InvalidArgumentError,
                    "mask of shape (2, 1, 4, 4) does not broadcast to [batch, heads, Tq, Tk] = (2, 3, 4, 5)");
  EXPECT_THROW_WITH(scaled_dot_product_attention(q, k, v, cast(Tensor::ones({1, 2, 3, 4, 5}), DType::kBool)),
                    InvalidArgumentError, "does not broadcast");
  EXPECT_THROW_WITH(scaled_dot_product_attention(q, k, v, {}, {.dropout_rate = 1.0}), InvalidArgumentError,
                    "dropout_rate must be in [0, 1), got 1");
  EXPECT_THROW_WITH(scaled_dot_product_attention(q, k, v, {}, {.scale = std::nan("")}), InvalidArgumentError,
                    "scale must be finite");
  // A failing call consumes no randomness.
  auto gen = Generator::from_seed(3);
  const GeneratorState before = gen.state();
  EXPECT_THROW(
      scaled_dot_product_attention(q, Tensor::zeros({2, 3, 5, 7}), v, {}, {.dropout_rate = 0.5, .generator = &gen}),
      InvalidArgumentError);
  EXPECT_EQ(gen.state(), before);
}

TEST_F(Attention, SecondDerivativeIsRefused) {
  Tensor q = random_tensor({1, 1, 2, 3}, 1), k = random_tensor({1, 1, 2, 3}, 2), v = random_tensor({1, 1, 2, 3}, 3);
  GradientTape outer(true);
  outer.watch(q);
  Tensor dq;
  {
    GradientTape inner;
    inner.watch(q);
    dq = inner.gradient(reduce_sum(scaled_dot_product_attention(q, k, v)), {q})[0];
  }
  EXPECT_THROW_WITH(outer.gradient(reduce_sum(dq), {q}), UnimplementedError, "ScaledDotProductAttentionGrad");
}

}  // namespace
}  // namespace chorus::ops
