// GPU training benchmark (issue 42): ms/step of the seed CNN (examples/mnist_mirrored.cc, Adam
// 1e-3) on one GPU, with PyTorch eager on the same GPU as the yardstick, in the same run.
//
//   bench_train_gpu [--quick] [--cpu] [--batches 128,512,2048] [--steps N] [--windows K] [--rounds R]
//                   [--tf32 on|off] [--capture on|off]
//   bench_train_gpu --child STRATEGY INPUT BATCH DTYPE [--steps N] [--windows K] [--tf32 on|off]
//                   [--capture on|off] [--profile-steps P] [--overlap on|off]
//                   (one child run; P: after the windows, P more steps between
//                   cudaProfilerStart and cudaProfilerStop, the range `ncu --profile-from-start off`
//                   records: scripts/gpu-profile.sh)
//
// Cases, for each global batch and dtype (float32; mixed_bfloat16 against torch.autocast bf16):
//   mirrored_2vgpu   MirroredStrategy over 2 virtual GPUs carved out of GPU:0 (the main job's set-up);
//   one_device       OneDeviceStrategy on GPU:0;
// each with the data resident on the device (8 distributed batches made once, the step run by
// strategy.run(Model::train_step) — as the PyTorch side's 8 device batches) and fed through
// chorus's own input pipeline (Model::fit over a cached, repeated dataset). The yardstick is
// bench/train/torch_seed_cnn_gpu.py (PyTorch eager, one GPU, data resident; the Python of
// bench_util.h's python_with_torch). Each configuration is a child process (a device configuration is frozen per
// process): warm-up steps through fit, then K windows of N timed steps, the GPU streams synchronized at both ends of
// each window; a child's ms/step is its median window, and R rounds (default 1) alternate PyTorch and the chorus cases,
// the medians of the rounds reported. Each chorus child also reports the host-time split of its steps from the timeline
// (core/timeline.h, captured over one more window after the timed ones, which run with it off): input (waiting for the
// next batch, fit only), forward, backward, all-reduce, update (the optimizer's span less its collectives) and other
// (the rest of the step), per step and replica — host time, which is what a host-bound step is made of — and the host
// waits per step (core/gpu.h host_waits: GPU stream/event synchronizes; issue 42's goal is 0). Goals (issue 42),
// printed PASS/FAIL and as JSON cases whose ratio is PyTorch's ms ÷ chorus's (a speed ratio): mirrored_2vgpu ≥ 1.0 at
// every batch and dtype (resident data); one_device ≥ 1.3 at batch 128; the input wait ≤ 5% of the step with the
// pipeline. TensorFloat-32: both sides run float32 matmuls and convolutions with the same setting — chorus's
// (core/config.h: on unless NVIDIA_TF32_OVERRIDE=0, as TF) unless --tf32 says; PyTorch gets it as
// torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32 (its own defaults
// differ: matmul off, cuDNN on). The setting is printed and is in the JSON line. --capture on
// gives the pipeline cases' fits FitOptions::capture_steps (model/step_capture.h: one_device's
// steps replayed from a CUDA graph; mirrored_2vgpu says why it stays eager), and each such child
// prints how many of its last window's steps were replays.
// Without a GPU it says so, prints a JSON line with "skipped" and exits 0 (its ctest smoke run has
// no GPU by design). --cpu runs the same cases on logical CPU devices (2 for mirrored_2vgpu, CPU:0
// for one_device; PyTorch with --device cpu): a check of the bench itself, not a measurement of
// the GPU step (ctest bench_train_gpu_cpu_check). Last line: one JSON line.
#include <chorus/chorus.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/train/seed_cnn.h"
#include <chorus/core/gpu.h>
#include <chorus/core/runtime.h>
#include <chorus/core/timeline.h>
#include <chorus/model/mixed_precision.h>

#ifdef CHORUS_WITH_CUDA
#include <cuda_profiler_api.h>
#endif

namespace {

namespace cx = chorus;
using cx::bench::Json;

struct Options {
  std::vector<std::int64_t> batches{128, 512, 2048};
  int steps = 50;
  int windows = 3;
  int rounds = 1;
  bool quick = false;
  bool cpu = false;             // --cpu: the same cases on logical CPU devices, to check the bench itself
  int profile_steps = 0;        // --profile-steps (children only)
  std::optional<bool> overlap;  // --overlap on|off: MirroredStrategyOptions::overlap_gradient_all_reduce
  std::optional<bool> tf32;     // --tf32 on|off; unset: chorus's default
  bool capture = false;         // --capture on|off: FitOptions::capture_steps for the fit-fed cases
};

// Host time in the timeline's events that `pick` accepts: per thread, the union of their intervals
// (nested spans count once), summed over threads, in ms.
template <typename Pick>
double busy_ms(const cx::timeline::Capture& c, Pick pick) {
  std::map<int, std::vector<std::pair<std::int64_t, std::int64_t>>> by_thread;
  for (const cx::timeline::CapturedEvent& e : c.events)
    if (pick(e)) by_thread[e.tid].push_back({e.start_us, e.end_us});
  double us = 0;
  for (auto& [tid, spans] : by_thread) {
    std::sort(spans.begin(), spans.end());
    std::int64_t start = -1, end = -1;
    for (const auto& [s, e] : spans) {
      if (s > end) {
        if (end > start) us += static_cast<double>(end - start);
        start = s;
        end = e;
      } else {
        end = std::max(end, e);
      }
    }
    if (end > start) us += static_cast<double>(end - start);
  }
  return us / 1e3;
}

void synchronize_gpus() {
  for (const auto& d : cx::runtime::devices())
    if (d->is_gpu()) d->stream().synchronize();
}

// One configuration; prints "RESULT ms_per_step=... input=... forward=... backward=... allreduce=...
// update=... other=... host_waits=..." (the split in ms per step and replica; waits per step).
int child(const std::string& strategy_name, const std::string& input, std::int64_t batch, const std::string& dtype,
          const Options& o) {
  if (!o.cpu && cx::gpu::device_count() == 0) {
    std::printf("no GPU: %s\n", cx::gpu::unavailable_reason().c_str());
    return 2;
  }
  if (o.tf32) cx::config::enable_tensor_float_32_execution(*o.tf32);
  const bool mirrored = strategy_name == "mirrored_2vgpu";
  if (mirrored) {
    const std::int64_t mb = o.cpu ? 2048 : 16384;  // per virtual device: batch 2048's activations fit
    cx::config::set_logical_device_configuration(cx::config::list_physical_devices(o.cpu ? "CPU" : "GPU")[0],
                                                 {{.memory_limit_mb = mb}, {.memory_limit_mb = mb}});
  }
  if (dtype == "bfloat16") cx::mixed_precision::set_global_policy("mixed_bfloat16");
  std::unique_ptr<cx::distribute::Strategy> strategy;
  if (mirrored)
    strategy = std::make_unique<cx::distribute::MirroredStrategy>(
        std::vector<std::string>{}, cx::distribute::MirroredStrategyOptions{.overlap_gradient_all_reduce = o.overlap});
  else
    strategy = std::make_unique<cx::distribute::OneDeviceStrategy>(o.cpu ? "/CPU:0" : "/GPU:0");
  std::unique_ptr<cx::model::Sequential> model = cx::bench::seed_cnn(*strategy);
  const cx::data::Dataset data = cx::data::synthetic_digits(8 * batch, /*seed=*/1)
                                     .batch(batch, /*drop_remainder=*/true)
                                     .cache()
                                     .repeat()
                                     .prefetch(cx::data::kAutotune);
  // Warm-up through fit (builds the model and the slots, sets the global batch train_step divides by).
  model->fit(data, {.epochs = 1, .steps_per_epoch = o.quick ? 2 : 10, .verbose = 0, .capture_steps = o.capture});
  cx::model::History last;  // the fit-fed windows' last fit: how many steps were replays
  std::vector<cx::distribute::DistributedDataset::Batch> resident;
  if (input == "resident") {
    auto it = strategy->experimental_distribute_dataset(data).make_iterator();
    for (int i = 0; i < 8; ++i) resident.push_back(*it.next());
  }
  // `steps` steps of this configuration's path, the GPU streams synchronized after them.
  auto run_steps = [&](int steps) {
    if (input == "resident") {
      for (int s = 0; s < steps; ++s) {
        cx::timeline::Span span("step", "train step");
        strategy->run([&](const cx::data::Element& e) { model->train_step(e); }, resident[s % 8]);
      }
    } else {
      last = model->fit(data, {.epochs = 1, .steps_per_epoch = steps, .verbose = 0, .capture_steps = o.capture});
    }
    synchronize_gpus();
  };
  auto run_window = [&]() { run_steps(o.steps); };
  run_window();  // the path's own warm-up (resident batches, a second fit)
  synchronize_gpus();
  // The timed windows run as a user's steps do, with the timeline off; one more window, captured,
  // gives the split (recording costs a few percent of a small step: core/timeline.h).
  std::vector<double> windows;
  const std::int64_t waits_before = cx::gpu::host_waits();
  for (int w = 0; w < o.windows; ++w) {
    const auto t0 = std::chrono::steady_clock::now();
    run_window();
    windows.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
                      o.steps);
  }
  // Less the one synchronize per GPU stream at the end of each window (synchronize_gpus).
  int gpu_streams = 0;
  for (const auto& d : cx::runtime::devices()) gpu_streams += d->is_gpu() ? 1 : 0;
  const double host_waits =
      static_cast<double>(cx::gpu::host_waits() - waits_before - static_cast<std::int64_t>(o.windows) * gpu_streams) /
      (static_cast<double>(o.windows) * o.steps);
  cx::timeline::start_capture();
  run_window();
  const std::optional<cx::timeline::Capture> c = cx::timeline::stop_capture();
  const double per = o.steps;  // steps in the captured window
  if (o.profile_steps > 0) {
#ifdef CHORUS_WITH_CUDA
    synchronize_gpus();
    cudaProfilerStart();  // unchecked: only a profiler (ncu) uses the range; without one it is a no-op
#endif
    run_steps(o.profile_steps);
#ifdef CHORUS_WITH_CUDA
    cudaProfilerStop();  // unchecked: as cudaProfilerStart
#endif
  }
  const double replicas = strategy->num_replicas_in_sync();
  auto cat = [](const char* category) {
    return [category](const cx::timeline::CapturedEvent& e) { return e.category == category; };
  };
  const double step = busy_ms(*c, cat("step")) / per;
  const double in = busy_ms(*c, cat("input")) / per;
  const double forward = busy_ms(*c, cat("forward")) / per / replicas;
  const double backward = busy_ms(*c, cat("backward")) / per / replicas;
  const double allreduce = busy_ms(*c, cat("collective")) / per / replicas;
  const double optimizer =
      busy_ms(*c, [](const cx::timeline::CapturedEvent& e) { return e.category == "optimizer"; }) / per / replicas;
  const double update = std::max(0.0, optimizer - allreduce);
  const double other = std::max(0.0, step - forward - backward - optimizer);
  std::printf("%s %s batch %lld %s (overlap %s): %.3f ms/step (windows:", strategy_name.c_str(), input.c_str(),
              static_cast<long long>(batch), dtype.c_str(), strategy->overlap_reason().c_str(),
              cx::bench::median(windows));
  for (double w : windows) std::printf(" %.3f", w);
  std::printf(")\n");
  if (o.capture && input != "resident")
    std::printf("captured steps: the last window's fit replayed %lld of %d steps%s%s\n",
                static_cast<long long>(last.replayed_steps), o.steps,
                last.why_eager.empty() ? "" : "; eager: ", last.why_eager.c_str());
  std::printf(
      "RESULT ms_per_step=%.6f input=%.6f forward=%.6f backward=%.6f allreduce=%.6f update=%.6f other=%.6f "
      "host_waits=%.3f\n",
      cx::bench::median(windows), in, forward, backward, allreduce, update, other, host_waits);
  return 0;
}

struct Measured {
  std::vector<double> ms;
  std::map<std::string, std::vector<double>> split;
  std::vector<double> host_waits;  // per step (core/gpu.h)
  std::string note;                // why there is no value
};

std::optional<double> median_of(const Measured& m) {
  if (m.ms.empty()) return std::nullopt;
  return cx::bench::median(m.ms);
}

// The longest one child (a chorus configuration or a PyTorch run) may take.
constexpr int kChildLimitSeconds = 120;

int parent(const Options& o) {
  const std::string machine = cx::bench::machine(true);
  std::printf("bench_train_gpu: the seed CNN on one GPU, chorus against PyTorch eager (%s)\n", machine.c_str());
  if (!o.cpu && cx::gpu::device_count() == 0) {
    const std::string why = "no GPU: " + cx::gpu::unavailable_reason();
    std::printf("%s; nothing measured\n", why.c_str());
    cx::bench::print_json_line("train_gpu", machine, {}, Json{{"skipped", why}});
    return 0;
  }
  const std::string self = cx::bench::self_path("bench_train_gpu");
  std::string torch_why;
  const std::string torch_py = cx::bench::python_with_torch(&torch_why);
  if (torch_py.empty()) std::printf("PyTorch yardstick skipped: %s\n", torch_why.c_str());
  const std::string script = std::string(CHORUS_TRAIN_BENCH_DIR) + "/torch_seed_cnn_gpu.py";
  const bool tf32 = o.tf32.value_or(cx::config::tensor_float_32_execution_enabled());
  const std::string tf32_flag = std::string(" --tf32 ") + (tf32 ? "on" : "off");
  std::printf("TensorFloat-32 for float32 matmuls and convolutions: %s on both sides\n", tf32 ? "on" : "off");
  const std::string common = " --steps " + std::to_string(o.steps) + " --windows " + std::to_string(o.windows) +
                             (o.cpu ? " --cpu" : "") + (o.quick ? " --quick" : "") + tf32_flag +
                             (o.capture ? " --capture on" : "");
  // Each child runs under timeout(1): a hung configuration is reported as failed (exit 124) and the
  // others still run.
  const std::string limit = "timeout --kill-after=5 " + std::to_string(kChildLimitSeconds) + " ";
  const std::vector<std::string> dtypes{"float32", "bfloat16"};
  const std::vector<std::pair<std::string, std::string>> configs{{"mirrored_2vgpu", "resident"},
                                                                 {"one_device", "resident"},
                                                                 {"mirrored_2vgpu", "pipeline"},
                                                                 {"one_device", "pipeline"}};
  std::map<std::string, Measured> results;  // key: case name
  auto key = [](const std::string& s, const std::string& in, std::int64_t b, const std::string& d) {
    return s + "_" + in + "_b" + std::to_string(b) + "_" + d;
  };
  for (int round = 0; round < o.rounds; ++round) {
    for (std::int64_t b : o.batches) {
      for (const std::string& d : dtypes) {
        int status = 0;
        const std::string torch_key = "pytorch_b" + std::to_string(b) + "_" + d;
        const std::string out =
            torch_py.empty() ? std::string()
                             : cx::bench::capture(limit + torch_py + " " + script + " --batch " + std::to_string(b) +
                                                      " --dtype " + d + " --steps " + std::to_string(o.steps) +
                                                      " --repeats " + std::to_string(o.windows) + tf32_flag +
                                                      (o.cpu ? " --device cpu --warmup 2" : "") + " 2>&1",
                                                  &status);
        std::printf("%s", out.c_str());
        if (auto ms = cx::bench::result_field(out, "ms_per_step"); status == 0 && ms)
          results[torch_key].ms.push_back(*ms);
        else
          results[torch_key].note =
              torch_py.empty() ? torch_why : "PyTorch run failed (exit " + std::to_string(status) + ")";
        for (const auto& [s, in] : configs) {
          const std::string k = key(s, in, b, d);
          const std::string child_out = cx::bench::capture(
              limit + self + " --child " + s + " " + in + " " + std::to_string(b) + " " + d + common + " 2>&1",
              &status);
          std::printf("%s", child_out.c_str());
          const std::optional<double> ms = cx::bench::result_field(child_out, "ms_per_step");
          if (status != 0 || !ms) {
            results[k].note = "child failed (exit " + std::to_string(status) + ")";
            continue;
          }
          results[k].ms.push_back(*ms);
          for (const char* f : {"input", "forward", "backward", "allreduce", "update", "other"})
            if (auto v = cx::bench::result_field(child_out, f)) results[k].split[f].push_back(*v);
          if (auto v = cx::bench::result_field(child_out, "host_waits")) results[k].host_waits.push_back(*v);
        }
      }
    }
  }
  std::vector<Json> cases;
  bool all_pass = true;
  std::printf("\n%-40s %10s %10s %8s  %s\n", "case", "chorus ms", "torch ms", "ratio", "host split per step (ms)");
  for (std::int64_t b : o.batches) {
    for (const std::string& d : dtypes) {
      const std::optional<double> torch_ms = median_of(results["pytorch_b" + std::to_string(b) + "_" + d]);
      for (const auto& [s, in] : configs) {
        const std::string k = key(s, in, b, d);
        const Measured& m = results[k];
        const std::optional<double> ms = median_of(m);
        if (!ms) {
          std::printf("%-40s %10s  (%s)\n", k.c_str(), "-", m.note.c_str());
          all_pass = false;
          continue;
        }
        std::optional<double> ratio;
        if (torch_ms) ratio = *torch_ms / *ms;
        std::ostringstream split;
        for (const auto& [f, v] : m.split) split << f << " " << cx::bench::significant(cx::bench::median(v), 3) << " ";
        if (!m.host_waits.empty()) split << "| host waits/step " << cx::bench::median(m.host_waits);
        std::printf("%-40s %10.3f %10s %8s  %s\n", k.c_str(), *ms,
                    torch_ms ? std::to_string(*torch_ms).substr(0, 7).c_str() : "-",
                    ratio ? std::to_string(*ratio).substr(0, 5).c_str() : "-", split.str().c_str());
        Json c = cx::bench::json_case(k, *ms, "ms/step", "pytorch eager, 1 GPU, ms/step", torch_ms, ratio);
        for (const auto& [f, v] : m.split) c["split_ms"][f] = cx::bench::significant(cx::bench::median(v), 4);
        if (!m.host_waits.empty()) c["host_waits_per_step"] = cx::bench::median(m.host_waits);
        cases.push_back(c);
        // Goals.
        std::optional<bool> pass;
        std::string goal;
        if (s == "mirrored_2vgpu" && in == "resident" && ratio) {
          pass = *ratio >= 1.0;
          goal = "mirrored_2vgpu >= 1.0x PyTorch";
        } else if (s == "one_device" && in == "resident" && b == 128 && ratio) {
          pass = *ratio >= 1.3;
          goal = "one_device >= 1.3x PyTorch at batch 128";
        } else if (in == "pipeline" && m.split.count("input")) {
          pass = cx::bench::median(m.split.at("input")) <= 0.05 * *ms;
          goal = "input wait <= 5% of the step";
        }
        if (pass) {
          std::printf("  goal (%s): %s\n", goal.c_str(), *pass ? "PASS" : "FAIL");
          all_pass = all_pass && *pass;
        }
      }
    }
  }
  std::printf("goals: %s\n", all_pass ? "all met" : "not all met");
  cx::bench::print_json_line("train_gpu", machine, cases, Json{{"goals_met", all_pass}, {"tf32", tf32}});
  return 0;
}

std::vector<std::int64_t> parse_list(const std::string& s) {
  std::vector<std::int64_t> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoll(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  return cx::bench::run_main("bench_train_gpu", [&]() -> int {
    Options o;
    std::vector<std::string> child_args;
    bool is_child = false;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw cx::InvalidArgumentError("bench_train_gpu: " + a + " needs a value");
        return argv[++i];
      };
      if (a == "--quick") {
        o.quick = true;
        o.batches = {128};
        o.steps = 5;
        o.windows = 1;
      } else if (a == "--cpu") {
        o.cpu = true;
      } else if (a == "--batches") {
        o.batches = parse_list(value());
      } else if (a == "--steps") {
        o.steps = std::stoi(value());
      } else if (a == "--windows") {
        o.windows = std::stoi(value());
      } else if (a == "--rounds") {
        o.rounds = std::stoi(value());
      } else if (a == "--tf32") {
        const std::string v = value();
        if (v != "on" && v != "off")
          throw cx::InvalidArgumentError("bench_train_gpu: --tf32 takes on or off, got " + v);
        o.tf32 = v == "on";
      } else if (a == "--overlap") {
        const std::string v = value();
        if (v != "on" && v != "off")
          throw cx::InvalidArgumentError("bench_train_gpu: --overlap takes on or off, got " + v);
        o.overlap = v == "on";
      } else if (a == "--capture") {
        const std::string v = value();
        if (v != "on" && v != "off")
          throw cx::InvalidArgumentError("bench_train_gpu: --capture takes on or off, got " + v);
        o.capture = v == "on";
      } else if (a == "--profile-steps") {
        o.profile_steps = std::stoi(value());
      } else if (a == "--child") {
        is_child = true;
        for (int k = 0; k < 4; ++k) child_args.push_back(value());
      } else {
        std::fprintf(stderr,
                     "usage: bench_train_gpu [--quick] [--cpu] [--batches 128,512,2048] [--steps N] [--windows K] "
                     "[--rounds R] [--tf32 on|off] [--capture on|off]\n");
        return 2;
      }
    }
    if (o.steps < 1 || o.windows < 1 || o.rounds < 1 || o.batches.empty() || o.profile_steps < 0)
      throw cx::InvalidArgumentError("bench_train_gpu: --steps, --windows and --rounds must be >= 1");
    if (is_child) return child(child_args[0], child_args[1], std::stoll(child_args[2]), child_args[3], o);
    return parent(o);
  });
}
