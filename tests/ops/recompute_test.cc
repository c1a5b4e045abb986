// recompute_grad (ops/recompute.h), TensorFlow's tf.recompute_grad: the gradients equal — bit for
// bit — those of recording the function normally (MLP and conv blocks, dropout inside, variables
// read inside, nested and persistent tapes); random draws are replayed; the backward pass's peak
// memory falls; the errors. The reference in each test is the same computation without
// recomputation, in the same process, on the same kernels.
#include <chorus/ops/recompute.h>

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "tests/core/test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/error.h>
#include <chorus/core/variable.h>
#include <chorus/ops/ops.h>

namespace chorus {
namespace {

class RecomputeTest : public testing::CoreTest {};

using ops::GradientTape;

Tensor normal(const Shape& s, std::int64_t seed, DType dtype = DType::kFloat32) {
  return ops::stateless_random_normal(s, {seed, 17}, {.stddev = 0.5, .dtype = dtype, .device = "/CPU:0"});
}
Variable var(const Shape& s, std::int64_t seed, const std::string& name, bool trainable = true) {
  return make_variable({.initial_value = normal(s, seed), .name = name, .trainable = trainable});
}

// Bitwise equality of two lists of gradients (undefined where the other is undefined).
void expect_same_bits(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].defined(), want[i].defined()) << "gradient " << i;
    if (!want[i].defined()) continue;
    ASSERT_EQ(got[i].shape(), want[i].shape()) << "gradient " << i;
    ASSERT_EQ(got[i].dtype(), want[i].dtype()) << "gradient " << i;
    if (want[i].dtype() == DType::kFloat64)
      EXPECT_EQ(got[i].to_vector<double>(), want[i].to_vector<double>()) << "gradient " << i;
    else
      EXPECT_EQ(got[i].to_vector<float>(), want[i].to_vector<float>()) << "gradient " << i;
  }
}

// An MLP block: dense(relu) → dense → tanh, plus the block's input (a residual).
struct MlpBlock {
  Variable w1, b1, w2;
  MlpBlock(std::int64_t width, std::int64_t hidden, std::int64_t seed)
      : w1(var({width, hidden}, seed, "w1")),
        b1(var({hidden}, seed + 1, "b1")),
        w2(var({hidden, width}, seed + 2, "w2")) {}
  Tensor operator()(const Tensor& x) const {
    const Tensor h = ops::relu(ops::add(ops::matmul(x, w1.value()), b1.value()));
    return ops::tanh(ops::matmul(h, w2.value()));
  }
  std::vector<Variable> vars() const { return {w1, b1, w2}; }
};

// d loss / d (vars, x) for loss = sum(square(block2(block1(x)))) with the blocks plain or
// recomputed. x is watched, so its gradient flows through both recorded ops.
std::vector<Tensor> mlp_gradients(bool recompute) {
  const MlpBlock a(32, 64, 1), b(32, 64, 11);
  const Tensor x = normal({16, 32}, 100);
  ops::RecomputeFn1 fa = [&](const Tensor& t) { return a(t); };
  ops::RecomputeFn1 fb = [&](const Tensor& t) { return b(t); };
  if (recompute) {
    fa = ops::recompute_grad(fa);
    fb = ops::recompute_grad(fb);
  }
  GradientTape tape(/*persistent=*/true);
  tape.watch(x);
  const Tensor loss = ops::reduce_sum(ops::square(fb(fa(x))));
  std::vector<Variable> vars = a.vars();
  for (const Variable& v : b.vars()) vars.push_back(v);
  std::vector<Tensor> g = tape.gradient(loss, vars);
  g.push_back(tape.gradient(loss, std::vector<Tensor>{x})[0]);
  return g;
}

TEST_F(RecomputeTest, MlpBlockGradientsAreBitwiseEqual) {
  const std::vector<Tensor> want = mlp_gradients(false);
  const std::vector<Tensor> got = mlp_gradients(true);
  for (const Tensor& g : want) ASSERT_TRUE(g.defined());
  expect_same_bits(got, want);
}

// A conv block: fused conv + bias + relu, then a plain conv, then max pooling.
std::vector<Tensor> conv_gradients(bool recompute) {
  const Variable f1 = var({3, 3, 4, 8}, 1, "f1"), bias = var({8}, 2, "bias"), f2 = var({3, 3, 8, 8}, 3, "f2");
  const Tensor x = normal({2, 10, 10, 4}, 4);
  ops::RecomputeFn fn = [&](const std::vector<Tensor>& in) {
    const Tensor h = ops::fused_conv2d(in[0], f1.value(), bias.value(), ops::FusedActivation::kRelu,
                                       {.padding = ops::Padding::kSame});
    const Tensor y = ops::conv2d(h, f2.value(), {1, 1}, ops::Padding::kValid);
    return std::vector<Tensor>{ops::max_pool2d(y, {2, 2}, {2, 2}), h};  // two results, both used
  };
  if (recompute) fn = ops::recompute_grad(fn);
  GradientTape tape;
  tape.watch(x);
  const std::vector<Tensor> ys = fn({x});
  const Tensor loss = ops::add(ops::reduce_sum(ops::square(ys[0])), ops::reduce_mean(ys[1]));
  return tape.gradient(loss, std::vector<Tensor>{f1.value(), bias.value(), f2.value(), x});
}

TEST_F(RecomputeTest, ConvBlockGradientsAreBitwiseEqual) {
  const std::vector<Tensor> want = conv_gradients(false);
  for (const Tensor& g : want) ASSERT_TRUE(g.defined());
  expect_same_bits(conv_gradients(true), want);
}

TEST_F(RecomputeTest, TapeKeepsOneOpAndFnRunsAgainInTheBackward) {
  const MlpBlock a(8, 16, 1);
  int runs = 0;
  auto fn = ops::recompute_grad(ops::RecomputeFn1([&](const Tensor& t) {
    ++runs;
    return a(t);
  }));
  const Tensor x = normal({4, 8}, 2);
  GradientTape tape(/*persistent=*/true);
  const Tensor loss = ops::reduce_sum(fn(x));
  EXPECT_EQ(runs, 1);
  const auto g1 = tape.gradient(loss, a.vars());
  EXPECT_EQ(runs, 2);  // recomputed once per backward pass
  const auto g2 = tape.gradient(loss, a.vars());
  EXPECT_EQ(runs, 3);
  expect_same_bits(g2, g1);
}

TEST_F(RecomputeTest, OutsideAnyTapeItIsJustFn) {
  const MlpBlock a(8, 16, 1);
  int runs = 0;
  auto fn = ops::recompute_grad(ops::RecomputeFn1([&](const Tensor& t) {
    ++runs;
    return a(t);
  }));
  const Tensor x = normal({4, 8}, 2);
  EXPECT_EQ(fn(x).to_vector<float>(), a(x).to_vector<float>());
  EXPECT_EQ(runs, 1);
}

TEST_F(RecomputeTest, VariablesReadInsideGetGradientsAsTapeWatchesThem) {
  const Variable w = var({3}, 1, "w"), frozen = var({3}, 2, "frozen", /*trainable=*/false);
  const Tensor x = normal({3}, 3);
  auto fn = ops::recompute_grad(ops::RecomputeFn1(
      [&](const Tensor& t) { return ops::mul(ops::mul(t, w.value()), ops::square(frozen.value())); }));
  const auto grads = [&](bool watch_frozen) {
    GradientTape tape;
    if (watch_frozen) tape.watch(frozen);
    return tape.gradient(ops::reduce_sum(fn(x)), std::vector<Variable>{w, frozen});
  };
  // d/dw = x * frozen^2; d/dfrozen = 2 x w frozen (only when watched, as without recompute_grad).
  const auto xv = x.to_vector<float>(), wv = w.value().to_vector<float>(), fv = frozen.value().to_vector<float>();
  const auto g = grads(false);
  ASSERT_TRUE(g[0].defined());
  EXPECT_FALSE(g[1].defined());
  const auto gw = g[0].to_vector<float>();
  for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(gw[i], xv[i] * (fv[i] * fv[i]));
  const auto g2 = grads(true);
  ASSERT_TRUE(g2[1].defined());
  const auto gf = g2[1].to_vector<float>();
  for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(gf[i], 2 * xv[i] * wv[i] * fv[i]);
}

TEST_F(RecomputeTest, UnwatchedFunctionGetsNoOp) {
  // Nothing fn reads is watched: no op is recorded, so no recomputation and no gradient.
  int runs = 0;
  auto fn = ops::recompute_grad(ops::RecomputeFn1([&](const Tensor& t) {
    ++runs;
    return ops::square(t);
  }));
  const Tensor x = normal({3}, 1), other = normal({3}, 2);
  GradientTape tape;
  tape.watch(other);
  const Tensor loss = ops::reduce_sum(ops::add(fn(x), other));
  const auto g = tape.gradient(loss, std::vector<Tensor>{x, other});
  EXPECT_FALSE(g[0].defined());
  EXPECT_TRUE(g[1].defined());
  EXPECT_EQ(runs, 1);
}

// Captured watched tensors and pass-through results behave as without recomputation.
TEST_F(RecomputeTest, CapturedTensorsAndPassThroughResults) {
  const Tensor x = normal({5}, 1, DType::kFloat64), c = normal({5}, 2, DType::kFloat64);
  const auto run = [&](bool recompute) {
    ops::RecomputeFn fn = [&](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{ops::mul(ops::tanh(in[0]), c), in[0]};  // c captured; in[0] returned as is
    };
    if (recompute) fn = ops::recompute_grad(fn);
    GradientTape tape;
    tape.watch(x);
    tape.watch(c);
    const auto ys = fn({x});
    EXPECT_EQ(ys[1].id(), x.id());
    return tape.gradient(ops::reduce_sum(ops::mul(ys[0], ys[1])), std::vector<Tensor>{x, c});
  };
  expect_same_bits(run(true), run(false));
}

// Nested tapes, the outer persistent: a second-order gradient through the recomputation.
std::vector<Tensor> second_order(bool recompute) {
  const Variable w = make_variable({.initial_value = normal({4}, 1, DType::kFloat64), .name = "w"});
  const Tensor x = normal({4}, 2, DType::kFloat64);
  ops::RecomputeFn1 fn = [&](const Tensor& t) { return ops::mul(ops::mul(t, t), ops::tanh(w.value())); };
  if (recompute) fn = ops::recompute_grad(fn);
  GradientTape outer(/*persistent=*/true);
  outer.watch(x);
  std::vector<Tensor> first;
  {
    GradientTape inner;
    inner.watch(x);
    const Tensor y = ops::reduce_sum(fn(x));
    first = inner.gradient(y, std::vector<Tensor>{x});  // 2 x tanh(w)
  }
  const Tensor gsum = ops::reduce_sum(first[0]);
  const auto dx = outer.gradient(gsum, std::vector<Tensor>{x});    // 2 tanh(w)
  const auto dw = outer.gradient(gsum, std::vector<Variable>{w});  // 2 x (1 - tanh(w)^2)
  return {first[0], dx[0], dw[0]};
}

TEST_F(RecomputeTest, NestedTapesSecondOrderGradientsAreBitwiseEqual) {
  const std::vector<Tensor> want = second_order(false);
  for (const Tensor& g : want) ASSERT_TRUE(g.defined());
  expect_same_bits(second_order(true), want);
  // And analytically.
  const auto w = normal({4}, 1, DType::kFloat64).to_vector<double>(),
             x = normal({4}, 2, DType::kFloat64).to_vector<double>();
  const auto dx = want[1].to_vector<double>(), dw = want[2].to_vector<double>();
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(dx[i], 2 * std::tanh(w[i]), 1e-12);
    EXPECT_NEAR(dw[i], 2 * x[i] * (1 - std::tanh(w[i]) * std::tanh(w[i])), 1e-12);
  }
}

TEST_F(RecomputeTest, NestedRecomputeGrad) {
  const MlpBlock a(8, 16, 1), b(8, 16, 5);
  const Tensor x = normal({4, 8}, 2);
  const auto run = [&](bool recompute) {
    ops::RecomputeFn1 inner = [&](const Tensor& t) { return a(t); };
    if (recompute) inner = ops::recompute_grad(inner);
    ops::RecomputeFn1 outer = [&](const Tensor& t) { return b(inner(t)); };
    if (recompute) outer = ops::recompute_grad(outer);
    GradientTape tape;
    std::vector<Variable> vars = a.vars();
    for (const Variable& v : b.vars()) vars.push_back(v);
    return tape.gradient(ops::reduce_sum(ops::square(outer(x))), vars);
  };
  expect_same_bits(run(true), run(false));
}

// A tape created inside fn records fn's ops as usual: fn(x) = d/dx sum(x^3 w) = 3 x^2 w.
TEST_F(RecomputeTest, TapeInsideFunctionRecordsAsUsual) {
  const Variable w = make_variable({.initial_value = normal({4}, 1, DType::kFloat64), .name = "w"});
  const Tensor x = normal({4}, 2, DType::kFloat64);
  const auto run = [&](bool recompute) {
    ops::RecomputeFn1 fn = [&](const Tensor& t) {
      GradientTape own;
      own.watch(t);
      const Tensor y = ops::reduce_sum(ops::mul(ops::mul(ops::square(t), t), w.value()));
      return own.gradient(y, std::vector<Tensor>{t})[0];
    };
    if (recompute) fn = ops::recompute_grad(fn);
    GradientTape tape;
    tape.watch(x);
    const Tensor g = fn(x);
    const auto d = tape.gradient(ops::reduce_sum(g), std::vector<Tensor>{x, w.value()});
    return std::vector<Tensor>{g, d[0], d[1]};
  };
  const auto want = run(false);
  expect_same_bits(run(true), want);
  const auto xv = x.to_vector<double>(), wv = w.value().to_vector<double>(), dx = want[1].to_vector<double>(),
             dw = want[2].to_vector<double>();
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(dx[i], 6 * xv[i] * wv[i], 1e-12);  // d/dx 3 x^2 w
    EXPECT_NEAR(dw[i], 3 * xv[i] * xv[i], 1e-12);  // d/dw 3 x^2 w
  }
}

// ---- random numbers ----

// Dropout from a Generator inside the block: same mask in the recomputation, the same gradient as
// without recomputation from the same seed, and the generator moved once (by the forward).
TEST_F(RecomputeTest, DropoutFromGeneratorIsReplayed) {
  const MlpBlock a(16, 32, 1);
  const Tensor x = normal({8, 16}, 2);
  const auto run = [&](bool recompute, ops::GeneratorState* after) {
    auto gen = std::make_shared<ops::Generator>(ops::Generator::from_seed(42));
    ops::RecomputeFn1 fn = [&a, gen](const Tensor& t) { return ops::dropout(a(t), 0.5, *gen); };
    if (recompute) fn = ops::recompute_grad(fn);
    GradientTape tape;
    const Tensor y = fn(x);
    const auto g = tape.gradient(ops::reduce_sum(ops::square(y)), a.vars());
    *after = gen->state();
    std::vector<Tensor> out = g;
    out.push_back(y);
    return out;
  };
  ops::GeneratorState plain, recomputed;
  const auto want = run(false, &plain);
  const auto got = run(true, &recomputed);
  expect_same_bits(got, want);
  EXPECT_EQ(recomputed, plain) << "the recomputation must not draw from the generator again";
  // The mask is not all-ones or all-zeros (the test would not see a replay otherwise).
  const auto y = want.back().to_vector<float>();
  int zeros = 0;
  for (float v : y) zeros += v == 0.0f;
  EXPECT_GT(zeros, 0);
  EXPECT_LT(zeros, static_cast<int>(y.size()));
}

TEST_F(RecomputeTest, GlobalGeneratorAndStatelessDropoutAreReplayed) {
  const MlpBlock a(16, 32, 1);
  const Tensor x = normal({8, 16}, 2);
  const auto run = [&](bool recompute) {
    ops::set_seed(9);
    ops::RecomputeFn1 fn = [&](const Tensor& t) {
      return ops::dropout(ops::dropout(a(t), 0.3), 0.25, std::array<std::int64_t, 2>{5, 6});
    };
    if (recompute) fn = ops::recompute_grad(fn);
    GradientTape tape;
    auto g = tape.gradient(ops::reduce_sum(ops::square(fn(x))), a.vars());
    g.push_back(ops::random_uniform({4}));  // the global generator's next draw
    return g;
  };
  const auto want = run(false);
  expect_same_bits(run(true), want);
}

TEST_F(RecomputeTest, RecomputationDrawingOtherNumbersIsAnInternalError) {
  const Variable w = var({64}, 1, "w");
  auto gen = std::make_shared<ops::Generator>(ops::Generator::from_seed(1));
  int runs = 0;
  // Draws 64 numbers in the forward, 128 in the recomputation.
  auto other_size = ops::recompute_grad(ops::RecomputeFn1([&, gen](const Tensor& t) {
    const std::int64_t n = ++runs == 1 ? 64 : 128;
    return ops::mul(t, ops::slice(gen->uniform({n}), {0}, {64}));
  }));
  {
    GradientTape tape;
    const Tensor loss = ops::reduce_sum(other_size(w.value()));
    EXPECT_THROW_WITH(tape.gradient(loss, std::vector<Variable>{w}), InternalError, "recompute_grad", "random draw 0");
  }
  // Draws in the forward only.
  runs = 0;
  auto fewer = ops::recompute_grad(ops::RecomputeFn1(
      [&, gen](const Tensor& t) { return ++runs == 1 ? ops::mul(t, gen->uniform({64})) : ops::mul(t, t); }));
  {
    GradientTape tape;
    const Tensor loss = ops::reduce_sum(fewer(w.value()));
    EXPECT_THROW_WITH(tape.gradient(loss, std::vector<Variable>{w}), InternalError, "recompute_grad",
                      "drew 0 random draws but the forward drew 1");
  }
  // Draws in the recomputation only.
  runs = 0;
  auto more = ops::recompute_grad(ops::RecomputeFn1(
      [&, gen](const Tensor& t) { return ++runs == 1 ? ops::mul(t, t) : ops::mul(t, gen->uniform({64})); }));
  {
    GradientTape tape;
    const Tensor loss = ops::reduce_sum(more(w.value()));
    EXPECT_THROW_WITH(tape.gradient(loss, std::vector<Variable>{w}), InternalError, "recompute_grad",
                      "draws more random numbers than the forward did");
  }
}

// ---- errors ----

TEST_F(RecomputeTest, Errors) {
  EXPECT_THROW_WITH(ops::recompute_grad(ops::RecomputeFn()), InvalidArgumentError, "recompute_grad: fn is empty");
  EXPECT_THROW_WITH(ops::recompute_grad(ops::RecomputeFn1()), InvalidArgumentError, "recompute_grad: fn is empty");
  auto fn = ops::recompute_grad(ops::RecomputeFn([](const std::vector<Tensor>& x) { return x; }));
  EXPECT_THROW_WITH(fn({normal({2}, 1), Tensor()}), InvalidArgumentError, "argument 1 of 2 is undefined");

  const Variable w = var({4}, 1, "w");
  int runs = 0;
  auto shape_changes = ops::recompute_grad(ops::RecomputeFn1([&](const Tensor& t) {
    const Tensor y = ops::square(t);
    return ++runs == 1 ? y : ops::reshape(y, {2, 2});
  }));
  GradientTape tape;
  const Tensor loss = ops::reduce_sum(shape_changes(w.value()));
  EXPECT_THROW_WITH(tape.gradient(loss, std::vector<Variable>{w}), InternalError,
                    "recomputation of fn returned result 0 shaped (2, 2), the forward (4,)");
}

// ---- memory ----

// The peak of a forward and backward pass over a deep MLP on the CPU device, from a reset.
std::int64_t mlp_peak(bool recompute, std::vector<Tensor>* grads) {
  constexpr int kBlocks = 8;
  constexpr std::int64_t kBatch = 1024, kWidth = 128, kHidden = 256;
  std::vector<MlpBlock> blocks;
  for (int i = 0; i < kBlocks; ++i) blocks.emplace_back(kWidth, kHidden, 10 * i + 1);
  std::vector<Variable> vars;
  for (const MlpBlock& b : blocks)
    for (const Variable& v : b.vars()) vars.push_back(v);
  Tensor x = normal({kBatch, kWidth}, 3);
  config::reset_memory_stats("/CPU:0");
  {
    GradientTape tape;
    Tensor h = x;
    for (const MlpBlock& b : blocks) {
      ops::RecomputeFn1 fn = [&b](const Tensor& t) { return b(t); };
      h = recompute ? ops::recompute_grad(fn)(h) : fn(h);
    }
    const Tensor loss = ops::reduce_sum(ops::square(h));
    h = Tensor();
    *grads = tape.gradient(loss, vars);
  }
  return static_cast<std::int64_t>(config::get_memory_info("/CPU:0").peak);
}

TEST_F(RecomputeTest, BackwardPeakMemoryFalls) {
  std::vector<Tensor> want, got;
  const std::int64_t plain = mlp_peak(false, &want);
  const std::int64_t recomputed = mlp_peak(true, &got);
  expect_same_bits(got, want);
  // Activation-dominated: a hidden activation [1024, 256] float32 is 1 MiB, a block's input and
  // output 0.5 MiB, a block's weights 0.25 MiB. Recorded normally, each of the 8 blocks keeps about
  // 4.5 MiB until its gradient ran (its input, the matmul, bias-add and relu outputs, the second
  // matmul's and tanh's): ≈ 36 MiB at the start of the backward pass. Recomputed, a block keeps its
  // 0.5 MiB input (4 MiB for all), and the backward pass holds one recomputed block (≈ 4.5 MiB)
  // plus its gradients' temporaries and the weights' gradients (2 MiB): ≈ 12 MiB, a third.
  std::cout << "peak: plain " << plain << " B, recomputed " << recomputed << " B, ratio "
            << static_cast<double>(recomputed) / static_cast<double>(plain) << "\n";
  EXPECT_LT(recomputed, plain / 2);
}

}  // namespace
}  // namespace chorus
