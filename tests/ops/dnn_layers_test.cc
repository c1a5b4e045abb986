// Tests for ops/cpu/dnn.h, continued from dnn_test.cc (matmul, convolution, pooling, softmax; the
// two layers of trust are described there): batch normalization, eltwise, the seed CNN end to end,
// and the dispatch runtime (the primitive cache, bias + activation, threads, errors). CTest runs
// this file again under the ONEDNN_MAX_CPU_ISA caps too (tests/ops/CMakeLists.txt).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <chorus/core/error.h>
#include <chorus/ops/cpu/dnn.h>
#include <chorus/ops/cpu/reference.h>
#include <chorus/ops/geometry.h>

#include "dnn_test_util.h"

namespace chorus::ops::cpu {
namespace {

using namespace dnn_test;  // NOLINT: the helpers of this file's tests

// ---- batch normalization ------------------------------------------------------------------------

TEST(DnnBatchNorm, Float32MatchesReference) {
  struct Shape {
    std::int64_t rows, channels;
  };
  std::uint32_t seed = 1100;
  const double eps = 1e-3;
  for (const Shape s : {Shape{1, 1}, Shape{7, 3}, Shape{64 * 13 * 13, 32}, Shape{50, 17}}) {
    const auto size = static_cast<std::size_t>(s.rows * s.channels), c = static_cast<std::size_t>(s.channels);
    F32 x = random_f32(size, seed++, -2.f, 3.f);
    const F32 gamma = random_f32(c, seed++, 0.5f, 1.5f), beta = random_f32(c, seed++), dy = random_f32(size, seed++);
    const F64 x64 = widen(x), gamma64 = widen(gamma), beta64 = widen(beta), dy64 = widen(dy);
    const std::string what = "batch norm " + std::to_string(s.rows) + "x" + std::to_string(s.channels);

    F32 y(size), mean(c), var(c);
    F64 y64(size), mean64(c), var64(c);
    batch_norm_training(DType::kFloat32, x.data(), gamma.data(), beta.data(), y.data(), mean.data(), var.data(), s.rows,
                        s.channels, eps);
    batch_norm_training(DType::kFloat64, x64.data(), gamma64.data(), beta64.data(), y64.data(), mean64.data(),
                        var64.data(), s.rows, s.channels, eps);
    expect_close(mean, mean64, 1e-4, what + " mean");
    expect_close(var, var64, 1e-4, what + " variance");
    if (s.rows > 1) expect_close(y, y64, 1e-4, what + " training y");

    // Inference and backward from the float32 statistics, so both sides use the same ones.
    const F64 meanf = widen(mean), varf = widen(var);
    batch_norm_inference(DType::kFloat32, x.data(), gamma.data(), beta.data(), mean.data(), var.data(), y.data(),
                         s.rows, s.channels, eps);
    batch_norm_inference(DType::kFloat64, x64.data(), gamma64.data(), beta64.data(), meanf.data(), varf.data(),
                         y64.data(), s.rows, s.channels, eps);
    expect_close(y, y64, 1e-4, what + " inference y");

    F32 dx(size), dgamma(c), dbeta(c);
    F64 dx64(size), dgamma64(c), dbeta64(c);
    batch_norm_backward(DType::kFloat32, x.data(), dy.data(), gamma.data(), mean.data(), var.data(), dx.data(),
                        dgamma.data(), dbeta.data(), s.rows, s.channels, eps);
    batch_norm_backward(DType::kFloat64, x64.data(), dy64.data(), gamma64.data(), meanf.data(), varf.data(),
                        dx64.data(), dgamma64.data(), dbeta64.data(), s.rows, s.channels, eps);
    expect_close(dbeta, dbeta64, 1e-4, what + " dbeta");
    expect_close(dgamma, dgamma64, 1e-4, what + " dgamma");
    if (s.rows > 1) expect_close(dx, dx64, 1e-3, what + " dx");
  }
}

TEST(DnnBatchNorm, ReferenceBackwardMatchesFiniteDifferences) {
  const std::int64_t rows = 6, channels = 3;
  const double eps = 1e-3;
  F64 x = random_f64(rows * channels, 1200), gamma = random_f64(channels, 1201), beta = random_f64(channels, 1202);
  const F64 r = random_f64(rows * channels, 1203);
  F64 y(x.size()), mean(channels), var(channels);
  const auto loss = [&] {
    reference::batch_norm_training(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), var.data(), rows,
                                   channels, eps);
    return dot(y, r);
  };
  loss();
  F64 dx(x.size()), dgamma(channels), dbeta(channels);
  reference::batch_norm_backward(x.data(), r.data(), gamma.data(), mean.data(), var.data(), dx.data(), dgamma.data(),
                                 dbeta.data(), rows, channels, eps);
  expect_close(dx, numeric_gradient(x, loss), 1e-6, "batch norm dx vs finite differences");
  expect_close(dgamma, numeric_gradient(gamma, loss), 1e-6, "batch norm dgamma vs finite differences");
  expect_close(dbeta, numeric_gradient(beta, loss), 1e-6, "batch norm dbeta vs finite differences");
}

// ---- eltwise ------------------------------------------------------------------------------------

TEST(DnnEltwise, EachKindMatchesStdMath) {
  struct Kind {
    UnaryOp op;
    double (*f)(double);
    float lo, hi;
  };
  const Kind kinds[] = {
      {UnaryOp::kSigmoid, [](double v) { return 1 / (1 + std::exp(-v)); }, -10, 10},
      {UnaryOp::kTanh, [](double v) { return std::tanh(v); }, -5, 5},
      {UnaryOp::kGelu, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }, -5, 5},
      {UnaryOp::kExp, [](double v) { return std::exp(v); }, -10, 10},
      {UnaryOp::kLog, [](double v) { return std::log(v); }, 1e-3f, 100},
      {UnaryOp::kSqrt, [](double v) { return std::sqrt(v); }, 0, 100},
      {UnaryOp::kSquare, [](double v) { return v * v; }, -10, 10},
      {UnaryOp::kAbs, [](double v) { return std::abs(v); }, -10, 10},
  };
  std::uint32_t seed = 1300;
  for (const Kind& k : kinds) {
    const F32 x = random_f32(1037, seed++, k.lo, k.hi);
    F32 y(x.size());
    const bool done = eltwise_forward(k.op, DType::kFloat32, x.data(), y.data(), static_cast<std::int64_t>(x.size()));
    EXPECT_EQ(done, have_onednn()) << static_cast<int>(k.op);
    if (!done) continue;
    F64 expected(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) expected[i] = k.f(x[i]);
    expect_close(y, expected, 1e-5, "eltwise " + std::to_string(static_cast<int>(k.op)));
  }
  // ReLU stays on chorus's loop: oneDNN's eltwise_relu maps NaN to 0, TensorFlow keeps NaN.
  F32 r32(4, 1.f);
  EXPECT_FALSE(eltwise_forward(UnaryOp::kRelu, DType::kFloat32, r32.data(), r32.data(), 4));
  const F64 x64(4, 1.0);
  F64 y64(4);
  EXPECT_FALSE(eltwise_forward(UnaryOp::kRelu, DType::kFloat64, x64.data(), y64.data(), 4));
  const F32 x32(4, 1.f);
  F32 y32(4);
  EXPECT_FALSE(eltwise_forward(UnaryOp::kNeg, DType::kFloat32, x32.data(), y32.data(), 4));
  EXPECT_FALSE(eltwise_forward(UnaryOp::kRsqrt, DType::kFloat32, x32.data(), y32.data(), 4));
}

// GeluGrad on oneDNN's eltwise backward (dnn.h eltwise_backward): dy · gelu'(x) within float32
// rounding of the float64 formula, and at NaN / ±Inf what TF's composed gradient gives (NaN: the
// Inf · 0 of x · pdf(x)); dnn_dispatch says which path runs.
TEST(DnnEltwise, GeluBackwardMatchesTheFormulaAndTfAtNonFinite) {
  DnnCall call;
  call.kernel = DnnKernel::kEltwiseBackward;
  call.unary = UnaryOp::kGelu;
  call.elements = 1037;
  const DnnPath path = dnn_dispatch(call).path;
  EXPECT_EQ(path == DnnPath::kOneDnn, have_onednn()) << dnn_dispatch(call).reason;
  call.dtype = DType::kFloat64;
  EXPECT_EQ(dnn_dispatch(call).path, DnnPath::kChorusLoops);
  F32 x = random_f32(1037, 1400, -6, 6), dy = random_f32(1037, 1401, -2, 2);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  x[3] = inf, x[4] = -inf, x[5] = nan, dy[6] = inf, x[6] = 0.5f, dy[7] = nan;
  F32 dx(x.size());
  const bool done = eltwise_backward(UnaryOp::kGelu, DType::kFloat32, x.data(), dy.data(), dx.data(), 1037);
  EXPECT_EQ(done, have_onednn());
  if (!done) return;
  auto grad = [](double v) {
    return 0.5 * (1 + std::erf(v / std::sqrt(2.0))) + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
  };
  F64 expected(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) expected[i] = dy[i] * grad(x[i]);
  for (std::size_t i : {3, 4, 5, 6, 7}) {
    EXPECT_EQ(std::isnan(dx[i]), std::isnan(expected[i])) << i << ": " << dx[i] << " vs " << expected[i];
    if (!std::isnan(expected[i])) {
      EXPECT_EQ(dx[i], expected[i]) << i;
    }
    expected[i] = dx[i] = 0;
  }
  expect_close(dx, expected, 1e-5, "gelu backward");
  EXPECT_FALSE(eltwise_backward(UnaryOp::kTanh, DType::kFloat32, x.data(), dy.data(), dx.data(), 4));
}

// ---- the seed CNN -------------------------------------------------------------------------------

TEST(DnnSeedCnn, ForwardAndBackwardMatchReference) {
  // batch 64, 28x28x1 → conv 3x3x32 VALID → maxpool 2 → conv 3x3x64 VALID → maxpool 2.
  const Conv2dGeometry conv1 = make_geometry({64, 28, 28, 1, 3, 3, 32, 1, 1, Padding::kValid});
  const Conv2dGeometry pool1 = pool_geometry(64, conv1.out_h, conv1.out_w, 32, 2, 2, Padding::kValid);
  const Conv2dGeometry conv2 = make_geometry({64, pool1.out_h, pool1.out_w, 32, 3, 3, 64, 1, 1, Padding::kValid});
  const Conv2dGeometry pool2 = pool_geometry(64, conv2.out_h, conv2.out_w, 64, 2, 2, Padding::kValid);
  EXPECT_EQ(pool2.out_h, 5);
  check_conv(conv1, 2000);
  check_pool(PoolKind::kMax, pool1, random_f32(static_cast<std::size_t>(pool1.input_elements()), 2010), 2011);
  check_conv(conv2, 2020);
  check_pool(PoolKind::kMax, pool2, random_f32(static_cast<std::size_t>(pool2.input_elements()), 2030), 2031);

  // Timings of conv2 (informational; printed, not asserted).
  const F32 x = random_f32(static_cast<std::size_t>(conv2.input_elements()), 2040);
  const F32 w = random_f32(static_cast<std::size_t>(conv2.filter_elements()), 2041);
  F32 y(static_cast<std::size_t>(conv2.output_elements())), dx(x.size()), dw(w.size());
  const auto time_ms = [](const std::function<void()>& f) {
    f();
    const int reps = 10;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) f();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
  };
  const double fwd = time_ms([&] { conv2d_forward(DType::kFloat32, conv2, x.data(), w.data(), y.data()); });
  const double bwd_data = time_ms([&] { conv2d_backward_data(DType::kFloat32, conv2, y.data(), w.data(), dx.data()); });
  const double bwd_filter =
      time_ms([&] { conv2d_backward_filter(DType::kFloat32, conv2, x.data(), y.data(), dw.data()); });
  std::printf(
      "seed CNN conv2 (64x13x13x32 -> 64x11x11x64, %s, %d threads): forward %.3f ms, backward data %.3f ms, "
      "backward filter %.3f ms\n",
      have_onednn() ? "oneDNN" : "reference", omp_get_max_threads(), fwd, bwd_data, bwd_filter);
}

// ---- cache, threads, errors ---------------------------------------------------------------------

TEST(DnnCache, RepeatedShapeHitsTheCache) {
  if (!have_onednn()) GTEST_SKIP() << "built without oneDNN: no primitive cache";
  const F32 a = random_f32(6 * 5, 1), b = random_f32(5 * 4, 2);
  F32 c(6 * 4);
  matmul(DType::kFloat32, a.data(), 0, b.data(), 0, c.data(), 1, 6, 4, 5, false, false);
  const CacheStats before = cache_stats();
  EXPECT_GT(before.misses, 0);
  EXPECT_GT(before.entries, 0);
  matmul(DType::kFloat32, a.data(), 0, b.data(), 0, c.data(), 1, 6, 4, 5, false, false);
  const CacheStats after = cache_stats();
  EXPECT_EQ(after.hits, before.hits + 1);
  EXPECT_EQ(after.misses, before.misses);
  EXPECT_EQ(after.entries, before.entries);
}

// The epilogue's gradient against a plain loop, for every float dtype's float32 and float64 path,
// and its bias sums bit for bit the same with 1 and 2 threads (fixed blocks, not threads, order
// them). Shapes: the seed CNN's first layer (86528 x 32: many blocks, parallel) and a small one.
TEST(DnnBiasActivation, BackwardMatchesALoopAndDoesNotDependOnThreads) {
  for (const auto& [rows, channels] : {std::pair<std::int64_t, std::int64_t>{86528, 32}, {300, 3}}) {
    const auto n = static_cast<std::size_t>(rows * channels);
    const F32 dy = random_f32(n, 4000), y = random_f32(n, 4001);
    for (const bool relu : {false, true}) {
      F64 want_dz(n), want_db(static_cast<std::size_t>(channels), 0.0);
      for (std::size_t i = 0; i < n; ++i) {
        want_dz[i] = relu && y[i] <= 0.f ? 0.0 : dy[i];
        want_db[i % static_cast<std::size_t>(channels)] += want_dz[i];
      }
      std::vector<F32> dbs;
      for (const int threads : {1, 2}) {
        F32 dz(n, 9.f), db(static_cast<std::size_t>(channels), 9.f);
        std::thread([&] {
          use_threads(threads);
          bias_activation_backward(DType::kFloat32, relu, dy.data(), y.data(), dz.data(), db.data(), rows, channels);
        }).join();
        expect_close(dz, want_dz, 0, "dz");
        expect_close(db, want_db, 1e-6, "db");
        dbs.push_back(db);
      }
      EXPECT_EQ(dbs[0], dbs[1]) << "the bias gradient depends on the thread count";
      // In place (dz == dy) and without a bias gradient.
      F32 inplace = dy;
      bias_activation_backward(DType::kFloat32, relu, inplace.data(), y.data(), inplace.data(), nullptr, rows,
                               channels);
      expect_close(inplace, want_dz, 0, "in place");
    }
  }
  // float64 and bfloat16 go through the same loop (16-bit: computed in float, rounded once).
  const F64 dy = {1, -2, 3, -4}, y = {0.5, -1, 0, 2};
  F64 dz(4), db(2);
  bias_activation_backward(DType::kFloat64, true, dy.data(), y.data(), dz.data(), db.data(), 2, 2);
  EXPECT_EQ(dz, (F64{1, 0, 0, -4}));
  EXPECT_EQ(db, (F64{1, -4}));
  const bfloat16 by[2] = {bfloat16(1.5f), bfloat16(-1.0f)}, bdy[2] = {bfloat16(2.0f), bfloat16(3.0f)};
  bfloat16 bdz[2], bdb[1];
  bias_activation_backward(DType::kBFloat16, true, bdy, by, bdz, bdb, 2, 1);
  EXPECT_EQ(static_cast<float>(bdz[0]), 2.0f);
  EXPECT_EQ(static_cast<float>(bdz[1]), 0.0f);
  EXPECT_EQ(static_cast<float>(bdb[0]), 2.0f);
  EXPECT_THROW(bias_activation_backward(DType::kInt32, true, bdy, by, bdz, bdb, 2, 1), InvalidArgumentError);
}

TEST(DnnThreads, UseThreadsSetsTheCallingThreadsCount) {
  std::thread([] {
    use_threads(1);
    EXPECT_EQ(omp_get_max_threads(), 1);
    use_threads(2);
    EXPECT_EQ(omp_get_max_threads(), 2);
  }).join();
  EXPECT_THROW(use_threads(0), InvalidArgumentError);
}

TEST(DnnThreads, ConcurrentCallsShareOnePrimitive) {
  // Several threads run the same cached convolution at once (each with its own scratchpad).
  const Conv2dGeometry g = make_geometry({4, 12, 12, 8, 3, 3, 16, 1, 1, Padding::kSame});
  const F32 x = random_f32(static_cast<std::size_t>(g.input_elements()), 3000);
  const F32 w = random_f32(static_cast<std::size_t>(g.filter_elements()), 3001);
  F32 expected(static_cast<std::size_t>(g.output_elements()));
  conv2d_forward(DType::kFloat32, g, x.data(), w.data(), expected.data());
  std::vector<F32> outs(4, F32(expected.size()));
  std::vector<std::thread> threads;
  for (auto& out : outs) {
    threads.emplace_back([&, o = &out] {
      use_threads(1);
      for (int i = 0; i < 5; ++i) conv2d_forward(DType::kFloat32, g, x.data(), w.data(), o->data());
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& out : outs) expect_close(out, widen(expected), 1e-5, "concurrent conv");
}

TEST(DnnErrors, WrongDtypeAndGeometryThrowInvalidArgument) {
  const float buf[64] = {};
  float out[64];
  const Conv2dGeometry g = make_geometry({1, 4, 4, 1, 3, 3, 1, 1, 1, Padding::kValid});
  EXPECT_THROW(matmul(DType::kInt32, buf, 0, buf, 0, out, 1, 2, 2, 2, false, false), InvalidArgumentError);
  EXPECT_THROW(conv2d_forward(DType::kInt32, g, buf, buf, out), InvalidArgumentError);
  EXPECT_THROW(conv2d_backward_data(DType::kInt32, g, buf, buf, out), InvalidArgumentError);
  EXPECT_THROW(conv2d_backward_filter(DType::kInt32, g, buf, buf, out), InvalidArgumentError);
  EXPECT_THROW(pool2d_forward(PoolKind::kMax, DType::kInt32, g, buf, out), InvalidArgumentError);
  EXPECT_THROW(pool2d_backward(PoolKind::kAvg, DType::kInt32, g, buf, buf, out), InvalidArgumentError);
  EXPECT_THROW(softmax_forward(DType::kInt32, false, buf, out, 2, 2), InvalidArgumentError);
  EXPECT_THROW(softmax_backward(DType::kInt32, true, buf, buf, out, 2, 2), InvalidArgumentError);
  EXPECT_THROW(batch_norm_training(DType::kInt32, buf, buf, buf, out, out, out, 2, 2, 1e-3), InvalidArgumentError);
  EXPECT_THROW(batch_norm_inference(DType::kInt32, buf, buf, buf, buf, buf, out, 2, 2, 1e-3), InvalidArgumentError);
  EXPECT_THROW(batch_norm_backward(DType::kInt32, buf, buf, buf, buf, buf, out, out, out, 2, 2, 1e-3),
               InvalidArgumentError);
  EXPECT_THROW(matmul(DType::kFloat32, buf, 0, buf, 0, out, 1, -1, 2, 2, false, false), InvalidArgumentError);
  EXPECT_FALSE(eltwise_forward(UnaryOp::kRelu, DType::kInt32, buf, out, 4));

  Conv2dGeometry bad = g;
  bad.out_h = 3;  // VALID 3x3 over 4 rows gives 2
  EXPECT_THROW(conv2d_forward(DType::kFloat32, bad, buf, buf, out), InvalidArgumentError);
  bad = g;
  bad.stride_w = 0;
  EXPECT_THROW(conv2d_forward(DType::kFloat32, bad, buf, buf, out), InvalidArgumentError);
  bad = g;
  bad.out_c = 2;  // pooling needs out_c == in_c
  EXPECT_THROW(pool2d_forward(PoolKind::kMax, DType::kFloat32, bad, buf, out), InvalidArgumentError);
  try {
    softmax_forward(DType::kInt32, false, buf, out, 2, 2);
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("int32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace chorus::ops::cpu
