// Shared by the CUDA kernel tests (tests/ops/cuda_*_gpu_test.cc): a fixture that skips without a
// GPU, device tensors from host vectors, seeded inputs rounded to a dtype, strided layouts.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <chorus/core/dtype.h>
#include <chorus/core/error.h>
#include <chorus/core/gpu.h>
#include <chorus/core/runtime.h>
#include <chorus/core/tensor.h>

#ifdef CHORUS_WITH_CUDA
#include <chorus/ops/cpu/dnn.h>
#include <chorus/ops/cuda/kernels.h>
#include <chorus/ops/cuda/libraries.h>
#include <chorus/ops/determinism.h>

namespace chorus::ops::cuda::test {

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
inline Tensor put(const std::vector<T>& v) {
  return Tensor::from_vector<T>(v, Shape{static_cast<i64>(v.size())}, kGpu);
}
// Host doubles stored on the GPU as `dtype` (converted with core/dtype.h's rules).
inline Tensor put_as(const std::vector<double>& v, DType dtype) {
  std::vector<unsigned char> raw(v.size() * dtype_size(dtype));
  convert(v.data(), DType::kFloat64, raw.data(), dtype, v.size());
  return Tensor::from_host(raw.data(), Shape{static_cast<i64>(v.size())}, dtype, kGpu);
}
Tensor zeros(i64 n, DType dtype) { return Tensor::zeros(Shape{n}, dtype, kGpu); }
std::vector<double> get(const Tensor& t) { return t.to_vector<double>(); }
int ord(const Tensor& t) { return t.device_context().gpu_ordinal(); }
gpu::StreamHandle st(const Tensor& t) { return t.device_context().stream().native_handle(); }

inline std::vector<double> uniform(i64 n, double lo, double hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}
inline std::vector<double> integers(i64 n, int lo, int hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}
// Rounds host doubles through `dtype` (what the GPU actually reads).
inline std::vector<double> rounded(const std::vector<double>& v, DType dtype) {
  std::vector<unsigned char> raw(v.size() * dtype_size(dtype));
  convert(v.data(), DType::kFloat64, raw.data(), dtype, v.size());
  std::vector<double> out(v.size());
  convert(raw.data(), dtype, out.data(), DType::kFloat64, v.size());
  return out;
}

// |got - want| <= tol · max(1, |want|) elementwise; NaN must match NaN.
inline void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool ok = (std::isnan(want[i]) && std::isnan(got[i])) || (std::isinf(want[i]) && got[i] == want[i]) ||
                    std::fabs(got[i] - want[i]) <= tol * std::max(1.0, std::fabs(want[i]));
    if (!ok && reported++ < 5) ADD_FAILURE() << what << " [" << i << "]: got " << got[i] << ", want " << want[i];
  }
}

inline StridedLayout layout_of(std::vector<i64> dims, std::vector<std::vector<i64>> strides, std::vector<i64> offsets) {
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
inline i64 offset_of(const StridedLayout& l, int o, i64 i) {
  i64 off = l.offsets[o];
  for (int d = l.rank - 1; d >= 0; --d) {
    off += (i % l.dims[d]) * l.strides[o][d];
    i /= l.dims[d];
  }
  return off;
}

inline double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
inline double gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
inline double gelu_grad(double x) {
  return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
         x * std::exp(-0.5 * x * x) * 0.39894228040143267794;  // 1/sqrt(2 pi)
}

// The CPU value of a unary kind (reference of the unary kernel and of cuDNN's activations), for
// elements stored as `dtype`: only Softplus depends on it (TF's thresholds, ops/cpu/elementwise.cc:
// bfloat16's is -2.84375, so within [-3, 3] softplus(x) = x above 2.84375 and exp(x) below
// -2.84375; float32's and float64's lie outside the tests' ranges).
inline double unary_ref(UnaryOp op, double v, DType dtype = DType::kFloat64) {
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
    case UnaryOp::kSilu: return v * sigmoid(v);
    case UnaryOp::kLeakyRelu: return v > 0 ? v : 0.0;  // alpha 0: the launchers' default
    case UnaryOp::kElu: return v < 0 ? std::expm1(v) : v;
    case UnaryOp::kSoftplus: {
      const double threshold = dtype == DType::kBFloat16 ? -2.84375 : dtype == DType::kFloat64 ? -34.04 : -13.94;
      if (v > -threshold) return v;
      if (v < threshold) return std::exp(v);
      return std::log1p(std::exp(v));
    }
    case UnaryOp::kLogicalNot: return v != 0 ? 0 : 1;
  }
  return 0;
}

// Runs `body`, skipping the test if this build has no cuDNN (UnimplementedError by contract).
#define SKIP_WITHOUT_CUDNN(body)                            \
  try {                                                     \
    body;                                                   \
  } catch (const UnimplementedError& e) {                   \
    GTEST_SKIP() << "no cuDNN in this build: " << e.what(); \
  }

// A convolution geometry with `p`'s padding (computed), stride s and dilation d on both axes.
inline Conv2dGeometry conv_geometry(i64 n, i64 h, i64 w, i64 c, i64 kh, i64 kw, i64 oc, i64 s, i64 d, Padding p) {
  Conv2dGeometry g;
  g.n = n;
  g.in_h = h;
  g.in_w = w;
  g.in_c = c;
  g.k_h = kh;
  g.k_w = kw;
  g.out_c = oc;
  g.stride_h = g.stride_w = s;
  g.dilation_h = g.dilation_w = d;
  EXPECT_TRUE(compute_output_size(g, p));
  return g;
}

}  // namespace chorus::ops::cuda::test
#endif  // CHORUS_WITH_CUDA
