// Op benchmark: chorus ops against the raw library call they wrap, measured in the same run.
//
//   bench_ops [--quick]
//
// Cases (float32, CPU device /cpu:0 with all cores; GPU cases need a GPU and are listed as
// skipped otherwise):
//   - matmul n×n×n, n = 512, 1024, 2048, 4096 (--quick: 256, 512): ops::matmul (op layer, stream
//     hand-off, oneDNN primitive from the cache) vs a oneDNN matmul primitive created once and
//     executed directly on the calling thread;
//   - the seed CNN's convolutions at batch 64: conv1 28×28×1 → 32 (3×3, VALID), conv2
//     13×13×32 → 64 (3×3, VALID): forward, backward data, backward filter, each vs oneDNN's
//     primitive with the layouts oneDNN prefers and the weights reordered once, outside the timing
//     (the best a hand-written oneDNN program does);
//   - per-op framework overhead: ops::add of two 1-element tensors, op call to result ready, in
//     µs, vs the same addition as a plain C++ statement.
// Each case: median of 7 timed runs after 2 warm-ups. Ratio = yardstick time / chorus time (> 1:
// chorus faster). Goal (issue 3): ≥ 0.9 on large shapes. Last line: one JSON line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include <chorus/core/config.h>
#include <chorus/core/runtime.h>
#include <chorus/core/tensor.h>
#include <chorus/ops/geometry.h>
#include <chorus/ops/ops.h>

#ifdef CHORUS_WITH_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif
#ifdef CHORUS_WITH_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <chorus/core/gpu.h>
#include <chorus/launch/cli.h>
#endif

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;

double median_seconds(const std::function<void()>& fn, int warmup = 2, int runs = 7) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    const auto a = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - a).count());
  }
  return bench::median(t);
}

struct Row {
  std::string name;
  double chorus = 0, yard = 0;  // seconds
  std::string unit = "ms";
  double flops = 0;
};

void sync(const Tensor& t) { t.device_context().stream().synchronize(); }

Tensor random_tensor(const Shape& s, unsigned seed) {
  std::vector<float> v(static_cast<std::size_t>(s.num_elements()));
  unsigned x = seed * 2654435761u + 1;
  for (auto& e : v) {
    x = x * 1664525u + 1013904223u;
    e = static_cast<float>(x >> 8) / static_cast<float>(1u << 24) - 0.5f;
  }
  return Tensor::from_vector<float>(v, s, "/cpu:0");
}

#ifdef CHORUS_WITH_DNNL
using dnnl::memory;
using tag = memory::format_tag;

dnnl::engine& eng() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

double raw_matmul(std::int64_t n, const Tensor& a, const Tensor& b, const Tensor& c) {
  const auto f32 = memory::data_type::f32;
  memory::desc md({n, n}, f32, tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, md, md), eng());
  dnnl::matmul prim(pd);
  dnnl::stream s(eng());
  memory ma(md, eng(), a.data()), mb(md, eng(), b.data()), mc(md, eng(), c.data());
  return median_seconds([&] {
    prim.execute(s, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
    s.wait();
  });
}

enum class ConvPass { kForward, kBackwardData, kBackwardFilter };

// oneDNN convolution with its preferred weights layout (reordered once, untimed).
double raw_conv(ConvPass pass, const ops::Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& y) {
  const auto f32 = memory::data_type::f32;
  memory::desc src({g.n, g.in_c, g.in_h, g.in_w}, f32, tag::nhwc);
  memory::desc dst({g.n, g.out_c, g.out_h, g.out_w}, f32, tag::nhwc);
  memory::desc wany({g.out_c, g.in_c, g.k_h, g.k_w}, f32, tag::any);
  memory::desc whwio({g.out_c, g.in_c, g.k_h, g.k_w}, f32, tag::hwio);
  const memory::dims strides{1, 1}, dil{0, 0}, pad{0, 0};
  dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src, wany,
                                     dst, strides, dil, pad, pad);
  dnnl::convolution_forward::primitive_desc fpd(fd, eng());
  dnnl::stream s(eng());
  memory user_w(whwio, eng(), w.data());
  memory mx(src, eng(), x.data()), my(dst, eng(), y.data());
  if (pass == ConvPass::kForward) {
    memory wk(fpd.weights_desc(), eng());
    dnnl::reorder(user_w, wk).execute(s, user_w, wk);
    s.wait();
    dnnl::convolution_forward prim(fpd);
    return median_seconds([&] {
      prim.execute(s, {{DNNL_ARG_SRC, mx}, {DNNL_ARG_WEIGHTS, wk}, {DNNL_ARG_DST, my}});
      s.wait();
    });
  }
  if (pass == ConvPass::kBackwardData) {
    dnnl::convolution_backward_data::desc bd(dnnl::algorithm::convolution_direct, src, wany, dst, strides, dil, pad,
                                             pad);
    dnnl::convolution_backward_data::primitive_desc bpd(bd, eng(), fpd);
    memory wk(bpd.weights_desc(), eng());
    dnnl::reorder(user_w, wk).execute(s, user_w, wk);
    s.wait();
    dnnl::convolution_backward_data prim(bpd);
    return median_seconds([&] {
      prim.execute(s, {{DNNL_ARG_DIFF_DST, my}, {DNNL_ARG_WEIGHTS, wk}, {DNNL_ARG_DIFF_SRC, mx}});
      s.wait();
    });
  }
  dnnl::convolution_backward_weights::desc bd(dnnl::algorithm::convolution_direct, src, wany, dst, strides, dil, pad,
                                              pad);
  dnnl::convolution_backward_weights::primitive_desc bpd(bd, eng(), fpd);
  memory wk(bpd.diff_weights_desc(), eng());
  dnnl::convolution_backward_weights prim(bpd);
  return median_seconds([&] {
    prim.execute(s, {{DNNL_ARG_SRC, mx}, {DNNL_ARG_DIFF_DST, my}, {DNNL_ARG_DIFF_WEIGHTS, wk}});
    s.wait();
  });
}
#endif

#ifdef CHORUS_WITH_CUDA
// The GPU rows: ops::matmul on /gpu:0 against cublasSgemm on its own handle and stream.
void gpu_matmul_rows(bool quick, std::vector<Row>& rows, std::vector<std::string>& skipped) {
  // matmul on /gpu:0: ops::matmul (cuBLAS through the op layer) vs cublasSgemm on its own handle
  // and stream. Row-major C = A·B is column-major C^T = B^T·A^T: pass B first.
  // The yardstick calls CUDA and cuBLAS itself: every status is checked (docs/style.md habit 5).
  const auto cuda_check = [](cudaError_t err, const char* call) {
    if (err != cudaSuccess)
      throw InternalError(std::string(call) + " failed: " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) +
                          ")");
  };
  const auto cublas_check = [](cublasStatus_t status, const char* call) {
    if (status != CUBLAS_STATUS_SUCCESS)
      throw InternalError(std::string(call) + " failed: " + cublasGetStatusName(status) + " (" +
                          cublasGetStatusString(status) + ")");
  };
  cublasHandle_t handle;
  cudaStream_t stream;
  cuda_check(cudaSetDevice(0), "cudaSetDevice");
  cublas_check(cublasCreate(&handle), "cublasCreate");
  cuda_check(cudaStreamCreate(&stream), "cudaStreamCreate");
  cublas_check(cublasSetStream(handle, stream), "cublasSetStream");
  // The yardstick computes as ops::matmul does: with TensorFloat-32 while chorus's switch is on
  // (its default, core/config.h), in full float32 while it is off.
  const bool tf32 = config::tensor_float_32_execution_enabled();
  cublas_check(cublasSetMathMode(handle, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  for (std::int64_t n : quick ? std::vector<std::int64_t>{1024} : std::vector<std::int64_t>{1024, 4096, 8192}) {
    Tensor a = random_tensor({n, n}, 1).to("/gpu:0"), b = random_tensor({n, n}, 2).to("/gpu:0");
    Tensor c = Tensor::empty({n, n}, DType::kFloat32, "/gpu:0");
    Row r{"gpu matmul " + std::to_string(n) + (tf32 ? " (TF32)" : " (float32)"), 0, 0, "ms", 2.0 * n * n * n};
    r.chorus = median_seconds([&] { sync(ops::matmul(a, b)); });
    const float one = 1, zero = 0;
    const int ni = static_cast<int>(n);
    r.yard = median_seconds([&] {
      cublas_check(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &one, static_cast<const float*>(b.data()),
                               ni, static_cast<const float*>(a.data()), ni, &zero, static_cast<float*>(c.data()), ni),
                   "cublasSgemm");
      cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    });
    rows.push_back(r);
  }
  cublas_check(cublasDestroy(handle), "cublasDestroy");
  cuda_check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  skipped.push_back("GPU convolutions vs raw cuDNN: yardstick not written yet");
}
#endif

int run(bool quick) {
  std::vector<Row> rows;
  std::vector<std::string> skipped;
#ifdef CHORUS_WITH_DNNL
  const std::vector<std::int64_t> sizes =
      quick ? std::vector<std::int64_t>{256, 512} : std::vector<std::int64_t>{512, 1024, 2048, 4096};
  for (std::int64_t n : sizes) {
    Tensor a = random_tensor({n, n}, 1), b = random_tensor({n, n}, 2);
    Tensor c_raw = Tensor::empty({n, n}, DType::kFloat32, "/cpu:0");
    Row r{"matmul " + std::to_string(n), 0, 0, "ms", 2.0 * n * n * n};
    r.chorus = median_seconds([&] { sync(ops::matmul(a, b)); });
    r.yard = raw_matmul(n, a, b, c_raw);
    rows.push_back(r);
  }
  struct ConvCase {
    const char* name;
    std::int64_t n, h, w, ci, co;
  };
  const std::int64_t batch = quick ? 8 : 64;
  for (ConvCase cc :
       {ConvCase{"conv1 28x28x1->32", batch, 28, 28, 1, 32}, ConvCase{"conv2 13x13x32->64", batch, 13, 13, 32, 64}}) {
    Tensor x = random_tensor({cc.n, cc.h, cc.w, cc.ci}, 3), w = random_tensor({3, 3, cc.ci, cc.co}, 4);
    ops::Conv2dGeometry g{cc.n, cc.h, cc.w, cc.ci, 3, 3, cc.co};
    ops::compute_output_size(g, ops::Padding::kValid);
    Tensor dy = random_tensor({cc.n, g.out_h, g.out_w, cc.co}, 5);
    const double flops = 2.0 * g.output_elements() * 9 * cc.ci;
    ops::Conv2dOptions o{{1, 1}, ops::Padding::kValid, {1, 1}};
    Tensor xs = Tensor::empty(x.shape(), DType::kFloat32, "/cpu:0"),
           ys = Tensor::empty(dy.shape(), DType::kFloat32, "/cpu:0");
    std::memcpy(xs.data(), x.to_vector<float>().data(), x.nbytes());
    std::memcpy(ys.data(), dy.to_vector<float>().data(), dy.nbytes());
    Row f{std::string(cc.name) + " fwd", median_seconds([&] { sync(ops::conv2d(x, w, o)); }),
          raw_conv(ConvPass::kForward, g, xs, w, ys), "ms", flops};
    Row bd{std::string(cc.name) + " bwd data",
           median_seconds([&] { sync(ops::conv2d_backprop_input(x.shape(), w, dy, o)); }),
           raw_conv(ConvPass::kBackwardData, g, xs, w, ys), "ms", flops};
    Row bf{std::string(cc.name) + " bwd filter",
           median_seconds([&] { sync(ops::conv2d_backprop_filter(x, w.shape(), dy, o)); }),
           raw_conv(ConvPass::kBackwardFilter, g, xs, w, ys), "ms", flops};
    rows.push_back(f);
    rows.push_back(bd);
    rows.push_back(bf);
  }
#else
  skipped.push_back("matmul and convolutions: built without oneDNN");
#endif
  {
    Tensor a = Tensor::scalar(1.0f, "/cpu:0"), b = Tensor::scalar(2.0f, "/cpu:0");
    volatile float x = 1, y = 2, z = 0;
    Row r{"add 1 element (overhead)", 0, 0, "us", 0};
    r.chorus = median_seconds([&] {
                 for (int i = 0; i < 100; ++i) sync(ops::add(a, b));
               }) /
               100;
    r.yard = median_seconds([&] {
               for (int i = 0; i < 100; ++i) z = x + y;
             }) /
             100;
    (void)z;
    rows.push_back(r);
  }
#ifdef CHORUS_WITH_CUDA
  if (gpu::device_count() > 0)
    gpu_matmul_rows(quick, rows, skipped);
  else
    skipped.push_back("GPU cases (cuBLAS vs chorus): no GPU (" + gpu::unavailable_reason() + ")");
#else
  skipped.push_back("GPU cases: built without CUDA");
#endif

  std::printf("%-28s %14s %14s %8s %12s\n", "case", "chorus", "raw library", "ratio", "chorus GF/s");
  std::vector<chorus::bench::Json> json_cases;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const double scale = r.unit == "us" ? 1e6 : 1e3;
    const double ratio = r.yard / r.chorus;
    char gf[32] = "-";
    if (r.flops > 0) std::snprintf(gf, sizeof gf, "%.1f", r.flops / r.chorus / 1e9);
    std::printf("%-28s %11.3f %s %11.3f %s %8.2f %12s\n", r.name.c_str(), r.chorus * scale, r.unit.c_str(),
                r.yard * scale, r.unit.c_str(), ratio, gf);
    json_cases.push_back(chorus::bench::json_case(r.name, r.chorus * scale, r.unit,
                                                  r.unit == "us"                 ? "plain C++ statement"
                                                  : r.name.rfind("gpu ", 0) == 0 ? "cublasSgemm on its own stream"
                                                                                 : "raw oneDNN primitive",
                                                  r.yard * scale, ratio, 6, 4));
  }
  for (const auto& s : skipped) std::printf("skipped: %s\n", s.c_str());
  chorus::bench::print_json_line("ops", chorus::bench::machine(true), json_cases);
  return 0;
}

}  // namespace
}  // namespace chorus

int main(int argc, char** argv) {
  if (auto rc = chorus::launch::answer_help_or_version(argc, argv, "bench_ops", "usage: bench_ops [--quick]\n"))
    return *rc;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--quick") != 0)
      return chorus::launch::usage_error("bench_ops", argv[i], "usage: bench_ops [--quick]\n");
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  return chorus::run(quick);
}
