// Grouped, depthwise and 1-D convolutions on the GPU (cuDNN with cudnnSetConvolutionGroupCount)
// against the same ops on the CPU: outputs and both gradients, float64 / float32 / bfloat16, the
// fused convolution + bias + relu with groups, and the deterministic algorithm choice. Every test
// skips with the CUDA runtime's reason on a machine without a usable GPU.
#include "tests/ops/cuda_test_util.h"

#include <functional>

#include <chorus/ops/ops.h>

namespace chorus::ops::cuda {
namespace {

#ifndef CHORUS_WITH_CUDA

TEST(ConvVariantsGpuTest, NeedsCuda) { GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason(); }

#else

using namespace test;  // NOLINT
using Op = std::function<Tensor(const Tensor&, const Tensor&)>;

struct Variant {
  const char* name;
  Shape x, w;
  Op f;
};

std::vector<Variant> variants() {
  const Conv2dOptions same{{1, 1}, Padding::kSame};
  const Conv2dOptions strided{{2, 1}, Padding::kSame};
  const Conv2dOptions dilated{{1, 1}, Padding::kSame, {2, 2}, 4};
  return {
      {"grouped2 valid", {2, 9, 8, 8}, {3, 3, 4, 6}, [](const Tensor& x, const Tensor& w) { return conv2d(x, w); }},
      {"grouped3 stride 2x1 asymmetric SAME",
       {2, 8, 7, 6},
       {3, 3, 2, 9},
       [strided](const Tensor& x, const Tensor& w) { return conv2d(x, w, strided); }},
      {"grouped4 dilated",
       {1, 9, 9, 8},
       {3, 3, 2, 8},
       [dilated](const Tensor& x, const Tensor& w) { return conv2d(x, w, dilated); }},
      {"depthwise m2",
       {2, 8, 8, 5},
       {3, 3, 5, 2},
       [same](const Tensor& x, const Tensor& w) { return depthwise_conv2d(x, w, same); }},
      {"depthwise m1 stride 2",
       {2, 9, 9, 16},
       {5, 5, 16, 1},
       [](const Tensor& x, const Tensor& w) {
         return depthwise_conv2d(x, w, {{2, 2}, Padding::kSame});
       }},
      {"conv1d grouped dilated",
       {2, 17, 6},
       {3, 3, 4},
       [](const Tensor& x, const Tensor& w) { return conv1d(x, w, 1, Padding::kSame, 2); }},
  };
}

// y, dx, dw of v on `device` in `dtype` for the given float64 inputs and output gradient.
std::vector<std::vector<double> > run(const Variant& v, const char* device, DType dtype, const Tensor& hx,
                                      const Tensor& hw, unsigned dy_seed) {
  const Tensor x = ops::cast(hx, dtype).to(device), w = ops::cast(hw, dtype).to(device);
  GradientTape tape;
  tape.watch(x);
  tape.watch(w);
  const Tensor y = v.f(x, w);
  const Tensor dy =
      ops::cast(Tensor::from_vector(uniform(y.num_elements(), -1, 1, dy_seed), y.shape(), "/CPU:0"), dtype).to(device);
  const std::vector<Tensor> g = tape.gradient(y, {x, w}, dy);
  return {y.to_vector<double>(), g[0].to_vector<double>(), g[1].to_vector<double>()};
}

Tensor host(const Shape& s, unsigned seed) {
  return Tensor::from_vector(uniform(s.num_elements(), -1, 1, seed), s, "/CPU:0");
}

TEST_F(CudaKernelsTest, GroupedDepthwiseAndConv1dMatchCpuWithGradients) {
  for (const Variant& v : variants()) {
    const Tensor hx = host(v.x, 201), hw = host(v.w, 202);
    for (DType dtype : {DType::kFloat64, DType::kFloat32, DType::kBFloat16}) {
      std::vector<std::vector<double> > gpu;
      SKIP_WITHOUT_CUDNN(gpu = run(v, kGpu, dtype, hx, hw, 203));
      // bfloat16: both devices compute in float32 from the same bfloat16 inputs and round once, so
      // they differ by about one bfloat16 rounding; the reference is the CPU in float32 on them.
      const DType cpu_dtype = dtype == DType::kBFloat16 ? DType::kFloat32 : dtype;
      const Tensor rx = dtype == DType::kBFloat16 ? ops::cast(hx, dtype) : hx;
      const Tensor rw = dtype == DType::kBFloat16 ? ops::cast(hw, dtype) : hw;
      const auto cpu = run(v, "/CPU:0", cpu_dtype, ops::cast(rx, DType::kFloat64), ops::cast(rw, DType::kFloat64), 203);
      const double tol = dtype == DType::kFloat64 ? 1e-11 : dtype == DType::kFloat32 ? 5e-5 : 3e-2;
      const char* names[] = {" y", " dx", " dw"};
      for (std::size_t i = 0; i < 3; ++i)
        expect_close(gpu[i], cpu[i], tol, std::string(v.name) + " " + std::string(dtype_name(dtype)) + names[i]);
    }
  }
}

// ops::fused_conv2d with groups: cuDNN's fused call (or the composition it falls back to).
TEST_F(CudaKernelsTest, FusedGroupedConvolutionMatchesCpu) {
  const Tensor hx = host({2, 7, 7, 8}, 211), hw = host({3, 3, 2, 12}, 212), hb = host({12}, 213);
  std::vector<std::vector<double> > results[2];
  for (int d = 0; d < 2; ++d) {
    const char* device = d == 0 ? "/CPU:0" : kGpu;
    const Tensor x = ops::cast(hx, DType::kFloat32).to(device), w = ops::cast(hw, DType::kFloat32).to(device),
                 b = ops::cast(hb, DType::kFloat32).to(device);
    GradientTape tape;
    tape.watch(x);
    tape.watch(w);
    tape.watch(b);
    Tensor y;
    SKIP_WITHOUT_CUDNN(y = fused_conv2d(x, w, b, FusedActivation::kRelu, {{1, 1}, Padding::kSame}));
    const std::vector<Tensor> g = tape.gradient(y, {x, w, b});
    for (const Tensor& t : {y, g[0], g[1], g[2]}) results[d].push_back(t.to_vector<double>());
  }
  const char* names[] = {"y", "dx", "dw", "db"};
  for (std::size_t i = 0; i < 4; ++i) expect_close(results[1][i], results[0][i], 1e-4, names[i]);
}

// With op determinism (irreversible: CTest runs each test in its own process), cuDNN's heuristics
// choose the grouped algorithms: two runs agree bitwise.
TEST_F(CudaKernelsTest, DeterministicGroupedConvolutionIsReproducible) {
  enable_op_determinism();
  const Variant v = variants()[1];
  const Tensor hx = host(v.x, 221), hw = host(v.w, 222);
  std::vector<std::vector<double> > a, b;
  SKIP_WITHOUT_CUDNN(a = run(v, kGpu, DType::kFloat32, hx, hw, 223));
  b = run(v, kGpu, DType::kFloat32, hx, hw, 223);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(a[i], b[i]) << i;
}

#endif

}  // namespace
}  // namespace chorus::ops::cuda
