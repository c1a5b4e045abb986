// Host cost of a GPU op (issue 42): microseconds of host time per call of small chorus ops on a
// GPU, from one thread and from two threads at once, each on its own virtual GPU of GPU:0 (as
// MirroredStrategy's replica threads launch). The step of the seed CNN on 2 virtual GPUs is
// host-bound (bench_train_gpu: each replica thread spends about twice the host time of
// OneDeviceStrategy's one thread on the same layers); this bench tells whether the ops themselves
// cost that much more when two threads launch together, and whether the CUDA driver (the
// yardstick: cudaMemsetAsync of 4 bytes, a raw enqueue on the same stream, from the same threads)
// or chorus is where it grows.
//
//   bench_gpu_launch [--quick] [--calls N] [--repeats R]
//
// Each case: R repeats of N calls (the GPU streams synchronized, untimed, before each repeat);
// the host time per call is the median repeat's wall time / N, per thread. The ops are tiny
// (a 1-element add, an 8x8 matmul, a 1x8x8x4 convolution), so the GPU keeps up and the time is
// the host's. "2 threads" reports the slower thread's median. Ratio columns: chorus ÷ raw enqueue
// (how many enqueues an op costs), and 2 threads ÷ 1 thread (the contention factor). The last six
// cases are the seed CNN's convolutions at one replica's share of batch 128 (GPU time per call
// about 10-40 µs, below their host cost): cuDNN's legacy call alone and with chorus's per-call
// descriptors (the yardsticks, own handles), then chorus's conv2d, fused_conv2d, the composition,
// and a convolution with both gradients; then that last case captured once as a CUDA graph
// (core/graph_capture.h) and replayed, or the reason it could not be captured. Without a GPU it
// says so, prints a JSON line with "skipped" and exits 0. Last line: one JSON line.
#include <chorus/chorus.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include <chorus/core/gpu.h>
#include <chorus/core/graph_capture.h>
#include <chorus/core/runtime.h>

#ifdef CHORUS_WITH_CUDA
#include <cuda_runtime.h>
#endif
#ifdef CHORUS_WITH_CUDNN
#include <cudnn.h>
#endif

namespace {

namespace cx = chorus;
using cx::bench::Json;

struct Options {
  int calls = 2000;
  int repeats = 7;
};

void synchronize_gpus() {
  for (const auto& d : cx::runtime::devices())
    if (d->is_gpu()) d->stream().synchronize();
}

// Median over repeats of the host µs per call of `body(device_index)` run `calls` times, on
// `threads` threads at once (thread k on virtual GPU k); the slowest thread's median.
double host_us_per_call(int threads, const Options& o, const std::function<void(std::size_t)>& body) {
  std::vector<std::vector<double>> per_thread(static_cast<std::size_t>(threads));
  for (int r = 0; r < o.repeats; ++r) {
    synchronize_gpus();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < o.calls; ++i) body(static_cast<std::size_t>(t));
        const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        per_thread[static_cast<std::size_t>(t)].push_back(us / o.calls);
      });
    }
    for (std::thread& th : pool) th.join();
  }
  synchronize_gpus();
  double worst = 0;
  for (const auto& v : per_thread) worst = std::max(worst, cx::bench::median(v));
  return worst;
}

#ifdef CHORUS_WITH_CUDNN
void cudnn_check(cudnnStatus_t status, const char* call) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw cx::InternalError(std::string("bench_gpu_launch: ") + call + ": " + cudnnGetErrorString(status));
}

// cuDNN's own per-call host cost, the yardstick of chorus's convolutions: the seed CNN's first
// convolution (64x28x28x1 -> 32, 3x3, VALID, float32 NHWC) straight through the legacy API on the
// replica's stream, with descriptors, algorithm and workspace made once (`call`), and with the
// descriptors made, the workspace size asked and the descriptors destroyed around each call as
// chorus does (`call_describing`). One per replica thread (own handle).
struct RawConv {
  cudnnHandle_t handle = nullptr;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  std::size_t ws_bytes = 0;
  const void *xp = nullptr, *wp = nullptr;
  void *yp = nullptr, *wsp = nullptr;
  cx::Tensor out, ws;

  void describe() {
    cudnn_check(cudnnCreateTensorDescriptor(&x), "cudnnCreateTensorDescriptor");
    cudnn_check(cudnnCreateTensorDescriptor(&y), "cudnnCreateTensorDescriptor");
    cudnn_check(cudnnCreateFilterDescriptor(&w), "cudnnCreateFilterDescriptor");
    cudnn_check(cudnnCreateConvolutionDescriptor(&conv), "cudnnCreateConvolutionDescriptor");
    cudnn_check(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, 64, 1, 28, 28),
                "cudnnSetTensor4dDescriptor");
    cudnn_check(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, 64, 32, 26, 26),
                "cudnnSetTensor4dDescriptor");
    cudnn_check(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, 32, 1, 3, 3),
                "cudnnSetFilter4dDescriptor");
    cudnn_check(cudnnSetConvolution2dDescriptor(conv, 0, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                "cudnnSetConvolution2dDescriptor");
  }
  void forget() {
    cudnn_check(cudnnDestroyTensorDescriptor(x), "cudnnDestroyTensorDescriptor");
    cudnn_check(cudnnDestroyTensorDescriptor(y), "cudnnDestroyTensorDescriptor");
    cudnn_check(cudnnDestroyFilterDescriptor(w), "cudnnDestroyFilterDescriptor");
    cudnn_check(cudnnDestroyConvolutionDescriptor(conv), "cudnnDestroyConvolutionDescriptor");
  }
  void init(const std::string& device, cudaStream_t stream, const cx::Tensor& img, const cx::Tensor& filter) {
    cudnn_check(cudnnCreate(&handle), "cudnnCreate");
    cudnn_check(cudnnSetStream(handle, stream), "cudnnSetStream");
    describe();
    cudnnConvolutionFwdAlgoPerf_t perf[8];
    int found = 0;
    cudnn_check(cudnnGetConvolutionForwardAlgorithm_v7(handle, x, w, conv, y, 8, &found, perf),
                "cudnnGetConvolutionForwardAlgorithm_v7");
    for (int i = 0; i < found; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS) {
        algo = perf[i].algo;
        break;
      }
    cudnn_check(cudnnGetConvolutionForwardWorkspaceSize(handle, x, w, conv, y, algo, &ws_bytes),
                "cudnnGetConvolutionForwardWorkspaceSize");
    out = cx::Tensor::zeros({64, 26, 26, 32}, cx::DType::kFloat32, device);
    ws = cx::Tensor::zeros({static_cast<std::int64_t>(ws_bytes) + 1}, cx::DType::kUInt8, device);
    xp = img.data();
    wp = filter.data();  // 288 floats either way: HWIO [3,3,1,32] read as KRSC [32,3,3,1]
    yp = out.data();
    wsp = ws.data();
  }
  void call() const {
    const float one = 1, zero = 0;
    cudnn_check(cudnnConvolutionForward(handle, &one, x, xp, w, wp, conv, algo, wsp, ws_bytes, &zero, y, yp),
                "cudnnConvolutionForward");
  }
  void call_describing() {
    describe();
    std::size_t bytes = 0;
    cudnn_check(cudnnGetConvolutionForwardWorkspaceSize(handle, x, w, conv, y, algo, &bytes),
                "cudnnGetConvolutionForwardWorkspaceSize");
    call();
    forget();
  }
};
#endif

#ifdef CHORUS_WITH_CUDA
// `body(k)` captured on gpus[k], one graph each; empty with *why_not set when CUDA refused one.
std::vector<std::unique_ptr<cx::CapturedGraph>> capture_each(
    const std::vector<std::shared_ptr<cx::DeviceContext>>& gpus, const std::function<void(std::size_t)>& body,
    std::string* why_not) {
  std::vector<std::unique_ptr<cx::CapturedGraph>> graphs;
  for (std::size_t k = 0; k < gpus.size(); ++k) {
    cx::CapturedGraph::Capture c = cx::CapturedGraph::capture(*gpus[k], [&] { body(k); });
    if (c.graph == nullptr) {
      *why_not = c.why_not;
      return {};
    }
    graphs.push_back(std::move(c.graph));
  }
  return graphs;
}
#endif

int run(const Options& o) {
  const std::string machine = cx::bench::machine(true);
  std::printf("bench_gpu_launch: host time per call of small GPU ops, 1 and 2 threads (%s)\n", machine.c_str());
#ifndef CHORUS_WITH_CUDA
  std::printf("built without CUDA; nothing measured\n");
  cx::bench::print_json_line("gpu_launch", machine, {}, Json{{"skipped", "built without CUDA"}});
  return 0;
#else
  if (cx::gpu::device_count() == 0) {
    const std::string why = "no GPU: " + cx::gpu::unavailable_reason();
    std::printf("%s; nothing measured\n", why.c_str());
    cx::bench::print_json_line("gpu_launch", machine, {}, Json{{"skipped", why}});
    return 0;
  }
  cx::config::set_logical_device_configuration(cx::config::list_physical_devices("GPU")[0],
                                               {{.memory_limit_mb = 1024}, {.memory_limit_mb = 1024}});
  std::vector<std::shared_ptr<cx::DeviceContext>> gpus;
  for (const auto& d : cx::runtime::devices("bench_gpu_launch"))
    if (d->is_gpu()) gpus.push_back(d);
  if (gpus.size() < 2) throw cx::InternalError("bench_gpu_launch: expected 2 virtual GPUs");
  struct Inputs {
    cx::Tensor one, m, x, w, scratch;
    cx::Tensor img, w1, b1, act, w2;  // the seed CNN's first two convolutions, per replica at batch 128
    cudaStream_t stream = nullptr;
  };
  std::vector<Inputs> in(2);
  for (std::size_t k = 0; k < 2; ++k) {
    const std::string dev = gpus[k]->name();
    Inputs& i = in[k];
    i.one = cx::Tensor::full({1}, 1.0, cx::DType::kFloat32, dev);
    i.m = cx::Tensor::full({8, 8}, 0.5, cx::DType::kFloat32, dev);
    i.x = cx::Tensor::full({1, 8, 8, 4}, 0.5, cx::DType::kFloat32, dev);
    i.w = cx::Tensor::full({3, 3, 4, 4}, 0.25, cx::DType::kFloat32, dev);
    i.scratch = cx::Tensor::zeros({4}, cx::DType::kFloat32, dev);
    i.img = cx::Tensor::full({64, 28, 28, 1}, 0.5, cx::DType::kFloat32, dev);
    i.w1 = cx::Tensor::full({3, 3, 1, 32}, 0.1, cx::DType::kFloat32, dev);
    i.b1 = cx::Tensor::full({32}, 0.1, cx::DType::kFloat32, dev);
    i.act = cx::Tensor::full({64, 13, 13, 32}, 0.5, cx::DType::kFloat32, dev);
    i.w2 = cx::Tensor::full({3, 3, 32, 64}, 0.01, cx::DType::kFloat32, dev);
    i.stream = static_cast<cudaStream_t>(gpus[k]->stream().native_handle());
  }
#ifdef CHORUS_WITH_CUDNN
  std::vector<RawConv> raw(2);
  for (std::size_t k = 0; k < 2; ++k) raw[k].init(gpus[k]->name(), in[k].stream, in[k].img, in[k].w1);
#endif
  struct Case {
    std::string name;
    std::function<void(std::size_t)> body;
  };
  std::vector<Case> cases{
      {"raw enqueue (cudaMemsetAsync 4 B)",
       [&](std::size_t k) {
         if (cudaMemsetAsync(in[k].scratch.data(), 0, 4, in[k].stream) != cudaSuccess)
           throw cx::InternalError("bench_gpu_launch: cudaMemsetAsync failed");
       }},
      {"add 1 element", [&](std::size_t k) { (void)cx::ops::add(in[k].one, in[k].one); }},
      {"relu 1 element", [&](std::size_t k) { (void)cx::ops::relu(in[k].one); }},
      {"matmul 8x8", [&](std::size_t k) { (void)cx::ops::matmul(in[k].m, in[k].m); }},
      {"conv2d 1x8x8x4 3x3x4x4",
       [&](std::size_t k) {
         (void)cx::ops::conv2d(in[k].x, in[k].w, {1, 1}, cx::ops::Padding::kSame);
       }},
  // The seed CNN's convolutions as one replica of batch 128 on 2 GPUs runs them: which part of
  // a convolution's host cost is cuDNN's fused call, and what its gradients cost.
#ifdef CHORUS_WITH_CUDNN
      {"cuDNN forward alone 64x28x28x1 -> 32", [&](std::size_t k) { raw[k].call(); }},
      {"cuDNN forward, descriptors per call", [&](std::size_t k) { raw[k].call_describing(); }},
#endif
      {"conv2d 64x28x28x1 -> 32",
       [&](std::size_t k) {
         (void)cx::ops::conv2d(in[k].img, in[k].w1, {1, 1}, cx::ops::Padding::kValid);
       }},
      {"fused_conv2d (bias, relu) 64x28x28x1 -> 32",
       [&](std::size_t k) {
         (void)cx::ops::fused_conv2d(in[k].img, in[k].w1, in[k].b1, cx::ops::FusedActivation::kRelu);
       }},
      {"conv2d + add + relu 64x28x28x1 -> 32",
       [&](std::size_t k) {
         (void)cx::ops::relu(
             cx::ops::add(cx::ops::conv2d(in[k].img, in[k].w1, {1, 1}, cx::ops::Padding::kValid), in[k].b1));
       }},
      {"conv2d and both gradients 64x13x13x32 -> 64",
       [&](std::size_t k) {
         cx::ops::GradientTape tape;
         tape.watch(in[k].act);
         tape.watch(in[k].w2);
         const cx::Tensor y = cx::ops::conv2d(in[k].act, in[k].w2, {1, 1}, cx::ops::Padding::kValid);
         (void)tape.gradient(y, std::vector<cx::Tensor>{in[k].act, in[k].w2});
       }},
  };
  // Warm-up: handles, algorithm choices, allocator pools.
  for (const Case& c : cases) host_us_per_call(2, Options{.calls = 50, .repeats = 1}, c.body);
  // The last case as a CUDA graph (core/graph_capture.h): what capture saves of its host time.
  std::string not_captured;
  const std::vector<std::unique_ptr<cx::CapturedGraph>> graphs = capture_each(gpus, cases.back().body, &not_captured);
  if (not_captured.empty()) {
    cases.push_back({"the same, one captured graph", [&](std::size_t k) { graphs[k]->replay(); }});
  } else {
    std::printf("the last case could not be captured as a CUDA graph: %s\n", not_captured.c_str());
  }

  std::printf("\n%-34s %12s %12s %10s %14s\n", "case (host us per call)", "1 thread", "2 threads", "2t / 1t",
              "1t / enqueue");
  std::vector<Json> out;
  double raw1 = 0;
  for (const Case& c : cases) {
    const double one = host_us_per_call(1, o, c.body);
    const double two = host_us_per_call(2, o, c.body);
    if (out.empty()) raw1 = one;
    std::printf("%-34s %12.2f %12.2f %10.2f %14.1f\n", c.name.c_str(), one, two, two / one, one / raw1);
    out.push_back(cx::bench::json_case(c.name + ", 2 threads", two, "us/call", "the same, 1 thread", one, two / one));
  }
  cx::bench::print_json_line("gpu_launch", machine, out);
  return 0;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  return cx::bench::run_main("bench_gpu_launch", [&] {
    Options o;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw cx::InvalidArgumentError("bench_gpu_launch: " + a + " needs a value");
        return argv[++i];
      };
      if (a == "--quick") {
        o.calls = 100;
        o.repeats = 2;
      } else if (a == "--calls") {
        o.calls = std::stoi(value());
      } else if (a == "--repeats") {
        o.repeats = std::stoi(value());
      } else {
        throw cx::InvalidArgumentError("usage: bench_gpu_launch [--quick] [--calls N] [--repeats R]");
      }
    }
    if (o.calls < 1 || o.repeats < 1) throw cx::InvalidArgumentError("bench_gpu_launch: --calls, --repeats >= 1");
    return run(o);
  });
}
