// Tests for ops/cpu/dnn.h (oneDNN float32 kernels, dnn_dispatch.cc) and ops/cpu/reference.cc.
//
// Two layers of trust:
//   1. The float64 reference loops are checked against independent definitions: finite
//      differences of the reference forward for every backward, and hand-computed values for
//      pooling's tie and padding rules.
//   2. The float32 kernels (oneDNN, or the reference loops in a build without it) are checked
//      against the float64 reference on the same inputs (float32 values widened), on seeded random
//      data and many geometries, to a relative 1e-4 of the output's scale; softmax, whose outputs
//      can be pure rounding noise (a 1x1 log-softmax gradient is exactly 0), to bounds derived
//      from float32 rounding of its terms. CTest runs this file again under the ONEDNN_MAX_CPU_ISA
//      caps (tests/ops/CMakeLists.txt).
// This file: matmul, convolution, pooling, softmax; dnn_layers_test.cc the rest (helpers in
// dnn_test_util.h).
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

// ---- matmul -------------------------------------------------------------------------------------

// The textbook definition, independent of reference::matmul's loop order.
F64 naive_matmul(const F64& a, std::int64_t sa, const F64& b, std::int64_t sb, std::int64_t batch, std::int64_t m,
                 std::int64_t n, std::int64_t k, bool ta, bool tb) {
  F64 c(static_cast<std::size_t>(batch * m * n), 0.0);
  for (std::int64_t z = 0; z < batch; ++z)
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j)
        for (std::int64_t p = 0; p < k; ++p)
          c[(z * m + i) * n + j] += a[z * sa + (ta ? p * m + i : i * k + p)] * b[z * sb + (tb ? j * k + p : p * n + j)];
  return c;
}

struct MatmulCase {
  std::int64_t batch, m, n, k;
  bool broadcast_a, broadcast_b;
};

TEST(DnnMatmul, Float32MatchesReferenceForAllTransposesAndBroadcasts) {
  const MatmulCase cases[] = {{1, 1, 1, 1, false, false},    {3, 5, 7, 9, false, false},
                              {2, 17, 13, 33, false, false}, {4, 64, 65, 1, false, false},
                              {3, 6, 5, 4, true, false},     {3, 6, 5, 4, false, true},
                              {4, 7, 3, 11, true, true},     {1, 128, 100, 300, false, false}};
  std::uint32_t seed = 1;
  for (const auto& c : cases) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const std::int64_t sa = c.broadcast_a ? 0 : c.m * c.k, sb = c.broadcast_b ? 0 : c.k * c.n;
      const F32 a = random_f32(static_cast<std::size_t>((c.broadcast_a ? 1 : c.batch) * c.m * c.k), seed++);
      const F32 b = random_f32(static_cast<std::size_t>((c.broadcast_b ? 1 : c.batch) * c.k * c.n), seed++);
      F32 out(static_cast<std::size_t>(c.batch * c.m * c.n), -7.f);
      matmul(DType::kFloat32, a.data(), sa, b.data(), sb, out.data(), c.batch, c.m, c.n, c.k, ta, tb);
      const F64 a64 = widen(a), b64 = widen(b);
      F64 ref(out.size());
      matmul(DType::kFloat64, a64.data(), sa, b64.data(), sb, ref.data(), c.batch, c.m, c.n, c.k, ta, tb);
      const std::string what = "matmul b=" + std::to_string(c.batch) + " m=" + std::to_string(c.m) +
                               " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) + " ta=" + std::to_string(ta) +
                               " tb=" + std::to_string(tb) + " bcast=" + std::to_string(c.broadcast_a) +
                               std::to_string(c.broadcast_b);
      expect_close(ref, naive_matmul(a64, sa, b64, sb, c.batch, c.m, c.n, c.k, ta, tb), 1e-12, what + " (ref)");
      expect_close(out, ref, 1e-4, what);
    }
  }
}

TEST(DnnMatmul, EmptyInnerDimensionGivesZeros) {
  F32 out(2 * 3 * 4, 5.f);
  const float dummy = 0;
  matmul(DType::kFloat32, &dummy, 0, &dummy, 0, out.data(), 2, 3, 4, 0, false, false);
  for (float v : out) EXPECT_EQ(v, 0.f);
  F64 out64(6, 5.0);
  matmul(DType::kFloat64, &dummy, 0, &dummy, 0, out64.data(), 1, 2, 3, 0, true, true);
  for (double v : out64) EXPECT_EQ(v, 0.0);
}

// ---- convolution --------------------------------------------------------------------------------

TEST(DnnConv, Float32MatchesReferenceOverGeometries) {
  const ConvCase cases[] = {
      {2, 7, 7, 1, 1, 1, 3, 1, 1, Padding::kValid},   {2, 7, 7, 3, 3, 3, 5, 1, 1, Padding::kValid},
      {2, 7, 7, 3, 3, 3, 5, 1, 1, Padding::kSame},    {2, 8, 9, 3, 3, 3, 4, 2, 1, Padding::kSame},
      {2, 9, 8, 5, 3, 3, 7, 2, 1, Padding::kValid},   {1, 11, 10, 3, 3, 3, 4, 1, 2, Padding::kSame},
      {1, 11, 12, 2, 3, 3, 3, 1, 2, Padding::kValid}, {3, 10, 10, 1, 5, 5, 8, 1, 1, Padding::kSame},
      {2, 12, 11, 3, 5, 5, 6, 2, 1, Padding::kSame},  {2, 13, 13, 7, 5, 5, 9, 2, 2, Padding::kSame},
      {2, 6, 6, 16, 1, 1, 32, 2, 1, Padding::kSame},  {1, 10, 10, 17, 3, 3, 33, 1, 1, Padding::kSame},
      {4, 5, 5, 3, 3, 1, 2, 1, 1, Padding::kSame},    {2, 4, 4, 1, 3, 3, 1, 3, 1, Padding::kSame},
  };
  std::uint32_t seed = 100;
  for (const auto& c : cases) {
    check_conv(make_geometry(c), seed);
    seed += 3;
  }
  // Different strides per axis, and explicit asymmetric padding (more on the top/left than SAME
  // would put there).
  check_conv(make_geometry({2, 9, 10, 3, 3, 3, 4, 1, 1, Padding::kSame}, 2), seed);
  Conv2dGeometry g = make_geometry({2, 8, 8, 3, 3, 3, 4, 2, 1, Padding::kValid});
  g.pad_top = 2, g.pad_bottom = 0, g.pad_left = 1, g.pad_right = 2;
  g.out_h = (g.in_h + 2 - 3) / 2 + 1, g.out_w = (g.in_w + 3 - 3) / 2 + 1;
  check_conv(g, seed + 3);
}

TEST(DnnConv, ReferenceBackwardMatchesFiniteDifferences) {
  const ConvCase cases[] = {{2, 5, 6, 2, 3, 2, 3, 2, 1, Padding::kSame},
                            {1, 7, 7, 2, 3, 3, 2, 1, 2, Padding::kSame},
                            {2, 6, 5, 1, 2, 3, 2, 2, 1, Padding::kValid}};
  std::uint32_t seed = 300;
  for (const auto& c : cases) {
    const Conv2dGeometry g = make_geometry(c);
    F64 x = random_f64(static_cast<std::size_t>(g.input_elements()), seed++);
    F64 w = random_f64(static_cast<std::size_t>(g.filter_elements()), seed++);
    const F64 r = random_f64(static_cast<std::size_t>(g.output_elements()), seed++);
    F64 y(r.size());
    const auto loss = [&] {
      reference::conv2d_forward(g, x.data(), w.data(), y.data());
      return dot(y, r);
    };
    F64 dx(x.size()), dw(w.size());
    reference::conv2d_backward_data(g, r.data(), w.data(), dx.data());
    reference::conv2d_backward_filter(g, x.data(), r.data(), dw.data());
    expect_close(dx, numeric_gradient(x, loss), 1e-7, "conv dx vs finite differences " + describe(g));
    expect_close(dw, numeric_gradient(w, loss), 1e-7, "conv dw vs finite differences " + describe(g));
  }
}

// ---- pooling ------------------------------------------------------------------------------------

TEST(DnnPool, Float32MatchesReference) {
  const Conv2dGeometry geoms[] = {
      pool_geometry(2, 8, 8, 3, 2, 2, Padding::kValid),  pool_geometry(2, 7, 9, 5, 2, 2, Padding::kSame),
      pool_geometry(2, 7, 7, 4, 3, 2, Padding::kSame),   pool_geometry(1, 9, 8, 1, 3, 1, Padding::kSame),
      pool_geometry(3, 9, 9, 17, 3, 2, Padding::kValid), pool_geometry(1, 5, 6, 2, 5, 3, Padding::kSame)};
  std::uint32_t seed = 500;
  for (const auto& g : geoms) {
    for (PoolKind kind : {PoolKind::kMax, PoolKind::kAvg}) {
      check_pool(kind, g, random_f32(static_cast<std::size_t>(g.input_elements()), seed), seed + 1);
      // Few distinct values: most windows hold ties, so the first-maximum rule decides.
      F32 ties = random_f32(static_cast<std::size_t>(g.input_elements()), seed + 2, 0.f, 3.f);
      for (auto& v : ties) v = std::floor(v);
      check_pool(kind, g, ties, seed + 3);
      seed += 4;
    }
  }
}

// Training max pooling keeps a workspace: the forward that fills it gives the same output, and
// the backward that reads it the same gradient, as pool2d_forward / pool2d_backward (bit for bit:
// the same loops, minus the recomputation), ties included — with chorus's loops (up to 255 taps a
// window, one byte per output) and with oneDNN's above (16x16 windows: 256 taps). Nothing else
// has a workspace.
TEST(DnnPool, WorkspaceForwardAndBackwardEqualThePlainOnes) {
  const Conv2dGeometry geoms[] = {pool_geometry(4, 26, 26, 32, 2, 2, Padding::kValid),
                                  pool_geometry(2, 7, 7, 4, 3, 2, Padding::kSame),
                                  pool_geometry(2, 11, 11, 64, 2, 2, Padding::kValid),  // row/column 10 in no window
                                  pool_geometry(1, 20, 18, 3, 16, 2, Padding::kSame)};
  for (const auto& g : geoms) {
    const std::size_t bytes = pool2d_workspace_bytes(PoolKind::kMax, DType::kFloat32, g);
    EXPECT_EQ(pool2d_workspace_bytes(PoolKind::kAvg, DType::kFloat32, g), 0u);
    EXPECT_EQ(pool2d_workspace_bytes(PoolKind::kMax, DType::kFloat64, g), 0u);
    if (g.k_h * g.k_w > 255 && !have_onednn()) {
      EXPECT_EQ(bytes, 0u);
      continue;
    }
    ASSERT_GT(bytes, 0u);
    if (g.k_h * g.k_w <= 255) {
      EXPECT_EQ(bytes, static_cast<std::size_t>(g.output_elements()));
    }
    F32 x = random_f32(static_cast<std::size_t>(g.input_elements()), 600, 0.f, 3.f);
    for (std::size_t i = 0; i < x.size(); i += 2) x[i] = std::floor(x[i]);  // some ties
    const F32 dy = random_f32(static_cast<std::size_t>(g.output_elements()), 601);
    F32 y(dy.size()), y_ws(dy.size(), 9.f), dx(x.size()), dx_ws(x.size(), 9.f);
    std::vector<std::uint8_t> ws(bytes);
    pool2d_forward(PoolKind::kMax, DType::kFloat32, g, x.data(), y.data());
    pool2d_forward_training(PoolKind::kMax, DType::kFloat32, g, x.data(), y_ws.data(), ws.data());
    EXPECT_EQ(y_ws, y);
    pool2d_backward(PoolKind::kMax, DType::kFloat32, g, x.data(), dy.data(), dx.data());
    pool2d_backward_with_workspace(PoolKind::kMax, DType::kFloat32, g, dy.data(), ws.data(), dx_ws.data());
    EXPECT_EQ(dx_ws, dx);
  }
  const Conv2dGeometry g = geoms[1];
  float buf[1] = {};
  EXPECT_THROW(pool2d_forward_training(PoolKind::kAvg, DType::kFloat32, g, buf, buf, buf), InvalidArgumentError);
  EXPECT_THROW(pool2d_backward_with_workspace(PoolKind::kMax, DType::kFloat64, g, buf, buf, buf), InvalidArgumentError);
}

TEST(DnnPool, TiesRouteToTheFirstMaximum) {
  // One 2x2 window of equal values: the whole gradient goes to the top-left element.
  const Conv2dGeometry g = pool_geometry(1, 2, 2, 1, 2, 2, Padding::kValid);
  const F32 x = {1.f, 1.f, 1.f, 1.f}, dy = {5.f};
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    if (dtype == DType::kFloat32) {
      F32 dx(4, -1.f);
      pool2d_backward(PoolKind::kMax, dtype, g, x.data(), dy.data(), dx.data());
      EXPECT_EQ(dx, (F32{5.f, 0.f, 0.f, 0.f}));
    } else {
      const F64 x64 = widen(x), dy64 = widen(dy);
      F64 dx(4, -1.0);
      pool2d_backward(PoolKind::kMax, dtype, g, x64.data(), dy64.data(), dx.data());
      EXPECT_EQ(dx, (F64{5.0, 0.0, 0.0, 0.0}));
    }
  }
}

TEST(DnnPool, SameAverageDividesByInBoundsCount) {
  // 3x3 input 1..9, 3x3 window, stride 1, SAME: the corner window sees 4 values, the edge 6, the
  // center 9.
  const Conv2dGeometry g = pool_geometry(1, 3, 3, 1, 3, 1, Padding::kSame);
  const F32 x = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  F32 y(9);
  pool2d_forward(PoolKind::kAvg, DType::kFloat32, g, x.data(), y.data());
  EXPECT_FLOAT_EQ(y[0], (1 + 2 + 4 + 5) / 4.f);
  EXPECT_FLOAT_EQ(y[1], (1 + 2 + 3 + 4 + 5 + 6) / 6.f);
  EXPECT_FLOAT_EQ(y[4], 45 / 9.f);
  EXPECT_FLOAT_EQ(y[8], (5 + 6 + 8 + 9) / 4.f);
  // Backward of the corner output alone: 1/4 to each of its four inputs.
  F32 dy(9, 0.f), dx(9);
  dy[0] = 1.f;
  pool2d_backward(PoolKind::kAvg, DType::kFloat32, g, x.data(), dy.data(), dx.data());
  EXPECT_EQ(dx, (F32{0.25f, 0.25f, 0, 0.25f, 0.25f, 0, 0, 0, 0}));
  // Max pooling never picks the padding, even for all-negative inputs.
  const F32 neg = {-9, -8, -7, -6, -5, -4, -3, -2, -1};
  pool2d_forward(PoolKind::kMax, DType::kFloat32, g, neg.data(), y.data());
  EXPECT_EQ(y[0], -5.f);
  EXPECT_EQ(y[8], -1.f);
}

TEST(DnnPool, ReferenceBackwardMatchesFiniteDifferences) {
  for (PoolKind kind : {PoolKind::kMax, PoolKind::kAvg}) {
    for (const Conv2dGeometry& g :
         {pool_geometry(2, 5, 6, 2, 3, 2, Padding::kSame), pool_geometry(1, 6, 6, 3, 2, 2, Padding::kValid)}) {
      F64 x = random_f64(static_cast<std::size_t>(g.input_elements()), 700);  // distinct values
      const F64 r = random_f64(static_cast<std::size_t>(g.output_elements()), 701);
      F64 y(r.size()), dx(x.size());
      const auto loss = [&] {
        reference::pool2d_forward(kind, g, x.data(), y.data());
        return dot(y, r);
      };
      reference::pool2d_backward(kind, g, x.data(), r.data(), dx.data());
      expect_close(dx, numeric_gradient(x, loss), 1e-7, "pool dx vs finite differences " + describe(g));
    }
  }
}

// ---- softmax ------------------------------------------------------------------------------------

// Error bounds of float32 softmax from the rounding of its computation, in units of the float32
// epsilon times the magnitudes of the terms it combines (not of its result, which for a 1x1
// log-softmax gradient is all rounding noise: the exact value is 0). kUlps absorbs the few ulps of
// oneDNN's exp/log approximations and the operation orders of its kernels; a row sum of n terms
// adds n epsilons of the sum of their magnitudes (the worst case of any summation order). Holds
// for every kernel oneDNN may pick (AVX-512, AVX2, SSE4.1, reference), which is what CI checks.
constexpr double kEps32 = 1.1920928955078125e-07;  // 2^-23
constexpr double kUlps = 8;

struct SoftmaxBounds {
  F64 forward, backward;
};

// x: the float32 logits (widened); y: the float32 kernel's output (widened), which the backward
// reads; dy: the incoming gradient.
SoftmaxBounds softmax_bounds(bool log, const F64& x, const F64& y, const F64& dy, std::int64_t rows,
                             std::int64_t cols) {
  SoftmaxBounds b{F64(x.size()), F64(x.size())};
  const double n = static_cast<double>(cols);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::size_t o = static_cast<std::size_t>(r * cols);
    double m = -INFINITY;
    for (std::int64_t c = 0; c < cols; ++c) m = std::max(m, x[o + c]);
    // Forward: p_j = exp(x_j - m) / S. Rounding x_j - m costs eps |x_j - m| in the exponent,
    // i.e. a relative eps |x_j - m| in p_j; S adds the p-weighted sum of those plus n eps.
    double S = 0, weighted = 0;
    for (std::int64_t c = 0; c < cols; ++c) S += std::exp(x[o + c] - m);
    for (std::int64_t c = 0; c < cols; ++c) {
      const double p = std::exp(x[o + c] - m) / S;
      weighted += p * (1 + std::abs(x[o + c] - m));
    }
    const double sum_rel = weighted + n;  // relative error of S, in epsilons
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::size_t i = o + static_cast<std::size_t>(c);
      const double p = std::exp(x[i] - m) / S;
      b.forward[i] = log ? kUlps * kEps32 * (std::abs(x[i]) + std::abs(m) + std::abs(std::log(S)) + sum_rel)
                         : kUlps * kEps32 * p * (1 + std::abs(x[i] - m) + sum_rel);
    }
    // Backward from y (float32, exact inputs here).
    //   softmax:     dx_i = y_i (dy_i - s),        s = sum_j y_j dy_j
    //   log-softmax: dx_i = dy_i - exp(y_i) t,     t = sum_j dy_j
    double abs_s = 0, s_sum = 0, abs_t = 0, t_sum = 0;
    for (std::int64_t c = 0; c < cols; ++c) {
      abs_s += std::abs(y[o + c] * dy[o + c]);
      s_sum += y[o + c] * dy[o + c];
      abs_t += std::abs(dy[o + c]);
      t_sum += dy[o + c];
    }
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::size_t i = o + static_cast<std::size_t>(c);
      b.backward[i] =
          log ? kUlps * kEps32 *
                    (std::abs(dy[i]) + std::exp(y[i]) * ((1 + std::abs(y[i])) * std::abs(t_sum) + n * abs_t))
              : kUlps * kEps32 * std::abs(y[i]) * (std::abs(dy[i]) + std::abs(s_sum) + n * abs_s);
    }
  }
  return b;
}

void expect_within(const F32& actual, const F64& expected, const F64& bound, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (!(std::abs(static_cast<double>(actual[i]) - expected[i]) <= bound[i])) {
      if (++bad <= 5)
        ADD_FAILURE() << what << ": element " << i << " is " << actual[i] << ", expected " << expected[i]
                      << " (float32 rounding bound " << bound[i] << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << actual.size() << " elements off";
}

TEST(DnnSoftmax, Float32MatchesReferenceOnLargeLogits) {
  struct Shape {
    std::int64_t rows, cols;
  };
  std::uint32_t seed = 900;
  for (const Shape s : {Shape{1, 1}, Shape{3, 7}, Shape{64, 10}, Shape{5, 1000}, Shape{33, 129}}) {
    for (bool log : {false, true}) {
      const auto size = static_cast<std::size_t>(s.rows * s.cols);
      // Logits of magnitude ~1000: exp overflows in float without the max subtraction.
      F32 x = random_f32(size, seed++, -20.f, 20.f);
      for (std::size_t i = 0; i < size; ++i) x[i] += (i / s.cols % 2 ? 1000.f : -800.f);
      const F32 dy = random_f32(size, seed++);
      const F64 x64 = widen(x), dy64 = widen(dy);
      const std::string what =
          std::string(log ? "logsoftmax" : "softmax") + " " + std::to_string(s.rows) + "x" + std::to_string(s.cols);
      F32 y(size);
      F64 y64(size);
      softmax_forward(DType::kFloat32, log, x.data(), y.data(), s.rows, s.cols);
      softmax_forward(DType::kFloat64, log, x64.data(), y64.data(), s.rows, s.cols);
      for (float v : y) ASSERT_TRUE(std::isfinite(v)) << what;
      // Backward from the float32 output, so both see the same y.
      const F64 yf = widen(y);
      const SoftmaxBounds bound = softmax_bounds(log, x64, yf, dy64, s.rows, s.cols);
      expect_within(y, y64, bound.forward, what + " forward");
      F32 dx(size);
      F64 dx64(size);
      softmax_backward(DType::kFloat32, log, y.data(), dy.data(), dx.data(), s.rows, s.cols);
      softmax_backward(DType::kFloat64, log, yf.data(), dy64.data(), dx64.data(), s.rows, s.cols);
      expect_within(dx, dx64, bound.backward, what + " backward");
    }
  }
}

TEST(DnnSoftmax, ReferenceBackwardMatchesFiniteDifferences) {
  const std::int64_t rows = 3, cols = 5;
  for (bool log : {false, true}) {
    F64 x = random_f64(rows * cols, 950);
    const F64 r = random_f64(rows * cols, 951);
    F64 y(x.size()), dx(x.size());
    const auto loss = [&] {
      reference::softmax_forward(log, x.data(), y.data(), rows, cols);
      return dot(y, r);
    };
    loss();
    reference::softmax_backward(log, y.data(), r.data(), dx.data(), rows, cols);
    expect_close(dx, numeric_gradient(x, loss), 1e-7, log ? "logsoftmax dx" : "softmax dx");
  }
}

}  // namespace
}  // namespace chorus::ops::cpu
