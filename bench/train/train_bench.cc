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
// Multi-worker mode (issue 8), when the build has MPI and mpirun is found: the same model, batch,
// steps and repeats trained with MultiWorkerMirroredStrategy by 2 processes × 1 logical CPU device
// (each process: 1 op thread, as each replica of the 2-device run; `mpirun -np 2 bench_train
// --worker-child ...`, rank 0 reports), against the 1 process × 2 devices run of the same
// benchmark run; scaling efficiency = multi-worker samples/s ÷ single-process samples/s.
// Last line: one JSON line.
#include <chorus/chorus.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "bench/train/seed_cnn.h"
#include "core/profile.h"

namespace cx = chorus;

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::int64_t kGlobalBatch = cx::bench::kSeedGlobalBatch;
constexpr int kWarmupSteps = 3;

using cx::bench::capture;
using cx::bench::median;
using cx::bench::result_field;
using cx::bench::seed_cnn;
using cx::bench::self_path;

std::int64_t process_cpu_ns() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return (static_cast<std::int64_t>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000000 + u.ru_utime.tv_usec +
          u.ru_stime.tv_usec) *
         1000;
}

// One replica count, in this (child) process. Prints `RESULT ...` as its last line.
int run_child(int replicas, int steps, int repeats) {
  const cx::PhysicalDevice cpu = cx::config::list_physical_devices("CPU")[0];
  cx::config::set_logical_device_configuration(
      cpu, std::vector<cx::LogicalDeviceConfiguration>(static_cast<std::size_t>(replicas), {.memory_limit_mb = 1024}));
  cx::distribute::MirroredStrategy strategy;
  auto model = seed_cnn(strategy);
  auto ds = cx::bench::seed_training_data();
  model->fit(ds, {.epochs = 1, .steps_per_epoch = kWarmupSteps, .verbose = 0});

  // `repeats` timed fit calls of `steps` steps; samples/s is their median, the time split is over
  // all of them (counters and wall time summed).
  std::vector<double> sps;
  cx::profile::ProfileCounters c;
  double wall_ns = 0, process_cpu = 0;
  for (int rep = 0; rep < repeats; ++rep) {
    cx::profile::read_and_reset();
    cx::profile::enable_profiling(true);
    const std::int64_t cpu0 = process_cpu_ns();
    const auto start = Clock::now();
    model->fit(ds, {.epochs = 1, .steps_per_epoch = steps, .verbose = 0});
    const double w =
        static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
    process_cpu += static_cast<double>(process_cpu_ns() - cpu0);
    cx::profile::enable_profiling(false);
    const cx::profile::ProfileCounters r = cx::profile::read_and_reset();
    c.library_kernel_ns += r.library_kernel_ns;
    c.collective_ns += r.collective_ns;
    c.replica_step_ns += r.replica_step_ns;
    c.library_kernel_cpu_ns += r.library_kernel_cpu_ns;
    c.collective_cpu_ns += r.collective_cpu_ns;
    c.replica_step_cpu_ns += r.replica_step_cpu_ns;
    wall_ns += w;
    sps.push_back(static_cast<double>(steps * kGlobalBatch) / (w * 1e-9));
  }
  const double busy = replicas * wall_ns;  // summed per-replica time
  const auto d = [](std::int64_t v) { return static_cast<double>(v); };
  // Elsewhere, split: between steps (a replica thread outside the step body: the loop thread's
  // iterator, distribution, logs, and the hand-off to the replica threads); inside the step, CPU
  // the replica thread spent outside kernels and collectives (framework code); inside the step,
  // time it was not running outside kernels and collectives (blocked or descheduled).
  const double between = 1.0 - d(c.replica_step_ns) / busy;
  const double fw_cpu = (d(c.replica_step_cpu_ns) - d(c.library_kernel_cpu_ns) - d(c.collective_cpu_ns)) / busy;
  const double off_cpu = (d(c.replica_step_ns) - d(c.library_kernel_ns) - d(c.collective_ns)) / busy - fw_cpu;
  const double med = median(sps);
  std::printf(
      "RESULT replicas=%d samples_per_s=%.6g min_samples_per_s=%.6g max_samples_per_s=%.6g ms_per_step=%.6g "
      "kernels=%.6g collectives=%.6g between=%.6g fw_cpu=%.6g off_cpu=%.6g kernel_off_cpu=%.6g "
      "process_cpu_per_wall=%.6g\n",
      replicas, med, *std::min_element(sps.begin(), sps.end()), *std::max_element(sps.begin(), sps.end()),
      1e3 * kGlobalBatch / med, d(c.library_kernel_ns) / busy, d(c.collective_ns) / busy, between, fw_cpu, off_cpu,
      (d(c.library_kernel_ns) - d(c.library_kernel_cpu_ns)) / busy, process_cpu / wall_ns);
  return 0;
}

#if CHORUS_WITH_MPI
// One process of the multi-worker run: MultiWorkerMirroredStrategy over mpirun's processes, one
// logical CPU device each, one op thread each; rank 0 prints the RESULT line.
int run_worker_child(int steps, int repeats) {
  cx::collective::MpiEnvironment mpi;
  cx::config::set_intra_op_parallelism_threads(1);
  cx::distribute::MultiWorkerMirroredStrategy strategy({.cpu_devices_per_worker = 1});
  auto model = seed_cnn(strategy);
  auto ds = cx::bench::seed_training_data();  // the strategy shards each global batch over the workers
  model->fit(ds, {.epochs = 1, .steps_per_epoch = kWarmupSteps, .verbose = 0});
  std::vector<double> sps;
  for (int rep = 0; rep < repeats; ++rep) {
    const auto start = Clock::now();
    model->fit(ds, {.epochs = 1, .steps_per_epoch = steps, .verbose = 0});
    const double w = std::chrono::duration<double>(Clock::now() - start).count();
    sps.push_back(static_cast<double>(steps * kGlobalBatch) / w);
  }
  if (strategy.is_chief()) {
    std::printf("RESULT workers=%d samples_per_s=%.6g min_samples_per_s=%.6g max_samples_per_s=%.6g\n",
                strategy.num_workers(), median(sps), *std::min_element(sps.begin(), sps.end()),
                *std::max_element(sps.begin(), sps.end()));
    std::fflush(stdout);
  }
  return 0;
}
#endif

struct Case {
  int replicas;
  double samples_per_s, min_sps, max_sps, ms_per_step, kernels, collectives, between, fw_cpu, off_cpu, kernel_off_cpu,
      process_cpu_per_wall;
};

// The first Python that can import torch: `python3` on PATH (may be a pyenv or venv interpreter
// without system packages), then Debian's /usr/bin/python3 (where python3-torch installs).
std::optional<std::string> python_with_torch() {
  for (const char* py : {"python3", "/usr/bin/python3"}) {
    int status = 0;
    capture(std::string(py) + " -c 'import torch' >/dev/null 2>&1", &status);
    if (status == 0) return std::string(py);
  }
  return std::nullopt;
}

int run_parent(int steps, int repeats) {
  const std::string self = self_path("bench_train");
  std::vector<Case> cases;
  for (int r : {1, 2, 4}) {
    int status = 0;
    const std::string out = capture("'" + self + "' --replicas " + std::to_string(r) + " --steps " +
                                        std::to_string(steps) + " --repeats " + std::to_string(repeats),
                                    &status);
    const auto sps = result_field(out, "samples_per_s");
    if (status != 0 || !sps) {
      std::fprintf(stderr, "bench_train: the %d-replica run failed (exit %d):\n%s\n", r, status, out.c_str());
      return 1;
    }
    auto f = [&](const char* key) { return result_field(out, key).value_or(0.0); };
    cases.push_back({r, *sps, f("min_samples_per_s"), f("max_samples_per_s"), f("ms_per_step"), f("kernels"),
                     f("collectives"), f("between"), f("fw_cpu"), f("off_cpu"), f("kernel_off_cpu"),
                     f("process_cpu_per_wall")});
  }

  // The PyTorch yardstick, beside the 2-replica case: same steps, warm-up and repeats (median).
  std::optional<double> torch_sps;
  std::string skipped, torch_line;
  const std::optional<std::string> py = python_with_torch();
  if (!py) {
    skipped = "PyTorch not installed (apt-get install python3-torch)";
  } else {
    int status = 0;
    const std::string out =
        capture(*py + " '" + CHORUS_TRAIN_BENCH_DIR + "/pytorch_ddp.py' --world-size 2 --steps " +
                    std::to_string(steps) + " --warmup " + std::to_string(kWarmupSteps) + " --batch " +
                    std::to_string(kGlobalBatch) + " --repeats " + std::to_string(repeats) + " 2>&1",
                &status);
    torch_sps = result_field(out, "samples_per_s");
    if (status != 0 || !torch_sps) {
      torch_sps.reset();
      skipped = "PyTorch DDP run failed (exit " + std::to_string(status) + "): " + out.substr(0, 400);
    } else {
      const std::size_t p = out.find("pytorch ");
      if (p != std::string::npos) torch_line = out.substr(p, out.find('\n', p) - p);
    }
  }

  const unsigned cores = std::thread::hardware_concurrency();
  std::printf(
      "seed CNN, global batch %lld, %d warm-up steps, then %d x %d timed steps (samples/s: median of the %d, "
      "[min-max]), %u cores\n",
      static_cast<long long>(kGlobalBatch), kWarmupSteps, repeats, steps, repeats, cores);
  std::printf("%-8s %9s %15s %8s %8s %8s %9s | %8s %8s %8s | %7s %12s %6s\n", "replicas", "samples/s", "[min-max]",
              "ms/step", "kernels", "collect", "elsewhere", "between", "fw-cpu", "off-cpu", "cpu/wall", "pytorch DDP",
              "ratio");
  std::string json = "{\"bench\":\"train\",\"machine\":\"" + std::to_string(cores) + " cores\",\"cases\":[";
  bool first = true;
  auto add = [&](const std::string& name, double value, const char* unit, const std::string& yard,
                 std::optional<double> yard_value, std::optional<double> ratio) {
    char buf[640];
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
    char range[48];
    std::snprintf(range, sizeof range, "[%.0f-%.0f]", c.min_sps, c.max_sps);
    std::printf("%-8d %9.1f %15s %8.2f %7.1f%% %7.1f%% %8.1f%% | %7.1f%% %7.1f%% %7.1f%% | %7.2f %12s %6s\n",
                c.replicas, c.samples_per_s, range, c.ms_per_step, 100 * c.kernels, 100 * c.collectives,
                100 * elsewhere, 100 * c.between, 100 * c.fw_cpu, 100 * c.off_cpu, c.process_cpu_per_wall, tcol, rcol);
    const std::string suffix = std::to_string(c.replicas) + (c.replicas == 1 ? " replica" : " replicas");
    if (c.replicas == 2) {
      add("samples/s " + suffix, c.samples_per_s, "samples/s", "PyTorch DDP gloo, 2 processes x 1 thread", torch_sps,
          torch_sps ? std::optional<double>(c.samples_per_s / *torch_sps) : std::nullopt);
    } else {
      add("samples/s " + suffix, c.samples_per_s, "samples/s", "none", std::nullopt, std::nullopt);
    }
    // Goal: elsewhere <= 10%; ratio = goal / value (> 1: goal met).
    add("elsewhere fraction " + suffix, elsewhere, "fraction", "goal <= 0.10", 0.10,
        elsewhere > 0 ? std::optional<double>(0.10 / elsewhere) : std::nullopt);
    add("kernel fraction " + suffix, c.kernels, "fraction", "none", std::nullopt, std::nullopt);
    add("collective fraction " + suffix, c.collectives, "fraction", "none", std::nullopt, std::nullopt);
    add("elsewhere between-steps fraction " + suffix, c.between, "fraction", "none", std::nullopt, std::nullopt);
    add("elsewhere framework-cpu fraction " + suffix, c.fw_cpu, "fraction", "none", std::nullopt, std::nullopt);
    add("elsewhere off-cpu fraction " + suffix, c.off_cpu, "fraction", "none", std::nullopt, std::nullopt);
  }
  std::printf(
      "elsewhere = between + fw-cpu + off-cpu, of the summed replica-thread time (replicas x wall):\n"
      "  between: a replica thread outside the step body (loop thread: iterator, distribution, logs; hand-off)\n"
      "  fw-cpu:  CPU time of the replica threads in the step outside kernels and collectives (framework code)\n"
      "  off-cpu: time in the step outside kernels and collectives with the thread not running (blocked or\n"
      "           descheduled: more threads than cores, other processes)\n"
      "  cpu/wall: the process's CPU time over wall time (at most %u on this machine)\n",
      cores);
  for (const Case& c : cases)
    std::printf("  %d replica(s): kernels not running (descheduled inside a kernel) %.1f%% of replica time\n",
                c.replicas, 100 * c.kernel_off_cpu);
  if (!torch_line.empty()) std::printf("yardstick: %s\n", torch_line.c_str());

  // Multi-worker mode: 2 processes x 1 device against this run's 1 process x 2 devices.
  double mw_sps = 0;  // samples/s of the multi-worker run; 0: none (mw_skipped says why)
  std::string mw_skipped;
#if CHORUS_WITH_MPI
  {
    const char* root = getuid() == 0 ? " --allow-run-as-root" : "";
    int status = 0;
    const std::string out = capture(std::string(CHORUS_MPIEXEC) + root + " --oversubscribe --bind-to none -np 2 '" +
                                        self + "' --worker-child --steps " + std::to_string(steps) + " --repeats " +
                                        std::to_string(repeats) + " 2>&1",
                                    &status);
    mw_sps = status == 0 ? result_field(out, "samples_per_s").value_or(0) : 0;
    if (mw_sps <= 0) {
      mw_skipped = "multi-worker run failed (exit " + std::to_string(status) + "): " + out.substr(0, 400);
    }
  }
#else
  mw_skipped = "this build has no MPI";
#endif
  const Case* two = nullptr;
  for (const Case& c : cases)
    if (c.replicas == 2) two = &c;
  if (mw_sps > 0 && two) {
    const double efficiency = mw_sps / two->samples_per_s;
    std::printf(
        "multi-worker: 2 processes x 1 device %.1f samples/s vs 1 process x 2 devices %.1f samples/s: "
        "scaling efficiency %.2f\n",
        mw_sps, two->samples_per_s, efficiency);
    add("samples/s 2 workers x 1 device", mw_sps, "samples/s", "1 process x 2 devices (same run)", two->samples_per_s,
        efficiency);
  } else {
    std::printf("multi-worker: skipped: %s\n", mw_skipped.c_str());
  }
  if (!skipped.empty()) std::printf("skipped: %s\n", skipped.c_str());
  json += "]}";
  std::printf("%s\n", json.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, worker_child = false;
  int replicas = 0, steps = -1, repeats = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--quick") {
      quick = true;
    } else if (flag == "--worker-child") {
      worker_child = true;
    } else if (flag == "--replicas" && i + 1 < argc) {
      replicas = std::atoi(argv[++i]);
    } else if (flag == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (flag == "--repeats" && i + 1 < argc) {
      repeats = std::atoi(argv[++i]);
    } else {
      std::cerr << "usage: bench_train [--quick] [--steps N] [--repeats K]\n";
      return 2;
    }
  }
  if (steps <= 0) steps = quick ? 4 : 30;
  if (repeats <= 0) repeats = quick ? 1 : 5;
  try {
#if CHORUS_WITH_MPI
    if (worker_child) return run_worker_child(steps, repeats);
#else
    if (worker_child) throw chorus::UnavailableError("--worker-child needs a build with MPI");
#endif
    if (replicas > 0) return run_child(replicas, steps, repeats);
    return run_parent(steps, repeats);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
