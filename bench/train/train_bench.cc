// Training benchmark: samples/second of the seed CNN (examples/mnist_mirrored.cc) trained with
// Model::fit under MirroredStrategy, global batch 128, on 1, 2 and 4 logical CPU devices, with the
// share of step time spent in CPU kernels (oneDNN + chorus loops), in collectives, and elsewhere
// (framework overhead: op dispatch, tape, data pipeline, replica threads, waiting).
//
//   bench_train [--quick] [--steps N] [--repeats K]
//   bench_train --replicas R [--steps N] [--repeats K] [--save-every N]    (one child run)
//
// Device configuration is frozen per process, so each run is a child process: the benchmark
// re-executes itself with `--replicas R --steps N --repeats 1` and reads the child's RESULT line.
// Each child: 3 warm-up steps (fit with steps_per_epoch = 3), then N timed steps (default 30,
// --quick 4) in one fit call with verbose = 0 and core/profile.h's counters enabled; it also
// reports its peak RSS (getrusage). K rounds (default 5, --quick 1; --repeats K) alternate the
// sides: chorus 1 replica, TensorFlow one device, chorus 2 replicas, TensorFlow 2 devices, chorus 2
// replicas saving a checkpoint asynchronously every 10 steps (issue 24: ModelCheckpoint with
// async, model and Adam slots, --save-every N in the child), chorus 4 replicas. samples/s is the
// median of the rounds with their min-max; the time split is the median of each fraction. Goal
// (issue 24): the saving run's steps at most 5% slower than the plain 2-replica run's.
// Fractions: kernels = kernel_ns / (R × wall_ns), collectives = collective_ns / (R × wall_ns),
// elsewhere = 1 − both (the counters add up over the R replica threads); framework overhead =
// elsewhere − core-wait, the part of it a replica thread was ready to run but queued for a core
// (Linux schedstat run delay: core/profile.h), as a kernel's descheduled time counts as kernel time.
//
// Yardsticks (same run):
//   TensorFlow (issue 14), bench/train/tf_seed_cnn.py through $CHORUS_TF_PYTHON or the test venv:
//     the same model, optimizer, loss and cached synthetic batches with Keras fit on one CPU
//     device and under MirroredStrategy over 2 logical CPU devices; its intra-op and inter-op pools
//     2 threads each (chorus: 1 device with 2 oneDNN threads, or 2 devices with 1 each), steady
//     state only. Goals, printed PASS/FAIL and as JSON cases with their ratio: chorus 1 device ÷
//     TF one device ≥ 1.1; chorus 2 replicas ÷ TF MirroredStrategy ≥ 1.25; chorus 2 replicas ÷ TF
//     one device ≥ 1.05; framework overhead ≤ 5% with 1, 2 and 4 replicas; peak RSS ≤ 0.6 × TF's.
//     Skipped with the reason when no Python imports tensorflow.
//   PyTorch: bench/train/pytorch_ddp.py — DistributedDataParallel, gloo, two processes of one
//     thread, same model and batch — beside the 2-replica case, when `import torch` works;
//     otherwise listed as skipped and the JSON case has yardstick_value null.
// The header names the machine, its CPU and the ISA oneDNN chose.
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
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "bench/train/seed_cnn.h"
#include <chorus/core/profile.h>
#include <chorus/ops/cpu/dnn.h>

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

// This process's peak resident set (getrusage's ru_maxrss), MiB.
double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

// One replica count, in this (child) process. Prints `RESULT ...` as its last line.
// save_every > 0: the timed fit calls also save a checkpoint (model and optimizer) asynchronously
// every `save_every` steps, with callbacks::ModelCheckpoint and a CheckpointManager keeping 2, in a
// fresh directory under $TMPDIR (removed at the end); the warm-up makes one save first.
int run_child(int replicas, int steps, int repeats, int save_every) {
  const cx::PhysicalDevice cpu = cx::config::list_physical_devices("CPU")[0];
  cx::config::set_logical_device_configuration(
      cpu, std::vector<cx::LogicalDeviceConfiguration>(static_cast<std::size_t>(replicas), {.memory_limit_mb = 1024}));
  cx::distribute::MirroredStrategy strategy;
  auto model = seed_cnn(strategy);
  auto ds = cx::bench::seed_training_data();
  std::vector<cx::callbacks::CallbackPtr> callbacks;
  std::unique_ptr<cx::train::Checkpoint> ckpt;
  std::unique_ptr<cx::train::CheckpointManager> manager;
  std::string dir;
  if (save_every > 0) {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/chorus-bench-train-XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) throw cx::InternalError("bench_train: mkdtemp failed");
    dir = templ;
    ckpt.reset(new cx::train::Checkpoint({{"model", *model}, {"optimizer", model->optimizer()}}));
    manager = std::make_unique<cx::train::CheckpointManager>(*ckpt, dir, 2);
    callbacks.push_back(std::make_shared<cx::callbacks::ModelCheckpoint>(
        *manager, cx::callbacks::ModelCheckpoint::Options{.save_freq = save_every, .async = true}));
  }
  struct RemoveDir {
    const std::string& dir;
    ~RemoveDir() {
      if (!dir.empty()) std::filesystem::remove_all(dir);
    }
  } remove_dir{dir};
  // Profiling on from the warm-up: the replica threads' run-queue accounting then has a starting
  // point before the first timed step (read_and_reset below drops the warm-up's counts).
  cx::profile::enable_profiling(true);
  model->fit(ds, {.epochs = 1, .steps_per_epoch = kWarmupSteps, .verbose = 0});
  if (manager) manager->save();  // the first save (files, directory) outside the timed steps

  // `repeats` timed fit calls of `steps` steps; samples/s is their median, the time split is over
  // all of them (counters and wall time summed).
  std::vector<double> sps;
  cx::profile::ProfileCounters c;
  double wall_ns = 0, process_cpu = 0;
  for (int rep = 0; rep < repeats; ++rep) {
    cx::profile::read_and_reset();
    const std::int64_t cpu0 = process_cpu_ns();
    const auto start = Clock::now();
    model->fit(ds, {.epochs = 1, .steps_per_epoch = steps, .callbacks = callbacks, .verbose = 0});
    const double w =
        static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
    process_cpu += static_cast<double>(process_cpu_ns() - cpu0);
    const cx::profile::ProfileCounters r = cx::profile::read_and_reset();
    c.library_kernel_ns += r.library_kernel_ns;
    c.collective_ns += r.collective_ns;
    c.replica_step_ns += r.replica_step_ns;
    c.library_kernel_cpu_ns += r.library_kernel_cpu_ns;
    c.collective_cpu_ns += r.collective_cpu_ns;
    c.replica_step_cpu_ns += r.replica_step_cpu_ns;
    c.collective_run_queue_ns += r.collective_run_queue_ns;
    c.replica_step_run_queue_ns += r.replica_step_run_queue_ns;
    c.run_queue_ns += r.run_queue_ns;
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
  // Waiting for a core inside elsewhere: run-queue time (schedstat) between steps, and inside the
  // step outside collectives and kernels. Kernels are not read per call; their descheduled time
  // (wall − CPU) bounds their run-queue time from above, so the estimate errs toward overhead.
  const double kernel_off_cpu = (d(c.library_kernel_ns) - d(c.library_kernel_cpu_ns)) / busy;
  const double rq_between = std::max(0.0, d(c.run_queue_ns) - d(c.replica_step_run_queue_ns)) / busy;
  const double rq_step_elsewhere =
      std::max(0.0, (d(c.replica_step_run_queue_ns) - d(c.collective_run_queue_ns)) / busy - kernel_off_cpu);
  const double elsewhere = 1.0 - (d(c.library_kernel_ns) + d(c.collective_ns)) / busy;
  const double core_wait = std::clamp(rq_between + rq_step_elsewhere, 0.0, std::max(0.0, elsewhere));
  const double med = median(sps);
  std::printf(
      "RESULT replicas=%d samples_per_s=%.6g min_samples_per_s=%.6g max_samples_per_s=%.6g ms_per_step=%.6g "
      "kernels=%.6g collectives=%.6g between=%.6g fw_cpu=%.6g off_cpu=%.6g kernel_off_cpu=%.6g core_wait=%.6g "
      "run_queue=%.6g process_cpu_per_wall=%.6g peak_rss_mib=%.6g\n",
      replicas, med, *std::min_element(sps.begin(), sps.end()), *std::max_element(sps.begin(), sps.end()),
      1e3 * kGlobalBatch / med, d(c.library_kernel_ns) / busy, d(c.collective_ns) / busy, between, fw_cpu, off_cpu,
      kernel_off_cpu, core_wait, d(c.run_queue_ns) / busy, process_cpu / wall_ns, peak_rss_mib());
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
      core_wait, run_queue, process_cpu_per_wall, peak_rss_mib;
  // Framework overhead, issue 14's goal: elsewhere less its time waiting for a core. A kernel
  // descheduled for another replica's kernel already counts as kernel time; a replica thread
  // queued for a core between steps (4 replicas on 2 cores) is the same wait, not framework work.
  double overhead = 0;
};

Case with_overhead(Case c) {
  c.overhead = 1.0 - c.kernels - c.collectives - c.core_wait;
  return c;
}

// One side's rounds combined: samples/s the median of the rounds' (min-max over all of them), the
// time split the median of each fraction, peak RSS the largest.
Case combine(const std::vector<Case>& rounds) {
  auto med = [&](double Case::*field) {
    std::vector<double> v;
    for (const Case& c : rounds) v.push_back(c.*field);
    return median(v);
  };
  Case c = rounds.front();
  c.samples_per_s = med(&Case::samples_per_s);
  c.ms_per_step = 1e3 * kGlobalBatch / c.samples_per_s;
  for (double Case::*f :
       {&Case::kernels, &Case::collectives, &Case::between, &Case::fw_cpu, &Case::off_cpu, &Case::kernel_off_cpu,
        &Case::core_wait, &Case::run_queue, &Case::process_cpu_per_wall, &Case::overhead})
    c.*f = med(f);
  for (const Case& r : rounds) {
    c.min_sps = std::min(c.min_sps, r.min_sps);
    c.max_sps = std::max(c.max_sps, r.max_sps);
    c.peak_rss_mib = std::max(c.peak_rss_mib, r.peak_rss_mib);
  }
  return c;
}

// The TensorFlow yardstick (bench/train/tf_seed_cnn.py): one device, or MirroredStrategy over 2
// logical CPU devices; samples/s of each round and the largest peak RSS.
struct TfSide {
  std::vector<double> sps;
  double peak_rss_mib = 0;
  std::string line;  // the script's readable line, last round's
  double median_sps() const { return median(sps); }
};

// What the alternating rounds measured: chorus with 1, 2 and 4 replicas, chorus with 2 replicas
// saving asynchronously, and TensorFlow's two sides (or why TensorFlow was skipped).
struct Rounds {
  std::vector<Case> cases;  // 1, 2, 4 replicas
  Case saving{};            // 2 replicas, an async save every kSaveEvery steps (issue 24)
  TfSide tf[2];             // [0]: one device, [1]: MirroredStrategy over 2 logical devices
  std::string tf_skipped;
};
constexpr int kSaveEvery = 10;

// Rounds alternate the sides: chorus 1 replica, TensorFlow one device, chorus 2 replicas,
// TensorFlow 2 devices, chorus 2 replicas saving asynchronously every kSaveEvery steps (issue
// 24), chorus 4 replicas; each run in a fresh process, one window of `steps`. nullopt when a
// chorus run failed (printed to stderr).
std::optional<Rounds> run_rounds(const std::string& self, int steps, int repeats) {
  Rounds out;
  // TensorFlow, when its Python imports it: checked once, then one run per side and round.
  std::string tf_py = cx::bench::tf_python();
  std::string& tf_skipped = out.tf_skipped;
  if (tf_py.empty()) {
    tf_skipped = "no Python for TensorFlow (set CHORUS_TF_PYTHON, or make the test venv: scripts/test-python-env.sh)";
  } else {
    int status = 0;
    capture("'" + tf_py + "' -c 'import tensorflow' >/dev/null 2>&1", &status);
    if (status != 0) tf_skipped = "'" + tf_py + "' cannot import tensorflow";
  }
  const auto run_tf = [&](int devices) {
    if (!tf_skipped.empty()) return;
    int status = 0;
    const std::string text =
        capture("'" + tf_py + "' '" + CHORUS_TRAIN_BENCH_DIR + "/tf_seed_cnn.py' --devices " + std::to_string(devices) +
                    " --threads 2 --steps " + std::to_string(steps) + " --warmup " + std::to_string(kWarmupSteps) +
                    " --batch " + std::to_string(kGlobalBatch) + " --repeats 1 2>&1",
                &status);
    const auto sps = result_field(text, "samples_per_s");
    if (status != 0 || !sps) {
      tf_skipped = "TensorFlow run failed (exit " + std::to_string(status) + "): " + text.substr(0, 400);
      return;
    }
    TfSide& side = out.tf[devices - 1];
    side.sps.push_back(*sps);
    side.peak_rss_mib = std::max(side.peak_rss_mib, result_field(text, "peak_rss_mib").value_or(0.0));
    const std::size_t p = text.find("tensorflow ");
    if (p != std::string::npos) side.line = text.substr(p, text.find('\n', p) - p);
  };
  struct Run {
    int replicas, save_every;
  };
  const Run runs[4] = {{1, 0}, {2, 0}, {2, kSaveEvery}, {4, 0}};
  std::vector<Case> rounds[4];
  for (int round = 0; round < repeats; ++round) {
    for (int i = 0; i < 4; ++i) {
      const int r = runs[i].replicas;
      int status = 0;
      const std::string text =
          capture("'" + self + "' --replicas " + std::to_string(r) + " --steps " + std::to_string(steps) +
                      " --repeats 1 --save-every " + std::to_string(runs[i].save_every),
                  &status);
      const auto sps = result_field(text, "samples_per_s");
      if (status != 0 || !sps) {
        std::fprintf(stderr, "bench_train: the %d-replica run failed (exit %d):\n%s\n", r, status, text.c_str());
        return std::nullopt;
      }
      auto f = [&](const char* key) { return result_field(text, key).value_or(0.0); };
      rounds[i].push_back(
          with_overhead({r, *sps, f("min_samples_per_s"), f("max_samples_per_s"), f("ms_per_step"), f("kernels"),
                         f("collectives"), f("between"), f("fw_cpu"), f("off_cpu"), f("kernel_off_cpu"), f("core_wait"),
                         f("run_queue"), f("process_cpu_per_wall"), f("peak_rss_mib")}));
      if (r <= 2 && runs[i].save_every == 0) run_tf(r);
    }
  }
  for (int i : {0, 1, 3}) out.cases.push_back(combine(rounds[i]));
  out.saving = combine(rounds[2]);
  return out;
}

// The PyTorch yardstick, beside the 2-replica case: same steps, warm-up and repeats (median).
struct TorchSide {
  std::optional<double> sps;
  std::string skipped, line;
};

TorchSide run_pytorch_ddp(int steps, int repeats) {
  TorchSide t;
  std::string torch_why;
  const std::string py = cx::bench::python_with_torch(&torch_why);
  if (py.empty()) {
    t.skipped = "PyTorch not installed (apt-get install python3-torch): " + torch_why;
    return t;
  }
  int status = 0;
  const std::string out =
      capture(py + " '" + CHORUS_TRAIN_BENCH_DIR + "/pytorch_ddp.py' --world-size 2 --steps " + std::to_string(steps) +
                  " --warmup " + std::to_string(kWarmupSteps) + " --batch " + std::to_string(kGlobalBatch) +
                  " --repeats " + std::to_string(repeats) + " 2>&1",
              &status);
  t.sps = result_field(out, "samples_per_s");
  if (status != 0 || !t.sps) {
    t.sps.reset();
    t.skipped = "PyTorch DDP run failed (exit " + std::to_string(status) + "): " + out.substr(0, 400);
  } else {
    const std::size_t p = out.find("pytorch ");
    if (p != std::string::npos) t.line = out.substr(p, out.find('\n', p) - p);
  }
  return t;
}

// The JSON line's cases, added in order.
struct JsonCases {
  std::vector<cx::bench::Json> cases;
  void add(const std::string& name, double value, const char* unit, const std::string& yard,
           std::optional<double> yard_value, std::optional<double> ratio) {
    cases.push_back(cx::bench::json_case(name, value, unit, yard, yard_value, ratio, 6, 4));
  }
};

// The table of chorus's cases (time split, PyTorch beside 2 replicas) and its legend.
void print_cases(const std::vector<Case>& cases, const TorchSide& torch, JsonCases& json) {
  std::printf("%-8s %9s %15s %8s %8s %8s %9s | %8s %8s %8s %8s | %9s | %7s %12s %6s\n", "replicas", "samples/s",
              "[min-max]", "ms/step", "kernels", "collect", "elsewhere", "between", "fw-cpu", "off-cpu", "core-wait",
              "overhead", "cpu/wall", "pytorch DDP", "ratio");
  const unsigned cores = std::thread::hardware_concurrency();
  const std::optional<double>& torch_sps = torch.sps;
  auto add = [&](auto&&... a) { json.add(a...); };
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
    std::printf(
        "%-8d %9.1f %15s %8.2f %7.1f%% %7.1f%% %8.1f%% | %7.1f%% %7.1f%% %7.1f%% %7.1f%% | %8.1f%% | %7.2f %12s %6s\n",
        c.replicas, c.samples_per_s, range, c.ms_per_step, 100 * c.kernels, 100 * c.collectives, 100 * elsewhere,
        100 * c.between, 100 * c.fw_cpu, 100 * c.off_cpu, 100 * c.core_wait, 100 * c.overhead, c.process_cpu_per_wall,
        tcol, rcol);
    const std::string suffix = std::to_string(c.replicas) + (c.replicas == 1 ? " replica" : " replicas");
    if (c.replicas == 2) {
      add("samples/s " + suffix, c.samples_per_s, "samples/s", "PyTorch DDP gloo, 2 processes x 1 thread", torch_sps,
          torch_sps ? std::optional<double>(c.samples_per_s / *torch_sps) : std::nullopt);
    } else {
      add("samples/s " + suffix, c.samples_per_s, "samples/s", "none", std::nullopt, std::nullopt);
    }
    // Goal (issue 14): framework overhead <= 5%; ratio = goal / value (> 1: goal met).
    add("framework overhead fraction " + suffix, c.overhead, "fraction", "goal <= 0.05", 0.05,
        c.overhead > 0 ? std::optional<double>(0.05 / c.overhead) : std::nullopt);
    add("elsewhere fraction " + suffix, elsewhere, "fraction", "none", std::nullopt, std::nullopt);
    add("elsewhere waiting-for-a-core fraction " + suffix, c.core_wait, "fraction", "none", std::nullopt, std::nullopt);
    add("peak RSS MiB " + suffix, c.peak_rss_mib, "MiB", "none", std::nullopt, std::nullopt);
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
      "  core-wait: the part of elsewhere a replica thread was ready to run but queued for a core (Linux\n"
      "           schedstat run delay, between steps and inside the step outside kernels and collectives;\n"
      "           a kernel's descheduled time already counts as kernel time)\n"
      "  overhead: elsewhere - core-wait, the framework overhead (issue 14's goal: <= 5%%)\n"
      "  cpu/wall: the process's CPU time over wall time (at most %u on this machine)\n",
      cores);
  for (const Case& c : cases)
    std::printf("  %d replica(s): kernels not running (descheduled inside a kernel) %.1f%% of replica time\n",
                c.replicas, 100 * c.kernel_off_cpu);
  if (!torch.line.empty()) std::printf("yardstick: %s\n", torch.line.c_str());
}

// Issue 14's goals against TensorFlow and issue 24's async-save goal: lines "PASS|FAIL  what:
// detail" into `goal_lines`, and their JSON cases.
void tf_and_save_goals(const Rounds& rounds, JsonCases& json, std::vector<std::string>& goal_lines) {
  const std::vector<Case>& cases = rounds.cases;
  const TfSide* tf = rounds.tf;
  const std::string& tf_skipped = rounds.tf_skipped;
  const Case& saving = rounds.saving;
  auto add = [&](auto&&... a) { json.add(a...); };
  const auto goal = [&](const std::string& what, bool pass, const std::string& detail) {
    goal_lines.push_back(std::string(pass ? "PASS" : "FAIL") + "  " + what + ": " + detail);
  };
  char buf[256];
  for (const Case& c : cases) {
    std::snprintf(buf, sizeof buf, "%.1f%% (elsewhere %.1f%%, of it waiting for a core %.1f%%)", 100 * c.overhead,
                  100 * (1.0 - c.kernels - c.collectives), 100 * c.core_wait);
    goal("framework overhead <= 5% with " + std::to_string(c.replicas) + " replica(s)", c.overhead <= 0.05, buf);
  }
  if (tf_skipped.empty() && !tf[0].sps.empty() && !tf[1].sps.empty()) {
    const double tf1 = tf[0].median_sps(), tf2 = tf[1].median_sps();
    const auto range = [](const std::vector<double>& v) {
      char r[64];
      std::snprintf(r, sizeof r, "[%.0f-%.0f]", *std::min_element(v.begin(), v.end()),
                    *std::max_element(v.begin(), v.end()));
      return std::string(r);
    };
    std::printf(
        "TensorFlow (same run, alternating, 2 intra-op + 2 inter-op threads; chorus: 1 device x 2 oneDNN "
        "threads, 2 devices x 1):\n");
    std::printf("  one device:                    %9.1f samples/s %15s, peak RSS %.0f MiB\n", tf1,
                range(tf[0].sps).c_str(), tf[0].peak_rss_mib);
    std::printf("  MirroredStrategy, 2 devices:   %9.1f samples/s %15s, peak RSS %.0f MiB\n", tf2,
                range(tf[1].sps).c_str(), tf[1].peak_rss_mib);
    std::printf("  %s\n", tf[0].line.c_str());
    const Case& one = cases[0];
    const Case& two_r = cases[1];
    const auto ratio_goal = [&](const std::string& what, double mine, double theirs, double target,
                                const std::string& yard_name) {
      std::snprintf(buf, sizeof buf, "%.0f / %.0f = %.2f (goal >= %.2f)", mine, theirs, mine / theirs, target);
      goal(what, mine / theirs >= target, buf);
      add(what, mine, "samples/s", yard_name, theirs, mine / theirs);
    };
    ratio_goal("chorus 1 device / TensorFlow one device", one.samples_per_s, tf1, 1.1, "TensorFlow one CPU device");
    ratio_goal("chorus 2 replicas / TensorFlow MirroredStrategy 2 devices", two_r.samples_per_s, tf2, 1.25,
               "TensorFlow MirroredStrategy, 2 logical CPU devices");
    ratio_goal("chorus 2 replicas / TensorFlow one device", two_r.samples_per_s, tf1, 1.05,
               "TensorFlow one CPU device");
    for (int i = 0; i < 2; ++i) {
      const Case& c = cases[static_cast<std::size_t>(i)];
      const double ratio = c.peak_rss_mib / tf[i].peak_rss_mib;
      std::snprintf(buf, sizeof buf, "%.0f / %.0f MiB = %.2f (goal <= 0.60)", c.peak_rss_mib, tf[i].peak_rss_mib,
                    ratio);
      const std::string what = std::string("peak RSS, chorus ") + (i == 0 ? "1 device" : "2 replicas") +
                               " / TensorFlow " + (i == 0 ? "one device" : "2 devices");
      goal(what, ratio <= 0.6, buf);
      add(what, c.peak_rss_mib, "MiB", i == 0 ? "TensorFlow one CPU device" : "TensorFlow MirroredStrategy, 2 devices",
          tf[i].peak_rss_mib, ratio);
    }
  } else {
    std::printf("TensorFlow: skipped: %s\n", tf_skipped.c_str());
  }
  {  // Issue 24: training steps while async saves write in the background.
    const Case& plain = cases[1];
    const double slowdown = plain.samples_per_s / saving.samples_per_s - 1.0;
    std::printf(
        "async checkpoint every %d steps (issue 24; ModelCheckpoint async, model + Adam slots, 2 replicas): "
        "%.1f samples/s [%.0f-%.0f] vs %.1f without saves: steps %.1f%% slower\n",
        kSaveEvery, saving.samples_per_s, saving.min_sps, saving.max_sps, plain.samples_per_s, 100 * slowdown);
    std::snprintf(buf, sizeof buf, "%+.1f%% (goal <= 5%%)", 100 * slowdown);
    goal_lines.push_back(std::string(slowdown <= 0.05 ? "PASS" : "FAIL") + "  steps slower with an async save every " +
                         std::to_string(kSaveEvery) + " steps (issue 24): " + buf);
    add("samples/s 2 replicas, async save every " + std::to_string(kSaveEvery) + " steps", saving.samples_per_s,
        "samples/s", "2 replicas without saves (same run)", plain.samples_per_s,
        saving.samples_per_s / plain.samples_per_s);
  }
}

// Multi-worker mode: 2 processes x 1 device, samples/s; 0 with `skipped` saying why.
double run_multi_worker(const std::string& self, int steps, int repeats, std::string* skipped) {
  double mw_sps = 0;
#if CHORUS_WITH_MPI
  const char* root = getuid() == 0 ? " --allow-run-as-root" : "";
  int status = 0;
  const std::string out = capture(std::string(CHORUS_MPIEXEC) + root + " --oversubscribe --bind-to none -np 2 '" +
                                      self + "' --worker-child --steps " + std::to_string(steps) + " --repeats " +
                                      std::to_string(repeats) + " 2>&1",
                                  &status);
  mw_sps = status == 0 ? result_field(out, "samples_per_s").value_or(0) : 0;
  if (mw_sps <= 0) *skipped = "multi-worker run failed (exit " + std::to_string(status) + "): " + out.substr(0, 400);
#else
  (void)self;
  (void)steps;
  (void)repeats;
  *skipped = "this build has no MPI";
#endif
  return mw_sps;
}

int run_parent(int steps, int repeats) {
  const std::string self = self_path("bench_train");
  const std::optional<Rounds> rounds = run_rounds(self, steps, repeats);
  if (!rounds) return 1;
  const std::vector<Case>& cases = rounds->cases;
  const TorchSide torch = run_pytorch_ddp(steps, repeats);

  const std::string machine = cx::bench::machine(true) + ", oneDNN " + cx::ops::cpu::onednn_isa();
  std::printf(
      "seed CNN, global batch %lld; each run a fresh process: %d warm-up steps, then %d timed steps; %d rounds "
      "alternating chorus and TensorFlow (samples/s: median of the rounds, [min-max])\nmachine: %s\n",
      static_cast<long long>(kGlobalBatch), kWarmupSteps, steps, repeats, machine.c_str());
  JsonCases json;
  print_cases(cases, torch, json);
  std::vector<std::string> goal_lines;
  tf_and_save_goals(*rounds, json, goal_lines);
  std::printf("goals (issues 14, 24):\n");
  for (const std::string& line : goal_lines) std::printf("  %s\n", line.c_str());

  // Multi-worker mode: 2 processes x 1 device against this run's 1 process x 2 devices.
  std::string mw_skipped;
  const double mw_sps = run_multi_worker(self, steps, repeats, &mw_skipped);
  const Case* two = nullptr;
  for (const Case& c : cases)
    if (c.replicas == 2) two = &c;
  if (mw_sps > 0 && two) {
    const double efficiency = mw_sps / two->samples_per_s;
    std::printf(
        "multi-worker: 2 processes x 1 device %.1f samples/s vs 1 process x 2 devices %.1f samples/s: "
        "scaling efficiency %.2f\n",
        mw_sps, two->samples_per_s, efficiency);
    json.add("samples/s 2 workers x 1 device", mw_sps, "samples/s", "1 process x 2 devices (same run)",
             two->samples_per_s, efficiency);
  } else {
    std::printf("multi-worker: skipped: %s\n", mw_skipped.c_str());
  }
  if (!torch.skipped.empty()) std::printf("skipped: %s\n", torch.skipped.c_str());
  cx::bench::print_json_line("train", machine, json.cases);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (auto rc = chorus::launch::answer_help_or_version(
          argc, argv, "bench_train",
          "usage: bench_train [--quick] [--steps N] [--repeats K]\n       bench_train --replicas R [--steps N] [--repeats K] [--save-every N]\n"))
    return *rc;
  bool quick = false, worker_child = false;
  int replicas = 0, steps = -1, repeats = -1, save_every = 0;
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
    } else if (flag == "--save-every" && i + 1 < argc) {
      save_every = std::atoi(argv[++i]);
    } else {
      return cx::launch::usage_error("bench_train", flag,
                                     "usage: bench_train [--quick] [--steps N] [--repeats K]\n"
                                     "       bench_train --replicas R [--steps N] [--repeats K] [--save-every N]\n");
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
    if (replicas > 0) return run_child(replicas, steps, repeats, save_every);
    return run_parent(steps, repeats);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
