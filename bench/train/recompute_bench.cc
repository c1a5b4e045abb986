// Activation recomputation benchmark (ops/recompute.h, docs/recompute.md): peak memory per
// replica and step time of a deep stack of transformer-style feed-forward blocks trained with and
// without recompute_grad around each block, in one run, under MirroredStrategy on 2 logical CPU
// devices. The yardstick is the same training recorded normally (no recomputation).
//
//   bench_recompute [--quick] [--steps N] [--rounds R] [--blocks B] [--width W] [--rows N] [--stage S]
//
// Model: B blocks (default 8; --quick 4), each h + Dense(W) ∘ Dropout(0.1) ∘ Dense(4W, gelu) (h),
// width W = 128 (4W hidden), N = 1024 rows per replica (--quick 256) — activation-dominated, as a
// long sequence makes a transformer's feed-forward stack. Loss: mean squared error against a
// random target; SGD (no slots: the weights and gradients are the only state). A custom step:
// strategy.run with a GradientTape, Optimizer::compute_gradients and apply_gradients (what fit does).
// With recompute_grad, each block's function (the residual add outside it) is wrapped once:
// the tape keeps each block's input instead of its intermediates, and the backward pass runs each
// block's forward again.
// Per mode and round: a fresh strategy and model (the same seeded weights), a build call, 1 warm-up
// step, then config::reset_memory_stats on every replica device and N timed steps (default 5;
// --quick 2); the peak per replica is config::get_memory_info(device).peak after them, max over
// the replicas (it includes the resident weights). Modes alternate per round (plain, recomputed,
// plain, ...). --stage S runs under ZeRO stage S (default 0).
// Expected: the peak falls to roughly (weights + gradients + block inputs + one block) / (weights
// + gradients + all blocks' activations); the step takes about one more forward (≈ +1/3).
// Last line: one JSON line (bench/bench_util.h), ratio = plain / recomputed (> 1: recompute_grad
// is better) for the peak, and plain / recomputed for the step time (< 1: the recomputation's cost).
#include <chorus/chorus.h>
#include <chorus/ops/cpu/dnn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"

namespace cx = chorus;

namespace {

using Clock = std::chrono::steady_clock;
using cx::bench::median;

constexpr int kReplicas = 2;
constexpr const char* kUsage =
    "usage: bench_recompute [--quick] [--steps N] [--rounds R] [--blocks B] [--width W] [--rows N] [--stage S]\n";

struct Config {
  int blocks = 8, width = 128, rows = 1024, steps = 5, rounds = 2, stage = 0;
};

struct ModeResult {
  std::vector<double> step_ms;
  std::int64_t peak = 0;  // bytes, max over replicas and rounds
  double last_loss = 0;   // replica 0's, of the last round's last step
};

std::vector<std::string> devices() {
  std::vector<std::string> d;
  for (int i = 0; i < kReplicas; ++i) d.push_back("/cpu:" + std::to_string(i));
  return d;
}

using Block = std::vector<cx::layers::LayerPtr>;

std::vector<Block> make_blocks(const Config& c) {
  std::vector<Block> blocks;
  for (int i = 0; i < c.blocks; ++i) {
    const auto seed = static_cast<unsigned>(2 * i + 1);
    blocks.push_back({cx::layers::Dense(4 * c.width, "gelu", true, cx::initializers::glorot_uniform(seed)),
                      cx::layers::Dropout(0.1, 1000 + i),
                      cx::layers::Dense(c.width, "", true, cx::initializers::glorot_uniform(seed + 1))});
  }
  return blocks;
}

void run_mode(bool recompute, const Config& c, ModeResult& out) {
  const std::vector<std::string> devs = devices();
  cx::distribute::MirroredStrategy strategy(devs, {.sharding = {.stage = c.stage}});
  std::vector<Block> blocks;
  std::shared_ptr<cx::optimizers::SGD> opt;
  {
    auto scope = strategy.scope();
    blocks = make_blocks(c);
    opt = std::make_shared<cx::optimizers::SGD>(cx::optimizers::SGDOptions{.learning_rate = 1e-3});
  }
  // The block functions, wrapped once (the residual add stays outside).
  std::vector<cx::ops::RecomputeFn1> fns;
  for (const Block& b : blocks) {
    cx::ops::RecomputeFn1 fn = [&b](const cx::Tensor& x) {
      cx::Tensor y = x;
      for (const auto& l : b) y = (*l)(y, /*training=*/true);
      return y;
    };
    fns.push_back(recompute ? cx::ops::recompute_grad(fn) : fn);
  }
  std::vector<cx::Tensor> xs, ys;
  for (int r = 0; r < kReplicas; ++r) {
    const auto dev = devs[static_cast<std::size_t>(r)];
    xs.push_back(
        cx::ops::stateless_random_uniform({c.rows, c.width}, {1, r}, {.minval = -1, .maxval = 1, .device = dev}));
    ys.push_back(
        cx::ops::stateless_random_uniform({c.rows, c.width}, {2, r}, {.minval = -1, .maxval = 1, .device = dev}));
  }
  const cx::distribute::PerReplica<cx::Tensor> x(xs), y(ys);
  const double scale = 1.0 / (static_cast<double>(c.rows) * kReplicas * c.width);
  strategy.run(
      [&](const cx::Tensor& xr) {  // builds the layers (recompute_grad wants them built)
        cx::Tensor h = xr;
        for (const Block& b : blocks)
          for (const auto& l : b) h = (*l)(h, true);
      },
      x);
  std::vector<cx::Variable> vars;
  for (const Block& b : blocks)
    for (const auto& l : b)
      for (const cx::Variable& v : l->trainable_weights()) vars.push_back(v);

  auto step = [&] {
    return strategy.run(
        [&](const cx::Tensor& xr, const cx::Tensor& yr) {
          cx::optimizers::Gradients gradients;
          cx::Tensor loss;
          {
            cx::ops::GradientTape tape;
            cx::Tensor h = xr;
            for (const auto& fn : fns) h = cx::ops::add(h, fn(h));
            loss = cx::ops::reduce_sum(cx::ops::square(h - yr)) * scale;
            h = cx::Tensor();
            gradients = opt->compute_gradients(loss, vars, tape);
          }
          opt->apply_gradients(std::move(gradients));
          return loss;
        },
        x, y);
  };
  step();
  for (const std::string& d : devs) cx::config::get_memory_info(d);  // waits for queued work
  for (const std::string& d : devs) cx::config::reset_memory_stats(d);
  for (int i = 0; i < c.steps; ++i) {
    const auto t0 = Clock::now();
    const auto losses = step();
    for (const std::string& d : devs) cx::config::get_memory_info(d);  // the step's work done
    out.step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    out.last_loss = losses.values()[0].to_vector<float>()[0];
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

// Parses argv into *c; returns an exit status when the program should stop (2: bad usage).
std::optional<int> parse_args(int argc, char** argv, Config* c) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--quick") {
      *c = Config{.blocks = 4, .width = 128, .rows = 256, .steps = 2, .rounds = 1, .stage = c->stage};
    } else if (a == "--steps" && has_value) {
      c->steps = std::atoi(argv[++i]);
    } else if (a == "--rounds" && has_value) {
      c->rounds = std::atoi(argv[++i]);
    } else if (a == "--blocks" && has_value) {
      c->blocks = std::atoi(argv[++i]);
    } else if (a == "--width" && has_value) {
      c->width = std::atoi(argv[++i]);
    } else if (a == "--rows" && has_value) {
      c->rows = std::atoi(argv[++i]);
    } else if (a == "--stage" && has_value) {
      c->stage = std::atoi(argv[++i]);
    } else {
      return cx::launch::usage_error("bench_recompute", a, kUsage);
    }
  }
  if (c->steps < 1 || c->rounds < 1 || c->blocks < 1 || c->width < 1 || c->rows < 1 || c->stage < 0 || c->stage > 3) {
    std::fprintf(stderr,
                 "bench_recompute: --steps, --rounds, --blocks, --width and --rows must be >= 1, --stage 0..3\n");
    return 2;
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  if (auto rc = chorus::launch::answer_help_or_version(argc, argv, "bench_recompute", kUsage)) return *rc;
  return cx::bench::run_main("bench_recompute", [&] {
    Config c;
    if (auto rc = parse_args(argc, argv, &c)) return *rc;
    cx::config::set_visible_devices({}, "GPU");
    cx::config::set_logical_device_configuration(
        cx::config::list_physical_devices("CPU")[0],
        std::vector<cx::LogicalDeviceConfiguration>(kReplicas,
                                                    cx::LogicalDeviceConfiguration{.memory_limit_mb = 2048}));
    const std::string machine = cx::bench::machine(/*cpu_model=*/true) + ", oneDNN " + cx::ops::cpu::onednn_isa();
    const double params = static_cast<double>(c.blocks) * (8.0 * c.width * c.width + 5.0 * c.width);
    std::printf("machine: %s\n", machine.c_str());
    std::printf(
        "model: %d x (h + Dense(%d) . Dropout(0.1) . Dense(%d, gelu)), P = %.1f MB float32; SGD; ZeRO stage %d; "
        "%d logical CPU replicas x %d rows; 1 warm-up + %d timed steps per mode and round, %d round(s)\n",
        c.blocks, c.width, 4 * c.width, params * 4 / 1e6, c.stage, kReplicas, c.rows, c.steps, c.rounds);

    ModeResult plain, recomputed;
    for (int round = 0; round < c.rounds; ++round) {
      run_mode(false, c, plain);
      run_mode(true, c, recomputed);
    }
    const double peak0 = static_cast<double>(plain.peak), time0 = median(plain.step_ms);
    const double peak1 = static_cast<double>(recomputed.peak), time1 = median(recomputed.step_ms);
    for (const auto& [name, r] :
         {std::pair<const char*, const ModeResult*>{"plain     ", &plain}, {"recomputed", &recomputed}}) {
      std::printf("%s: peak per replica %8.2f MiB  step %7.1f ms (%s)  last loss %.6g\n", name,
                  static_cast<double>(r->peak) / (1 << 20), median(r->step_ms), min_max(r->step_ms).c_str(),
                  r->last_loss);
    }
    std::printf("recomputed / plain: peak %.3fx, step time %.3fx\n", peak1 / peak0, time1 / time0);
    std::vector<cx::bench::Json> cases;
    cases.push_back(cx::bench::json_case("recompute_grad peak per replica", peak1, "bytes",
                                         "no recomputation peak per replica", peak0, peak0 / peak1, 15));
    cases.push_back(cx::bench::json_case("recompute_grad step time", time1, "ms", "no recomputation step time", time0,
                                         time0 / time1));
    cx::bench::print_json_line("recompute", machine, cases);
    return 0;
  });
}
