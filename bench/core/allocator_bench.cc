// Allocator benchmark: chorus's BFC arena against the allocator it replaces.
//
//   bench_allocator [--quick]
//
// Workload (the same sequence for every contender): allocations of sizes drawn log-uniformly
// from 256 B to 4 MiB with a fixed seed, into a window of 64 live slots; each step frees a
// random slot's previous allocation and allocates into it, like the tensors of a training step
// coming and going. One op is one allocate or one free; reported is ns/op, median of 5 runs.
//
// Cases: BFC over host memory vs malloc/free; with CHORUS_WITH_CUDA and a visible GPU, also BFC
// over cudaMalloc vs cudaMalloc/cudaFree directly. Memory is not touched: this measures the
// allocators' bookkeeping, not page faults. The last line printed is the JSON line of
// docs/style.md habit 11; ratio = yardstick / chorus, so > 1 means chorus is faster.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include <chorus/core/allocator.h>

#ifdef CHORUS_WITH_CUDA
#include <cuda_runtime.h>

#include <chorus/core/gpu.h>
#include <chorus/launch/cli.h>
#endif

namespace chorus {
namespace {

using bench::machine;
using bench::median;

constexpr std::size_t kMinSize = 256;
constexpr std::size_t kMaxSize = std::size_t{4} << 20;
constexpr std::size_t kWindow = 64;
constexpr std::size_t kArenaLimit = std::size_t{1} << 30;  // > kWindow * kMaxSize: never OOM
constexpr int kRepetitions = 5;
constexpr std::uint64_t kSeed = 42;

struct Workload {
  std::vector<std::size_t> sizes;    // one per step
  std::vector<std::uint32_t> slots;  // the window slot each step frees and refills
};

Workload make_workload(std::size_t steps) {
  std::mt19937_64 rng(kSeed);
  std::uniform_real_distribution<double> log_size(std::log(double(kMinSize)), std::log(double(kMaxSize)));
  std::uniform_int_distribution<std::uint32_t> slot(0, kWindow - 1);
  Workload w;
  w.sizes.reserve(steps);
  w.slots.reserve(steps);
  for (std::size_t i = 0; i < steps; ++i) {
    // Not rounded: real tensor sizes rarely are multiples of 256.
    w.sizes.push_back(std::clamp<std::size_t>(std::size_t(std::exp(log_size(rng))), kMinSize, kMaxSize));
    w.slots.push_back(slot(rng));
  }
  return w;
}

// Keeps the compiler from proving an allocation unused and deleting the malloc/free pair.
inline void escape(void* p) { asm volatile("" : : "g"(p) : "memory"); }

using AllocFn = std::function<void*(std::size_t)>;
using FreeFn = std::function<void(void*)>;

// One run of the workload; returns ns per op. std::function costs the same few ns for every
// contender, so it does not tilt the comparison.
double run_once(const Workload& w, const AllocFn& alloc, const FreeFn& free) {
  std::vector<void*> live(kWindow, nullptr);
  const auto start = std::chrono::steady_clock::now();
  std::size_t ops = 0;
  for (std::size_t i = 0; i < w.sizes.size(); ++i) {
    void*& slot = live[w.slots[i]];
    if (slot != nullptr) {
      free(slot);
      ++ops;
    }
    slot = alloc(w.sizes[i]);
    escape(slot);
    ++ops;
  }
  for (void*& p : live) {
    if (p != nullptr) {
      free(p);
      ++ops;
    }
  }
  const auto stop = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(stop - start).count() / double(ops);
}

// BFC: a fresh arena per repetition, its region reserved (by a first allocation) before the
// clock starts, as it would be after a training job's first step.
double bench_bfc(const Workload& w, const std::function<std::unique_ptr<SubAllocator>()>& make_sub,
                 const char* device) {
  std::vector<double> runs;
  for (int r = 0; r < kRepetitions; ++r) {
    BFCOptions options;
    options.logical_device = device;
    options.memory_limit = kArenaLimit;
    options.allow_growth = false;
    auto allocator = make_bfc_allocator(make_sub(), options);
    allocator->deallocate(allocator->allocate(1));
    runs.push_back(run_once(
        w, [&](std::size_t n) { return allocator->allocate(n); }, [&](void* p) { allocator->deallocate(p); }));
  }
  return median(runs);
}

double bench_raw(const Workload& w, const AllocFn& alloc, const FreeFn& free) {
  std::vector<double> runs;
  for (int r = 0; r < kRepetitions; ++r) runs.push_back(run_once(w, alloc, free));
  return median(runs);
}

struct Case {
  std::string name;
  double value;
  std::string yardstick;
  double yardstick_value;
};

#ifdef CHORUS_WITH_CUDA
// The bench talks to CUDA directly for its yardstick; each call is checked and named.
#define BENCH_CUDA_CHECK(call)                                                                                     \
  do {                                                                                                             \
    cudaError_t bench_err_ = (call);                                                                               \
    if (bench_err_ != cudaSuccess)                                                                                 \
      throw std::runtime_error(std::string(#call) + " failed at " __FILE__ ":" + std::to_string(__LINE__) + ": " + \
                               cudaGetErrorString(bench_err_));                                                    \
  } while (0)

// Returns "" and appends the case, or the reason the GPU case was skipped.
std::string bench_gpu(std::size_t steps, std::vector<Case>& cases) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
  if (count <= 0) return "no CUDA device visible";
  try {
    BENCH_CUDA_CHECK(cudaSetDevice(0));
    BENCH_CUDA_CHECK(cudaFree(nullptr));  // create the context outside the timed runs
    const Workload w = make_workload(steps);
    const double bfc = bench_bfc(
        w, [] { return gpu::make_cuda_sub_allocator(0); }, "/job:localhost/replica:0/task:0/device:GPU:0");
    const double raw = bench_raw(
        w,
        [](std::size_t n) {
          void* p = nullptr;
          BENCH_CUDA_CHECK(cudaMalloc(&p, n));
          return p;
        },
        [](void* p) { BENCH_CUDA_CHECK(cudaFree(p)); });
    cases.push_back({"bfc_cuda_mixed_256B_4MiB", bfc, "cudaMalloc/cudaFree", raw});
  } catch (const std::exception& e) {
    return std::string("error: ") + e.what();
  }
  return "";
}
#endif

int run(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else {
      return launch::usage_error("bench_allocator", argv[i], "usage: bench_allocator [--quick]\n");
    }
  }
  const std::size_t host_steps = quick ? 20000 : 1000000;
  const std::size_t gpu_steps = quick ? 500 : 5000;  // cudaMalloc/cudaFree cost microseconds

  std::vector<Case> cases;
  const Workload host = make_workload(host_steps);
  const double bfc = bench_bfc(
      host, [] { return make_host_sub_allocator(); }, "/job:localhost/replica:0/task:0/device:CPU:0");
  const double raw = bench_raw(
      host, [](std::size_t n) { return std::malloc(n); }, [](void* p) { std::free(p); });
  cases.push_back({"bfc_host_mixed_256B_4MiB", bfc, "malloc/free", raw});

#ifdef CHORUS_WITH_CUDA
  const std::string gpu_skipped = bench_gpu(gpu_steps, cases);
#else
  const std::string gpu_skipped = "built without CUDA (CHORUS_WITH_CUDA not defined)";
  (void)gpu_steps;
#endif

  std::printf(
      "allocator bench: sizes 256 B..4 MiB log-uniform (seed %llu), %zu live slots, "
      "median of %d runs; host %zu steps, gpu %zu steps%s\n",
      static_cast<unsigned long long>(kSeed), kWindow, kRepetitions, host_steps, gpu_steps, quick ? " (--quick)" : "");
  std::printf("%-28s %14s   %-22s %16s %8s\n", "case", "chorus ns/op", "yardstick", "yardstick ns/op", "ratio");
  for (const Case& c : cases) {
    std::printf("%-28s %14.1f   %-22s %16.1f %8.2f\n", c.name.c_str(), c.value, c.yardstick.c_str(), c.yardstick_value,
                c.yardstick_value / c.value);
  }
  if (!gpu_skipped.empty()) std::printf("GPU case skipped: %s\n", gpu_skipped.c_str());

  std::vector<bench::Json> json_cases;
  for (const Case& c : cases)
    json_cases.push_back(
        bench::json_case(c.name, c.value, "ns/op", c.yardstick, c.yardstick_value, c.yardstick_value / c.value, 5));
  bench::print_json_line("allocator", machine(), json_cases);
  return 0;
}

}  // namespace
}  // namespace chorus

int main(int argc, char** argv) {
  if (auto rc =
          chorus::launch::answer_help_or_version(argc, argv, "bench_allocator", "usage: bench_allocator [--quick]\n"))
    return *rc;
  return chorus::bench::run_main("allocator bench failed", [&] { return chorus::run(argc, argv); });
}
