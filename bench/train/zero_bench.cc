// ZeRO benchmark (issue 17, docs/sharding.md): peak memory per replica and step time of
// MirroredStrategy without sharding (stage 0, the yardstick) and with ZeRO stages 1, 2 and 3, in
// one run, on 4 logical CPU devices, Adam, a parameter-dominated MLP.
//
//   bench_zero [--quick] [--steps N] [--rounds R] [--width W] [--layers L]
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
// Goals (the issue's): stage 2 peak ≤ 0.5× stage 0, stage 3 peak ≤ 0.35× stage 0, step time of
// each ≤ 1.3× stage 0.
// Offload section (issue 45): stages 1-3 again with ShardingOptions::offload_optimizer_state (R
// rounds of their own, after the stages above): peak per replica device against stage 0's (goal:
// stage 3 ≤ 0.15×), the host memory devices' peak, and the step time against the same stage
// without offload.
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

using Clock = std::chrono::steady_clock;
using cx::bench::median;

constexpr int kReplicas = 4, kGlobalBatch = 32;

struct Config {
  int width = 1024, layers = 8, steps = 10, rounds = 3;
};

struct StageResult {
  std::vector<double> step_ms;
  std::int64_t peak = 0;  // bytes, max over replicas and rounds
};

std::vector<std::string> devices() {
  std::vector<std::string> d;
  for (int i = 0; i < kReplicas; ++i) d.push_back("/cpu:" + std::to_string(i));
  return d;
}

void run_stage(int stage, const Config& c, StageResult& out) {
  const std::vector<std::string> devs = devices();
  cx::distribute::MirroredStrategy strategy(devs, {.sharding = {.stage = stage}});
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
  for (int r = 0; r < kReplicas; ++r) {
    xs.push_back(cx::ops::stateless_random_uniform({rows, c.width}, {1, r}, {.minval = -1, .maxval = 1})
                     .to(devs[static_cast<std::size_t>(r)]));
    ys.push_back(cx::ops::stateless_random_uniform({rows, c.width}, {2, r}, {.minval = -1, .maxval = 1})
                     .to(devs[static_cast<std::size_t>(r)]));
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
  for (const std::string& d : devs) cx::config::get_memory_info(d);  // waits for queued work
  for (const std::string& d : devs) cx::config::reset_memory_stats(d);
  for (int i = 0; i < c.steps; ++i) {
    const auto t0 = Clock::now();
    step();
    for (const std::string& d : devs) cx::config::get_memory_info(d);  // the step's work done
    out.step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  for (const std::string& d : devs)
    out.peak = std::max(out.peak, static_cast<std::int64_t>(cx::config::get_memory_info(d).peak));
}

std::string min_max(const std::vector<double>& v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f–%.1f", *std::min_element(v.begin(), v.end()),
                *std::max_element(v.begin(), v.end()));
  return buf;
}

// --- Offload (issue 45, item 3): ZeRO stages 1-3 with ShardingOptions::offload_optimizer_state ---
// Separate from run_stage on purpose (one section of its own in the output): the same model, data
// and step; per replica the peak of its device (what the offloaded slots leave there) and of its
// host memory device (core/host_memory.h: the slots and the host update's copies).

struct OffloadResult {
  std::vector<double> step_ms;
  std::int64_t peak = 0;       // bytes, max over the replicas' devices and rounds
  std::int64_t host_peak = 0;  // bytes, max over the replicas' host memory devices and rounds
};

void run_offload_stage(int stage, const Config& c, OffloadResult& out) {
  const std::vector<std::string> devs = devices();
  cx::distribute::MirroredStrategy strategy(devs, {.sharding = {.stage = stage, .offload_optimizer_state = true}});
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
  for (int r = 0; r < kReplicas; ++r) {
    xs.push_back(cx::ops::stateless_random_uniform({rows, c.width}, {1, r}, {.minval = -1, .maxval = 1})
                     .to(devs[static_cast<std::size_t>(r)]));
    ys.push_back(cx::ops::stateless_random_uniform({rows, c.width}, {2, r}, {.minval = -1, .maxval = 1})
                     .to(devs[static_cast<std::size_t>(r)]));
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
          opt->apply_gradients(std::move(gradients));
        },
        x, y);
  };
  for (int i = 0; i < 2; ++i) step();
  std::vector<std::string> hosts;
  for (int r = 0; r < kReplicas; ++r)
    hosts.push_back(cx::distribute::offload_device(devs[static_cast<std::size_t>(r)], r));
  for (const std::string& d : devs) cx::config::get_memory_info(d);
  for (const std::string& d : devs) cx::config::reset_memory_stats(d);
  for (const std::string& h : hosts) cx::config::reset_memory_stats(h);
  for (int i = 0; i < c.steps; ++i) {
    const auto t0 = Clock::now();
    step();
    for (const std::string& d : devs) cx::config::get_memory_info(d);
    out.step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  for (const std::string& d : devs)
    out.peak = std::max(out.peak, static_cast<std::int64_t>(cx::config::get_memory_info(d).peak));
  for (const std::string& h : hosts)
    out.host_peak = std::max(out.host_peak, static_cast<std::int64_t>(cx::config::get_memory_info(h).peak));
}

// Runs stages 1-3 with offload (R rounds, the stages in turn), prints the section against stage 0
// (peak) and the same stage without offload (step time, from `without`), appends the JSON cases;
// returns whether the goal holds: stage 3 with offload peak per replica <= 0.15x stage 0 (Adam).
bool offload_section(const Config& c, const StageResult* without, std::vector<cx::bench::Json>& cases) {
  constexpr int kStages = 4;
  OffloadResult res[kStages];
  for (int round = 0; round < c.rounds; ++round)
    for (int stage = 1; stage < kStages; ++stage) run_offload_stage(stage, c, res[stage]);
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
  if (auto rc = chorus::launch::answer_help_or_version(
          argc, argv, "bench_zero", "usage: bench_zero [--quick] [--steps N] [--rounds R] [--width W] [--layers L]\n"))
    return *rc;
  return cx::bench::run_main("bench_zero", [&] {
    Config c;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--quick") {
        c = Config{.width = 256, .layers = 4, .steps = 2, .rounds = 1};
      } else if (a == "--steps" && i + 1 < argc) {
        c.steps = std::atoi(argv[++i]);
      } else if (a == "--rounds" && i + 1 < argc) {
        c.rounds = std::atoi(argv[++i]);
      } else if (a == "--width" && i + 1 < argc) {
        c.width = std::atoi(argv[++i]);
      } else if (a == "--layers" && i + 1 < argc) {
        c.layers = std::atoi(argv[++i]);
      } else {
        return cx::launch::usage_error(
            "bench_zero", a, "usage: bench_zero [--quick] [--steps N] [--rounds R] [--width W] [--layers L]\n");
      }
    }
    if (c.steps < 1 || c.rounds < 1 || c.width < 1 || c.layers < 1) {
      std::fprintf(stderr, "bench_zero: --steps, --rounds, --width and --layers must be >= 1\n");
      return 2;
    }
    cx::config::set_visible_devices({}, "GPU");
    cx::config::set_logical_device_configuration(
        cx::config::list_physical_devices("CPU")[0],
        std::vector<cx::LogicalDeviceConfiguration>(kReplicas,
                                                    cx::LogicalDeviceConfiguration{.memory_limit_mb = 1024}));
    const std::string machine = cx::bench::machine(/*cpu_model=*/true);
    const double params = static_cast<double>(c.layers) * (static_cast<double>(c.width) * c.width + c.width);
    std::printf("machine: %s\n", machine.c_str());
    std::printf(
        "model: %d x Dense(%d->%d), P = %.1f MB float32; Adam; %d logical CPU replicas, global batch %d; "
        "%d warm-up + %d timed steps per stage and round, %d round(s)\n",
        c.layers, c.width, c.width, params * 4 / 1e6, kReplicas, kGlobalBatch, 2, c.steps, c.rounds);

    constexpr int kStages = 4;
    StageResult res[kStages];
    for (int round = 0; round < c.rounds; ++round)
      for (int stage = 0; stage < kStages; ++stage) run_stage(stage, c, res[stage]);

    const double peak0 = static_cast<double>(res[0].peak), time0 = median(res[0].step_ms);
    std::vector<cx::bench::Json> cases;
    for (int stage = 0; stage < kStages; ++stage) {
      const double peak = static_cast<double>(res[stage].peak), t = median(res[stage].step_ms);
      std::printf("stage %d: peak per replica %8.2f MiB (%.2fx stage 0, %.2f P)  step %7.1f ms (%s; %.2fx stage 0)\n",
                  stage, peak / (1 << 20), peak / peak0, peak / (params * 4), t, min_max(res[stage].step_ms).c_str(),
                  t / time0);
      if (stage == 0) continue;
      const std::string s = "stage " + std::to_string(stage);
      cases.push_back(cx::bench::json_case(s + " peak per replica", peak, "bytes", "stage 0 peak per replica", peak0,
                                           peak / peak0, 15));
      cases.push_back(cx::bench::json_case(s + " step time", t, "ms", "stage 0 step time", time0, t / time0));
    }
    bool all_pass = true;
    for (const auto& [stage, goal] : {std::pair<int, double>{2, 0.5}, {3, 0.35}}) {
      const double peak_ratio = static_cast<double>(res[stage].peak) / peak0;
      const double time_ratio = median(res[stage].step_ms) / time0;
      std::printf("goal stage %d peak <= %.2fx stage 0: %.2fx %s\n", stage, goal, peak_ratio,
                  peak_ratio <= goal ? "PASS" : "FAIL");
      std::printf("goal stage %d step time <= 1.3x stage 0: %.2fx %s\n", stage, time_ratio,
                  time_ratio <= 1.3 ? "PASS" : "FAIL");
      all_pass = all_pass && peak_ratio <= goal && time_ratio <= 1.3;
    }
    all_pass = offload_section(c, res, cases) && all_pass;
    cx::bench::print_json_line("zero", machine, cases, {{"goals", all_pass ? "pass" : "fail"}});
    return 0;
  });
}
