// Sharded checkpoints against the gather-to-chief save they replace, in the same run, on the same
// model (docs/checkpoints.md "Sharded checkpoints").
//
//   bench_sharded_checkpoint [--mib=256] [--reps=5] [--dir=/tmp] [--workers=4] [--quick]
//
// The model: float32 variables of 16 MiB, --mib in total, ZeRO stage 3 over 4 replicas (every
// parameter is 4 shards). Two configurations, each in its own processes:
//   workers   `mpirun -np <workers>` (MultiWorkerMirroredStrategy, one CPU device per worker);
//   devices   one process, MirroredStrategy on 4 logical CPU devices.
// In each, per repetition (the order of the two methods alternating):
//   save      sharded: Checkpoint::write — every worker writes its own shards into its own data
//             file, the chief the index; yardstick chief: Checkpoint::write(..., {.sharded =
//             false}) — every tensor gathered whole to the chief (all-gathered to every worker,
//             as MultiWorkerMirroredStrategy's gather does), the chief writes alone;
//   restore   sharded: Checkpoint::read of the sharded save — each worker reads its shards' ranges
//             from the slices they overlap; yardstick whole: the restore of before, BundleReader::
//             read of every whole tensor of the chief's save on every worker, then the variable's
//             restore() (each local shard its slice).
// Times run from a worker barrier to the end of the call on the slowest worker (a save ends in the
// strategy's barrier); GB/s = model bytes / time. Files are dropped from the page cache before a
// restore (fdatasync + POSIX_FADV_DONTNEED). One untimed save and restore of each first. Reported:
// the median of --reps and the ratio sharded / yardstick (> 1: sharded is faster); goal (issue
// 45): sharded save >= 1.5x the chief save with 4 workers (PASS/FAIL printed; the exit status is
// 0 unless a run broke or read back a wrong value).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include <chorus/checkpoint/bundle.h>
#include <chorus/checkpoint/checkpoint.h>
#include <chorus/core/config.h>
#include <chorus/core/distributed_variable.h>
#include <chorus/core/error.h>
#include <chorus/core/runtime.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/distribute/multi_worker_mirrored_strategy.h>
#include <chorus/launch/cli.h>
#if CHORUS_WITH_MPI
#include <chorus/collective/mpi/mpi.h>
#endif

namespace chorus {
namespace {

constexpr std::int64_t kVariableFloats = (16 << 20) / 4;
constexpr const char* kUsage =
    "usage: bench_sharded_checkpoint [--mib=256] [--reps=5] [--dir=/tmp] [--workers=4] [--quick]\n";

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void drop_cache(const std::string& prefix) {
  const std::filesystem::path p(prefix);
  for (const auto& e : std::filesystem::directory_iterator(p.parent_path())) {
    if (e.path().filename().string().rfind(p.filename().string() + ".", 0) != 0) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// ---- the child: one configuration, all repetitions ----

struct Child {
  std::unique_ptr<distribute::Strategy> strategy;
  std::vector<Variable> vars;
  std::unique_ptr<train::Checkpoint> ckpt;
  bool chief = true;

  void barrier(const std::string& tag) { strategy->worker_barrier(tag); }

  // Seconds of f() from a barrier to the slowest worker's end.
  template <typename F>
  double timed(const std::string& tag, F&& f) {
    barrier(tag + " start");
    const double t0 = now();
    f();
    const double mine = now() - t0;
    auto* mw = dynamic_cast<distribute::MultiWorkerMirroredStrategy*>(strategy.get());
    if (!mw) return mine;
    std::vector<double> all(static_cast<std::size_t>(mw->num_workers()), 0.0);  // one-hot, summed: all times
    all[static_cast<std::size_t>(mw->worker_index())] = mine;
    all = mw->sum_over_workers(all);
    return *std::max_element(all.begin(), all.end());
  }

  // The restore of before: every whole tensor read on every worker, each shard given its slice.
  void restore_whole(const std::string& path) {
    const train::BundleReader reader(path);
    for (std::size_t i = 0; i < vars.size(); ++i)
      as_distributed(vars[i])->restore(reader.read("v" + std::to_string(i) + "/.ATTRIBUTES/VARIABLE_VALUE"));
  }

  // Whether the first and the last variable hold `want` at both ends (a collective with several
  // workers: every worker calls it).
  bool check(float want) {
    for (const Variable* v : {&vars.front(), &vars.back()}) {
      const std::vector<float> got = as_distributed(*v)->checkpoint_value().to_vector<float>();
      if (got.front() != want || got.back() != want) return false;
    }
    return true;
  }
};

int run_child(const std::string& mode, int mib, int reps, const std::string& dir) {
#if CHORUS_WITH_MPI
  std::optional<collective::MpiEnvironment> mpi;  // outlives the strategy
  if (mode == "workers") mpi.emplace();
#endif
  Child c;
  if (mode == "workers") {
    c.strategy = std::make_unique<distribute::MultiWorkerMirroredStrategy>(
        distribute::MultiWorkerMirroredStrategyOptions{.cpu_devices_per_worker = 1, .sharding = {.stage = 3}});
    c.chief = c.strategy->is_chief();
  } else {
    config::set_visible_devices({}, "GPU");
    config::set_logical_device_configuration(
        config::list_physical_devices("CPU")[0],
        std::vector<LogicalDeviceConfiguration>(4, {.memory_limit_mb = 2 * mib + 64}));
    c.strategy =
        std::make_unique<distribute::MirroredStrategy>(std::vector<std::string>{"/cpu:0", "/cpu:1", "/cpu:2", "/cpu:3"},
                                                       distribute::MirroredStrategyOptions{.sharding = {.stage = 3}});
  }
  const int n = std::max(1, mib / 16);
  {
    auto scope = c.strategy->scope();
    for (int i = 0; i < n; ++i)
      c.vars.push_back(
          make_variable({.initial_value = Tensor::full({kVariableFloats}, 1.0), .name = "v" + std::to_string(i)}));
  }
  std::vector<train::TrackableChild> children;
  for (const Variable& v : c.vars) children.push_back({v.name(), train::TrackableRef(v)});
  c.ckpt = std::make_unique<train::Checkpoint>(std::move(children));
  const std::string sharded = dir + "/sharded", whole = dir + "/whole";
  std::vector<double> save_s, save_c, restore_s, restore_w;
  bool ok = true;
  for (int rep = -1; rep < reps; ++rep) {  // rep -1: untimed
    const auto save = [&](bool shard) {
      const double t = c.timed("save", [&] { c.ckpt->write(shard ? sharded : whole, {.sharded = shard}); });
      if (rep >= 0) (shard ? save_s : save_c).push_back(t);
    };
    if (rep % 2 == 0) {
      save(true), save(false);
    } else {
      save(false), save(true);
    }
    for (const auto& [first, second] : {std::pair{true, false}, std::pair{false, true}}) {
      (void)second;
      const bool shard = rep % 2 == 0 ? first : !first;
      for (Variable& v : c.vars) v.assign(Tensor::zeros({kVariableFloats}));
      if (c.chief) drop_cache(shard ? sharded : whole);
      const double t = c.timed("restore", [&] {
        if (shard) {
          c.ckpt->read(sharded);
        } else {
          c.restore_whole(whole);
        }
        c.barrier("restored");
      });
      ok = ok && c.check(1.0f);
      if (rep >= 0) (shard ? restore_s : restore_w).push_back(t);
    }
    c.barrier("rep");
    if (c.chief) {
      train::delete_bundle(sharded);
      train::delete_bundle(whole);
    }
  }
  if (c.chief) {
    const double gb = static_cast<double>(n) * kVariableFloats * 4 / 1e9;
    std::printf("RESULT save_sharded=%.6f save_chief=%.6f restore_sharded=%.6f restore_whole=%.6f ok=%d\n",
                gb / bench::median(save_s), gb / bench::median(save_c), gb / bench::median(restore_s),
                gb / bench::median(restore_w), ok ? 1 : 0);
  }
  return ok ? 0 : 1;
}

// ---- the launcher ----

struct Row {
  std::string config;
  double save_sharded = 0, save_chief = 0, restore_sharded = 0, restore_whole = 0;
};

std::optional<Row> run_config(const std::string& config, const std::string& command, std::string* why) {
  int status = 0;
  const std::string out = bench::capture(command + " 2>&1", &status);
  Row r{config};
  const auto f = [&](const char* k) { return bench::result_field(out, k); };
  if (status == 0 && f("ok") && *f("ok") == 1 && f("save_sharded") && f("save_chief") && f("restore_sharded") &&
      f("restore_whole")) {
    r.save_sharded = *f("save_sharded"), r.save_chief = *f("save_chief");
    r.restore_sharded = *f("restore_sharded"), r.restore_whole = *f("restore_whole");
    return r;
  }
  *why = "exit " + std::to_string(status) + ": " + out.substr(out.size() > 600 ? out.size() - 600 : 0);
  return std::nullopt;
}

int run(int argc, char** argv) {
  if (auto rc = launch::answer_help_or_version(argc, argv, "bench_sharded_checkpoint", kUsage)) return *rc;
  int mib = 256, reps = 5, workers = 4;
  std::string base = "/tmp";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--child=", 0) == 0) {  // --child=<mode>:<mib>:<reps>:<dir>
      const std::string s = a.substr(8);
      const std::size_t p1 = s.find(':'), p2 = s.find(':', p1 + 1), p3 = s.find(':', p2 + 1);
      if (p3 == std::string::npos) return launch::usage_error("bench_sharded_checkpoint", a, kUsage);
      return run_child(s.substr(0, p1), std::stoi(s.substr(p1 + 1, p2 - p1 - 1)),
                       std::stoi(s.substr(p2 + 1, p3 - p2 - 1)), s.substr(p3 + 1));
    }
    if (a.rfind("--mib=", 0) == 0) {
      mib = std::max(16, std::stoi(a.substr(6)));
    } else if (a.rfind("--reps=", 0) == 0) {
      reps = std::max(1, std::stoi(a.substr(7)));
    } else if (a.rfind("--workers=", 0) == 0) {
      workers = std::max(2, std::stoi(a.substr(10)));
    } else if (a.rfind("--dir=", 0) == 0) {
      base = a.substr(6);
    } else if (a == "--quick") {
      mib = 32, reps = 1, workers = 2;
    } else {
      return launch::usage_error("bench_sharded_checkpoint", a, kUsage);
    }
  }
  const std::string dir = base + "/chorus_sharded_checkpoint_bench_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string self = "'" + bench::self_path(argv[0]) + "'";
  const std::string spec = std::to_string(mib) + ":" + std::to_string(reps) + ":" + dir;
  const std::string mpirun = std::string("mpirun --oversubscribe") + (::geteuid() == 0 ? " --allow-run-as-root" : "");
  std::printf("bench_sharded_checkpoint: %d MiB of float32 (16 MiB variables, ZeRO stage 3), median of %d; %s\n", mib,
              reps, bench::machine(true).c_str());
  std::vector<Row> rows;
  std::vector<std::string> failures;
  const std::vector<std::pair<std::string, std::string>> configs{
      {std::to_string(workers) + " workers",
       mpirun + " -np " + std::to_string(workers) + " " + self + " --child=workers:" + spec},
      {"4 devices", self + " --child=devices:" + spec}};
  for (const auto& [name, command] : configs) {
    std::string why;
    if (auto r = run_config(name, command, &why)) {
      rows.push_back(*r);
    } else {
      failures.push_back(name + ": " + why);
    }
  }
  std::filesystem::remove_all(dir);
  std::printf("%-11s %14s %14s %7s %17s %15s %7s\n", "config", "sharded save", "chief save", "ratio", "sharded restore",
              "whole restore", "ratio");
  std::vector<bench::Json> cases;
  bool goal = false;
  for (const Row& r : rows) {
    std::printf("%-11s %9.3f GB/s %9.3f GB/s %6.2fx %12.3f GB/s %10.3f GB/s %6.2fx\n", r.config.c_str(), r.save_sharded,
                r.save_chief, r.save_sharded / r.save_chief, r.restore_sharded, r.restore_whole,
                r.restore_sharded / r.restore_whole);
    cases.push_back(bench::json_case("save " + r.config, r.save_sharded, "GB/s", "gather-to-chief save", r.save_chief,
                                     r.save_sharded / r.save_chief));
    cases.push_back(bench::json_case("restore " + r.config, r.restore_sharded, "GB/s", "whole-tensor restore",
                                     r.restore_whole, r.restore_sharded / r.restore_whole));
    if (r.config == std::to_string(workers) + " workers") goal = r.save_sharded >= 1.5 * r.save_chief;
  }
  std::printf("goal: sharded save >= 1.5x the chief save with %d workers: %s\n", workers,
              rows.empty() ? "not measured"
              : goal       ? "PASS"
                           : "FAIL");
  for (const std::string& f : failures) std::printf("failed: %s\n", f.c_str());
  bench::print_json_line("sharded_checkpoint", bench::machine(true), cases);
  return failures.empty() ? 0 : 1;
}

}  // namespace
}  // namespace chorus

int main(int argc, char** argv) {
  return chorus::bench::run_main("bench_sharded_checkpoint", [&] { return chorus::run(argc, argv); });
}
