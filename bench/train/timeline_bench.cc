// What the timeline (core/timeline.h) costs: Model::fit's step time with CHORUS_TIMELINE's
// recording off and on, in one run, and the cost of a hook when it is off.
//
//   bench_timeline [--quick] [--rounds R] [--steps N]
//
// Model: 4 × Dense(256→256, relu) + Dense(256→10), Adam, MeanSquaredError, fit on 2 logical CPU
// replicas (global batch 64), N steps per round (default 40; --quick 4) after one warm-up epoch.
// Rounds alternate off, on, off, on, ... (R each, default 5; --quick 1); the figure per mode is
// the median of the rounds' mean step times. With recording on, each round's timeline is written
// to a temporary file at its end (outside the timed steps) and its events counted.
// The off cost: timeline::Span constructed and destroyed 10^7 times with recording off, ns per
// hook; × the hooks a step runs (the on rounds' events per step) ÷ the off step time gives the
// share of a step the disabled hooks cost.
// Last line: one JSON line (bench/bench_util.h): the on/off step-time ratio (yardstick: off).
#include <unistd.h>
#include <chorus/chorus.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"

namespace cx = chorus;

namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  int rounds = 5, steps = 40;
};

int count_events(const std::string& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  int n = 0;
  const cx::bench::Json trace = chorus::internal::parse_json(text.str(), file);
  for (const cx::bench::Json& e : trace.at("traceEvents"))
    if (e.at("ph") == "X") ++n;
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  if (auto rc = chorus::launch::answer_help_or_version(argc, argv, "bench_timeline",
                                                       "usage: bench_timeline [--quick] [--rounds R] [--steps N]\n"))
    return *rc;
  return cx::bench::run_main("bench_timeline", [&] {
    Config c;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--quick") {
        c = Config{.rounds = 1, .steps = 4};
      } else if (a == "--rounds" && i + 1 < argc) {
        c.rounds = std::atoi(argv[++i]);
      } else if (a == "--steps" && i + 1 < argc) {
        c.steps = std::atoi(argv[++i]);
      } else {
        return cx::launch::usage_error("bench_timeline", a,
                                       "usage: bench_timeline [--quick] [--rounds R] [--steps N]\n");
      }
    }
    if (c.rounds < 1 || c.steps < 1) {
      std::fprintf(stderr, "bench_timeline: --rounds and --steps must be >= 1\n");
      return 2;
    }
    cx::config::set_visible_devices({}, "GPU");
    cx::config::set_logical_device_configuration(cx::config::list_physical_devices("CPU")[0],
                                                 {{.memory_limit_mb = 512}, {.memory_limit_mb = 512}});
    const std::string machine = cx::bench::machine(/*cpu_model=*/true);
    cx::distribute::MirroredStrategy strategy({"/cpu:0", "/cpu:1"});
    std::unique_ptr<cx::model::Sequential> m;
    {
      auto scope = strategy.scope();
      std::vector<cx::layers::LayerPtr> ls;
      for (int i = 0; i < 4; ++i) ls.push_back(cx::layers::Dense(256, "relu"));
      ls.push_back(cx::layers::Dense(10));
      m = std::make_unique<cx::model::Sequential>(std::move(ls));
      m->compile(std::make_shared<cx::optimizers::Adam>(1e-4), std::make_shared<cx::losses::MeanSquaredError>());
    }
    const std::int64_t rows = 64LL * c.steps;
    const cx::Tensor x = cx::ops::stateless_random_uniform({rows, 256}, {1, 2});
    const cx::Tensor y = cx::ops::stateless_random_uniform({rows, 10}, {3, 4});
    const cx::data::Dataset ds = cx::data::Dataset::from_tensor_slices({x, y}).batch(64);
    m->fit(ds, {.epochs = 1, .verbose = 0});  // warm-up
    const std::string file =
        (std::filesystem::temp_directory_path() / ("bench_timeline_" + std::to_string(::getpid()) + ".json")).string();
    std::vector<double> off_ms, on_ms;
    int events = 0;
    for (int round = 0; round < 2 * c.rounds; ++round) {
      const bool on = round % 2 == 1;
      if (on) cx::timeline::start(file);
      const auto t0 = Clock::now();
      m->fit(ds, {.epochs = 1, .verbose = 0});
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / c.steps;
      (on ? on_ms : off_ms).push_back(ms);
      if (on) {
        events = count_events(cx::timeline::stop());
        std::filesystem::remove(file);
      }
    }
    // The disabled hook.
    constexpr int kHooks = 10'000'000;
    const auto h0 = Clock::now();
    for (int i = 0; i < kHooks; ++i) cx::timeline::Span span("forward", "x");
    const double hook_ns = std::chrono::duration<double, std::nano>(Clock::now() - h0).count() / kHooks;
    const double off = cx::bench::median(off_ms), on = cx::bench::median(on_ms);
    const double per_step = static_cast<double>(events) / c.steps;
    const double off_share = hook_ns * per_step / (off * 1e6);
    std::printf("machine: %s\n", machine.c_str());
    std::printf(
        "fit, 2 logical CPU replicas, 4 x Dense(256) + Dense(10), global batch 64, %d steps per round, %d "
        "rounds per mode\n",
        c.steps, c.rounds);
    std::printf("step time, timeline off: %.3f ms (median)\n", off);
    std::printf("step time, timeline on:  %.3f ms (median), %.2fx off; %.0f events per step\n", on, on / off, per_step);
    std::printf("a disabled hook: %.2f ns; x %.0f hooks per step = %.5f%% of a step\n", hook_ns, per_step,
                100 * off_share);
    cx::bench::print_json_line(
        "timeline", machine,
        {cx::bench::json_case("step time, timeline on", on, "ms", "step time, timeline off", off, on / off),
         cx::bench::json_case("disabled hooks per step", hook_ns * per_step / 1e6, "ms", "step time, timeline off", off,
                              off_share, 4, 4)});
    return 0;
  });
}
