// Helpers of the oneDNN-kernel tests (dnn_test.cc, dnn_layers_test.cc): seeded random inputs, the
// float64-reference comparison, finite differences, the convolution and pooling checks.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <chorus/ops/cpu/dnn.h>
#include <chorus/ops/cpu/reference.h>
#include <chorus/ops/geometry.h>

namespace chorus::ops::cpu::dnn_test {

using F32 = std::vector<float>;
using F64 = std::vector<double>;

// Random floats in [lo, hi), generated as float so that the float64 reference sees the same values.
inline F32 random_f32(std::size_t n, std::uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  F32 v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}
inline F64 widen(const F32& v) { return F64(v.begin(), v.end()); }
inline F64 random_f64(std::size_t n, std::uint32_t seed) { return widen(random_f32(n, seed)); }

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

inline double dot(const F64& a, const F64& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central differences of the scalar loss(v) with respect to every entry of v, in float64.
inline F64 numeric_gradient(F64& v, const std::function<double()>& loss, double h = 1e-6) {
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

// ---- convolution and pooling geometries, and their float32-vs-reference checks ----

struct ConvCase {
  std::int64_t n, h, w, c, kh, kw, oc, stride, dilation;
  Padding padding;
};

inline Conv2dGeometry make_geometry(const ConvCase& c, std::int64_t stride_w = -1) {
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
inline void check_conv(const Conv2dGeometry& g, std::uint32_t seed) {
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

inline Conv2dGeometry pool_geometry(std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c, std::int64_t k,
                                    std::int64_t s, Padding p) {
  return make_geometry({n, h, w, c, k, k, c, s, 1, p});
}

inline void check_pool(PoolKind kind, const Conv2dGeometry& g, const F32& x, std::uint32_t seed) {
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

}  // namespace chorus::ops::cpu::dnn_test
