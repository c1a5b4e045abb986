// ZeRO benchmark (issues 17 and 45, docs/sharding.md): peak memory per replica and step time of
// MirroredStrategy without sharding (stage 0, the yardstick) and with ZeRO stages 1, 2 and 3, each
// also with the overlap of issue 45 (stage 0/2: overlap_gradient_all_reduce, the reduction during
// the backward pass; stage 3: prefetch_limit 1 and overlap), in one run, on 4 logical CPU devices,
// Adam, a parameter-dominated MLP.
//
//   bench_zero [--quick] [--steps N] [--rounds R] [--width W] [--layers L]
//   mpirun -np 2|4 bench_zero --multi-worker ...   MultiWorkerMirroredStrategy: 4 replicas in all,
//                                                  4/np logical CPU devices per worker; rank 0 prints
//
// Model: L × Dense(W→W) (default 8 × 1024: P = 33.6 MB of float32 weights; --quick 4 × 256),
// global batch 32 (8 rows per replica), mean squared error, a custom training step
// (strategy.run: GradientTape, then Optimizer::compute_gradients and apply_gradients — what
// fit does per step: the optimizer holds the only references to the local gradients).
// All four stages run in this process on the same devices (the device configuration is the same
// for all: 4 logical CPU devices of 1024 MiB). Per stage and round: a fresh strategy and model (the
// same seeded initial weights), 2 warm-up steps (the first creates Adam's slots), then
// config::reset_memory_stats on every replica device and N timed steps (default 10; --quick 2);
// the peak per replica is config::get_memory_info(device).peak after them, max over the replicas
// (it includes the resident weights and slots). R rounds (default 3; --quick 1) run the stages in
// turn 0, 1, 2, 3, 0, 1, 2, 3, ...; step times are the medians over all rounds' steps with min–max, the
// peak is the largest over the rounds.
// Goals: issue 17's (no overlap): stage 2 peak ≤ 0.5× stage 0, stage 3 peak ≤ 0.35× stage 0, step
// time of each ≤ 1.3× stage 0; issue 45's, against stage 0 with overlap measured in the same run:
// stage 3 (prefetch + overlap) step ≤ 1.1×, stage 2 with overlap ≤ 1.0×.
// Offload section (issue 45): stages 1-3 again with ShardingOptions::offload_optimizer_state (R
// rounds of their own, after the variants above; one process only): peak per replica device
// against stage 0's (goal: stage 3 ≤ 0.15×), the host memory devices' peak, and the step time
// against the same stage without offload.
// Last line: one JSON line (bench/bench_util.h).
#include <chorus/chorus.h>
#include <chorus/distribute/optimizer_offload.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_util.h"

namespace cx = chorus;

namespace {

constexpr const char* kUsage =
    "usage: bench_zero [--quick] [--steps N] [--rounds R] [--width W] [--layers L] [--multi-worker]\n"
    "  --multi-worker: MultiWorkerMirroredStrategy under mpirun -np 1, 2 or 4 (4 replicas in all)\n";

using Clock = std::chrono::steady_clock;
using cx::bench::median;

constexpr int kReplicas = 4, kGlobalBatch = 32;

struct Config {
  int width = 1024, layers = 8, steps = 10, rounds = 3;
  bool multi_worker = false;
};

// One configuration of the strategy: its ZeRO stage, overlap, stage 3's prefetch, offload.
struct Variant {
  int stage = 0;
  bool overlap = false;
  int prefetch = 0;
  bool offload = false;
  std::string name() const {
    std::string n = "stage " + std::to_string(stage);
    if (prefetch > 0) n += " + prefetch";
    if (overlap) n += " + overlap";
    if (offload) n += " + offload";
    return n;
  }
};
// Stage 3 with overlap alone has nothing to overlap (its reduce-scatters run per layer inside the
// backward pass already), so its "with" variant is prefetch + overlap.
const std::vector<Variant> kVariants{{0, false, 0}, {0, true, 0}, {1, false, 0}, {1, true, 0},
                                     {2, false, 0}, {2, true, 0}, {3, false, 0}, {3, true, 1}};

struct StageResult {
  std::vector<double> step_ms;
  std::int64_t peak = 0;       // bytes, max over the replicas' devices and rounds
  std::int64_t host_peak = 0;  // with offload: bytes, max over the replicas' host memory devices and rounds
};

// This process's replicas: all 4, or 4 / the worker count under --multi-worker.
int local_replicas(const Config& c) {
  return c.multi_worker ? kReplicas / cx::distribute::ClusterResolver::from_environment().num_workers() : kReplicas;
}

std::vector<std::string> devices(const Config& c) {
  std::vector<std::string> d;
  for (int i = 0; i < local_replicas(c); ++i) d.push_back("/cpu:" + std::to_string(i));
  return d;
}

std::unique_ptr<cx::distribute::Strategy> make_strategy(const Variant& v, const Config& c) {
  const cx::distribute::ShardingOptions sharding{
      .stage = v.stage, .prefetch_limit = v.prefetch, .offload_optimizer_state = v.offload};
  if (c.multi_worker)
    return std::make_unique<cx::distribute::MultiWorkerMirroredStrategy>(
        cx::distribute::MultiWorkerMirroredStrategyOptions{.cpu_devices_per_worker = local_replicas(c),
                                                           .sharding = sharding,
                                                           .overlap_gradient_all_reduce = v.overlap});
  return std::make_unique<cx::distribute::MirroredStrategy>(
      devices(c),
      cx::distribute::MirroredStrategyOptions{.sharding = sharding, .overlap_gradient_all_reduce = v.overlap});
}

void run_variant(const Variant& v, const Config& c, StageResult& out, bool& chief) {
  const std::vector<std::string> devs = devices(c);
  std::unique_ptr<cx::distribute::Strategy> owned = make_strategy(v, c);
  cx::distribute::Strategy& strategy = *owned;
  chief = strategy.is_chief();
  std::unique_ptr<cx::model::Sequential> m;
  std::shared_ptr<cx::optimizers::Adam> opt;
  {
    auto scope = strategy.scope();
    std::vector<cx::layers::LayerPtr> ls;
    for (int i = 0; i < c.layers; ++i)
      ls.push_back(cx::layers::Dense(c.width, i + 1 < c.layers ? "relu" : "", true,
                                     cx::initializers::glorot_uniform(static_cast<unsigned>(i + 1))));
    m = std::make_unique<cx::model::Sequential>(std::move(ls));
    m->build(cx::Shape({kGlobalBatch, c.width}));
    opt = std::make_shared<cx::optimizers::Adam>(cx::optimizers::AdamOptions{.learning_rate = 1e-4});
  }
  const std::int64_t rows = kGlobalBatch / kReplicas;
  std::vector<cx::Tensor> xs, ys;
  for (int local = 0; local < static_cast<int>(devs.size()); ++local) {
    const int r = strategy.worker_offset() + local;
    xs.push_back(cx::ops::stateless_random_uniform({rows, c.width}, {1, r}, {.minval = -1, .maxval = 1})
                     .to(devs[static_cast<std::size_t>(local)]));
    ys.push_back(cx::ops::stateless_random_uniform({rows, c.width}, {2, r}, {.minval = -1, .maxval = 1})
                     .to(devs[static_cast<std::size_t>(local)]));
  }
  const cx::distribute::PerReplica<cx::Tensor> x(xs), y(ys);
  auto step = [&] {
    strategy.run(
        [&](const cx::Tensor& xr, const cx::Tensor& yr) {
          std::vector<cx::Variable> vars = m->trainable_variables();
          cx::optimizers::Gradients gradients;
          {
            cx::ops::GradientTape tape;
            cx::Tensor loss =
                cx::ops::reduce_sum(cx::ops::square((*m)(xr, true) - yr)) / static_cast<double>(kGlobalBatch * c.width);
            gradients = opt->compute_gradients(loss, vars, tape);
          }
          opt->apply_gradients(std::move(gradients));  // as fit: the optimizer releases each local gradient early
        },
        x, y);
  };
  for (int i = 0; i < 2; ++i) step();
  std::vector<std::string> hosts;  // the replicas' host memory devices, with offload
  if (v.offload)
    for (int local = 0; local < static_cast<int>(devs.size()); ++local)
      hosts.push_back(cx::distribute::offload_device(devs[static_cast<std::size_t>(local)], local));
  for (const std::string& d : devs) cx::config::get_memory_info(d);  // waits for queued work
  for (const std::string& d : devs) cx::config::reset_memory_stats(d);
  for (const std::string& h : hosts) cx::config::reset_memory_stats(h);
  for (int i = 0; i < c.steps; ++i) {
    strategy.worker_barrier("bench_zero step");  // the workers start each timed step together
    const auto t0 = Clock::now();
    step();
    for (const std::string& d : devs) cx::config::get_memory_info(d);  // the step's work done
    out.step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  for (const std::string& d : devs)
    out.peak = std::max(out.peak, static_cast<std::int64_t>(cx::config::get_memory_info(d).peak));
  for (const std::string& h : hosts)
    out.host_peak = std::max(out.host_peak, static_cast<std::int64_t>(cx::config::get_memory_info(h).peak));
}

std::string min_max(const std::vector<double>& v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f–%.1f", *std::min_element(v.begin(), v.end()),
                *std::max_element(v.begin(), v.end()));
  return buf;
}

// --- Offload (issue 45, item 3): ZeRO stages 1-3 with ShardingOptions::offload_optimizer_state ---
// A section of its own in the output: the same model, data and step (run_variant); per replica the
// peak of its device (what the offloaded slots leave there) and of its host memory device
// (core/host_memory.h: the slots and the host update's copies).

// Runs stages 1-3 with offload (R rounds, the stages in turn), prints the section against stage 0
// (peak) and the same stage without offload (step time, from `without`), appends the JSON cases;
// returns whether the goal holds: stage 3 with offload peak per replica <= 0.15x stage 0 (Adam).
bool offload_section(const Config& c, const StageResult* without, std::vector<cx::bench::Json>& cases) {
  constexpr int kStages = 4;
  StageResult res[kStages];
  bool chief = true;
  for (int round = 0; round < c.rounds; ++round)
    for (int stage = 1; stage < kStages; ++stage)
      run_variant({.stage = stage, .overlap = false, .prefetch = 0, .offload = true}, c, res[stage], chief);
  const double params = static_cast<double>(c.layers) * (static_cast<double>(c.width) * c.width + c.width);
  const double peak0 = static_cast<double>(without[0].peak);
  std::printf("offload (optimizer state in host memory, ZeRO-Offload):\n");
  for (int stage = 1; stage < kStages; ++stage) {
    const double peak = static_cast<double>(res[stage].peak), t = median(res[stage].step_ms);
    const double t_without = median(without[stage].step_ms);
    std::printf(
        "stage %d + offload: peak per replica %8.2f MiB (%.2fx stage 0, %.2f P), host memory %8.2f MiB  "
        "step %7.1f ms (%s; %.2fx stage %d without offload)\n",
        stage, peak / (1 << 20), peak / peak0, peak / (params * 4),
        static_cast<double>(res[stage].host_peak) / (1 << 20), t, min_max(res[stage].step_ms).c_str(), t / t_without,
        stage);
    const std::string s = "stage " + std::to_string(stage) + " offload";
    cases.push_back(cx::bench::json_case(s + " peak per replica", peak, "bytes", "stage 0 peak per replica", peak0,
                                         peak / peak0, 15));
    cases.push_back(cx::bench::json_case(s + " host memory peak per replica", static_cast<double>(res[stage].host_peak),
                                         "bytes", "stage 0 peak per replica", peak0, std::nullopt, 15));
    cases.push_back(cx::bench::json_case(s + " step time", t, "ms", "stage " + std::to_string(stage) + " step time",
                                         t_without, t / t_without));
  }
  const double ratio = static_cast<double>(res[3].peak) / peak0;
  std::printf("goal stage 3 + offload peak <= 0.15x stage 0: %.3fx %s\n", ratio, ratio <= 0.15 ? "PASS" : "FAIL");
  return ratio <= 0.15;
}

}  // namespace

int main(int argc, char** argv) {
  if (auto rc = chorus::launch::answer_help_or_version(argc, argv, "bench_zero", kUsage)) return *rc;
  return cx::bench::run_main("bench_zero", [&] {
    Config c;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--quick") {
        c = Config{.width = 256, .layers = 4, .steps = 2, .rounds = 1, .multi_worker = c.multi_worker};
      } else if (a == "--multi-worker") {
        c.multi_worker = true;
      } else if (a == "--steps" && i + 1 < argc) {
        c.steps = std::atoi(argv[++i]);
      } else if (a == "--rounds" && i + 1 < argc) {
        c.rounds = std::atoi(argv[++i]);
      } else if (a == "--width" && i + 1 < argc) {
        c.width = std::atoi(argv[++i]);
      } else if (a == "--layers" && i + 1 < argc) {
        c.layers = std::atoi(argv[++i]);
      } else {
        return cx::launch::usage_error("bench_zero", a, kUsage);
      }
    }
    if (c.steps < 1 || c.rounds < 1 || c.width < 1 || c.layers < 1) {
      std::fprintf(stderr, "bench_zero: --steps, --rounds, --width and --layers must be >= 1\n");
      return 2;
    }
    std::optional<cx::collective::MpiEnvironment> mpi;  // for MultiWorkerMirroredStrategy, until the end
    if (c.multi_worker) {
#if CHORUS_WITH_MPI
      mpi.emplace();
#else
      throw cx::UnavailableError("bench_zero: --multi-worker needs a build with MPI");
#endif
    }
    const int workers = c.multi_worker ? cx::distribute::ClusterResolver::from_environment().num_workers() : 1;
    if (kReplicas % workers != 0) {
      std::fprintf(stderr, "bench_zero: --multi-worker needs 1, 2 or 4 workers (4 replicas in all), got %d\n", workers);
      return 2;
    }
    cx::config::set_visible_devices({}, "GPU");
    cx::config::set_logical_device_configuration(
        cx::config::list_physical_devices("CPU")[0],
        std::vector<cx::LogicalDeviceConfiguration>(static_cast<std::size_t>(local_replicas(c)),
                                                    cx::LogicalDeviceConfiguration{.memory_limit_mb = 1024}));
    const std::string machine = cx::bench::machine(/*cpu_model=*/true);
    const double params = static_cast<double>(c.layers) * (static_cast<double>(c.width) * c.width + c.width);
    const std::size_t n = kVariants.size();
    std::vector<StageResult> res(n);
    bool chief = true;
    // Rounds alternate the variants: 0, 0+overlap, 1, ..., 3+prefetch+overlap, 0, ...
    for (int round = 0; round < c.rounds; ++round)
      for (std::size_t v = 0; v < n; ++v) run_variant(kVariants[v], c, res[v], chief);
    if (!chief) return 0;  // rank 0 reports (every worker measured the same steps)
    std::printf("machine: %s\n", machine.c_str());
    std::printf(
        "model: %d x Dense(%d->%d), P = %.1f MB float32; Adam; %d logical CPU replicas (%d worker(s) x %d), global "
        "batch %d; %d warm-up + %d timed steps per variant and round, %d round(s), variants alternating\n",
        c.layers, c.width, c.width, params * 4 / 1e6, kReplicas, workers, kReplicas / workers, kGlobalBatch, 2, c.steps,
        c.rounds);
    const double peak0 = static_cast<double>(res[0].peak), time0 = median(res[0].step_ms);
    const double time0_overlap = median(res[1].step_ms);
    std::vector<cx::bench::Json> cases;
    for (std::size_t v = 0; v < n; ++v) {
      const double peak = static_cast<double>(res[v].peak), t = median(res[v].step_ms);
      std::printf(
          "%-29s peak per replica %8.2f MiB (%.2fx stage 0, %.2f P)  step %7.1f ms (%s; %.2fx stage 0, "
          "%.2fx stage 0 + overlap)\n",
          kVariants[v].name().c_str(), peak / (1 << 20), peak / peak0, peak / (params * 4), t,
          min_max(res[v].step_ms).c_str(), t / time0, t / time0_overlap);
      if (v == 0) continue;
      const std::string s = kVariants[v].name();
      cases.push_back(cx::bench::json_case(s + " peak per replica", peak, "bytes", "stage 0 peak per replica", peak0,
                                           peak0 / peak, 15));
      // ratio > 1: faster than the yardstick (stage 0 with overlap for the overlapped variants).
      const bool overlapped = kVariants[v].overlap;
      const double yard = overlapped ? time0_overlap : time0;
      cases.push_back(cx::bench::json_case(
          s + " step time", t, "ms", overlapped ? "stage 0 + overlap step time" : "stage 0 step time", yard, yard / t));
    }
    bool all_pass = true;
    auto goal = [&](const std::string& what, double ratio, double bound) {
      std::printf("goal %s <= %.2fx: %.2fx %s\n", what.c_str(), bound, ratio, ratio <= bound ? "PASS" : "FAIL");
      all_pass = all_pass && ratio <= bound;
    };
    goal("stage 2 peak / stage 0 peak", static_cast<double>(res[4].peak) / peak0, 0.5);
    goal("stage 3 peak / stage 0 peak", static_cast<double>(res[6].peak) / peak0, 0.35);
    goal("stage 2 step / stage 0 step", median(res[4].step_ms) / time0, 1.3);
    goal("stage 3 step / stage 0 step", median(res[6].step_ms) / time0, 1.3);
    goal("stage 3 + prefetch + overlap step / stage 0 + overlap step", median(res[7].step_ms) / time0_overlap, 1.1);
    goal("stage 2 + overlap step / stage 0 + overlap step", median(res[5].step_ms) / time0_overlap, 1.0);
    if (c.multi_worker) {
      std::printf("offload: not measured under --multi-worker (one process only)\n");
    } else {
      const StageResult without[4] = {res[0], res[2], res[4], res[6]};  // stages 0-3 without overlap
      all_pass = offload_section(c, without, cases) && all_pass;
    }
    cx::bench::print_json_line("zero", machine, cases, {{"goals", all_pass ? "pass" : "fail"}});
    return 0;
  });
}
