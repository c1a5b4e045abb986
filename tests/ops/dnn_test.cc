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
//      from float32 rounding of its terms. CTest runs this file again under ONEDNN_MAX_CPU_ISA=AVX2
//      and SSE41 (tests/ops/CMakeLists.txt).
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

namespace chorus::ops::cpu {
namespace {

using F32 = std::vector<float>;
using F64 = std::vector<double>;

// Random floats in [lo, hi), generated as float so that the float64 reference sees the same values.
F32 random_f32(std::size_t n, std::uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  F32 v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}
F64 widen(const F32& v) { return F64(v.begin(), v.end()); }
F64 random_f64(std::size_t n, std::uint32_t seed) { return widen(random_f32(n, seed)); }

// |actual - expected| <= rtol * (|expected| + rms(expected)) + atol elementwise: relative for
// large entries, relative to the output's scale for entries that cancel to near zero.
template <typename T>
void expect_close(const std::vector<T>& actual, const F64& expected, double rtol, const std::string& what,
                  double atol = 0) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double sq = 0;
  for (double e : expected) sq += e * e;
  const double rms = expected.empty() ? 0 : std::sqrt(sq / static_cast<double>(expected.size()));
  int bad = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double tol = rtol * (std::abs(expected[i]) + rms) + atol;
    if (!(std::abs(static_cast<double>(actual[i]) - expected[i]) <= tol)) {
      if (++bad <= 5)
        ADD_FAILURE() << what << ": element " << i << " is " << actual[i] << ", expected " << expected[i]
                      << " (tolerance " << tol << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << actual.size() << " elements off";
}

double dot(const F64& a, const F64& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central differences of the scalar loss(v) with respect to every entry of v, in float64.
F64 numeric_gradient(F64& v, const std::function<double()>& loss, double h = 1e-6) {
  F64 g(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double saved = v[i];
    v[i] = saved + h;
    const double up = loss();
    v[i] = saved - h;
    const double down = loss();
    v[i] = saved;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

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

struct ConvCase {
  std::int64_t n, h, w, c, kh, kw, oc, stride, dilation;
  Padding padding;
};

Conv2dGeometry make_geometry(const ConvCase& c, std::int64_t stride_w = -1) {
  Conv2dGeometry g;
  g.n = c.n, g.in_h = c.h, g.in_w = c.w, g.in_c = c.c, g.k_h = c.kh, g.k_w = c.kw, g.out_c = c.oc;
  g.stride_h = c.stride, g.stride_w = stride_w > 0 ? stride_w : c.stride;
  g.dilation_h = g.dilation_w = c.dilation;
  EXPECT_TRUE(compute_output_size(g, c.padding));
  return g;
}

std::string describe(const Conv2dGeometry& g) {
  return "n=" + std::to_string(g.n) + " in=" + std::to_string(g.in_h) + "x" + std::to_string(g.in_w) + "x" +
         std::to_string(g.in_c) + " k=" + std::to_string(g.k_h) + "x" + std::to_string(g.k_w) +
         " oc=" + std::to_string(g.out_c) + " s=" + std::to_string(g.stride_h) + "/" + std::to_string(g.stride_w) +
         " d=" + std::to_string(g.dilation_h) + " pad=" + std::to_string(g.pad_top) + "," + std::to_string(g.pad_left) +
         "," + std::to_string(g.pad_bottom) + "," + std::to_string(g.pad_right);
}

// Runs forward, backward data and backward filter in float32 and float64 on the same inputs.
void check_conv(const Conv2dGeometry& g, std::uint32_t seed) {
  const auto ni = static_cast<std::size_t>(g.input_elements()), nf = static_cast<std::size_t>(g.filter_elements()),
             no = static_cast<std::size_t>(g.output_elements());
  const F32 x = random_f32(ni, seed), w = random_f32(nf, seed + 1), dy = random_f32(no, seed + 2);
  const F64 x64 = widen(x), w64 = widen(w), dy64 = widen(dy);
  const std::string what = describe(g);

  F32 y(no);
  F64 y64(no);
  conv2d_forward(DType::kFloat32, g, x.data(), w.data(), y.data());
  conv2d_forward(DType::kFloat64, g, x64.data(), w64.data(), y64.data());
  expect_close(y, y64, 1e-4, "conv forward " + what);

  // The epilogue (bias, ReLU, both): fused into oneDNN's kernel for float32, a loop after the
  // float64 reference; the float64 expectation is computed here by hand from y64.
  const F32 bias = random_f32(static_cast<std::size_t>(g.out_c), seed + 3);
  for (const auto& [with_bias, relu] : {std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
    F32 fy(no, 9.f);
    conv2d_forward(DType::kFloat32, g, x.data(), w.data(), fy.data(), {with_bias ? bias.data() : nullptr, relu});
    F64 want(no);
    for (std::size_t i = 0; i < no; ++i) {
      double v = y64[i] + (with_bias ? bias[i % static_cast<std::size_t>(g.out_c)] : 0.0);
      want[i] = relu ? std::max(v, 0.0) : v;
    }
    expect_close(fy, want, 1e-4,
                 "conv forward + " + std::string(with_bias ? "bias " : "") + (relu ? "relu " : "") + what);
    const F64 bias64 = widen(bias);
    F64 fy64(no);
    conv2d_forward(DType::kFloat64, g, x64.data(), w64.data(), fy64.data(),
                   {with_bias ? bias64.data() : nullptr, relu});
    expect_close(fy64, want, 1e-12, "float64 conv forward + epilogue " + what);
  }

  F32 dx(ni, 9.f);
  F64 dx64(ni);
  conv2d_backward_data(DType::kFloat32, g, dy.data(), w.data(), dx.data());
  conv2d_backward_data(DType::kFloat64, g, dy64.data(), w64.data(), dx64.data());
  expect_close(dx, dx64, 1e-4, "conv backward data " + what);

  F32 dw(nf, 9.f);
  F64 dw64(nf);
  conv2d_backward_filter(DType::kFloat32, g, x.data(), dy.data(), dw.data());
  conv2d_backward_filter(DType::kFloat64, g, x64.data(), dy64.data(), dw64.data());
  expect_close(dw, dw64, 1e-4, "conv backward filter " + what);
}

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

Conv2dGeometry pool_geometry(std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c, std::int64_t k,
                             std::int64_t s, Padding p) {
  return make_geometry({n, h, w, c, k, k, c, s, 1, p});
}

void check_pool(PoolKind kind, const Conv2dGeometry& g, const F32& x, std::uint32_t seed) {
  const auto ni = static_cast<std::size_t>(g.input_elements()), no = static_cast<std::size_t>(g.output_elements());
  const F32 dy = random_f32(no, seed);
  const F64 x64 = widen(x), dy64 = widen(dy);
  const std::string what = std::string(kind == PoolKind::kMax ? "max" : "avg") + " pool " + describe(g);
  F32 y(no);
  F64 y64(no);
  pool2d_forward(kind, DType::kFloat32, g, x.data(), y.data());
  pool2d_forward(kind, DType::kFloat64, g, x64.data(), y64.data());
  expect_close(y, y64, 1e-5, what + " forward");
  F32 dx(ni, 9.f);
  F64 dx64(ni);
  pool2d_backward(kind, DType::kFloat32, g, x.data(), dy.data(), dx.data());
  pool2d_backward(kind, DType::kFloat64, g, x64.data(), dy64.data(), dx64.data());
  expect_close(dx, dx64, 1e-5, what + " backward");
}

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
