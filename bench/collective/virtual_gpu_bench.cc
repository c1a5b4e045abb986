// Virtual-GPU all-reduce benchmark: k logical GPUs carved out of GPU:0, float32 sum in place,
// 4 KiB … 256 MiB, against the device-to-device copy bandwidth of the same GPU measured in the
// same run (k cudaMemcpyAsync of N bytes on one stream: the 2·k·N bytes an all-reduce of k
// buffers must at least move). Issue 4's goal: ≥ 70% of that bandwidth.
//
//   bench_virtual_gpu_allreduce [--quick]
//
// Without a GPU it prints why and an empty JSON case list (last line, docs/style.md habit 11).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include <chorus/collective/virtual_gpu.h>
#include <chorus/core/config.h>
#include <chorus/core/gpu.h>
#include <chorus/core/runtime.h>
#include <chorus/core/tensor.h>
#include <chorus/launch/cli.h>

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;
using bench::median;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Median seconds per call of `fn` over 5 batches of `iters` calls.
template <typename Fn>
double time_per_call(int iters, Fn&& fn) {
  fn();  // warm-up
  std::vector<double> batches;
  for (int b = 0; b < 5; ++b) {
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) fn();
    batches.push_back(seconds_since(t0) / iters);
  }
  return median(batches);
}

struct Case {
  std::string name;
  double value, yardstick_value;
};

int run(bool quick) {
  if (gpu::device_count() == 0) {
    std::printf("virtual-GPU all-reduce bench skipped: no GPU (%s)\n", gpu::unavailable_reason().c_str());
    bench::print_json_line("virtual_gpu_allreduce", "no GPU", {});
    return 0;
  }
  const std::size_t max_bytes = quick ? (std::size_t{1} << 20) : (std::size_t{256} << 20);
  const int max_k = 4;
  // Each device holds its buffer plus copy-yardstick buffers: 3 × the largest size, with slack.
  const std::int64_t limit_mb = static_cast<std::int64_t>(3 * max_bytes / (1 << 20)) + 64;
  std::vector<LogicalDeviceConfiguration> cfgs(max_k, LogicalDeviceConfiguration{.memory_limit_mb = limit_mb});
  config::set_logical_device_configuration(config::list_physical_devices("GPU")[0], cfgs);
  const auto props = gpu::device_properties(0);
  std::printf("virtual-GPU all-reduce: float32 sum in place, %d virtual GPUs of %lld MiB on %s\n", max_k,
              static_cast<long long>(limit_mb), props.name.c_str());
  std::printf("%-3s %-9s %14s %14s %14s %8s\n", "k", "size", "allreduce us", "2kN GB/s", "D2D copy GB/s", "ratio");
  std::vector<Case> cases;
  for (int k : {2, 4}) {
    std::vector<std::string> devices;
    for (int r = 0; r < k; ++r) devices.push_back("/gpu:" + std::to_string(r));
    auto comms = collective::make_virtual_gpu_group(devices, "bench");
    for (std::size_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
      const auto n = static_cast<std::int64_t>(bytes / 4);
      std::vector<Tensor> bufs;
      for (int r = 0; r < k; ++r) bufs.push_back(Tensor::full({n}, r + 1, DType::kFloat32, devices[r]));
      const int iters =
          bytes <= (std::size_t{1} << 20) ? 200 : std::max(5, static_cast<int>((std::size_t{256} << 20) / bytes));
      // One call = every replica thread issues the all-reduce and waits for it. The replica
      // threads persist through a batch of `iters` calls, as a strategy's replica threads do:
      // starting threads per call would time thread creation, not the collective.
      const auto batch = [&](int calls) {
        std::vector<std::thread> threads;
        for (int r = 0; r < k; ++r)
          threads.emplace_back([&, r] {
            for (int i = 0; i < calls; ++i) comms[r]->all_reduce(bufs[r], bufs[r])->wait(std::chrono::seconds(60));
          });
        for (auto& t : threads) t.join();
      };
      batch(3);  // warm-up
      std::vector<double> per_call;
      for (int b = 0; b < 5; ++b) {
        const auto t0 = Clock::now();
        batch(iters);
        per_call.push_back(seconds_since(t0) / iters);
      }
      const double t_ar = median(per_call);
      // Yardstick: k device-to-device copies of N bytes on one stream.
      DeviceContext& ctx = bufs[0].device_context();
      Tensor dst = Tensor::empty({n}, DType::kFloat32, devices[0]);
      const double t_copy = time_per_call(iters, [&] {
        for (int r = 0; r < k; ++r)
          gpu::memcpy_async(ctx.gpu_ordinal(), ctx.stream().native_handle(), dst.data(), bufs[r].data(), bytes,
                            gpu::CopyKind::kDeviceToDevice);
        ctx.stream().synchronize();
      });
      const double moved = 2.0 * k * static_cast<double>(bytes);
      const double bw = moved / t_ar / 1e9, bw_copy = moved / t_copy / 1e9;
      char label[32];
      std::snprintf(label, sizeof label, bytes >= (1 << 20) ? "%zuMiB" : "%zuKiB",
                    bytes >= (1 << 20) ? bytes >> 20 : bytes >> 10);
      std::printf("%-3d %-9s %14.2f %14.2f %14.2f %8.2f\n", k, label, t_ar * 1e6, bw, bw_copy, bw / bw_copy);
      cases.push_back({"virtual_gpu k=" + std::to_string(k) + " " + label, bw, bw_copy});
    }
  }
  std::vector<bench::Json> json_cases;
  for (const Case& c : cases)
    json_cases.push_back(
        bench::json_case(c.name, c.value, "GB/s", "D2D copy 2kN", c.yardstick_value, c.value / c.yardstick_value, 4));
  bench::print_json_line("virtual_gpu_allreduce", props.name, json_cases);
  return 0;
}

}  // namespace
}  // namespace chorus

int main(int argc, char** argv) {
  if (auto rc = chorus::launch::answer_help_or_version(argc, argv, "bench_virtual_gpu_allreduce",
                                                       "usage: bench_virtual_gpu_allreduce [--quick]\n"))
    return *rc;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--quick") != 0)
      return chorus::launch::usage_error("bench_virtual_gpu_allreduce", argv[i],
                                         "usage: bench_virtual_gpu_allreduce [--quick]\n");
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  return chorus::bench::run_main("virtual-GPU all-reduce bench failed", [&] { return chorus::run(quick); });
}
