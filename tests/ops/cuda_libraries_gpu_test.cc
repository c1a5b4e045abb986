// The cuBLAS and cuDNN wrappers (ops/cuda/libraries.h), against ops/cpu/dnn.h in float64, against CPU results on seeded
// random inputs (see tests/ops/cuda_test_util.h). Every test skips with the CUDA runtime's reason on a machine without
// a usable GPU.
#include "tests/ops/cuda_test_util.h"

#include <chorus/ops/nn.h>
#include <chorus/ops/tape.h>

namespace chorus::ops::cuda {
namespace {

#ifndef CHORUS_WITH_CUDA

TEST(CudaKernelsTest, NeedsCuda) { GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason(); }

#else

using namespace test;  // NOLINT

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
        cpu::matmul(DType::kFloat64, ha.data(), m * k, hb.data(), broadcast_b ? 0 : k * n, want.data(), batch, m, n, k,
                    ta, tb);
        const double tol = dtype == DType::kFloat64   ? 1e-12
                           : dtype == DType::kFloat32 ? 1e-5
                           : dtype == DType::kFloat16 ? 5e-3
                                                      : 3e-2;
        expect_close(
            get(c), want, tol,
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

std::vector<Conv2dGeometry> conv_cases() {
  return {
      conv_geometry(2, 9, 11, 3, 3, 3, 4, 1, 1, Padding::kValid),  // no padding
      conv_geometry(2, 8, 10, 3, 3, 3, 5, 2, 1, Padding::kSame),   // asymmetric SAME (odd totals)
      conv_geometry(1, 7, 7, 4, 3, 3, 2, 1, 1, Padding::kSame),    // symmetric SAME
      conv_geometry(2, 12, 9, 2, 3, 2, 3, 1, 2, Padding::kSame),   // dilated, asymmetric in w
  };
}

// The three directions of a convolution in float64 on the CPU: y, dx and dw.
struct ConvReference {
  std::vector<double> y, dx, dw;
};
ConvReference conv_reference(const Conv2dGeometry& g, const std::vector<double>& x, const std::vector<double>& w,
                             const std::vector<double>& dy) {
  ConvReference r{std::vector<double>(static_cast<std::size_t>(g.output_elements())),
                  std::vector<double>(static_cast<std::size_t>(g.input_elements())),
                  std::vector<double>(static_cast<std::size_t>(g.filter_elements()))};
  cpu::conv2d_forward(DType::kFloat64, g, x.data(), w.data(), r.y.data());
  cpu::conv2d_backward_data(DType::kFloat64, g, dy.data(), w.data(), r.dx.data());
  cpu::conv2d_backward_filter(DType::kFloat64, g, x.data(), dy.data(), r.dw.data());
  return r;
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
      const ConvReference want = conv_reference(g, hx, hw, hdy);
      const double tol = dtype == DType::kFloat32 ? 2e-5 : 1e-11;
      const std::string what = std::string(dtype_name(dtype)) + " conv out " + std::to_string(g.out_h) + "x" +
                               std::to_string(g.out_w) + " pads " + std::to_string(g.pad_top) +
                               std::to_string(g.pad_bottom) + std::to_string(g.pad_left) + std::to_string(g.pad_right);
      expect_close(get(y), want.y, tol, what + " forward");
      expect_close(get(dx), want.dx, tol, what + " backward data");
      expect_close(get(dw), want.dw, tol, what + " backward filter");
    }
  }
}

// cudnnConvolutionBiasActivationForward against the CPU's float64 conv + bias (+ relu). float32
// with relu must fuse (cuDNN's documented FLOAT_CONFIG); the other cases may be refused, and then
// the op composes the three kernels (checked below on the op).
TEST_F(CudaKernelsTest, FusedConvolutionBiasActivationMatchesCpu) {
  for (const Conv2dGeometry& g : conv_cases()) {
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      for (bool relu : {true, false}) {
        const auto hx = rounded(uniform(g.input_elements(), -1, 1, 84), dtype);
        const auto hw = rounded(uniform(g.filter_elements(), -1, 1, 85), dtype);
        const auto hb = rounded(uniform(g.out_c, -1, 1, 86), dtype);
        Tensor x = put_as(hx, dtype), w = put_as(hw, dtype), b = put_as(hb, dtype);
        Tensor y = zeros(g.output_elements(), dtype);
        bool fused = false;
        SKIP_WITHOUT_CUDNN(fused = conv2d_bias_activation_forward(x.device_context(), dtype, g, x.data(), w.data(),
                                                                  b.data(), relu, y.data()));
        const std::string what = std::string(dtype_name(dtype)) + (relu ? " relu" : " identity") + " conv out " +
                                 std::to_string(g.out_h) + "x" + std::to_string(g.out_w);
        if (dtype == DType::kFloat32 && relu) {
          EXPECT_TRUE(fused) << what << ": cuDNN refused the fused forward";
        }
        if (!fused) {
          RecordProperty("refused " + what, "composed");
          continue;
        }
        std::vector<double> want(static_cast<std::size_t>(g.output_elements()));
        cpu::conv2d_forward(DType::kFloat64, g, hx.data(), hw.data(), want.data());
        for (std::size_t i = 0; i < want.size(); ++i) {
          want[i] += hb[i % static_cast<std::size_t>(g.out_c)];
          if (relu) want[i] = std::max(want[i], 0.0);
        }
        expect_close(get(y), want, dtype == DType::kFloat32 ? 2e-5 : 1e-11, what);
      }
    }
  }
}

// The plan a shape's first call keeps (cudnn_conv.cc) serves its later calls: new buffers at other
// addresses, with other values, through all three directions and the fused forward in between
// (which shares the plain forward's plan), each call still matching the CPU.
TEST_F(CudaKernelsTest, ConvolutionPlansServeLaterCallsOfTheSameShape) {
  const DType dtype = DType::kFloat32;
  for (const Conv2dGeometry& g : conv_cases()) {
    for (unsigned round = 0; round < 3; ++round) {
      const unsigned seed = 90 + 4 * round;
      const auto hx = rounded(uniform(g.input_elements(), -1, 1, seed), dtype);
      const auto hw = rounded(uniform(g.filter_elements(), -1, 1, seed + 1), dtype);
      const auto hdy = rounded(uniform(g.output_elements(), -1, 1, seed + 2), dtype);
      const auto hb = rounded(uniform(g.out_c, -1, 1, seed + 3), dtype);
      Tensor pad = zeros(1 + 97 * round, dtype);  // moves the buffers below to other addresses
      Tensor x = put_as(hx, dtype), w = put_as(hw, dtype), dy = put_as(hdy, dtype), b = put_as(hb, dtype);
      Tensor y = zeros(g.output_elements(), dtype), fy = zeros(g.output_elements(), dtype),
             dx = zeros(g.input_elements(), dtype), dw = zeros(g.filter_elements(), dtype);
      SKIP_WITHOUT_CUDNN(conv2d_forward(x.device_context(), dtype, g, x.data(), w.data(), y.data()));
      const bool fused =
          conv2d_bias_activation_forward(x.device_context(), dtype, g, x.data(), w.data(), b.data(), true, fy.data());
      conv2d_backward_data(x.device_context(), dtype, g, dy.data(), w.data(), dx.data());
      conv2d_backward_filter(x.device_context(), dtype, g, x.data(), dy.data(), dw.data());
      const ConvReference want = conv_reference(g, hx, hw, hdy);
      const std::string what = "round " + std::to_string(round) + " conv out " + std::to_string(g.out_h) + "x" +
                               std::to_string(g.out_w) + " pads " + std::to_string(g.pad_top) +
                               std::to_string(g.pad_bottom) + std::to_string(g.pad_left) + std::to_string(g.pad_right);
      expect_close(get(y), want.y, 2e-5, what + " forward");
      expect_close(get(dx), want.dx, 2e-5, what + " backward data");
      expect_close(get(dw), want.dw, 2e-5, what + " backward filter");
      EXPECT_TRUE(fused) << what << ": cuDNN refused the fused float32 relu forward";
      if (fused) {
        std::vector<double> fused_want = want.y;
        for (std::size_t i = 0; i < fused_want.size(); ++i)
          fused_want[i] = std::max(fused_want[i] + hb[i % static_cast<std::size_t>(g.out_c)], 0.0);
        expect_close(get(fy), fused_want, 2e-5, what + " fused forward");
      }
    }
  }
}

// ops::fused_conv2d on the GPU (fused or composed) against the same op on the CPU: the output and
// the three gradients.
TEST_F(CudaKernelsTest, FusedConv2dOpMatchesCpuWithGradients) {
  const Shape xs{2, 9, 11, 3}, ws{3, 3, 3, 4};
  const auto hx = uniform(xs.num_elements(), -1, 1, 87), hw = uniform(ws.num_elements(), -1, 1, 88),
             hb = uniform(4, -0.5, 0.5, 89), hdy = uniform(2 * 9 * 11 * 4, -1, 1, 90);
  for (auto act : {FusedActivation::kRelu, FusedActivation::kNone}) {
    std::vector<std::vector<double> > results[2];
    for (const char* device : {"/cpu:0", kGpu}) {
      const auto f32 = [&](const std::vector<double>& v, const Shape& shape) {
        return Tensor::from_vector<float>(std::vector<float>(v.begin(), v.end()), shape, device);
      };
      Tensor x = f32(hx, xs), w = f32(hw, ws), b = f32(hb, Shape{4}), dy = f32(hdy, Shape{2, 9, 11, 4});
      GradientTape tape;
      tape.watch(x);
      tape.watch(w);
      tape.watch(b);
      Tensor y = fused_conv2d(x, w, b, act, {{1, 1}, Padding::kSame, {1, 1}});
      const std::vector<Tensor> g = tape.gradient(y, {x, w, b}, dy);
      auto& r = results[std::string(device) == kGpu ? 1 : 0];
      for (const Tensor& t : {y, g[0], g[1], g[2]}) r.push_back(t.to_vector<double>());
    }
    const char* names[] = {"y", "dx", "dw", "db"};
    for (int i = 0; i < 4; ++i)
      expect_close(results[1][static_cast<std::size_t>(i)], results[0][static_cast<std::size_t>(i)], 1e-4,
                   std::string(act == FusedActivation::kRelu ? "relu " : "identity ") + names[i]);
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
    g.n = 2;
    g.in_h = h;
    g.in_w = w;
    g.in_c = 3;
    g.out_c = 3;
    g.k_h = k;
    g.k_w = k;
    g.stride_h = g.stride_w = s;
    EXPECT_TRUE(compute_output_size(g, p));
    return g;
  };
  const Conv2dGeometry cases[] = {
      pool_geometry(8, 8, 2, 2, Padding::kValid), pool_geometry(8, 10, 3, 2, Padding::kSame),  // asymmetric
      pool_geometry(7, 7, 3, 1, Padding::kSame),                                               // symmetric
      pool_geometry(9, 6, 2, 2, Padding::kSame),                                               // asymmetric in h only
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
        std::vector<double> wy(static_cast<std::size_t>(g.output_elements())),
            wdx(static_cast<std::size_t>(g.input_elements()));
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
    std::vector<double> wy(static_cast<std::size_t>(rows * channels)), wm(static_cast<std::size_t>(channels)),
        wv(wm.size());
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
