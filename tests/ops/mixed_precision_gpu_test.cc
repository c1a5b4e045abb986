// float16 and bfloat16 on the GPU libraries (issue 16): cuBLAS gemm with float32 accumulation,
// cuDNN convolutions (tensor-core engines first), pooling and softmax, against a float64 CPU
// reference computed from the same 16-bit-rounded inputs. The tolerance is the output's own
// rounding (2^-11 float16, 2^-8 bfloat16, twice for slack) plus float32 accumulation, relative to
// max(1, |want|) (see expect_close). Skips without a GPU; never run on a machine without one.
#include "tests/ops/cuda_test_util.h"

namespace chorus::ops::cuda {
namespace {

#ifndef CHORUS_WITH_CUDA

TEST(CudaKernelsTest, NeedsCuda) { GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason(); }

#else

using namespace test;  // NOLINT

constexpr DType k16[] = {DType::kFloat16, DType::kBFloat16};

double tol16(DType dtype) { return dtype == DType::kFloat16 ? 2 * std::ldexp(1.0, -11) : 2 * std::ldexp(1.0, -8); }

TEST_F(CudaKernelsTest, SixteenBitGemmAccumulatesInFloat32) {
  const i64 m = 33, n = 70, k = 300;  // k large enough that 16-bit accumulation would be far off
  for (DType dtype : k16) {
    const auto ha = rounded(uniform(m * k, -1, 1, 1), dtype), hb = rounded(uniform(k * n, -1, 1, 2), dtype);
    Tensor a = put_as(ha, dtype), b = put_as(hb, dtype), c = zeros(m * n, dtype);
    gemm(a.device_context(), dtype, a.data(), 0, b.data(), 0, c.data(), 1, m, n, k, false, false);
    std::vector<double> want(static_cast<std::size_t>(m * n));
    cpu::matmul(DType::kFloat64, ha.data(), 0, hb.data(), 0, want.data(), 1, m, n, k, false, false);
    expect_close(get(c), rounded(want, dtype), tol16(dtype), std::string(dtype_name(dtype)) + " gemm");
  }
}

TEST_F(CudaKernelsTest, SixteenBitConvolutionsMatchTheFloat64Reference) {
  const Conv2dGeometry cases[] = {
      conv_geometry(4, 12, 12, 16, 3, 3, 32, 1, 1, Padding::kSame),  // tensor-core friendly
      conv_geometry(2, 9, 11, 3, 3, 3, 5, 2, 1, Padding::kSame),     // asymmetric, odd channels
      conv_geometry(2, 8, 8, 8, 1, 1, 8, 1, 1, Padding::kValid)};
  for (const Conv2dGeometry& g : cases) {
    for (DType dtype : k16) {
      const auto hx = rounded(uniform(g.input_elements(), -1, 1, 11), dtype);
      const auto hw = rounded(uniform(g.filter_elements(), -1, 1, 12), dtype);
      const auto hdy = rounded(uniform(g.output_elements(), -1, 1, 13), dtype);
      Tensor x = put_as(hx, dtype), w = put_as(hw, dtype), dy = put_as(hdy, dtype);
      Tensor y = zeros(g.output_elements(), dtype), dx = zeros(g.input_elements(), dtype),
             dw = zeros(g.filter_elements(), dtype);
      SKIP_WITHOUT_CUDNN(conv2d_forward(x.device_context(), dtype, g, x.data(), w.data(), y.data()));
      conv2d_backward_data(x.device_context(), dtype, g, dy.data(), w.data(), dx.data());
      conv2d_backward_filter(x.device_context(), dtype, g, x.data(), dy.data(), dw.data());
      std::vector<double> wy(static_cast<std::size_t>(g.output_elements())),
          wdx(static_cast<std::size_t>(g.input_elements())), wdw(static_cast<std::size_t>(g.filter_elements()));
      cpu::conv2d_forward(DType::kFloat64, g, hx.data(), hw.data(), wy.data());
      cpu::conv2d_backward_data(DType::kFloat64, g, hdy.data(), hw.data(), wdx.data());
      cpu::conv2d_backward_filter(DType::kFloat64, g, hx.data(), hdy.data(), wdw.data());
      const std::string what = std::string(dtype_name(dtype)) + " conv " + std::to_string(g.in_c) + "->" +
                               std::to_string(g.out_c) + " stride " + std::to_string(g.stride_h);
      expect_close(get(y), rounded(wy, dtype), tol16(dtype), what + " forward");
      expect_close(get(dx), rounded(wdx, dtype), tol16(dtype), what + " backward data");
      expect_close(get(dw), rounded(wdw, dtype), tol16(dtype), what + " backward filter");
    }
  }
}

TEST_F(CudaKernelsTest, SixteenBitPoolingAndSoftmaxMatchTheFloat64Reference) {
  // SAME with stride 2 on an odd size: asymmetric padding, the -inf fill and the exact average kernel.
  const Conv2dGeometry g = [] {
    Conv2dGeometry p;
    p.n = 2;
    p.in_h = 7;
    p.in_w = 9;
    p.in_c = p.out_c = 3;
    p.k_h = p.k_w = 2;
    p.stride_h = p.stride_w = 2;
    EXPECT_TRUE(compute_output_size(p, Padding::kSame));
    return p;
  }();
  for (DType dtype : k16) {
    for (PoolKind kind : {PoolKind::kMax, PoolKind::kAvg}) {
      const auto hx = rounded(uniform(g.input_elements(), -3, 3, 21), dtype);
      const auto hdy = rounded(uniform(g.output_elements(), -1, 1, 22), dtype);
      Tensor x = put_as(hx, dtype), dy = put_as(hdy, dtype);
      Tensor y = zeros(g.output_elements(), dtype), dx = zeros(g.input_elements(), dtype);
      SKIP_WITHOUT_CUDNN(pool2d_forward(x.device_context(), kind, dtype, g, x.data(), y.data()));
      pool2d_backward(x.device_context(), kind, dtype, g, x.data(), y.data(), dy.data(), dx.data());
      std::vector<double> wy(static_cast<std::size_t>(g.output_elements())),
          wdx(static_cast<std::size_t>(g.input_elements()));
      cpu::pool2d_forward(kind, DType::kFloat64, g, hx.data(), wy.data());
      cpu::pool2d_backward(kind, DType::kFloat64, g, hx.data(), hdy.data(), wdx.data());
      const std::string what = std::string(dtype_name(dtype)) + (kind == PoolKind::kMax ? " max" : " avg") + " pool";
      expect_close(get(y), rounded(wy, dtype), tol16(dtype), what + " forward");
      expect_close(get(dx), rounded(wdx, dtype), tol16(dtype), what + " backward");
    }
    const i64 rows = 5, cols = 40;
    const auto hl = rounded(uniform(rows * cols, -4, 4, 31), dtype);
    Tensor logits = put_as(hl, dtype), p = zeros(rows * cols, dtype);
    SKIP_WITHOUT_CUDNN(softmax_forward(logits.device_context(), dtype, false, logits.data(), p.data(), rows, cols));
    std::vector<double> wp(static_cast<std::size_t>(rows * cols));
    cpu::softmax_forward(DType::kFloat64, false, hl.data(), wp.data(), rows, cols);
    expect_close(get(p), rounded(wp, dtype), tol16(dtype), std::string(dtype_name(dtype)) + " softmax");
  }
}

TEST_F(CudaKernelsTest, SixteenBitBatchNormIsRefusedWithTheWayOut) {
  for (DType dtype : k16) {
    Tensor x = zeros(8, dtype), g = zeros(2, dtype), y = zeros(8, dtype);
    try {
      batch_norm_training(x.device_context(), dtype, x.data(), g.data(), g.data(), y.data(), g.data(), g.data(), 4, 2,
                          1e-3);
      ADD_FAILURE() << "no error for " << dtype_name(dtype);
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("cast to float32"), std::string::npos) << e.what();
    } catch (const UnimplementedError& e) {
      GTEST_SKIP() << "no cuDNN in this build: " << e.what();
    }
  }
}

#endif  // CHORUS_WITH_CUDA

}  // namespace
}  // namespace chorus::ops::cuda
