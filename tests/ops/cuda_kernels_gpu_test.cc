// The CUDA kernels (ops/cuda/kernels.h) and the cuBLAS/cuDNN wrappers (ops/cuda/libraries.h)
// against CPU results on seeded random inputs: small loops written here for the elementwise,
// reduction, loss and index kernels; ops/cpu/dnn.h in float64 (its reference loops) for matmul,
// convolution, pooling, softmax and batch norm. Every test skips with the CUDA runtime's reason
// on a machine without a usable GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/gpu.h"
#include "core/runtime.h"
#include "core/tensor.h"

#ifdef CHORUS_WITH_CUDA
#include "ops/cpu/dnn.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/libraries.h"
#include "ops/determinism.h"
#endif

namespace chorus::ops::cuda {
namespace {

#ifndef CHORUS_WITH_CUDA

TEST(CudaKernelsTest, NeedsCuda) { GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason(); }

#else

using i64 = std::int64_t;
constexpr const char* kGpu = "/GPU:0";
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

class CudaKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::device_count() == 0) GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason();
  }
};

// ---- Helpers ---------------------------------------------------------------------------------

template <typename T>
Tensor put(const std::vector<T>& v) {
  return Tensor::from_vector<T>(v, Shape{static_cast<i64>(v.size())}, kGpu);
}
// Host doubles stored on the GPU as `dtype` (converted with core/dtype.h's rules).
Tensor put_as(const std::vector<double>& v, DType dtype) {
  std::vector<unsigned char> raw(v.size() * dtype_size(dtype));
  convert(v.data(), DType::kFloat64, raw.data(), dtype, v.size());
  return Tensor::from_host(raw.data(), Shape{static_cast<i64>(v.size())}, dtype, kGpu);
}
Tensor zeros(i64 n, DType dtype) { return Tensor::zeros(Shape{n}, dtype, kGpu); }
std::vector<double> get(const Tensor& t) { return t.to_vector<double>(); }
int ord(const Tensor& t) { return t.device_context().gpu_ordinal(); }
gpu::StreamHandle st(const Tensor& t) { return t.device_context().stream().native_handle(); }

std::vector<double> uniform(i64 n, double lo, double hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}
std::vector<double> integers(i64 n, int lo, int hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}
// Rounds host doubles through `dtype` (what the GPU actually reads).
std::vector<double> rounded(const std::vector<double>& v, DType dtype) {
  std::vector<unsigned char> raw(v.size() * dtype_size(dtype));
  convert(v.data(), DType::kFloat64, raw.data(), dtype, v.size());
  std::vector<double> out(v.size());
  convert(raw.data(), dtype, out.data(), DType::kFloat64, v.size());
  return out;
}

// |got - want| <= tol · max(1, |want|) elementwise; NaN must match NaN.
void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool ok = (std::isnan(want[i]) && std::isnan(got[i])) ||
                    (std::isinf(want[i]) && got[i] == want[i]) ||
                    std::fabs(got[i] - want[i]) <= tol * std::max(1.0, std::fabs(want[i]));
    if (!ok && reported++ < 5) ADD_FAILURE() << what << " [" << i << "]: got " << got[i] << ", want " << want[i];
  }
}

StridedLayout layout_of(std::vector<i64> dims, std::vector<std::vector<i64>> strides, std::vector<i64> offsets) {
  StridedLayout l;
  l.rank = static_cast<int>(dims.size());
  for (int d = 0; d < l.rank; ++d) {
    l.dims[d] = dims[static_cast<std::size_t>(d)];
    for (std::size_t o = 0; o < strides.size(); ++o) l.strides[o][d] = strides[o][static_cast<std::size_t>(d)];
  }
  for (std::size_t o = 0; o < offsets.size(); ++o) l.offsets[o] = offsets[o];
  return l;
}
// Element offset of operand o for output index i.
i64 offset_of(const StridedLayout& l, int o, i64 i) {
  i64 off = l.offsets[o];
  for (int d = l.rank - 1; d >= 0; --d) {
    off += (i % l.dims[d]) * l.strides[o][d];
    i /= l.dims[d];
  }
  return off;
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_grad(double x) {
  return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) * 0.39894228040143267794;  // 1/sqrt(2 pi)
}

// ---- Elementwise -----------------------------------------------------------------------------

double unary_ref(UnaryOp op, double v) {
  switch (op) {
    case UnaryOp::kNeg: return -v;
    case UnaryOp::kExp: return std::exp(v);
    case UnaryOp::kLog: return std::log(v);
    case UnaryOp::kSqrt: return std::sqrt(v);
    case UnaryOp::kRsqrt: return 1 / std::sqrt(v);
    case UnaryOp::kSquare: return v * v;
    case UnaryOp::kAbs: return std::fabs(v);
    case UnaryOp::kSign: return v > 0 ? 1 : (v < 0 ? -1 : 0);
    case UnaryOp::kReciprocal: return 1 / v;
    case UnaryOp::kRelu: return v > 0 ? v : 0;
    case UnaryOp::kSigmoid: return sigmoid(v);
    case UnaryOp::kTanh: return std::tanh(v);
    case UnaryOp::kGelu: return gelu(v);
    case UnaryOp::kLogicalNot: return v != 0 ? 0 : 1;
  }
  return 0;
}

TEST_F(CudaKernelsTest, UnaryFloatOpsMatchCpu) {
  const UnaryOp ops[] = {UnaryOp::kNeg,   UnaryOp::kExp,        UnaryOp::kLog,  UnaryOp::kSqrt,
                         UnaryOp::kRsqrt, UnaryOp::kSquare,     UnaryOp::kAbs,  UnaryOp::kSign,
                         UnaryOp::kReciprocal, UnaryOp::kRelu, UnaryOp::kSigmoid, UnaryOp::kTanh, UnaryOp::kGelu};
  const struct { DType dtype; double tol; } types[] = {
      {DType::kFloat32, 1e-5}, {DType::kFloat64, 1e-12}, {DType::kFloat16, 2e-3}, {DType::kBFloat16, 1.6e-2}};
  const i64 n = 3001;
  for (const auto& t : types) {
    for (UnaryOp op : ops) {
      const bool positive = op == UnaryOp::kLog || op == UnaryOp::kSqrt || op == UnaryOp::kRsqrt;
      const auto host = rounded(uniform(n, positive ? 0.1 : -3, 3, 11), t.dtype);
      Tensor x = put_as(host, t.dtype);
      Tensor y = zeros(n, t.dtype);
      unary(ord(x), st(x), op, t.dtype, x.data(), y.data(), n);
      std::vector<double> want(host.size());
      for (std::size_t i = 0; i < host.size(); ++i) want[i] = unary_ref(op, host[i]);
      expect_close(get(y), rounded(want, t.dtype), t.tol,
                   std::string(dtype_name(t.dtype)) + " unary op " + std::to_string(static_cast<int>(op)));
    }
  }
}

TEST_F(CudaKernelsTest, UnaryIntegerAndBoolOps) {
  const auto host = integers(1000, -50, 50, 3);
  Tensor x = put_as(host, DType::kInt32);
  for (UnaryOp op : {UnaryOp::kNeg, UnaryOp::kSquare, UnaryOp::kAbs, UnaryOp::kSign, UnaryOp::kRelu}) {
    Tensor y = zeros(1000, DType::kInt32);
    unary(ord(x), st(x), op, DType::kInt32, x.data(), y.data(), 1000);
    std::vector<double> want(host.size());
    for (std::size_t i = 0; i < host.size(); ++i) want[i] = unary_ref(op, host[i]);
    expect_close(get(y), want, 0, "int32 unary");
  }
  Tensor b = put<bool>({true, false, false, true});
  Tensor nb = zeros(4, DType::kBool);
  unary(ord(b), st(b), UnaryOp::kLogicalNot, DType::kBool, b.data(), nb.data(), 4);
  EXPECT_EQ(get(nb), (std::vector<double>{0, 1, 1, 0}));
  EXPECT_THROW(unary(ord(x), st(x), UnaryOp::kExp, DType::kInt32, x.data(), x.data(), 1000), InvalidArgumentError);
  EXPECT_THROW(unary(ord(b), st(b), UnaryOp::kNeg, DType::kBool, b.data(), b.data(), 4), InvalidArgumentError);
}

double binary_ref(BinaryOp op, double x, double y) {
  switch (op) {
    case BinaryOp::kAdd: return x + y;
    case BinaryOp::kSub: return x - y;
    case BinaryOp::kMul: return x * y;
    case BinaryOp::kDiv: return x / y;
    case BinaryOp::kPow: return std::pow(x, y);
    case BinaryOp::kMaximum: return std::max(x, y);
    case BinaryOp::kMinimum: return std::min(x, y);
    case BinaryOp::kEqual: return x == y;
    case BinaryOp::kNotEqual: return x != y;
    case BinaryOp::kLess: return x < y;
    case BinaryOp::kLessEqual: return x <= y;
    case BinaryOp::kGreater: return x > y;
    case BinaryOp::kGreaterEqual: return x >= y;
    case BinaryOp::kLogicalAnd: return (x != 0) && (y != 0);
    case BinaryOp::kLogicalOr: return (x != 0) || (y != 0);
    case BinaryOp::kReluGrad: return y > 0 ? x : 0;
    case BinaryOp::kSigmoidGrad: return x * y * (1 - y);
    case BinaryOp::kTanhGrad: return x * (1 - y * y);
    case BinaryOp::kGeluGrad: return x * gelu_grad(y);
  }
  return 0;
}

TEST_F(CudaKernelsTest, BinaryBroadcastAndStridedMatchCpu) {
  // a: [3, 1, 5] broadcast along dim 1; b: [4, 5] stored transposed ([5, 4]) at offset 2,
  // broadcast along dim 0. Output [3, 4, 5].
  const StridedLayout l = layout_of({3, 4, 5}, {{5, 0, 1}, {0, 1, 4}}, {0, 2});
  const i64 n = l.num_elements();
  const BinaryOp ops[] = {BinaryOp::kAdd,     BinaryOp::kSub,       BinaryOp::kMul,      BinaryOp::kDiv,
                          BinaryOp::kPow,     BinaryOp::kMaximum,   BinaryOp::kMinimum,  BinaryOp::kEqual,
                          BinaryOp::kNotEqual, BinaryOp::kLess,     BinaryOp::kLessEqual, BinaryOp::kGreater,
                          BinaryOp::kGreaterEqual, BinaryOp::kLogicalAnd, BinaryOp::kLogicalOr,
                          BinaryOp::kReluGrad, BinaryOp::kSigmoidGrad, BinaryOp::kTanhGrad, BinaryOp::kGeluGrad};
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kFloat16}) {
    const double tol = dtype == DType::kFloat64 ? 1e-12 : dtype == DType::kFloat32 ? 1e-5 : 2e-3;
    auto ha = rounded(uniform(15, 0.5, 2, 5), dtype);
    auto hb = rounded(uniform(22, -1, 1, 6), dtype);
    ha[3] = hb[2 + 3 * 4];  // a[0, 0, 3] == b[0, 3] (at offset 2 + 3·4): the comparisons see an equal pair
    Tensor a = put_as(ha, dtype), b = put_as(hb, dtype);
    for (BinaryOp op : ops) {
      const bool to_bool = is_comparison(op) || is_logical(op);
      Tensor out = zeros(n, to_bool ? DType::kBool : dtype);
      binary(ord(a), st(a), op, dtype, l, a.data(), b.data(), out.data());
      std::vector<double> want(static_cast<std::size_t>(n));
      for (i64 i = 0; i < n; ++i)
        want[static_cast<std::size_t>(i)] =
            binary_ref(op, ha[static_cast<std::size_t>(offset_of(l, 0, i))], hb[static_cast<std::size_t>(offset_of(l, 1, i))]);
      expect_close(get(out), to_bool ? want : rounded(want, dtype), to_bool ? 0 : tol,
                   std::string(dtype_name(dtype)) + " binary op " + std::to_string(static_cast<int>(op)));
    }
  }
}

TEST_F(CudaKernelsTest, BinaryIntegerEdgeCases) {
  const std::vector<std::int32_t> a{7, -7, 7, std::numeric_limits<std::int32_t>::min(), 5, 2, -1, 1, 3, -9};
  const std::vector<std::int32_t> b{2, 2, 0, -1, 0, 10, -3, -5, -2, 4};
  Tensor ta = put(a), tb = put(b);
  const StridedLayout dense = layout_of({10}, {{1}, {1}}, {0, 0});
  Tensor q = zeros(10, DType::kInt32);
  binary(ord(ta), st(ta), BinaryOp::kDiv, DType::kInt32, dense, ta.data(), tb.data(), q.data());
  // Truncation toward zero; x / 0 → 0 on the GPU; INT_MIN / -1 wraps to INT_MIN.
  EXPECT_EQ(q.to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{3, -3, 0, std::numeric_limits<std::int32_t>::min(), 0, 0, 0, 0, -1, -2}));
  Tensor p = zeros(10, DType::kInt32);
  binary(ord(ta), st(ta), BinaryOp::kPow, DType::kInt32, dense, ta.data(), tb.data(), p.data());
  // 7^2, (-7)^2, 7^0, INT_MIN^-1 → 0, 5^0, 2^10, (-1)^-3 → -1, 1^-5 → 1, 3^-2 → 0, (-9)^4.
  EXPECT_EQ(p.to_vector<std::int32_t>(), (std::vector<std::int32_t>{49, 49, 1, 0, 1, 1024, -1, 1, 0, 6561}));
  Tensor bb = put<bool>({true, false});
  EXPECT_THROW(binary(ord(bb), st(bb), BinaryOp::kAdd, DType::kBool, layout_of({2}, {{1}, {1}}, {0, 0}), bb.data(),
                      bb.data(), bb.data()),
               InvalidArgumentError);
  EXPECT_THROW(binary(ord(ta), st(ta), BinaryOp::kTanhGrad, DType::kInt32, dense, ta.data(), tb.data(), q.data()),
               InvalidArgumentError);
}

TEST_F(CudaKernelsTest, WhereBroadcastsTheCondition) {
  // cond [4] broadcast over rows of [3, 4]; x dense; y a scalar.
  const StridedLayout l = layout_of({3, 4}, {{0, 1}, {4, 1}, {0, 0}}, {0, 0, 0});
  Tensor c = put<bool>({true, false, true, false});
  const auto hx = uniform(12, -1, 1, 9);
  Tensor x = put_as(hx, DType::kFloat64), y = put<double>({42.0});
  Tensor out = zeros(12, DType::kFloat64);
  where(ord(x), st(x), DType::kFloat64, l, c.data(), x.data(), y.data(), out.data());
  std::vector<double> want(12);
  for (int i = 0; i < 12; ++i) want[static_cast<std::size_t>(i)] = (i % 2 == 0) ? hx[static_cast<std::size_t>(i)] : 42.0;
  EXPECT_EQ(get(out), want);
}

TEST_F(CudaKernelsTest, CastFollowsCoreConversionRules) {
  const std::vector<double> src{0.0, -0.0, 1.5, -1.5, 2.5, 300.7, -300.7, 1e10, -1e10, kNaN,
                                std::numeric_limits<double>::infinity(), 65504.0, 65520.0, 1e-8, 3.999999, 255.9};
  const DType all[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                       DType::kInt32,   DType::kInt64,   DType::kUInt8,   DType::kBool};
  const std::size_t n = src.size();
  for (DType from : all) {
    // The source values as `from` holds them.
    std::vector<unsigned char> raw_from(n * dtype_size(from));
    convert(src.data(), DType::kFloat64, raw_from.data(), from, n);
    Tensor x = Tensor::from_host(raw_from.data(), Shape{static_cast<i64>(n)}, from, kGpu);
    for (DType to : all) {
      std::vector<unsigned char> want(n * dtype_size(to));
      convert(raw_from.data(), from, want.data(), to, n);
      Tensor y = zeros(static_cast<i64>(n), to);
      cast(ord(x), st(x), from, to, x.data(), y.data(), static_cast<i64>(n));
      std::vector<unsigned char> got(n * dtype_size(to));
      y.copy_to_host(got.data());
      if (to == DType::kBool) {
        for (auto& g : got) g = g != 0;
      }
      // NaN payloads may differ between host and device conversion: compare values then.
      std::vector<double> gv(n), wv(n);
      convert(got.data(), to, gv.data(), DType::kFloat64, n);
      convert(want.data(), to, wv.data(), DType::kFloat64, n);
      expect_close(gv, wv, 0, std::string("cast ") + std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)));
    }
  }
}

TEST_F(CudaKernelsTest, CopyStridedTransposesEveryElementSize) {
  // [2, 3, 4] → its [4, 3, 2] transpose, walking the source's dims with destination strides.
  const StridedLayout l = layout_of({2, 3, 4}, {{12, 4, 1}, {1, 2, 6}}, {0, 0});
  for (DType dtype : {DType::kUInt8, DType::kFloat16, DType::kFloat32, DType::kFloat64}) {
    const auto host = integers(24, 0, 100, 4);
    Tensor src = put_as(host, dtype);
    Tensor dst = zeros(24, dtype);
    copy_strided(ord(src), st(src), dtype_size(dtype), l, src.data(), dst.data());
    std::vector<double> want(24);
    for (i64 i = 0; i < 24; ++i) want[static_cast<std::size_t>(offset_of(l, 1, i))] = host[static_cast<std::size_t>(i)];
    EXPECT_EQ(get(dst), want) << dtype_name(dtype);
  }
  // An offset slice: elements 5..9 of a vector into elements 1..5 of another.
  Tensor src = put<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor dst = zeros(6, DType::kFloat32);
  copy_strided(ord(src), st(src), 4, layout_of({5}, {{1}, {1}}, {5, 1}), src.data(), dst.data());
  EXPECT_EQ(get(dst), (std::vector<double>{0, 5, 6, 7, 8, 9}));
}

// ---- Reductions ------------------------------------------------------------------------------

std::vector<double> reduce_ref(ReduceKind kind, const std::vector<double>& x, i64 outer, i64 r, i64 inner) {
  std::vector<double> y(static_cast<std::size_t>(outer * inner));
  for (i64 o = 0; o < outer; ++o)
    for (i64 i = 0; i < inner; ++i) {
      double a = kind == ReduceKind::kProd ? 1 : kind == ReduceKind::kMax ? -INFINITY : kind == ReduceKind::kMin ? INFINITY : 0;
      for (i64 j = 0; j < r; ++j) {
        const double v = x[static_cast<std::size_t>((o * r + j) * inner + i)];
        switch (kind) {
          case ReduceKind::kSum:
          case ReduceKind::kMean: a += v; break;
          case ReduceKind::kProd: a *= v; break;
          case ReduceKind::kMax: a = std::max(a, v); break;
          case ReduceKind::kMin: a = std::min(a, v); break;
        }
      }
      if (kind == ReduceKind::kMean && r > 0) a /= static_cast<double>(r);
      y[static_cast<std::size_t>(o * inner + i)] = a;
    }
  return y;
}

TEST_F(CudaKernelsTest, ReduceMatchesCpuOnEveryKernelShape) {
  struct Case { i64 outer, r, inner; };
  // warp per row; block per row; tiles along inner; few outputs with a long r; r == 0.
  const Case cases[] = {{7, 1000, 1}, {3, 5000, 1}, {4, 300, 70}, {2, 3000, 3}, {3, 0, 5}, {1, 1, 1}};
  const ReduceKind kinds[] = {ReduceKind::kSum, ReduceKind::kMean, ReduceKind::kMax, ReduceKind::kMin,
                              ReduceKind::kProd};
  for (const Case& c : cases) {
    const i64 n = c.outer * c.r * c.inner;
    for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kInt32}) {
      const bool is_int = dtype == DType::kInt32;
      for (ReduceKind kind : kinds) {
        // Products stay near 1; integer products stay small.
        auto host = kind == ReduceKind::kProd ? (is_int ? integers(n, 1, 1, 8) : uniform(n, 0.999, 1.001, 8))
                                              : (is_int ? integers(n, -100, 100, 8) : uniform(n, -1, 1, 8));
        host = rounded(host, dtype);
        Tensor x = put_as(host, dtype);
        Tensor y = zeros(c.outer * c.inner, dtype);
        reduce(ord(y), st(y), kind, dtype, x.data(), y.data(), c.outer, c.r, c.inner);
        auto want = reduce_ref(kind, host, c.outer, c.r, c.inner);
        if (is_int && kind == ReduceKind::kMean)
          for (auto& w : want) w = std::trunc(w);
        if (is_int && c.r == 0 && kind == ReduceKind::kMax) for (auto& w : want) w = std::numeric_limits<std::int32_t>::lowest();
        if (is_int && c.r == 0 && kind == ReduceKind::kMin) for (auto& w : want) w = std::numeric_limits<std::int32_t>::max();
        const double tol = dtype == DType::kFloat16 ? 1e-3 : dtype == DType::kFloat32 ? 1e-6 : is_int ? 0 : 1e-12;
        expect_close(get(y), rounded(want, dtype), tol,
                     std::string(dtype_name(dtype)) + " reduce " + std::to_string(static_cast<int>(kind)) + " [" +
                         std::to_string(c.outer) + "," + std::to_string(c.r) + "," + std::to_string(c.inner) + "]");
      }
    }
  }
}

TEST_F(CudaKernelsTest, ReduceIsBitwiseReproducible) {
  const auto host = uniform(4 * 100000, -1, 1, 12);
  Tensor x = put_as(host, DType::kFloat32);
  Tensor y1 = zeros(4, DType::kFloat32), y2 = zeros(4, DType::kFloat32);
  reduce(ord(x), st(x), ReduceKind::kSum, DType::kFloat32, x.data(), y1.data(), 4, 100000, 1);
  reduce(ord(x), st(x), ReduceKind::kSum, DType::kFloat32, x.data(), y2.data(), 4, 100000, 1);
  EXPECT_EQ(y1.to_vector<float>(), y2.to_vector<float>());
}

TEST_F(CudaKernelsTest, ArgmaxTakesTheFirstExtreme) {
  // Ties (integers in a small range) make "first" matter; shapes cover the three kernels.
  struct Case { i64 outer, r, inner; };
  for (const Case& c : {Case{5, 700, 1}, Case{2, 9000, 1}, Case{3, 50, 40}, Case{1, 4000, 2}}) {
    const auto host = integers(c.outer * c.r * c.inner, 0, 20, 21);
    for (DType dtype : {DType::kFloat32, DType::kInt64, DType::kBFloat16}) {
      Tensor x = put_as(host, dtype);
      for (bool min : {false, true}) {
        Tensor y = zeros(c.outer * c.inner, DType::kInt64);
        argmax(ord(x), st(x), min, dtype, x.data(), static_cast<std::int64_t*>(y.data()), c.outer, c.r, c.inner);
        std::vector<double> want;
        for (i64 o = 0; o < c.outer; ++o)
          for (i64 i = 0; i < c.inner; ++i) {
            i64 at = 0;
            for (i64 j = 1; j < c.r; ++j) {
              const double v = host[static_cast<std::size_t>((o * c.r + j) * c.inner + i)];
              const double b = host[static_cast<std::size_t>((o * c.r + at) * c.inner + i)];
              if (min ? v < b : v > b) at = j;
            }
            want.push_back(static_cast<double>(at));
          }
        EXPECT_EQ(get(y), want) << dtype_name(dtype) << (min ? " argmin" : " argmax");
      }
    }
  }
  // NaN: ignored after index 0, wins at index 0 (the CPU kernel's sequential rule).
  Tensor x = put<float>({1, NAN, 3, 2, /**/ NAN, 5, 6, 7});
  Tensor y = zeros(2, DType::kInt64);
  argmax(ord(x), st(x), false, DType::kFloat32, x.data(), static_cast<std::int64_t*>(y.data()), 2, 4, 1);
  EXPECT_EQ(y.to_vector<std::int64_t>(), (std::vector<std::int64_t>{2, 0}));
  EXPECT_THROW(argmax(ord(x), st(x), false, DType::kFloat32, x.data(), static_cast<std::int64_t*>(y.data()), 2, 0, 1),
               InvalidArgumentError);
}

// ---- Losses ----------------------------------------------------------------------------------

TEST_F(CudaKernelsTest, SparseSoftmaxCrossEntropyMatchesCpu) {
  const i64 rows = 37, cols = 1000;
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kFloat16}) {
    const auto logits = rounded(uniform(rows * cols, -5, 5, 31), dtype);
    auto labels = integers(rows, 0, static_cast<int>(cols - 1), 32);
    labels[3] = static_cast<double>(cols);  // out of range: a NaN row
    labels[4] = -1;
    for (DType label_dtype : {DType::kInt32, DType::kInt64}) {
      Tensor x = put_as(logits, dtype), lab = put_as(labels, label_dtype);
      Tensor loss = zeros(rows, dtype), grad = zeros(rows * cols, dtype);
      sparse_softmax_xent(ord(x), st(x), dtype, x.data(), label_dtype, lab.data(), loss.data(), grad.data(), rows,
                          cols);
      std::vector<double> want_loss(static_cast<std::size_t>(rows)), want_grad(static_cast<std::size_t>(rows * cols));
      for (i64 r = 0; r < rows; ++r) {
        const double* row = &logits[static_cast<std::size_t>(r * cols)];
        double mx = -INFINITY, sum = 0;
        for (i64 c = 0; c < cols; ++c) mx = std::max(mx, row[c]);
        for (i64 c = 0; c < cols; ++c) sum += std::exp(row[c] - mx);
        const i64 label = static_cast<i64>(labels[static_cast<std::size_t>(r)]);
        const bool valid = label >= 0 && label < cols;
        want_loss[static_cast<std::size_t>(r)] = valid ? std::log(sum) - (row[label] - mx) : kNaN;
        for (i64 c = 0; c < cols; ++c)
          want_grad[static_cast<std::size_t>(r * cols + c)] =
              valid ? std::exp(row[c] - mx) / sum - (c == label ? 1.0 : 0.0) : kNaN;
      }
      const double tol = dtype == DType::kFloat16 ? 3e-3 : dtype == DType::kFloat32 ? 2e-5 : 1e-12;
      expect_close(get(loss), rounded(want_loss, dtype), tol, std::string(dtype_name(dtype)) + " sparse xent loss");
      expect_close(get(grad), rounded(want_grad, dtype), tol, std::string(dtype_name(dtype)) + " sparse xent grad");
      // Without a gradient buffer.
      Tensor loss2 = zeros(rows, dtype);
      sparse_softmax_xent(ord(x), st(x), dtype, x.data(), label_dtype, lab.data(), loss2.data(), nullptr, rows, cols);
      expect_close(get(loss2), get(loss), 0, "loss without grad");
    }
  }
}

TEST_F(CudaKernelsTest, DenseSoftmaxCrossEntropyMatchesCpu) {
  const i64 rows = 19, cols = 300;
  const auto logits = uniform(rows * cols, -4, 4, 41);
  auto probs = uniform(rows * cols, 0, 1, 42);
  for (i64 r = 0; r < rows; ++r) {  // rows sum to 1, except row 0 (sum(p) enters the gradient)
    double s = 0;
    for (i64 c = 0; c < cols; ++c) s += probs[static_cast<std::size_t>(r * cols + c)];
    if (r > 0)
      for (i64 c = 0; c < cols; ++c) probs[static_cast<std::size_t>(r * cols + c)] /= s;
  }
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const auto hx = rounded(logits, dtype), hp = rounded(probs, dtype);
    Tensor x = put_as(hx, dtype), p = put_as(hp, dtype);
    Tensor loss = zeros(rows, dtype), grad = zeros(rows * cols, dtype);
    softmax_xent(ord(x), st(x), dtype, x.data(), p.data(), loss.data(), grad.data(), rows, cols);
    std::vector<double> wl(static_cast<std::size_t>(rows)), wg(static_cast<std::size_t>(rows * cols));
    for (i64 r = 0; r < rows; ++r) {
      const double* row = &hx[static_cast<std::size_t>(r * cols)];
      const double* pr = &hp[static_cast<std::size_t>(r * cols)];
      double mx = -INFINITY, sum = 0, psum = 0, total = 0;
      for (i64 c = 0; c < cols; ++c) mx = std::max(mx, row[c]);
      for (i64 c = 0; c < cols; ++c) sum += std::exp(row[c] - mx);
      for (i64 c = 0; c < cols; ++c) {
        total -= pr[c] * (row[c] - mx - std::log(sum));
        psum += pr[c];
      }
      wl[static_cast<std::size_t>(r)] = total;
      for (i64 c = 0; c < cols; ++c) wg[static_cast<std::size_t>(r * cols + c)] = std::exp(row[c] - mx) / sum * psum - pr[c];
    }
    const double tol = dtype == DType::kFloat32 ? 2e-5 : 1e-12;
    expect_close(get(loss), rounded(wl, dtype), tol, "dense xent loss");
    expect_close(get(grad), rounded(wg, dtype), tol, "dense xent grad");
  }
}

// ---- Index ops -------------------------------------------------------------------------------

TEST_F(CudaKernelsTest, GatherGivesZeroRowsOutOfRange) {
  const i64 rows = 50, inner = 33;
  const auto params = uniform(rows * inner, -1, 1, 51);
  const std::vector<double> idx{3, 0, 49, 50, -1, 3, 17};
  for (DType index_dtype : {DType::kInt32, DType::kInt64}) {
    for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kUInt8}) {
      const auto hp = rounded(params, dtype);
      Tensor p = put_as(hp, dtype), ix = put_as(idx, index_dtype);
      const i64 num = static_cast<i64>(idx.size());
      Tensor out = zeros(num * inner, dtype);
      gather(ord(p), st(p), dtype, p.data(), rows, inner, index_dtype, ix.data(), num, out.data());
      std::vector<double> want;
      for (double r : idx)
        for (i64 c = 0; c < inner; ++c)
          want.push_back(r >= 0 && r < rows ? hp[static_cast<std::size_t>(static_cast<i64>(r) * inner + c)] : 0.0);
      EXPECT_EQ(get(out), want) << dtype_name(dtype);
    }
  }
}

// out[idx[j]] += updates[j] in index order, rounding after each addition (the CPU loop);
// integers wrap (uint8 modulo 256).
std::vector<double> scatter_ref(const std::vector<double>& out0, const std::vector<double>& upd,
                                const std::vector<double>& idx, i64 rows, i64 inner, DType dtype) {
  std::vector<double> out = out0;
  for (std::size_t j = 0; j < idx.size(); ++j) {
    const i64 r = static_cast<i64>(idx[j]);
    if (r < 0 || r >= rows) continue;
    for (i64 c = 0; c < inner; ++c) {
      auto& o = out[static_cast<std::size_t>(r * inner + c)];
      const double sum = o + upd[j * static_cast<std::size_t>(inner) + static_cast<std::size_t>(c)];
      if (dtype == DType::kUInt8) o = std::fmod(sum, 256.0);
      else if (is_integer(dtype)) o = sum;
      else o = rounded({sum}, dtype)[0];
    }
  }
  return out;
}

TEST_F(CudaKernelsTest, ScatterAddAtomicAndDeterministicMatchCpu) {
  const i64 rows = 40, inner = 300, num = 1000;  // many duplicates per row
  auto idx = integers(num, -2, static_cast<int>(rows + 1), 61);  // a few out of range: skipped
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kInt32, DType::kInt64, DType::kUInt8}) {
    const bool is_int = dtype == DType::kInt32 || dtype == DType::kInt64 || dtype == DType::kUInt8;
    const auto upd = rounded(is_int ? integers(num * inner, 0, 9, 62) : uniform(num * inner, -1, 1, 62), dtype);
    const auto out0 = rounded(is_int ? integers(rows * inner, 0, 9, 63) : uniform(rows * inner, -1, 1, 63), dtype);
    const auto want = scatter_ref(out0, upd, idx, rows, inner, dtype);
    for (DType index_dtype : {DType::kInt32, DType::kInt64}) {
      Tensor u = put_as(upd, dtype), ix = put_as(idx, index_dtype);
      for (bool deterministic : {false, true}) {
        Tensor out = put_as(out0, dtype);
        scatter_add(ord(out), st(out), dtype, u.data(), inner, index_dtype, ix.data(), num, out.data(), rows,
                    deterministic);
        // Deterministic: the same additions in the same order as the CPU, bitwise (16-bit floats
        // too). Atomic: any order, so float sums only agree up to rounding.
        const double tol = (deterministic || is_int) ? 0 : dtype == DType::kFloat16 ? 2e-2 : 1e-5;
        expect_close(get(out), want, tol,
                     std::string(dtype_name(dtype)) + (deterministic ? " deterministic" : " atomic") + " scatter_add");
      }
    }
  }
}

TEST_F(CudaKernelsTest, OneHot) {
  const std::vector<double> idx{0, 3, 5, -1, 2};
  Tensor ix = put_as(idx, DType::kInt64);
  for (DType dtype : {DType::kFloat32, DType::kInt32, DType::kBFloat16, DType::kBool}) {
    Tensor out = zeros(5 * 4, dtype);
    one_hot(ord(ix), st(ix), dtype, DType::kInt64, ix.data(), 5, 4, 1.0, dtype == DType::kBool ? 0.0 : -2.0,
            out.data());
    std::vector<double> want;
    for (double j : idx)
      for (int d = 0; d < 4; ++d) want.push_back(j == d ? 1.0 : (dtype == DType::kBool ? 0.0 : -2.0));
    EXPECT_EQ(get(out), want) << dtype_name(dtype);
  }
}

// ---- cuBLAS ----------------------------------------------------------------------------------

TEST_F(CudaKernelsTest, GemmMatchesCpuForEveryTransposeAndBroadcast) {
  const i64 batch = 3, m = 37, n = 45, k = 29;
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      for (bool broadcast_b : {false, true}) {
        const auto ha = rounded(uniform(batch * m * k, -1, 1, 71), dtype);
        const auto hb = rounded(uniform((broadcast_b ? 1 : batch) * k * n, -1, 1, 72), dtype);
        Tensor a = put_as(ha, dtype), b = put_as(hb, dtype);
        Tensor c = zeros(batch * m * n, dtype);
        gemm(c.device_context(), dtype, a.data(), m * k, b.data(), broadcast_b ? 0 : k * n, c.data(), batch, m, n, k,
             ta, tb);
        std::vector<double> want(static_cast<std::size_t>(batch * m * n));
        cpu::matmul(DType::kFloat64, ha.data(), m * k, hb.data(), broadcast_b ? 0 : k * n, want.data(), batch, m, n,
                    k, ta, tb);
        const double tol = dtype == DType::kFloat64 ? 1e-12 : dtype == DType::kFloat32 ? 1e-5 :
                           dtype == DType::kFloat16 ? 5e-3 : 3e-2;
        expect_close(get(c), want, tol,
                     std::string(dtype_name(dtype)) + " gemm trans " + std::to_string(t) + (broadcast_b ? " bcast" : ""));
      }
    }
  }
  // k == 0: zeros.
  Tensor a = zeros(1, DType::kFloat32), c = put<float>({1, 2, 3, 4, 5, 6});
  gemm(c.device_context(), DType::kFloat32, a.data(), 0, a.data(), 0, c.data(), 1, 2, 3, 0, false, false);
  EXPECT_EQ(get(c), std::vector<double>(6, 0.0));
}

// ---- cuDNN -----------------------------------------------------------------------------------

// Runs `body`, skipping the test if this build has no cuDNN (UnimplementedError by contract).
#define SKIP_WITHOUT_CUDNN(body)                                                  \
  try {                                                                           \
    body;                                                                         \
  } catch (const UnimplementedError& e) {                                         \
    GTEST_SKIP() << "no cuDNN in this build: " << e.what();                       \
  }

Conv2dGeometry conv_geometry(i64 n, i64 h, i64 w, i64 c, i64 kh, i64 kw, i64 oc, i64 s, i64 d, Padding p) {
  Conv2dGeometry g;
  g.n = n; g.in_h = h; g.in_w = w; g.in_c = c; g.k_h = kh; g.k_w = kw; g.out_c = oc;
  g.stride_h = g.stride_w = s;
  g.dilation_h = g.dilation_w = d;
  EXPECT_TRUE(compute_output_size(g, p));
  return g;
}

std::vector<Conv2dGeometry> conv_cases() {
  return {
      conv_geometry(2, 9, 11, 3, 3, 3, 4, 1, 1, Padding::kValid),  // no padding
      conv_geometry(2, 8, 10, 3, 3, 3, 5, 2, 1, Padding::kSame),   // asymmetric SAME (odd totals)
      conv_geometry(1, 7, 7, 4, 3, 3, 2, 1, 1, Padding::kSame),    // symmetric SAME
      conv_geometry(2, 12, 9, 2, 3, 2, 3, 1, 2, Padding::kSame),   // dilated, asymmetric in w
  };
}

TEST_F(CudaKernelsTest, ConvolutionsMatchCpu) {
  for (const Conv2dGeometry& g : conv_cases()) {
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      const auto hx = rounded(uniform(g.input_elements(), -1, 1, 81), dtype);
      const auto hw = rounded(uniform(g.filter_elements(), -1, 1, 82), dtype);
      const auto hdy = rounded(uniform(g.output_elements(), -1, 1, 83), dtype);
      Tensor x = put_as(hx, dtype), w = put_as(hw, dtype), dy = put_as(hdy, dtype);
      Tensor y = zeros(g.output_elements(), dtype), dx = zeros(g.input_elements(), dtype),
             dw = zeros(g.filter_elements(), dtype);
      SKIP_WITHOUT_CUDNN(conv2d_forward(x.device_context(), dtype, g, x.data(), w.data(), y.data()));
      conv2d_backward_data(x.device_context(), dtype, g, dy.data(), w.data(), dx.data());
      conv2d_backward_filter(x.device_context(), dtype, g, x.data(), dy.data(), dw.data());
      std::vector<double> wy(static_cast<std::size_t>(g.output_elements())), wdx(static_cast<std::size_t>(g.input_elements())),
          wdw(static_cast<std::size_t>(g.filter_elements()));
      cpu::conv2d_forward(DType::kFloat64, g, hx.data(), hw.data(), wy.data());
      cpu::conv2d_backward_data(DType::kFloat64, g, hdy.data(), hw.data(), wdx.data());
      cpu::conv2d_backward_filter(DType::kFloat64, g, hx.data(), hdy.data(), wdw.data());
      const double tol = dtype == DType::kFloat32 ? 2e-5 : 1e-11;
      const std::string what = std::string(dtype_name(dtype)) + " conv out " + std::to_string(g.out_h) + "x" +
                               std::to_string(g.out_w) + " pads " + std::to_string(g.pad_top) +
                               std::to_string(g.pad_bottom) + std::to_string(g.pad_left) + std::to_string(g.pad_right);
      expect_close(get(y), wy, tol, what + " forward");
      expect_close(get(dx), wdx, tol, what + " backward data");
      expect_close(get(dw), wdw, tol, what + " backward filter");
    }
  }
}

TEST_F(CudaKernelsTest, DeterministicConvolutionBackwardFilterIsBitwiseReproducible) {
  enable_op_determinism();
  const Conv2dGeometry g = conv_geometry(8, 16, 16, 8, 3, 3, 16, 1, 1, Padding::kSame);
  Tensor x = put_as(uniform(g.input_elements(), -1, 1, 91), DType::kFloat32);
  Tensor dy = put_as(uniform(g.output_elements(), -1, 1, 92), DType::kFloat32);
  Tensor dw1 = zeros(g.filter_elements(), DType::kFloat32), dw2 = zeros(g.filter_elements(), DType::kFloat32);
  SKIP_WITHOUT_CUDNN(conv2d_backward_filter(x.device_context(), DType::kFloat32, g, x.data(), dy.data(), dw1.data()));
  conv2d_backward_filter(x.device_context(), DType::kFloat32, g, x.data(), dy.data(), dw2.data());
  const auto a = dw1.to_vector<float>(), b = dw2.to_vector<float>();
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

TEST_F(CudaKernelsTest, PoolingMatchesCpu) {
  auto pool_geometry = [](i64 h, i64 w, i64 k, i64 s, Padding p) {
    Conv2dGeometry g;
    g.n = 2; g.in_h = h; g.in_w = w; g.in_c = 3; g.out_c = 3; g.k_h = k; g.k_w = k;
    g.stride_h = g.stride_w = s;
    EXPECT_TRUE(compute_output_size(g, p));
    return g;
  };
  const Conv2dGeometry cases[] = {
      pool_geometry(8, 8, 2, 2, Padding::kValid),
      pool_geometry(8, 10, 3, 2, Padding::kSame),   // asymmetric
      pool_geometry(7, 7, 3, 1, Padding::kSame),    // symmetric
      pool_geometry(9, 6, 2, 2, Padding::kSame),    // asymmetric in h only
  };
  for (const Conv2dGeometry& g : cases) {
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      for (PoolKind kind : {PoolKind::kMax, PoolKind::kAvg}) {
        const auto hx = rounded(uniform(g.input_elements(), -1, 1, 101), dtype);  // no ties
        const auto hdy = rounded(uniform(g.output_elements(), -1, 1, 102), dtype);
        Tensor x = put_as(hx, dtype), dy = put_as(hdy, dtype);
        Tensor y = zeros(g.output_elements(), dtype), dx = zeros(g.input_elements(), dtype);
        SKIP_WITHOUT_CUDNN(pool2d_forward(x.device_context(), kind, dtype, g, x.data(), y.data()));
        pool2d_backward(x.device_context(), kind, dtype, g, x.data(), y.data(), dy.data(), dx.data());
        std::vector<double> wy(static_cast<std::size_t>(g.output_elements())), wdx(static_cast<std::size_t>(g.input_elements()));
        cpu::pool2d_forward(kind, DType::kFloat64, g, hx.data(), wy.data());
        cpu::pool2d_backward(kind, DType::kFloat64, g, hx.data(), hdy.data(), wdx.data());
        const double tol = dtype == DType::kFloat32 ? 1e-6 : 1e-12;
        const std::string what = std::string(dtype_name(dtype)) + (kind == PoolKind::kMax ? " max" : " avg") +
                                 " pool pads " + std::to_string(g.pad_top) + std::to_string(g.pad_bottom) +
                                 std::to_string(g.pad_left) + std::to_string(g.pad_right);
        expect_close(get(y), wy, tol, what + " forward");
        expect_close(get(dx), wdx, tol, what + " backward");
      }
    }
  }
}

TEST_F(CudaKernelsTest, SoftmaxMatchesCpu) {
  const i64 rows = 13, cols = 257;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (bool log : {false, true}) {
      const auto hx = rounded(uniform(rows * cols, -5, 5, 111), dtype);
      const auto hdy = rounded(uniform(rows * cols, -1, 1, 112), dtype);
      Tensor x = put_as(hx, dtype), dy = put_as(hdy, dtype);
      Tensor y = zeros(rows * cols, dtype), dx = zeros(rows * cols, dtype);
      SKIP_WITHOUT_CUDNN(softmax_forward(x.device_context(), dtype, log, x.data(), y.data(), rows, cols));
      std::vector<double> wy(static_cast<std::size_t>(rows * cols)), wdx(wy.size());
      cpu::softmax_forward(DType::kFloat64, log, hx.data(), wy.data(), rows, cols);
      const double tol = dtype == DType::kFloat32 ? 2e-6 : 1e-12;
      expect_close(get(y), wy, tol, std::string(dtype_name(dtype)) + (log ? " log_softmax" : " softmax"));
      // Backward from the exact forward result, so both sides start from the same y.
      const auto hy = rounded(wy, dtype);
      Tensor ty = put_as(hy, dtype);
      softmax_backward(x.device_context(), dtype, log, ty.data(), dy.data(), dx.data(), rows, cols);
      cpu::softmax_backward(DType::kFloat64, log, hy.data(), hdy.data(), wdx.data(), rows, cols);
      expect_close(get(dx), wdx, dtype == DType::kFloat32 ? 1e-5 : 1e-12,
                   std::string(dtype_name(dtype)) + (log ? " log_softmax grad" : " softmax grad"));
    }
  }
}

TEST_F(CudaKernelsTest, BatchNormMatchesCpu) {
  const i64 rows = 96, channels = 7;
  const double eps = 1e-3;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const auto hx = rounded(uniform(rows * channels, -2, 3, 121), dtype);
    const auto hg = rounded(uniform(channels, 0.5, 1.5, 122), dtype);
    const auto hb = rounded(uniform(channels, -0.5, 0.5, 123), dtype);
    const auto hdy = rounded(uniform(rows * channels, -1, 1, 124), dtype);
    Tensor x = put_as(hx, dtype), gamma = put_as(hg, dtype), beta = put_as(hb, dtype), dy = put_as(hdy, dtype);
    Tensor y = zeros(rows * channels, dtype), mean = zeros(channels, dtype), var = zeros(channels, dtype);
    SKIP_WITHOUT_CUDNN(batch_norm_training(x.device_context(), dtype, x.data(), gamma.data(), beta.data(), y.data(),
                                           mean.data(), var.data(), rows, channels, eps));
    std::vector<double> wy(static_cast<std::size_t>(rows * channels)), wm(static_cast<std::size_t>(channels)), wv(wm.size());
    cpu::batch_norm_training(DType::kFloat64, hx.data(), hg.data(), hb.data(), wy.data(), wm.data(), wv.data(), rows,
                             channels, eps);
    const double tol = dtype == DType::kFloat32 ? 2e-5 : 1e-10;
    expect_close(get(y), wy, tol, std::string(dtype_name(dtype)) + " batch norm y");
    expect_close(get(mean), wm, tol, "batch mean");
    expect_close(get(var), wv, tol, "batch variance (biased)");

    // Inference and backward from the CPU's statistics (rounded to dtype), so both use the same.
    const auto hm = rounded(wm, dtype), hv = rounded(wv, dtype);
    Tensor tm = put_as(hm, dtype), tv = put_as(hv, dtype);
    Tensor yi = zeros(rows * channels, dtype);
    batch_norm_inference(x.device_context(), dtype, x.data(), gamma.data(), beta.data(), tm.data(), tv.data(),
                         yi.data(), rows, channels, eps);
    std::vector<double> wyi(wy.size());
    cpu::batch_norm_inference(DType::kFloat64, hx.data(), hg.data(), hb.data(), hm.data(), hv.data(), wyi.data(), rows,
                              channels, eps);
    expect_close(get(yi), wyi, tol, "batch norm inference");

    Tensor dx = zeros(rows * channels, dtype), dg = zeros(channels, dtype), db = zeros(channels, dtype);
    batch_norm_backward(x.device_context(), dtype, x.data(), dy.data(), gamma.data(), tm.data(), tv.data(), dx.data(),
                        dg.data(), db.data(), rows, channels, eps);
    std::vector<double> wdx(wy.size()), wdg(wm.size()), wdb(wm.size());
    cpu::batch_norm_backward(DType::kFloat64, hx.data(), hdy.data(), hg.data(), hm.data(), hv.data(), wdx.data(),
                             wdg.data(), wdb.data(), rows, channels, eps);
    const double gtol = dtype == DType::kFloat32 ? 1e-4 : 1e-9;
    expect_close(get(dx), wdx, gtol, "batch norm dx");
    expect_close(get(dg), wdg, gtol, "batch norm dgamma");
    expect_close(get(db), wdb, gtol, "batch norm dbeta");
  }
}

TEST_F(CudaKernelsTest, ActivationForward) {
  const i64 n = 5000;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const auto hx = rounded(uniform(n, -4, 4, 131), dtype);
    Tensor x = put_as(hx, dtype);
    for (UnaryOp op : {UnaryOp::kRelu, UnaryOp::kSigmoid, UnaryOp::kTanh}) {
      Tensor y = zeros(n, dtype);
      if (!activation_forward(x.device_context(), op, dtype, x.data(), y.data(), n))
        GTEST_SKIP() << "no cuDNN activation in this build";
      std::vector<double> want(hx.size());
      for (std::size_t i = 0; i < hx.size(); ++i) want[i] = unary_ref(op, hx[i]);
      expect_close(get(y), rounded(want, dtype), dtype == DType::kFloat32 ? 1e-6 : 1e-12,
                   std::string(dtype_name(dtype)) + " activation");
    }
    Tensor y = zeros(n, dtype);
    EXPECT_FALSE(activation_forward(x.device_context(), UnaryOp::kExp, dtype, x.data(), y.data(), n));
  }
  Tensor h = put_as(std::vector<double>(8, 1.0), DType::kFloat16);
  EXPECT_FALSE(activation_forward(h.device_context(), UnaryOp::kRelu, DType::kFloat16, h.data(), h.data(), 8));
}

#endif  // CHORUS_WITH_CUDA

}  // namespace
}  // namespace chorus::ops::cuda
