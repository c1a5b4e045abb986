// The elementwise CUDA kernels (unary, binary with broadcasting, where, cast, strided copy) against CPU results on
// seeded random inputs (see tests/ops/cuda_test_util.h). Every test skips with the CUDA runtime's reason on a machine
// without a usable GPU.
#include "tests/ops/cuda_test_util.h"

namespace chorus::ops::cuda {
namespace {

#ifndef CHORUS_WITH_CUDA

TEST(CudaKernelsTest, NeedsCuda) { GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason(); }

#else

using namespace test;  // NOLINT

// ---- Elementwise -----------------------------------------------------------------------------

TEST_F(CudaKernelsTest, UnaryFloatOpsMatchCpu) {
  const UnaryOp ops[] = {
      UnaryOp::kNeg,  UnaryOp::kExp,  UnaryOp::kLog,        UnaryOp::kSqrt, UnaryOp::kRsqrt,   UnaryOp::kSquare,
      UnaryOp::kAbs,  UnaryOp::kSign, UnaryOp::kReciprocal, UnaryOp::kRelu, UnaryOp::kSigmoid, UnaryOp::kTanh,
      UnaryOp::kGelu, UnaryOp::kSilu, UnaryOp::kLeakyRelu,  UnaryOp::kElu,  UnaryOp::kSoftplus};
  const struct {
    DType dtype;
    double tol;
  } types[] = {{DType::kFloat32, 1e-5}, {DType::kFloat64, 1e-12}, {DType::kFloat16, 2e-3}, {DType::kBFloat16, 1.6e-2}};
  const i64 n = 3001;
  for (const auto& t : types) {
    for (UnaryOp op : ops) {
      const bool positive = op == UnaryOp::kLog || op == UnaryOp::kSqrt || op == UnaryOp::kRsqrt;
      const auto host = rounded(uniform(n, positive ? 0.1 : -3, 3, 11), t.dtype);
      Tensor x = put_as(host, t.dtype);
      Tensor y = zeros(n, t.dtype);
      unary(ord(x), st(x), op, t.dtype, x.data(), y.data(), n);
      std::vector<double> want(host.size());
      for (std::size_t i = 0; i < host.size(); ++i) want[i] = unary_ref(op, host[i], t.dtype);
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
    case BinaryOp::kSiluGrad: return x * sigmoid(y) * (1 + y * (1 - sigmoid(y)));
    case BinaryOp::kLeakyReluGrad: return y > 0 ? x : 0;  // alpha 0: the launchers' default
    case BinaryOp::kEluGrad: return y < 0 ? x * (y + 1) : x;
    case BinaryOp::kSoftplusGrad: return x / (std::exp(-y) + 1);
    case BinaryOp::kSqrtGrad: return x == 0 ? 0 : x * 0.5 / y;
    case BinaryOp::kRsqrtGrad: return x == 0 ? 0 : -0.5 * x * (y * y * y);
    case BinaryOp::kReciprocalGrad: return x == 0 ? 0 : -x * (y * y);
  }
  return 0;
}

TEST_F(CudaKernelsTest, BinaryBroadcastAndStridedMatchCpu) {
  // a: [3, 1, 5] broadcast along dim 1; b: [4, 5] stored transposed ([5, 4]) at offset 2,
  // broadcast along dim 0. Output [3, 4, 5].
  const StridedLayout l = layout_of({3, 4, 5}, {{5, 0, 1}, {0, 1, 4}}, {0, 2});
  const i64 n = l.num_elements();
  const BinaryOp ops[] = {
      BinaryOp::kAdd,           BinaryOp::kSub,           BinaryOp::kMul,          BinaryOp::kDiv,
      BinaryOp::kPow,           BinaryOp::kMaximum,       BinaryOp::kMinimum,      BinaryOp::kEqual,
      BinaryOp::kNotEqual,      BinaryOp::kLess,          BinaryOp::kLessEqual,    BinaryOp::kGreater,
      BinaryOp::kGreaterEqual,  BinaryOp::kLogicalAnd,    BinaryOp::kLogicalOr,    BinaryOp::kReluGrad,
      BinaryOp::kSigmoidGrad,   BinaryOp::kTanhGrad,      BinaryOp::kGeluGrad,     BinaryOp::kSiluGrad,
      BinaryOp::kLeakyReluGrad, BinaryOp::kEluGrad,       BinaryOp::kSoftplusGrad, BinaryOp::kSqrtGrad,
      BinaryOp::kRsqrtGrad,     BinaryOp::kReciprocalGrad};
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
        want[static_cast<std::size_t>(i)] = binary_ref(op, ha[static_cast<std::size_t>(offset_of(l, 0, i))],
                                                       hb[static_cast<std::size_t>(offset_of(l, 1, i))]);
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
  for (int i = 0; i < 12; ++i)
    want[static_cast<std::size_t>(i)] = (i % 2 == 0) ? hx[static_cast<std::size_t>(i)] : 42.0;
  EXPECT_EQ(get(out), want);
}

TEST_F(CudaKernelsTest, CastFollowsCoreConversionRules) {
  const std::vector<double> src{
      0.0,     -0.0,    1.5,  -1.5,     2.5,  300.7, -300.7, 1e10, -1e10, kNaN, std::numeric_limits<double>::infinity(),
      65504.0, 65520.0, 1e-8, 3.999999, 255.9};
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
      expect_close(gv, wv, 0,
                   std::string("cast ") + std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)));
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

#endif  // CHORUS_WITH_CUDA

}  // namespace
}  // namespace chorus::ops::cuda
