// Training benchmark: samples/second of the seed CNN (examples/mnist_mirrored.cc) trained with
// Model::fit under MirroredStrategy, global batch 128, on 1, 2 and 4 logical CPU devices, with the
// share of step time spent in CPU kernels (oneDNN + chorus loops), in collectives, and elsewhere
// (framework overhead: op dispatch, tape, data pipeline, replica threads, waiting).
//
//   bench_train [--quick] [--steps N]
//
// Device configuration is frozen per process, so each replica count runs in a child process: the
// benchmark re-executes itself with `--replicas R --steps N` and reads the child's RESULT line.
// Each child: 3 warm-up steps (fit with steps_per_epoch = 3), then N timed steps (default 30,
// --quick 4) in one fit call with verbose = 0 and core/profile.h's counters enabled.
// Fractions: kernels = kernel_ns / (R × wall_ns), collectives = collective_ns / (R × wall_ns),
// elsewhere = 1 − both (the counters add up over the R replica threads).
//
// Yardstick (same run): bench/train/pytorch_ddp.py — PyTorch DistributedDataParallel, gloo, two
// processes of one thread, same model and batch — beside the 2-replica case, when `import torch`
// works; otherwise listed as skipped and the JSON case has yardstick_value null.
// Goals (issue): elsewhere ≤ 10% of step time; 2 replicas faster than PyTorch (ratio > 1).
// Last line: one JSON line.
#include <chorus/chorus.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/profile.h"

namespace cx = chorus;

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::int64_t kGlobalBatch = 128;
constexpr int kWarmupSteps = 3;

// One replica count, in this (child) process. Prints `RESULT ...` as its last line.
int run_child(int replicas, int steps) {
  const cx::PhysicalDevice cpu = cx::config::list_physical_devices("CPU")[0];
  cx::config::set_logical_device_configuration(
      cpu, std::vector<cx::LogicalDeviceConfiguration>(static_cast<std::size_t>(replicas), {.memory_limit_mb = 1024}));
  cx::distribute::MirroredStrategy strategy;
  std::unique_ptr<cx::model::Sequential> model;
  {
    auto scope = strategy.scope();
    namespace L = cx::layers;
    model = std::make_unique<cx::model::Sequential>(std::vector<L::LayerPtr>{
        L::Conv2D(32, 3, "relu"), L::MaxPooling2D(2), L::Conv2D(64, 3, "relu"), L::MaxPooling2D(2),
        L::Conv2D(64, 3, "relu"), L::Flatten(), L::Dense(64, "relu"), L::Dense(10)});
    model->compile(std::make_shared<cx::optimizers::Adam>(1e-3),
                   std::make_shared<cx::losses::SparseCategoricalCrossentropy>(/*from_logits=*/true));
  }
  // 8 distinct global batches, batched once and cached, so the pipeline costs little per step.
  auto ds = cx::data::synthetic_digits(8 * kGlobalBatch, /*seed=*/1)
                .batch(kGlobalBatch, /*drop_remainder=*/true)
                .cache()
                .repeat()
                .prefetch(cx::data::kAutotune);
  model->fit(ds, {.epochs = 1, .steps_per_epoch = kWarmupSteps, .verbose = 0});

  cx::profile::read_and_reset();
  cx::profile::enable_profiling(true);
  const auto start = Clock::now();
  model->fit(ds, {.epochs = 1, .steps_per_epoch = steps, .verbose = 0});
  const double wall_ns = static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
  cx::profile::enable_profiling(false);
  const cx::profile::ProfileCounters c = cx::profile::read_and_reset();
  const double busy = replicas * wall_ns;
  std::printf("RESULT replicas=%d samples_per_s=%.6g ms_per_step=%.6g kernels=%.6g collectives=%.6g\n", replicas,
              static_cast<double>(steps * kGlobalBatch) / (wall_ns * 1e-9), wall_ns * 1e-6 / steps,
              static_cast<double>(c.library_kernel_ns) / busy, static_cast<double>(c.collective_ns) / busy);
  return 0;
}

// Runs `command`, returns its stdout (empty on failure to start) and sets `status` to the exit code.
std::string capture(const std::string& command, int* status) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) {
    *status = -1;
    return out;
  }
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

// The value of `key=` on the RESULT line of `out`, if any.
std::optional<double> result_field(const std::string& out, const std::string& key) {
  const std::size_t line = out.rfind("RESULT ");
  if (line == std::string::npos) return std::nullopt;
  const std::size_t k = out.find(" " + key + "=", line);
  if (k == std::string::npos) return std::nullopt;
  return std::strtod(out.c_str() + k + key.size() + 2, nullptr);
}

struct Case {
  int replicas;
  double samples_per_s, ms_per_step, kernels, collectives;
};

std::string self_path() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "bench_train";
  return std::string(buf, static_cast<std::size_t>(n));
}

int run_parent(int steps) {
  const std::string self = self_path();
  std::vector<Case> cases;
  for (int r : {1, 2, 4}) {
    int status = 0;
    const std::string out =
        capture("'" + self + "' --replicas " + std::to_string(r) + " --steps " + std::to_string(steps), &status);
    const auto sps = result_field(out, "samples_per_s");
    if (status != 0 || !sps) {
      std::fprintf(stderr, "bench_train: the %d-replica run failed (exit %d):\n%s\n", r, status, out.c_str());
      return 1;
    }
    cases.push_back({r, *sps, *result_field(out, "ms_per_step"), *result_field(out, "kernels"),
                     *result_field(out, "collectives")});
  }

  // The PyTorch yardstick, beside the 2-replica case.
  std::optional<double> torch_sps;
  std::string skipped;
  int status = 0;
  capture("python3 -c 'import torch' >/dev/null 2>&1", &status);
  if (status != 0) {
    skipped = "PyTorch not installed (apt-get install python3-torch)";
  } else {
    const std::string out = capture(std::string("python3 '") + CHORUS_TRAIN_BENCH_DIR +
                                        "/pytorch_ddp.py' --world-size 2 --steps " + std::to_string(steps) + " 2>&1",
                                    &status);
    torch_sps = result_field(out, "samples_per_s");
    if (status != 0 || !torch_sps) {
      torch_sps.reset();
      skipped = "PyTorch DDP run failed (exit " + std::to_string(status) + "): " + out.substr(0, 400);
    }
  }

  const unsigned cores = std::thread::hardware_concurrency();
  std::printf("seed CNN, global batch %lld, %d timed steps after %d warm-up, %u cores\n",
              static_cast<long long>(kGlobalBatch), steps, kWarmupSteps, cores);
  std::printf("%-9s %12s %10s %9s %12s %10s %14s %7s\n", "replicas", "samples/s", "ms/step", "kernels", "collectives",
              "elsewhere", "pytorch DDP", "ratio");
  std::string json = "{\"bench\":\"train\",\"machine\":\"" + std::to_string(cores) + " cores\",\"cases\":[";
  bool first = true;
  auto add = [&](const std::string& name, double value, const char* unit, const std::string& yard,
                 std::optional<double> yard_value, std::optional<double> ratio) {
    char buf[512];
    char yv[64] = "null", ra[64] = "null";
    if (yard_value) std::snprintf(yv, sizeof yv, "%.6g", *yard_value);
    if (ratio) std::snprintf(ra, sizeof ra, "%.4g", *ratio);
    std::snprintf(buf, sizeof buf,
                  "%s{\"case\":\"%s\",\"value\":%.6g,\"unit\":\"%s\",\"yardstick\":\"%s\",\"yardstick_value\":%s,"
                  "\"ratio\":%s}",
                  first ? "" : ",", name.c_str(), value, unit, yard.c_str(), yv, ra);
    json += buf;
    first = false;
  };
  for (const Case& c : cases) {
    const double elsewhere = 1.0 - c.kernels - c.collectives;
    const bool yard = c.replicas == 2 && torch_sps.has_value();
    char tcol[32] = "-", rcol[32] = "-";
    if (yard) {
      std::snprintf(tcol, sizeof tcol, "%.1f", *torch_sps);
      std::snprintf(rcol, sizeof rcol, "%.2f", c.samples_per_s / *torch_sps);
    } else if (c.replicas == 2) {
      std::snprintf(tcol, sizeof tcol, "skipped");
    }
    std::printf("%-9d %12.1f %10.2f %8.1f%% %11.1f%% %9.1f%% %14s %7s\n", c.replicas, c.samples_per_s, c.ms_per_step,
                100 * c.kernels, 100 * c.collectives, 100 * elsewhere, tcol, rcol);
    const std::string suffix = std::to_string(c.replicas) + (c.replicas == 1 ? " replica" : " replicas");
    if (c.replicas == 2) {
      add("samples/s " + suffix, c.samples_per_s, "samples/s",
          "PyTorch DDP gloo, 2 processes x 1 thread", torch_sps,
          torch_sps ? std::optional<double>(c.samples_per_s / *torch_sps) : std::nullopt);
    } else {
      add("samples/s " + suffix, c.samples_per_s, "samples/s", "none", std::nullopt, std::nullopt);
    }
    // Goal: elsewhere <= 10%; ratio = goal / value (> 1: goal met).
    add("elsewhere fraction " + suffix, elsewhere, "fraction", "goal <= 0.10", 0.10,
        elsewhere > 0 ? std::optional<double>(0.10 / elsewhere) : std::nullopt);
    add("kernel fraction " + suffix, c.kernels, "fraction", "none", std::nullopt, std::nullopt);
    add("collective fraction " + suffix, c.collectives, "fraction", "none", std::nullopt, std::nullopt);
  }
  if (!skipped.empty()) std::printf("skipped: %s\n", skipped.c_str());
  json += "]}";
  std::printf("%s\n", json.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  int replicas = 0, steps = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--quick") {
      quick = true;
    } else if (flag == "--replicas" && i + 1 < argc) {
      replicas = std::atoi(argv[++i]);
    } else if (flag == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else {
      std::cerr << "usage: bench_train [--quick] [--steps N]\n";
      return 2;
    }
  }
  if (steps <= 0) steps = quick ? 4 : 30;
  try {
    if (replicas > 0) return run_child(replicas, steps);
    return run_parent(steps);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
