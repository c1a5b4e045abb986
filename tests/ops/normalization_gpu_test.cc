// The CUDA kernels of silu, leaky_relu, elu, softplus (ops/cuda/elementwise.cu) and of layer_norm /
// rms_norm (ops/cuda/normalization.cu) against the CPU kernels, through the ops on /GPU:0 and
// /CPU:0 tensors: forward and gradients, float32, float64, float16, bfloat16, NaN and Inf where
// the CPU has them, both row paths (one warp per row up to 1024 columns, one block above) and the
// split column sums of the backward (rows > 256). The tolerance is each dtype's rounding, relative
// to max(1, |cpu|) (the two sum in different orders). Skips without a GPU.
#include "tests/ops/cuda_test_util.h"

#include <functional>
#include <utility>

#include <chorus/ops/ops.h>

namespace chorus::ops::cuda {
namespace {

#ifndef CHORUS_WITH_CUDA

TEST(CudaKernelsTest, NeedsCuda) { GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason(); }

#else

using namespace test;  // NOLINT

constexpr DType kTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16};

double tol_of(DType d) {
  switch (d) {
    case DType::kFloat32: return 2e-6;
    case DType::kFloat64: return 1e-12;
    case DType::kFloat16: return 2 * std::ldexp(1.0, -11);
    default: return 2 * std::ldexp(1.0, -8);
  }
}

std::vector<double> host(const Tensor& t) { return ops::cast(t, DType::kFloat64).to_vector<double>(); }

// NaN where the CPU has NaN, the same infinities, else within tol·max(1, |cpu|).
void expect_like_cpu(const Tensor& gpu_t, const Tensor& cpu_t, double tol, const std::string& what) {
  ASSERT_EQ(gpu_t.dtype(), cpu_t.dtype()) << what;
  ASSERT_EQ(gpu_t.shape(), cpu_t.shape()) << what;
  const std::vector<double> g = host(gpu_t), c = host(cpu_t);
  int bad = 0;
  for (std::size_t i = 0; i < g.size() && bad < 10; ++i) {
    const bool ok = std::isnan(c[i])   ? std::isnan(g[i])
                    : std::isinf(c[i]) ? g[i] == c[i]
                                       : std::abs(g[i] - c[i]) <= tol * std::max(1.0, std::abs(c[i]));
    if (!ok) {
      ++bad;
      ADD_FAILURE() << what << "[" << i << "]: gpu " << g[i] << " cpu " << c[i];
    }
  }
}

Tensor on(const std::vector<double>& v, const Shape& s, DType d, const char* device) {
  return ops::cast(Tensor::from_vector<double>(v, s, "/CPU:0"), d).to(device);
}

TEST_F(CudaKernelsTest, ActivationsMatchCpuWithNanAndInf) {
  std::vector<double> xv = uniform(3000, -8, 8, 5);
  const double specials[] = {kNaN, INFINITY, -INFINITY, 0, 2.84375, 2.875, -2.875, 14, -14, 40, -40, 1e30, -1e30};
  xv.insert(xv.begin(), std::begin(specials), std::end(specials));
  const Shape s{static_cast<i64>(xv.size())};
  const std::vector<double> dyv = uniform(s.num_elements(), -1, 1, 6);
  const std::pair<const char*, std::function<Tensor(const Tensor&)> > acts[] = {
      {"silu", ops::silu},
      {"leaky_relu", [](const Tensor& t) { return ops::leaky_relu(t); }},
      {"leaky_relu(-1.5)", [](const Tensor& t) { return ops::leaky_relu(t, -1.5); }},
      {"elu", ops::elu},
      {"softplus", ops::softplus}};
  for (DType d : kTypes) {
    for (const auto& [name, f] : acts) {
      auto run = [&, f = f](const char* device) {
        const Tensor x = on(xv, s, d, device), dy = on(dyv, s, d, device);
        ops::GradientTape tape;
        tape.watch(x);
        const Tensor y = f(x);
        return std::pair<Tensor, Tensor>{y, tape.gradient(ops::reduce_sum(ops::mul(y, dy)), {x})[0]};
      };
      const auto g = run(kGpu), c = run("/CPU:0");
      const std::string what = std::string(dtype_name(d)) + " " + name;
      expect_like_cpu(g.first, c.first, tol_of(d), what);
      expect_like_cpu(g.second, c.second, tol_of(d), what + " gradient");
    }
  }
}

struct NormCase {
  Shape x;
  int begin_axis;
};

TEST_F(CudaKernelsTest, LayerNormAndRmsNormMatchCpu) {
  // Warp rows with a tail; block rows (> 1024 columns); split column sums (> 256 rows); 2 axes.
  const NormCase cases[] = {{{7, 33}, -1}, {{5, 1500}, -1}, {{600, 64}, -1}, {{3, 4, 5}, 1}, {{2, 1025}, 0}};
  for (const NormCase& nc : cases) {
    const int b = nc.begin_axis < 0 ? nc.begin_axis + nc.x.rank() : nc.begin_axis;
    const Shape p(std::vector<std::int64_t>(nc.x.dims().begin() + b, nc.x.dims().end()));
    const auto xv = uniform(nc.x.num_elements(), -2, 4, 1), dyv = uniform(nc.x.num_elements(), -1, 1, 2);
    const auto gv = uniform(p.num_elements(), 0.5, 1.5, 3), bv = uniform(p.num_elements(), -1, 1, 4);
    for (DType d : kTypes) {
      const DType pd = d == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
      for (bool rms : {false, true}) {
        auto run = [&](const char* device) {
          const Tensor x = on(xv, nc.x, d, device), dy = on(dyv, nc.x, d, device);
          const Tensor g = on(gv, p, pd, device), be = on(bv, p, pd, device);
          ops::GradientTape tape;
          tape.watch(x);
          tape.watch(g);
          tape.watch(be);
          const Tensor y =
              rms ? ops::rms_norm(x, g, 1e-6, nc.begin_axis) : ops::layer_norm(x, g, be, 1e-3, nc.begin_axis);
          std::vector<Tensor> out =
              tape.gradient(ops::reduce_sum(ops::mul(ops::cast(y, pd), ops::cast(dy, pd))), {x, g, be});
          out.insert(out.begin(), y);
          return out;
        };
        const auto g = run(kGpu), c = run("/CPU:0");
        const std::string what =
            std::string(rms ? "rms_norm " : "layer_norm ") + std::string(dtype_name(d)) + " " + nc.x.to_string();
        expect_like_cpu(g[0], c[0], tol_of(d), what + " y");
        expect_like_cpu(g[1], c[1], tol_of(d), what + " dx");
        // Column sums over up to 600 rows in different orders: a few float32 roundings of the total.
        const double ptol =
            pd == DType::kFloat64 ? 1e-11 : 2e-5 * std::max<double>(1, nc.x.num_elements() / p.num_elements());
        expect_like_cpu(g[2], c[2], d == DType::kFloat32 || d == DType::kFloat64 ? ptol : 0.02, what + " dgamma");
        if (!rms)
          expect_like_cpu(g[3], c[3], d == DType::kFloat32 || d == DType::kFloat64 ? ptol : 0.02, what + " dbeta");
      }
    }
  }
}

TEST_F(CudaKernelsTest, LayerNormBackwardIsDeterministic) {
  const Shape s{1000, 96};
  const auto xv = uniform(s.num_elements(), -3, 3, 7);
  auto grads = [&] {
    const Tensor x = on(xv, s, DType::kFloat32, kGpu), g = on(uniform(96, 0.5, 1.5, 8), {96}, DType::kFloat32, kGpu);
    ops::GradientTape tape;
    tape.watch(x);
    tape.watch(g);
    const Tensor y = ops::layer_norm(x, g, Tensor(), 1e-3);
    const auto gr = tape.gradient(ops::reduce_sum(ops::square(y)), {x, g});
    return std::pair<std::vector<float>, std::vector<float> >{gr[0].to_vector<float>(), gr[1].to_vector<float>()};
  };
  const auto a = grads(), b = grads();
  EXPECT_EQ(a.first, b.first);
  EXPECT_EQ(a.second, b.second);
}

#endif

}  // namespace
}  // namespace chorus::ops::cuda
