// The CUDA reductions, arg-max, fused cross-entropy losses and index kernels (gather, scatter-add, one-hot) against CPU
// results on seeded random inputs (see tests/ops/cuda_test_util.h). Every test skips with the CUDA runtime's reason on
// a machine without a usable GPU.
#include "tests/ops/cuda_test_util.h"

namespace chorus::ops::cuda {
namespace {

#ifndef CHORUS_WITH_CUDA

TEST(CudaKernelsTest, NeedsCuda) { GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason(); }

#else

using namespace test;  // NOLINT

// ---- Reductions ------------------------------------------------------------------------------

std::vector<double> reduce_ref(ReduceKind kind, const std::vector<double>& x, i64 outer, i64 r, i64 inner) {
  std::vector<double> y(static_cast<std::size_t>(outer * inner));
  for (i64 o = 0; o < outer; ++o)
    for (i64 i = 0; i < inner; ++i) {
      double a = kind == ReduceKind::kProd  ? 1
                 : kind == ReduceKind::kMax ? -INFINITY
                 : kind == ReduceKind::kMin ? INFINITY
                                            : 0;
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
  struct Case {
    i64 outer, r, inner;
  };
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
        if (is_int && c.r == 0 && kind == ReduceKind::kMax)
          for (auto& w : want) w = std::numeric_limits<std::int32_t>::lowest();
        if (is_int && c.r == 0 && kind == ReduceKind::kMin)
          for (auto& w : want) w = std::numeric_limits<std::int32_t>::max();
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

TEST_F(CudaKernelsTest, ReduceSplitsLongColumnsOverManyBlocks) {
  struct Case {
    i64 outer, r, inner;
  };
  // A bias gradient's [N*H*W, C]; a long vector; inner not a multiple of the tile; few rows.
  const Case cases[] = {{1, 50000, 32}, {1, 200000, 1}, {2, 9000, 70}, {3, 5000, 1}, {1, 4100, 5}};
  EXPECT_EQ(reduce_workspace_bytes(7, 1000, 1), 0) << "short rows: no split";
  EXPECT_EQ(reduce_workspace_bytes(1, 4095, 32), 0) << "r below the split's threshold";
  EXPECT_EQ(reduce_workspace_bytes(512, 100000, 1), 0) << "enough outputs to fill the GPU";
  const ReduceKind kinds[] = {ReduceKind::kSum, ReduceKind::kMean, ReduceKind::kMax, ReduceKind::kMin,
                              ReduceKind::kProd};
  for (const Case& c : cases) {
    const std::int64_t ws_bytes = reduce_workspace_bytes(c.outer, c.r, c.inner);
    ASSERT_GT(ws_bytes, 0) << c.outer << "," << c.r << "," << c.inner;
    ASSERT_EQ(ws_bytes % (8 * c.outer * c.inner), 0);
    ASSERT_LE(ws_bytes / 8, c.outer * c.r * c.inner / 512) << "the workspace stays small beside x";
    Tensor ws = zeros(ws_bytes / 8, DType::kInt64);
    const i64 n = c.outer * c.r * c.inner;
    for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt32}) {
      const bool is_int = dtype == DType::kInt32;
      for (ReduceKind kind : kinds) {
        auto host = kind == ReduceKind::kProd ? (is_int ? integers(n, 1, 1, 9) : uniform(n, 0.99999, 1.00001, 9))
                                              : (is_int ? integers(n, -100, 100, 9) : uniform(n, -1, 1, 9));
        host = rounded(host, dtype);
        Tensor x = put_as(host, dtype);
        Tensor split = zeros(c.outer * c.inner, dtype), again = zeros(c.outer * c.inner, dtype),
               whole = zeros(c.outer * c.inner, dtype);
        reduce(ord(x), st(x), kind, dtype, x.data(), split.data(), c.outer, c.r, c.inner, ws.data());
        reduce(ord(x), st(x), kind, dtype, x.data(), again.data(), c.outer, c.r, c.inner, ws.data());
        reduce(ord(x), st(x), kind, dtype, x.data(), whole.data(), c.outer, c.r, c.inner);
        auto want = reduce_ref(kind, host, c.outer, c.r, c.inner);
        if (is_int && kind == ReduceKind::kMean)
          for (auto& w : want) w = std::trunc(w);
        const std::string what = std::string(dtype_name(dtype)) + " reduce " + std::to_string(static_cast<int>(kind)) +
                                 " [" + std::to_string(c.outer) + "," + std::to_string(c.r) + "," +
                                 std::to_string(c.inner) + "]";
        // Sums accumulate in double on both paths: the stored results differ by the storage
        // type's rounding at most.
        const double tol = dtype == DType::kBFloat16 ? 1e-2 : dtype == DType::kFloat32 ? 1e-6 : is_int ? 0 : 1e-12;
        expect_close(get(split), rounded(want, dtype), tol, what + " (split)");
        expect_close(get(split), get(whole), tol, what + " (split against one block per column)");
        EXPECT_EQ(get(split), get(again)) << what << ": the split is bitwise reproducible";
      }
    }
  }
}

TEST_F(CudaKernelsTest, ArgmaxTakesTheFirstExtreme) {
  // Ties (integers in a small range) make "first" matter; shapes cover the three kernels.
  struct Case {
    i64 outer, r, inner;
  };
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
  // NaN never wins, at index 0 too (TF's rule, the CPU kernel's: from index 0 and the lowest
  // value, strictly greater wins); a row of NaN only gives index 0.
  Tensor x = put<float>({1, NAN, 3, 2, /**/ NAN, 5, 6, 7, /**/ NAN, NAN, NAN, NAN});
  Tensor y = zeros(3, DType::kInt64);
  argmax(ord(x), st(x), false, DType::kFloat32, x.data(), static_cast<std::int64_t*>(y.data()), 3, 4, 1);
  EXPECT_EQ(y.to_vector<std::int64_t>(), (std::vector<std::int64_t>{2, 3, 0}));
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
      for (i64 c = 0; c < cols; ++c)
        wg[static_cast<std::size_t>(r * cols + c)] = std::exp(row[c] - mx) / sum * psum - pr[c];
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
      if (dtype == DType::kUInt8)
        o = std::fmod(sum, 256.0);
      else if (is_integer(dtype))
        o = sum;
      else
        o = rounded({sum}, dtype)[0];
    }
  }
  return out;
}

TEST_F(CudaKernelsTest, ScatterAddAtomicAndDeterministicMatchCpu) {
  const i64 rows = 40, inner = 300, num = 1000;                  // many duplicates per row
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

#endif  // CHORUS_WITH_CUDA

}  // namespace
}  // namespace chorus::ops::cuda
