// GradientTape semantics, TensorFlow's: what is watched, unconnected sources, persistence,
// stop_gradient and StopRecording, nested tapes (higher-order gradients), threads.
#include <chorus/ops/tape.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "tests/core/test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/variable.h>
#include <chorus/ops/ops.h>

namespace chorus {
namespace {

class TapeTest : public testing::CoreTest {};

Tensor D(const std::vector<double>& v) { return Tensor::from_vector<double>(v, "/CPU:0"); }
std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

Variable var(const std::vector<double>& v, const std::string& name, bool trainable = true) {
  return make_variable({.initial_value = D(v), .name = name, .trainable = trainable});
}

TEST_F(TapeTest, TrainableVariablesAreWatchedAutomatically) {
  Variable w = var({1, 2, 3}, "w");
  ops::GradientTape tape;
  const Tensor loss = ops::reduce_sum(ops::square(w.value()));
  const auto g = tape.gradient(loss, std::vector<Variable>{w});
  ASSERT_TRUE(g[0].defined());
  EXPECT_EQ(vals(g[0]), (std::vector<double>{2, 4, 6}));
}

TEST_F(TapeTest, NonTrainableVariablesOnlyWhenWatched) {
  Variable c = var({1, 2}, "c", /*trainable=*/false);
  {
    ops::GradientTape tape;
    const Tensor loss = ops::reduce_sum(ops::square(c.value()));
    EXPECT_FALSE(tape.gradient(loss, std::vector<Variable>{c})[0].defined());
  }
  {
    ops::GradientTape tape;
    tape.watch(c);
    const Tensor loss = ops::reduce_sum(ops::square(c.value()));
    EXPECT_EQ(vals(tape.gradient(loss, std::vector<Variable>{c})[0]), (std::vector<double>{2, 4}));
  }
}

TEST_F(TapeTest, WatchAccessedVariablesFalse) {
  Variable a = var({3}, "a"), b = var({5}, "b");
  ops::GradientTape tape(/*persistent=*/false, /*watch_accessed_variables=*/false);
  tape.watch(b);
  const Tensor loss = ops::reduce_sum(ops::mul(a.value(), b.value()));
  const auto g = tape.gradient(loss, std::vector<Variable>{a, b});
  EXPECT_FALSE(g[0].defined());
  ASSERT_TRUE(g[1].defined());
  EXPECT_EQ(vals(g[1]), (std::vector<double>{3}));
}

TEST_F(TapeTest, WatchTensor) {
  const Tensor x = D({1, 2}), k = D({3, 4});
  ops::GradientTape tape(/*persistent=*/true);
  const Tensor unwatched = ops::reduce_sum(ops::mul(x, k));
  EXPECT_FALSE(tape.gradient(unwatched, {x})[0].defined());
  tape.watch(x);
  const Tensor y = ops::reduce_sum(ops::mul(x, k));
  const auto g = tape.gradient(y, {x, k});
  EXPECT_EQ(vals(g[0]), (std::vector<double>{3, 4}));
  EXPECT_FALSE(g[1].defined()) << "k is a constant";
}

TEST_F(TapeTest, UnconnectedSourcesAreUndefinedOrZero) {
  const Tensor x = D({1, 2}), z = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}, "/CPU:0");
  ops::GradientTape tape(/*persistent=*/true);
  tape.watch(x);
  tape.watch(z);
  const Tensor y = ops::reduce_sum(ops::exp(x));
  const auto none = tape.gradient(y, {x, z});
  EXPECT_TRUE(none[0].defined());
  EXPECT_FALSE(none[1].defined());
  const auto zero = tape.gradient(y, {x, z}, Tensor(), ops::UnconnectedGradients::kZero);
  ASSERT_TRUE(zero[1].defined());
  EXPECT_EQ(zero[1].shape(), z.shape());
  EXPECT_EQ(zero[1].dtype(), z.dtype());
  EXPECT_EQ(vals(zero[1]), std::vector<double>(6, 0.0));
}

TEST_F(TapeTest, NonPersistentTapeComputesOnce) {
  const Tensor x = D({2});
  ops::GradientTape tape;
  tape.watch(x);
  const Tensor y = ops::square(x);
  EXPECT_EQ(vals(tape.gradient(y, {x})[0]), (std::vector<double>{4}));
  EXPECT_THROW_WITH(tape.gradient(y, {x}), FailedPreconditionError, "persistent");
}

TEST_F(TapeTest, PersistentTapeComputesManyTimes) {
  const Tensor x = D({2, 3});
  ops::GradientTape tape(/*persistent=*/true);
  tape.watch(x);
  const Tensor y = ops::square(x);
  const Tensor z = ops::mul(y, y);  // x^4
  EXPECT_EQ(vals(tape.gradient(y, {x})[0]), (std::vector<double>{4, 6}));
  EXPECT_EQ(vals(tape.gradient(z, {x})[0]), (std::vector<double>{32, 108}));
  EXPECT_EQ(vals(tape.gradient(z, {y})[0]), (std::vector<double>{8, 18}));  // an intermediate as source
  EXPECT_EQ(vals(tape.gradient(y, {x})[0]), (std::vector<double>{4, 6}));
}

TEST_F(TapeTest, GradientsAccumulateOverPaths) {
  const Tensor x = D({1.5, -2});
  ops::GradientTape tape;
  tape.watch(x);
  const Tensor y = ops::add(ops::mul(x, x), ops::mul(x, ops::scalar_like(x, 3)));  // x^2 + 3x
  EXPECT_EQ(vals(tape.gradient(y, {x})[0]), (std::vector<double>{6, -1}));
}

TEST_F(TapeTest, TargetIsSummedOrSeeded) {
  const Tensor x = D({1, 2, 3});
  ops::GradientTape tape(/*persistent=*/true);
  tape.watch(x);
  const Tensor y = ops::square(x);  // not a scalar: d sum(y) / dx
  EXPECT_EQ(vals(tape.gradient(y, {x})[0]), (std::vector<double>{2, 4, 6}));
  EXPECT_EQ(vals(tape.gradient(y, {x}, D({1, 0, -1}))[0]), (std::vector<double>{2, 0, -6}));
  EXPECT_THROW_WITH(tape.gradient(y, {x}, D({1, 0})), InvalidArgumentError, "output_gradient");
  EXPECT_EQ(vals(tape.gradient(x, {x})[0]), (std::vector<double>{1, 1, 1}));  // the target itself
}

TEST_F(TapeTest, StopGradient) {
  const Tensor x = D({3});
  ops::GradientTape tape;
  tape.watch(x);
  const Tensor y = ops::mul(x, ops::stop_gradient(x));  // d/dx = stop_gradient(x) = 3, not 2x
  EXPECT_EQ(vals(tape.gradient(y, {x})[0]), (std::vector<double>{3}));
  EXPECT_EQ(vals(ops::stop_gradient(x)), (std::vector<double>{3}));
}

TEST_F(TapeTest, StopGradientOfATrainableVariable) {
  Variable w = var({2}, "w");
  ops::GradientTape tape;
  const Tensor y = ops::mul(w.value(), ops::stop_gradient(w.value()));
  EXPECT_EQ(vals(tape.gradient(y, std::vector<Variable>{w})[0]), (std::vector<double>{2}));
}

TEST_F(TapeTest, StopRecording) {
  const Tensor x = D({2});
  ops::GradientTape tape(/*persistent=*/true);
  tape.watch(x);
  Tensor hidden;
  {
    ops::GradientTape::StopRecording pause(tape);
    hidden = ops::square(x);
  }
  const Tensor y = ops::add(ops::square(x), hidden);  // only the recorded square contributes
  EXPECT_EQ(vals(tape.gradient(y, {x})[0]), (std::vector<double>{4}));
  EXPECT_FALSE(tape.gradient(hidden, {x})[0].defined());
}

TEST_F(TapeTest, TapeCreatedAfterTheOpSeesNothing) {
  const Tensor x = D({2});
  const Tensor y = ops::square(x);
  ops::GradientTape tape;
  tape.watch(x);
  EXPECT_FALSE(tape.gradient(y, {x})[0].defined());
}

TEST_F(TapeTest, SecondDerivativeWithNestedTapes) {
  // d/dx x^3 = 3x^2, d2/dx2 = 6x; the outer tape records the inner tape's gradient computation.
  const Tensor x = D({2, -1});
  ops::GradientTape outer(/*persistent=*/true);
  outer.watch(x);
  Tensor dy;
  {
    ops::GradientTape inner;
    inner.watch(x);
    const Tensor y = ops::mul(ops::mul(x, x), x);
    dy = inner.gradient(y, {x})[0];
  }
  EXPECT_EQ(vals(dy), (std::vector<double>{12, 3}));
  EXPECT_EQ(vals(outer.gradient(dy, {x})[0]), (std::vector<double>{12, -6}));
  // pow's gradient is differentiable too: d2/dx2 x^3 through Pow.
  Tensor dp;
  {
    ops::GradientTape inner;
    inner.watch(x);
    const Tensor y = ops::pow(x, ops::scalar_like(x, 3));
    dp = inner.gradient(y, {x})[0];
  }
  const auto d2 = vals(outer.gradient(dp, {x})[0]);
  EXPECT_NEAR(d2[0], 12, 1e-12);
  EXPECT_NEAR(d2[1], -6, 1e-12);
}

TEST_F(TapeTest, SecondDerivativesThroughFusedKernelsAreAnErrorNotAWrongNumber) {
  const Tensor x = Tensor::from_vector<double>({0.5, -1, 2, 0.25}, Shape{1, 2, 2, 1}, "/CPU:0");
  const Tensor w = Tensor::from_vector<double>({1.5}, Shape{1, 1, 1, 1}, "/CPU:0");
  ops::GradientTape outer(/*persistent=*/true);
  outer.watch(x);
  Tensor g;
  {
    ops::GradientTape inner;
    inner.watch(x);
    g = inner.gradient(ops::reduce_sum(ops::square(ops::conv2d(x, w))), {x})[0];
  }
  EXPECT_THROW_WITH(outer.gradient(g, {x}), UnimplementedError, "Conv2DBackpropInput", "second derivatives");
  Tensor s;
  {
    ops::GradientTape inner;
    inner.watch(x);
    s = inner.gradient(ops::reduce_sum(ops::square(ops::softmax(ops::reshape(x, {1, 4})))), {x})[0];
  }
  EXPECT_THROW_WITH(outer.gradient(s, {x}), UnimplementedError, "SoftmaxGrad");
}

// A gradient function learns which of its inputs lead to a source (internal::wants_input_gradient)
// and may skip the others; what it returns for those is ignored.
TEST_F(TapeTest, GradientFunctionsAreToldWhichInputsLeadToASource) {
  const Tensor data = D({1, 2});  // not watched: like a batch of images
  Variable w = var({3, 4}, "w");
  std::vector<std::vector<bool>> seen;
  // y = a * b, recorded by hand with a gradient that notes what it was asked for.
  auto op = [&](const Tensor& a, const Tensor& b) {
    Tensor y = ops::mul(ops::stop_gradient(a), ops::stop_gradient(b));
    ops::internal::record("Probe", {a, b}, {y}, [a, b, &seen](const std::vector<Tensor>& gs) {
      seen.push_back({ops::internal::wants_input_gradient(0), ops::internal::wants_input_gradient(1)});
      return std::vector<Tensor>{ops::mul(gs[0], b), ops::mul(gs[0], a)};
    });
    return y;
  };
  {
    ops::GradientTape tape;
    const Tensor h = op(data, w.value());  // the data leads nowhere; w is the source
    const Tensor y = op(h, D({5, 6}));     // h leads to w; the constant does not
    EXPECT_EQ(vals(tape.gradient(ops::reduce_sum(y), {w})[0]), (std::vector<double>{5, 12}));
  }
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], (std::vector<bool>{true, false}));  // the second op, run first
  EXPECT_EQ(seen[1], (std::vector<bool>{false, true}));
  EXPECT_TRUE(ops::internal::wants_input_gradient(0)) << "outside a gradient function: true";
  // A watched input counts as a source only when asked for: with the data as the source too, both.
  seen.clear();
  {
    ops::GradientTape tape;
    tape.watch(data);
    const Tensor y = op(data, w.value());
    tape.gradient(ops::reduce_sum(y), {data, w.value()});
  }
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (std::vector<bool>{true, true}));
  // An op none of whose inputs leads to a source is not asked at all (a watched tensor that is not
  // a source, times a constant), and the state it saved is let go.
  seen.clear();
  auto saved = std::make_shared<int>(0);
  {
    ops::GradientTape tape;
    const Tensor u = D({1, 2});
    tape.watch(u);
    Tensor side = ops::mul(ops::stop_gradient(u), ops::stop_gradient(D({3, 3})));
    ops::internal::record("SideProbe", {u}, {side}, [&seen, saved](const std::vector<Tensor>& gs) {
      seen.push_back({true});
      return std::vector<Tensor>{gs[0]};
    });
    const Tensor y = ops::add(op(data, w.value()), side);
    EXPECT_EQ(saved.use_count(), 2);
    tape.gradient(ops::reduce_sum(y), {w});
    EXPECT_EQ(saved.use_count(), 1) << "the skipped op's gradient function (and what it captured) is gone";
  }
  ASSERT_EQ(seen.size(), 1u) << "only the probe on the path to w ran";
  EXPECT_EQ(seen[0], (std::vector<bool>{false, true}));
}

// The first convolution of a model: the tape does not ask for the images' gradient, and the
// filters' gradient is unchanged.
TEST_F(TapeTest, ConvolutionSkipsTheGradientOfItsUnwatchedInput) {
  const Tensor x = Tensor::from_vector<double>({0.5, -1, 2, 0.25}, Shape{1, 2, 2, 1}, "/CPU:0");
  Variable w =
      make_variable({.initial_value = Tensor::from_vector<double>({1.5}, Shape{1, 1, 1, 1}, "/CPU:0"), .name = "w"});
  Variable b = var({0.25}, "b");
  for (const bool fused : {false, true}) {
    ops::GradientTape tape;
    const Tensor y =
        fused ? ops::fused_conv2d(x, w.value(), b.value(), ops::FusedActivation::kRelu) : ops::conv2d(x, w.value());
    const auto g = tape.gradient(ops::reduce_sum(y), {w, b});
    // d/dw sum(relu(1.5 x + 0.25)) = sum of x where 1.5 x + 0.25 > 0 (0.5, 2, 0.25); unfused: sum x.
    EXPECT_EQ(vals(g[0]), (std::vector<double>{fused ? 2.75 : 1.75}));
    if (fused) {
      EXPECT_EQ(vals(g[1]), (std::vector<double>{3}));
    }
  }
}

// The fused convolution's gradient writes dz into dy's storage only when nothing else holds it:
// here dy (the gradient reaching y) is also a requested result, and must come back unmasked.
TEST_F(TapeTest, FusedConvolutionNeverOverwritesAGradientSomeoneElseHolds) {
  const Tensor x = Tensor::from_vector<double>({0.5, -1, 2, 0.25}, Shape{1, 2, 2, 1}, "/CPU:0");
  Variable w =
      make_variable({.initial_value = Tensor::from_vector<double>({1.5}, Shape{1, 1, 1, 1}, "/CPU:0"), .name = "w"});
  Variable b = var({0.25}, "b");
  ops::GradientTape tape;
  const Tensor y = ops::fused_conv2d(x, w.value(), b.value(), ops::FusedActivation::kRelu);  // {1, 0, 3.25, 0.625}
  const Tensor c = Tensor::from_vector<double>({1, 2, 3, 4}, Shape{1, 2, 2, 1}, "/CPU:0");
  const auto g = tape.gradient(ops::reduce_sum(ops::mul(y, c)), {y, w.value()});
  EXPECT_EQ(vals(g[0]), (std::vector<double>{1, 2, 3, 4})) << "the gradient of y itself, not masked by the ReLU";
  EXPECT_EQ(vals(g[1]), (std::vector<double>{0.5 * 1 + 2 * 3 + 0.25 * 4}));
}

TEST_F(TapeTest, SecondDerivativeWithANonPersistentOuterTape) {
  const Tensor x = D({0.5});
  ops::GradientTape outer;
  outer.watch(x);
  Tensor dy;
  {
    ops::GradientTape inner;
    inner.watch(x);
    dy = inner.gradient(ops::tanh(x) * 1.0 + ops::exp(x), {x})[0];
  }
  // d/dx (1 - tanh^2 + e^x) = -2 tanh (1 - tanh^2) + e^x: TanhGrad has a gradient of its own.
  const Tensor d2 = outer.gradient(dy, {x})[0];
  ASSERT_TRUE(d2.defined());
  EXPECT_NEAR(vals(d2)[0], std::exp(0.5) - 2 * std::tanh(0.5) * (1 - std::tanh(0.5) * std::tanh(0.5)), 1e-12);
}

TEST_F(TapeTest, GradientsLiveOnTheSourcesDevice) {
  config::set_logical_device_configuration(config::list_physical_devices("CPU")[0],
                                           {{.memory_limit_mb = 256}, {.memory_limit_mb = 256}});
  const Tensor x = Tensor::from_vector<double>({1, 2}, "/CPU:1");
  ops::GradientTape tape;
  tape.watch(x);
  const Tensor y = ops::reduce_sum(ops::mul(ops::square(x), ops::scalar_like(x, 3)));
  const Tensor g = tape.gradient(y, {x})[0];
  EXPECT_EQ(g.device_name(), x.device_name());
  EXPECT_EQ(vals(g), (std::vector<double>{6, 12}));
}

TEST_F(TapeTest, TapeBelongsToItsThread) {
  const Tensor x = D({1});
  ops::GradientTape tape;
  tape.watch(x);
  const Tensor y = ops::square(x);
  std::atomic<int> thrown{0};
  std::thread other([&] {
    try {
      tape.gradient(y, {x});
    } catch (const FailedPreconditionError&) {
      ++thrown;
    }
    try {
      tape.watch(x);
    } catch (const FailedPreconditionError&) {
      ++thrown;
    }
  });
  other.join();
  EXPECT_EQ(thrown.load(), 2);
  EXPECT_EQ(vals(tape.gradient(y, {x})[0]), (std::vector<double>{2}));  // still usable by its owner
}

TEST_F(TapeTest, EachThreadHasItsOwnTape) {
  // Two replica-like threads share a variable; each tape sees only its own thread's ops.
  Variable w = var({1, 2, 3}, "w");
  std::vector<double> g1, g2;
  auto replica = [&w](double scale, std::vector<double>& out) {
    for (int step = 0; step < 20; ++step) {
      ops::GradientTape tape;
      const Tensor loss = ops::reduce_sum(ops::mul(ops::square(w.value()), ops::scalar_like(w.value(), scale)));
      out = tape.gradient(loss, std::vector<Variable>{w})[0].to_vector<double>();
    }
  };
  std::thread t1(replica, 1.0, std::ref(g1)), t2(replica, 10.0, std::ref(g2));
  t1.join();
  t2.join();
  EXPECT_EQ(g1, (std::vector<double>{2, 4, 6}));
  EXPECT_EQ(g2, (std::vector<double>{20, 40, 60}));
}

TEST_F(TapeTest, IntegerTargetAndSources) {
  const Tensor i = Tensor::from_vector<std::int32_t>({1, 2}, "/CPU:0");
  ops::GradientTape tape(/*persistent=*/true);
  tape.watch(i);
  const Tensor y = ops::square(i);
  EXPECT_THROW_WITH(tape.gradient(y, {i}), InvalidArgumentError, "int32", "floating");
  // A float target reached through a cast: the integer source still gets no gradient.
  const Tensor f = ops::cast(i, DType::kFloat64);
  EXPECT_FALSE(tape.gradient(ops::square(f), {i})[0].defined());
  EXPECT_THROW(tape.gradient(Tensor(), {i}), InvalidArgumentError);
}

TEST_F(TapeTest, UnconnectedNames) {
  Variable kernel = var({1, 2}, "dense/kernel"), bias = var({0}, "dense/bias"), other = var({5}, "other");
  ops::GradientTape tape;
  const Tensor loss = ops::reduce_sum(ops::square(kernel.value()));
  const std::vector<Variable> vars{kernel, bias, other};
  const auto grads = tape.gradient(loss, vars);
  EXPECT_EQ(ops::GradientTape::unconnected_names(vars, grads), (std::vector<std::string>{"dense/bias", "other"}));
}

TEST_F(TapeTest, VariableAssignKeepsWatching) {
  // The value handle aliases the variable: after assign, a new tape differentiates the new value.
  Variable w = var({1, 2}, "w");
  w.assign(D({3, 4}));
  ops::GradientTape tape;
  const Tensor loss = ops::reduce_sum(ops::square(w.value()));
  EXPECT_EQ(vals(tape.gradient(loss, std::vector<Variable>{w})[0]), (std::vector<double>{6, 8}));
}

// gradient() drops each op's saved tensors once its gradient ran (non-persistent tape) and each
// intermediate gradient once its producer consumed it: while an earlier op's gradient runs, what a
// later op's closure held is gone. A persistent tape keeps both (it may be asked again).
TEST_F(TapeTest, BackwardReleasesEachOpsSavedStateAsItGoes) {
  for (const bool persistent : {false, true}) {
    Tensor x = D({1, 2, 3});
    std::weak_ptr<int> later_state;
    bool later_state_alive_in_earlier_backward = true;
    std::vector<Tensor> g;
    {
      ops::GradientTape tape(persistent);
      tape.watch(x);
      Tensor y = x.reshape(x.shape());
      ops::internal::record("Earlier", {x}, {y}, [&](const std::vector<Tensor>& dy) -> std::vector<Tensor> {
        later_state_alive_in_earlier_backward = !later_state.expired();
        return {dy[0]};
      });
      Tensor z = y.reshape(y.shape());
      auto state = std::make_shared<int>(7);
      later_state = state;
      ops::internal::record("Later", {y}, {z},
                            [state](const std::vector<Tensor>& dz) -> std::vector<Tensor> { return {dz[0]}; });
      state.reset();
      EXPECT_FALSE(later_state.expired()) << "the tape keeps the closure until the backward pass";
      g = tape.gradient(z, std::vector<Tensor>{x});
      EXPECT_EQ(later_state_alive_in_earlier_backward, persistent) << "persistent " << persistent;
      if (persistent) {
        EXPECT_EQ(vals(tape.gradient(z, std::vector<Tensor>{x})[0]), (std::vector<double>{1, 1, 1}));
      }
    }
    EXPECT_TRUE(later_state.expired());
    EXPECT_EQ(vals(g[0]), (std::vector<double>{1, 1, 1}));
  }
}

// An intermediate tensor asked for as a source keeps its gradient although its producer ran.
TEST_F(TapeTest, IntermediateSourcesKeepTheirGradient) {
  Tensor x = D({1, 2});
  ops::GradientTape tape;
  tape.watch(x);
  Tensor y = ops::mul(x, x);
  Tensor z = ops::reduce_sum(ops::mul(y, D({3, 5})));
  const std::vector<Tensor> g = tape.gradient(z, std::vector<Tensor>{y, x});
  EXPECT_EQ(vals(g[0]), (std::vector<double>{3, 5}));
  EXPECT_EQ(vals(g[1]), (std::vector<double>{6, 20}));
}

}  // namespace
}  // namespace chorus
