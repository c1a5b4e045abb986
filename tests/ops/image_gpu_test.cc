// The CUDA resize kernels (ops/cuda/image.cu) against the CPU kernels, through ops::image::resize
// on /GPU:0 and /CPU:0 tensors: forward and gradients (bilinear and nearest), upsampling,
// downsampling and mixed, every input dtype, NaN and Inf. The GPU kernels use the CPU's index and
// weight arithmetic (ops/image_geometry.h, --fmad=false) and sum in the same order, so the results
// must be equal bit for bit. Also the GPU paths of the other image ops (strided-copy flips, crops,
// the composed convert/standardize). Skips without a GPU.
#include "tests/ops/cuda_test_util.h"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <chorus/ops/image.h>
#include <chorus/ops/ops.h>

namespace chorus::ops::cuda {
namespace {

#ifndef CHORUS_WITH_CUDA

TEST(CudaKernelsTest, NeedsCuda) { GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason(); }

#else

using namespace test;  // NOLINT
namespace img = ops::image;

std::vector<double> host(const Tensor& t) { return ops::cast(t.to("/CPU:0"), DType::kFloat64).to_vector<double>(); }

// Bitwise equality of values (NaN == NaN).
void expect_same(const Tensor& gpu_t, const Tensor& cpu_t, const std::string& what) {
  ASSERT_EQ(gpu_t.dtype(), cpu_t.dtype()) << what;
  ASSERT_EQ(gpu_t.shape(), cpu_t.shape()) << what;
  const std::vector<double> g = host(gpu_t), c = host(cpu_t);
  int bad = 0;
  for (std::size_t i = 0; i < g.size() && bad < 10; ++i) {
    if ((std::isnan(c[i]) && std::isnan(g[i])) || g[i] == c[i]) continue;
    ++bad;
    ADD_FAILURE() << what << "[" << i << "]: gpu " << g[i] << " cpu " << c[i];
  }
}

Tensor input(const Shape& s, DType d, bool nonfinite) {
  std::vector<double> v = uniform(s.num_elements(), d == DType::kUInt8 ? 0 : -4, d == DType::kUInt8 ? 255 : 4, 17);
  if (d != DType::kFloat32 && d != DType::kFloat64 && d != DType::kFloat16 && d != DType::kBFloat16)
    for (double& x : v) x = std::floor(x);
  if (nonfinite && v.size() > 40) {
    v[3] = std::nan("");
    v[20] = INFINITY;
    v[39] = -INFINITY;
  }
  return ops::cast(Tensor::from_vector<double>(v, s, "/CPU:0"), d);
}

Tensor grad_of(const std::function<Tensor(const Tensor&)>& f, const Tensor& x, const Tensor& w) {
  ops::GradientTape tape;
  tape.watch(x);
  const Tensor y = f(x);
  return tape.gradient(ops::reduce_sum(ops::mul(w.to(x.device_name()), y)), {x})[0];
}

TEST_F(CudaKernelsTest, ResizeForwardAndGradientsEqualTheCpuBitForBit) {
  const Shape in{3, 13, 17, 5};
  const std::array<i64, 2> sizes[] = {{29, 40}, {6, 5}, {20, 9}, {13, 17}, {1, 1}};
  const DType all[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                       DType::kUInt8,   DType::kInt32,   DType::kInt64};
  for (auto method : {img::ResizeMethod::kBilinear, img::ResizeMethod::kNearestNeighbor}) {
    for (const auto& size : sizes) {
      for (DType d : all) {
        const std::string what = std::string(method == img::ResizeMethod::kBilinear ? "bilinear " : "nearest ") +
                                 dtype_name(d).data() + " " + std::to_string(size[0]) + "x" + std::to_string(size[1]);
        const Tensor x = input(in, d, is_floating(d));
        auto f = [&](const Tensor& v) { return img::resize(v, size, {.method = method}); };
        const Tensor cpu = f(x), gpu_y = f(x.to("/GPU:0"));
        expect_same(gpu_y, cpu, what);
        if (!is_floating(d)) continue;
        const Tensor w = input(cpu.shape(), cpu.dtype(), true);
        expect_same(grad_of(f, x.to("/GPU:0"), w), grad_of(f, x, w), what + " grad");
      }
    }
  }
}

TEST_F(CudaKernelsTest, ImageOpsOnTheGpuEqualTheCpu) {
  const Tensor x = input({4, 6, 7, 3}, DType::kFloat32, true);
  const Tensor xg = x.to("/GPU:0");
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)> > > fs = {
      {"flip_left_right", [](const Tensor& v) { return img::flip_left_right(v); }},
      {"stateless_flip",
       [](const Tensor& v) {
         return img::stateless_random_flip_up_down(v, {4, 2});
       }},
      {"stateless_crop",
       [](const Tensor& v) {
         return img::stateless_random_crop(v, {2, 3, 4, 3}, {9, 9});
       }},
      {"central_crop", [](const Tensor& v) { return img::central_crop(v, 0.6); }},
      {"pad", [](const Tensor& v) { return img::pad_to_bounding_box(v, 1, 1, 9, 9); }},
      {"to_uint8", [](const Tensor& v) { return img::convert_image_dtype(v, DType::kUInt8, true); }},
      {"to_bf16", [](const Tensor& v) { return img::convert_image_dtype(v, DType::kBFloat16); }},
  };
  for (const auto& [name, f] : fs) expect_same(f(xg), f(x), name);
  // Standardization reduces in another order on the GPU: float32 rounding.
  const std::vector<double> g =
      host(img::per_image_standardization(input({2, 5, 6, 3}, DType::kFloat32, false).to("/GPU:0")));
  const std::vector<double> c = host(img::per_image_standardization(input({2, 5, 6, 3}, DType::kFloat32, false)));
  for (std::size_t i = 0; i < c.size(); ++i) EXPECT_NEAR(g[i], c[i], 1e-5 * std::max(1.0, std::abs(c[i]))) << i;
}

#endif

}  // namespace
}  // namespace chorus::ops::cuda
