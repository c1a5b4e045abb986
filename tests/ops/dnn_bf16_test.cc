// Tests for the 16-bit paths of ops/cpu/dnn.h: bfloat16 matmul, convolution (forward, backward
// data, backward filter) and pooling (forward, backward) on oneDNN's bf16 kernels and on the
// float32 fallback, and float16's error where oneDNN has no float16 kernels.
//
// Expected values: the float64 reference loops on the same bfloat16 inputs (widened exactly).
// Either path computes with float32 accumulation and rounds each output once to bfloat16, so
// |got - want| <= u·|want| + 2·K·2^-24·S, with u = 2^-8 (bfloat16's unit roundoff), K the reduction
// length of that output and S the same reduction over the inputs' absolute values (the bound of
// K-term float32 summation, doubled for the order oneDNN sums in). Both paths run on every
// machine: set_onednn_bf16_enabled(false) forces the fallback. CTest runs this file again with
// CHORUS_ONEDNN_BF16=0 and under every ONEDNN_MAX_CPU_ISA cap this CPU allows (tests/ops/CMakeLists.txt).
// Which path a call takes is the library's answer, dnn_dispatch() (dnn.h), never a guess from the
// ISA's name: every kernel call here checks that it ran on the path dnn_dispatch() named for it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <chorus/core/dtype.h>
#include <chorus/core/error.h>
#include <chorus/ops/cpu/dnn.h>
#include <chorus/ops/cpu/reference.h>
#include <chorus/ops/geometry.h>

namespace chorus::ops::cpu {
namespace {

using F64 = std::vector<double>;
using Bits = std::vector<std::uint16_t>;

constexpr double kU = 1.0 / 256;             // bfloat16 unit roundoff, 2^-8
constexpr double kEps32 = 1.0 / 16777216.0;  // float32 unit roundoff, 2^-24

// Random bfloat16 values in [-1, 1) and their exact float64 values.
struct Bf16Data {
  Bits bits;
  F64 values;
};
Bf16Data random_bf16(std::int64_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  Bf16Data d;
  for (std::int64_t i = 0; i < n; ++i) {
    d.bits.push_back(float_to_bfloat16(dist(gen)));
    d.values.push_back(bfloat16_to_float(d.bits.back()));
  }
  return d;
}
F64 abs(F64 v) {
  for (double& x : v) x = std::abs(x);
  return v;
}

// The bound of the file comment, element by element.
void expect_bf16_close(const Bits& got, const F64& want, const F64& scale, double k, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = bfloat16_to_float(got[i]);
    const double tol = kU * std::abs(want[i]) + 2 * k * kEps32 * scale[i];
    if (!(std::abs(g - want[i]) <= tol) && ++bad <= 5)
      ADD_FAILURE() << what << ": element " << i << " is " << g << ", expected " << want[i] << " (tolerance " << tol
                    << ")";
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements off";
}

// Runs `kernel_call`, one bfloat16 kernel call that `call` describes, and checks that it ran on the
// path dnn_dispatch() names for it (the bf16_stats() counters).
void run_as_dispatched(const DnnCall& call, const std::function<void()>& kernel_call, const std::string& what) {
  const DnnDispatch d = dnn_dispatch(call);
  ASSERT_TRUE(d.path == DnnPath::kOneDnn || d.path == DnnPath::kFloat32Fallback) << what << ": " << d.reason;
  const Bf16Stats before = bf16_stats();
  kernel_call();
  const Bf16Stats after = bf16_stats();
  EXPECT_EQ(after.onednn - before.onednn, d.path == DnnPath::kOneDnn ? 1 : 0) << what << ": " << d.reason;
  EXPECT_EQ(after.fallback - before.fallback, d.path == DnnPath::kFloat32Fallback ? 1 : 0) << what << ": " << d.reason;
}

DnnCall geometry_call(DnnKernel kernel, const Conv2dGeometry& g, PoolKind pool = PoolKind::kMax) {
  DnnCall call;
  call.kernel = kernel;
  call.dtype = DType::kBFloat16;
  call.geometry = g;
  call.pool = pool;
  return call;
}

// Runs `body` once on each path: oneDNN's bf16 kernels (where this machine and oneDNN have them)
// and the forced float32 fallback, where no call may run on oneDNN.
void on_both_paths(const std::function<void(const std::string&)>& body) {
  const bool saved = onednn_bf16_enabled();
  for (bool enabled : {true, false}) {
    set_onednn_bf16_enabled(enabled);
    const std::string path = bf16_path();
    const Bf16Stats before = bf16_stats();
    body(path);
    const Bf16Stats after = bf16_stats();
    if (!enabled) {
      EXPECT_EQ(after.onednn, before.onednn) << "the fallback path ran kernels on oneDNN";
      EXPECT_GT(after.fallback, before.fallback);
    }
  }
  set_onednn_bf16_enabled(saved);
}

// ---- which path ----------------------------------------------------------------------------------

TEST(DnnBf16, PathReflectsTheSwitchAndTheEnvironment) {
  const bool saved = onednn_bf16_enabled();
  set_onednn_bf16_enabled(false);
  EXPECT_EQ(bf16_path(), "float32 fallback");
  EXPECT_FALSE(onednn_bf16_enabled());
  set_onednn_bf16_enabled(true);
  const std::string path = bf16_path();
  // bf16_path() probes a 32x32x32 matmul: it names oneDNN exactly when dnn_dispatch() sends that there.
  DnnCall probe;
  probe.kernel = DnnKernel::kMatmul;
  probe.dtype = DType::kBFloat16;
  probe.m = probe.n = probe.k = 32;
  const DnnDispatch d = dnn_dispatch(probe);
  EXPECT_EQ(path == "float32 fallback", d.path == DnnPath::kFloat32Fallback) << path << " / " << d.reason;
  EXPECT_EQ(path.rfind("onednn " + onednn_isa(), 0) == 0, d.path == DnnPath::kOneDnn) << path << " / " << d.reason;
  if (!have_onednn()) {
    EXPECT_EQ(path, "float32 fallback");
  }
  set_onednn_bf16_enabled(saved);
}

TEST(DnnBf16, DispatchNamesThePathAndWhy) {
  const bool saved = onednn_bf16_enabled();
  const Conv2dGeometry g = [] {
    Conv2dGeometry p;
    p.n = 1;
    p.in_h = p.in_w = 4;
    p.in_c = p.out_c = 8;
    p.k_h = p.k_w = p.stride_h = p.stride_w = 2;
    EXPECT_TRUE(compute_output_size(p, Padding::kValid));
    return p;
  }();
  DnnCall call = geometry_call(DnnKernel::kPool2dForward, g);
  call.unary = UnaryOp::kSigmoid;  // relu runs chorus's loop on every path (NaN, docs/ops.md)
  // Switched off: every bfloat16 kernel falls back, and says why.
  set_onednn_bf16_enabled(false);
  for (DnnKernel k :
       {DnnKernel::kMatmul, DnnKernel::kPool2dForward, DnnKernel::kPool2dBackward, DnnKernel::kEltwiseForward}) {
    call.kernel = k;
    const DnnDispatch d = dnn_dispatch(call);
    EXPECT_EQ(d.path, DnnPath::kFloat32Fallback) << d.reason;
    if (have_onednn()) EXPECT_NE(d.reason.find("switched off"), std::string::npos) << d.reason;
  }
  set_onednn_bf16_enabled(saved);
  // float64 runs chorus's loops; float32 max pooling too.
  call.kernel = DnnKernel::kPool2dForward;
  call.dtype = DType::kFloat64;
  EXPECT_EQ(dnn_dispatch(call).path, DnnPath::kChorusLoops);
  call.dtype = DType::kFloat32;
  EXPECT_EQ(dnn_dispatch(call).path, DnnPath::kChorusLoops);
  call.pool = PoolKind::kAvg;
  EXPECT_EQ(dnn_dispatch(call).path, have_onednn() ? DnnPath::kOneDnn : DnnPath::kChorusLoops);
  // float16: oneDNN or unsupported, never a fallback; the matmul probe agrees with float16_supported().
  DnnCall f16;
  f16.dtype = DType::kFloat16;
  f16.m = f16.n = f16.k = 32;
  EXPECT_EQ(dnn_dispatch(f16).path, float16_supported() ? DnnPath::kOneDnn : DnnPath::kUnsupported);
  // An invalid call throws what the kernel would.
  call.dtype = DType::kInt32;
  EXPECT_THROW(dnn_dispatch(call), InvalidArgumentError);
  EXPECT_STREQ(dnn_path_name(DnnPath::kFloat32Fallback), "float32 fallback");
}

// Runs in both environments (nothing skips on a fresh machine, issue 39): under
// CHORUS_ONEDNN_BF16=0 (ctest: *_bf16_off) the oneDNN path is off and a bf16 matmul takes the
// fallback; without it the switch is on and the call takes exactly one of the two paths.
TEST(DnnBf16, EnvironmentVariableSwitchesTheOneDnnPath) {
  const char* env = std::getenv("CHORUS_ONEDNN_BF16");
  const bool off = env != nullptr && std::string(env) == "0";
  // The tests before this one restore the switch to the value they found (the variable's).
  EXPECT_EQ(onednn_bf16_enabled(), !off);
  if (off) EXPECT_EQ(bf16_path(), "float32 fallback");
  const Bf16Data a = random_bf16(6, 1), b = random_bf16(6, 2);
  Bits c(4);
  const Bf16Stats before = bf16_stats();
  matmul(DType::kBFloat16, a.bits.data(), 0, b.bits.data(), 0, c.data(), 1, 2, 2, 3, false, false);
  const Bf16Stats after = bf16_stats();
  EXPECT_EQ((after.onednn - before.onednn) + (after.fallback - before.fallback), 1);
  if (off) {
    EXPECT_EQ(after.onednn, before.onednn);
    EXPECT_EQ(after.fallback, before.fallback + 1);
  }
}

// ---- gelu's gradient -----------------------------------------------------------------------------

// bfloat16 GeluGrad (dnn.h eltwise_backward): on oneDNN's bf16 JIT kernel where dnn_dispatch says
// so, else false (the caller's loop). Both compute in float32 and round once, so a result is the
// float64 formula rounded to bfloat16 give or take one bfloat16 step (float32 erf approximations
// may land either side of a rounding tie) and float32-level absolute error; NaN/±Inf as TF's
// composed gradient (NaN).
TEST(DnnBf16, GeluBackwardRunsWhereDispatchSaysAndRoundsOnce) {
  const bool saved = onednn_bf16_enabled();
  for (bool enabled : {true, false}) {
    set_onednn_bf16_enabled(enabled);
    DnnCall call;
    call.kernel = DnnKernel::kEltwiseBackward;
    call.dtype = DType::kBFloat16;
    call.unary = UnaryOp::kGelu;
    call.elements = 1037;
    const DnnDispatch d = dnn_dispatch(call);
    if (!enabled || !have_onednn()) EXPECT_NE(d.path, DnnPath::kOneDnn) << d.reason;
    Bits x(1037), dy(1037), dx(1037, 0);
    std::mt19937 gen(1500);
    std::uniform_real_distribution<float> xs(-6.f, 6.f), dys(-2.f, 2.f);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = float_to_bfloat16(xs(gen)), dy[i] = float_to_bfloat16(dys(gen));
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    x[3] = float_to_bfloat16(inf), x[4] = float_to_bfloat16(-inf), x[5] = float_to_bfloat16(nan);
    const bool ran = eltwise_backward(UnaryOp::kGelu, DType::kBFloat16, x.data(), dy.data(), dx.data(), 1037);
    EXPECT_EQ(ran, d.path == DnnPath::kOneDnn) << d.reason;
    if (!ran) continue;
    int bad = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double v = bfloat16_to_float(x[i]);
      const double want = bfloat16_to_float(dy[i]) *
                          (0.5 * (1 + std::erf(v / std::sqrt(2.0))) + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI));
      const double got = bfloat16_to_float(dx[i]);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << i << ": " << got;
        continue;
      }
      const double rounded = bfloat16_to_float(float_to_bfloat16(static_cast<float>(want)));
      // One bfloat16 step near the value, plus float32-level absolute error of gelu' (whose values
      // are O(1)): in the far tails (x < -5) gelu' is a difference of two nearly equal terms, and
      // oneDNN's float32 approximation is off there by about 3e-8 — 25 % of a 1e-7 result.
      const double step = std::abs(rounded) * kU * 2 + 1e-6 * std::abs(bfloat16_to_float(dy[i]));
      if (!(std::abs(got - rounded) <= step) && ++bad <= 5)
        ADD_FAILURE() << "element " << i << ": x " << v << ", got " << got << ", expected " << rounded;
    }
    EXPECT_EQ(bad, 0);
  }
  set_onednn_bf16_enabled(saved);
}

// ---- matmul --------------------------------------------------------------------------------------

TEST(DnnBf16, MatmulMatchesTheReferenceOnBothPaths) {
  struct Case {
    std::int64_t batch, m, n, k;
    bool broadcast_a, broadcast_b;
  };
  const Case cases[] = {{1, 1, 1, 1, false, false},    {3, 5, 7, 9, false, false}, {2, 17, 13, 33, false, false},
                        {3, 6, 5, 4, true, false},     {3, 6, 5, 4, false, true},  {2, 4, 3, 5, true, true},
                        {1, 64, 96, 300, false, false}};
  on_both_paths([&](const std::string& path) {
    std::uint32_t seed = 100;
    for (const Case& c : cases) {
      for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        const std::int64_t sa = c.broadcast_a ? 0 : c.m * c.k, sb = c.broadcast_b ? 0 : c.k * c.n;
        const Bf16Data a = random_bf16((c.broadcast_a ? 1 : c.batch) * c.m * c.k, seed++);
        const Bf16Data b = random_bf16((c.broadcast_b ? 1 : c.batch) * c.k * c.n, seed++);
        Bits got(static_cast<std::size_t>(c.batch * c.m * c.n));
        DnnCall call;
        call.dtype = DType::kBFloat16;
        call.batch = c.batch, call.m = c.m, call.n = c.n, call.k = c.k;
        call.a_batch_stride = sa, call.b_batch_stride = sb, call.trans_a = ta, call.trans_b = tb;
        run_as_dispatched(
            call,
            [&] {
              matmul(DType::kBFloat16, a.bits.data(), sa, b.bits.data(), sb, got.data(), c.batch, c.m, c.n, c.k, ta,
                     tb);
            },
            path + ": matmul");
        F64 want(got.size()), scale(got.size());
        reference::matmul(a.values.data(), sa, b.values.data(), sb, want.data(), c.batch, c.m, c.n, c.k, ta, tb);
        const F64 aa = abs(a.values), ab = abs(b.values);
        reference::matmul(aa.data(), sa, ab.data(), sb, scale.data(), c.batch, c.m, c.n, c.k, ta, tb);
        expect_bf16_close(got, want, scale, static_cast<double>(c.k),
                          path + ": matmul " + std::to_string(c.batch) + "x" + std::to_string(c.m) + "x" +
                              std::to_string(c.n) + "x" + std::to_string(c.k) + " t=" + std::to_string(t));
      }
    }
  });
}

TEST(DnnBf16, MatmulWithEmptyReductionGivesZeros) {
  Bits c(6, 0x3f80);  // 1.0
  const std::uint16_t unused = 0;
  matmul(DType::kBFloat16, &unused, 0, &unused, 0, c.data(), 1, 2, 3, 0, false, false);
  for (std::uint16_t v : c) EXPECT_EQ(v, 0);
}

// ---- convolution ---------------------------------------------------------------------------------

Conv2dGeometry conv(std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c, std::int64_t k, std::int64_t f,
                    std::int64_t stride, std::int64_t dilation, Padding padding) {
  Conv2dGeometry g;
  g.n = n;
  g.in_h = h;
  g.in_w = w;
  g.in_c = c;
  g.k_h = g.k_w = k;
  g.out_c = f;
  g.stride_h = g.stride_w = stride;
  g.dilation_h = g.dilation_w = dilation;
  EXPECT_TRUE(compute_output_size(g, padding));
  return g;
}

TEST(DnnBf16, ConvolutionForwardAndBackwardMatchTheReferenceOnBothPaths) {
  const Conv2dGeometry geometries[] = {
      conv(2, 8, 8, 3, 3, 16, 1, 1, Padding::kSame), conv(1, 9, 7, 16, 3, 8, 2, 1, Padding::kValid),
      conv(2, 10, 10, 4, 3, 32, 1, 2, Padding::kSame), conv(4, 12, 12, 32, 5, 32, 1, 1, Padding::kSame)};
  on_both_paths([&](const std::string& path) {
    std::uint32_t seed = 300;
    for (const Conv2dGeometry& g : geometries) {
      const std::string name = path + ": conv " + std::to_string(g.n) + "x" + std::to_string(g.in_h) + "x" +
                               std::to_string(g.in_w) + "x" + std::to_string(g.in_c) + " k" + std::to_string(g.k_h) +
                               " f" + std::to_string(g.out_c);
      const Bf16Data x = random_bf16(g.input_elements(), seed++), w = random_bf16(g.filter_elements(), seed++);
      const Bf16Data dy = random_bf16(g.output_elements(), seed++);
      const F64 ax = abs(x.values), aw = abs(w.values), ady = abs(dy.values);

      Bits y(static_cast<std::size_t>(g.output_elements()));
      run_as_dispatched(
          geometry_call(DnnKernel::kConv2dForward, g),
          [&] { conv2d_forward(DType::kBFloat16, g, x.bits.data(), w.bits.data(), y.data()); }, name + " forward");
      F64 want(y.size()), scale(y.size());
      reference::conv2d_forward(g, x.values.data(), w.values.data(), want.data());
      reference::conv2d_forward(g, ax.data(), aw.data(), scale.data());
      expect_bf16_close(y, want, scale, static_cast<double>(g.k_h * g.k_w * g.in_c), name + " forward");

      Bits dx(static_cast<std::size_t>(g.input_elements()));
      run_as_dispatched(
          geometry_call(DnnKernel::kConv2dBackwardData, g),
          [&] { conv2d_backward_data(DType::kBFloat16, g, dy.bits.data(), w.bits.data(), dx.data()); },
          name + " backward data");
      want.assign(dx.size(), 0);
      scale.assign(dx.size(), 0);
      reference::conv2d_backward_data(g, dy.values.data(), w.values.data(), want.data());
      reference::conv2d_backward_data(g, ady.data(), aw.data(), scale.data());
      expect_bf16_close(dx, want, scale, static_cast<double>(g.k_h * g.k_w * g.out_c), name + " backward data");

      Bits dw(static_cast<std::size_t>(g.filter_elements()));
      run_as_dispatched(
          geometry_call(DnnKernel::kConv2dBackwardFilter, g),
          [&] { conv2d_backward_filter(DType::kBFloat16, g, x.bits.data(), dy.bits.data(), dw.data()); },
          name + " backward filter");
      want.assign(dw.size(), 0);
      scale.assign(dw.size(), 0);
      reference::conv2d_backward_filter(g, x.values.data(), dy.values.data(), want.data());
      reference::conv2d_backward_filter(g, ax.data(), ady.data(), scale.data());
      expect_bf16_close(dw, want, scale, static_cast<double>(g.n * g.out_h * g.out_w), name + " backward filter");
    }
  });
}

// ---- pooling -------------------------------------------------------------------------------------

Conv2dGeometry pool(std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c, std::int64_t k, std::int64_t stride,
                    Padding padding) {
  Conv2dGeometry g = conv(n, h, w, c, k, c, stride, 1, padding);
  return g;
}

TEST(DnnBf16, PoolingForwardAndBackwardMatchTheReferenceOnBothPaths) {
  const Conv2dGeometry geometries[] = {pool(2, 8, 8, 16, 2, 2, Padding::kValid), pool(1, 7, 9, 3, 3, 2, Padding::kSame),
                                       pool(2, 6, 6, 32, 3, 1, Padding::kSame)};  // overlapping windows
  on_both_paths([&](const std::string& path) {
    std::uint32_t seed = 500;
    for (const Conv2dGeometry& g : geometries) {
      for (PoolKind kind : {PoolKind::kMax, PoolKind::kAvg}) {
        const std::string name = path + (kind == PoolKind::kMax ? ": max" : ": avg") + " pool k" +
                                 std::to_string(g.k_h) + " s" + std::to_string(g.stride_h) + " c" +
                                 std::to_string(g.in_c);
        // Distinct inputs within each image and channel (a shuffled ramp of small integers / 16,
        // exact in bfloat16), so that every window has one maximum and both paths route max
        // pooling's gradient to the same element.
        const std::int64_t hw = g.in_h * g.in_w;
        ASSERT_LE(hw, 256);
        Bits xb(static_cast<std::size_t>(g.input_elements()));
        F64 x(xb.size());
        std::mt19937 gen(seed++);
        for (std::int64_t n = 0; n < g.n; ++n) {
          for (std::int64_t c = 0; c < g.in_c; ++c) {
            std::vector<std::int64_t> order(static_cast<std::size_t>(hw));
            for (std::int64_t i = 0; i < hw; ++i) order[static_cast<std::size_t>(i)] = i - hw / 2;
            std::shuffle(order.begin(), order.end(), gen);
            for (std::int64_t i = 0; i < hw; ++i) {
              const auto at = static_cast<std::size_t>((n * hw + i) * g.in_c + c);
              x[at] = static_cast<double>(order[static_cast<std::size_t>(i)]) / 16.0;
              xb[at] = float_to_bfloat16(static_cast<float>(x[at]));
              ASSERT_EQ(bfloat16_to_float(xb[at]), x[at]);
            }
          }
        }
        const Bf16Data dy = random_bf16(g.output_elements(), seed++);

        Bits y(static_cast<std::size_t>(g.output_elements()));
        run_as_dispatched(
            geometry_call(DnnKernel::kPool2dForward, g, kind),
            [&] { pool2d_forward(kind, DType::kBFloat16, g, xb.data(), y.data()); }, name + " forward");
        F64 want(y.size()), scale(y.size());
        const F64 ax = abs(x), ady = abs(dy.values);
        reference::pool2d_forward(kind, g, x.data(), want.data());
        reference::pool2d_forward(PoolKind::kAvg, g, ax.data(), scale.data());
        expect_bf16_close(y, want, scale, static_cast<double>(g.k_h * g.k_w), name + " forward");

        Bits dx(static_cast<std::size_t>(g.input_elements()));
        run_as_dispatched(
            geometry_call(DnnKernel::kPool2dBackward, g, kind),
            [&] { pool2d_backward(kind, DType::kBFloat16, g, xb.data(), dy.bits.data(), dx.data()); },
            name + " backward");
        want.assign(dx.size(), 0);
        scale.assign(dx.size(), 0);
        reference::pool2d_backward(kind, g, x.data(), dy.values.data(), want.data());
        reference::pool2d_backward(kind, g, x.data(), ady.data(), scale.data());
        // K: the windows that overlap one input element.
        const double k = std::ceil(static_cast<double>(g.k_h) / static_cast<double>(g.stride_h)) *
                         std::ceil(static_cast<double>(g.k_w) / static_cast<double>(g.stride_w));
        expect_bf16_close(dx, want, scale, k, name + " backward");
      }
    }
  });
}

TEST(DnnBf16, PoolingBackwardWithOverlappingWindowsRoundsOnce) {
  // Overlapping windows (3x3, stride 1) go through float32 even where oneDNN has bf16 pooling;
  // disjoint ones (2x2, stride 2) run where dnn_dispatch() says (oneDNN where it has a kernel).
  const Conv2dGeometry overlapping = pool(1, 6, 6, 16, 3, 1, Padding::kSame);
  const Conv2dGeometry disjoint = pool(1, 6, 6, 16, 2, 2, Padding::kValid);
  for (bool is_disjoint : {false, true}) {
    const Conv2dGeometry& g = is_disjoint ? disjoint : overlapping;
    const Bf16Data x = random_bf16(g.input_elements(), 700), dy = random_bf16(g.output_elements(), 701);
    Bits dx(static_cast<std::size_t>(g.input_elements()));
    const DnnCall call = geometry_call(DnnKernel::kPool2dBackward, g, PoolKind::kAvg);
    const DnnDispatch d = dnn_dispatch(call);
    if (!is_disjoint) {
      EXPECT_EQ(d.path, DnnPath::kFloat32Fallback) << d.reason;
    } else if (bf16_path() == "float32 fallback") {
      EXPECT_EQ(d.path, DnnPath::kFloat32Fallback) << d.reason;  // nothing bfloat16 runs on oneDNN
    }
    run_as_dispatched(
        call, [&] { pool2d_backward(PoolKind::kAvg, DType::kBFloat16, g, x.bits.data(), dy.bits.data(), dx.data()); },
        is_disjoint ? "disjoint" : "overlapping");
  }
}

// ---- float16 -------------------------------------------------------------------------------------

TEST(DnnFloat16, RunsWhereOneDnnHasKernelsElseNamesTheWorkingPolicy) {
  const Conv2dGeometry g = conv(1, 4, 4, 2, 3, 2, 1, 1, Padding::kSame);
  std::vector<std::uint16_t> x(static_cast<std::size_t>(g.input_elements()), float_to_float16(0.5f));
  std::vector<std::uint16_t> w(static_cast<std::size_t>(g.filter_elements()), float_to_float16(0.25f));
  std::vector<std::uint16_t> y(static_cast<std::size_t>(g.output_elements()));
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"matmul", [&] { matmul(DType::kFloat16, x.data(), 0, w.data(), 0, y.data(), 1, 2, 2, 4, false, false); }},
      {"conv2d_forward", [&] { conv2d_forward(DType::kFloat16, g, x.data(), w.data(), y.data()); }},
      {"pool2d_forward", [&] {
         pool2d_forward(PoolKind::kMax, DType::kFloat16, pool(1, 4, 4, 2, 2, 2, Padding::kValid), x.data(), y.data());
       }}};
  for (const auto& [name, call] : calls) {
    if (float16_supported()) {
      EXPECT_NO_THROW(call()) << name;
      continue;
    }
    try {
      call();
      ADD_FAILURE() << name << ": float16 ran although float16_supported() is false";
    } catch (const UnimplementedError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(name), std::string::npos) << msg;
      EXPECT_NE(msg.find("float16"), std::string::npos) << msg;
      EXPECT_NE(msg.find("mixed_bfloat16"), std::string::npos) << msg;
      EXPECT_NE(msg.find("GPU"), std::string::npos) << msg;
    }
  }
  // Where float16 runs, its values: 4 products of 0.5 · 0.25 = 0.5, exact in float16.
  if (float16_supported()) {
    matmul(DType::kFloat16, x.data(), 0, w.data(), 0, y.data(), 1, 2, 2, 4, false, false);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(float16_to_float(y[static_cast<std::size_t>(i)]), 0.5f);
  }
}

TEST(DnnBf16, SoftmaxAndBatchNormKernelsRejectSixteenBitTypes) {
  // The op layer runs 16-bit softmax / batch_norm in float32; the kernels say so if called directly.
  const std::uint16_t x[2] = {0x3f80, 0x3f80};
  std::uint16_t y[2];
  EXPECT_THROW(softmax_forward(DType::kBFloat16, false, x, y, 1, 2), InvalidArgumentError);
  EXPECT_THROW(matmul(DType::kInt32, x, 0, x, 0, y, 1, 1, 1, 1, false, false), InvalidArgumentError);
}

}  // namespace
}  // namespace chorus::ops::cpu
