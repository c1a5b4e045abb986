// Mixed-precision benchmark (issue 16): training samples/s under the "mixed_bfloat16" policy
// against "float32" — the yardstick, measured in the same run — for a wide MLP (784 → 4096 → 4096
// → 4096 → 10, global batch 512, and again at 256: matmul-bound, where bfloat16 matters) and the
// seed CNN (examples/mnist_mirrored.cc, global batch 128); held-out accuracy of both policies after the
// same epochs; and the all-reduce of a gradient-sized list with bfloat16 compression against
// none (2 logical devices).
//
//   bench_mixed_precision [--quick] [--steps N] [--repeats R] [--epochs E] [--only NAME]
//
// --only runs that model's speed rounds and nothing else (for profiling one of them).
// Speed: one logical CPU device (the whole machine), Model::fit with Adam; 3 warm-up steps per
// model, then R rounds (default 5; --quick 1) that alternate the two policies, each a fit call of
// N steps (default 6 MLP / 10 CNN; --quick 2), steady state only; medians with min–max.
// Accuracy: each model trained E epochs (default 2; --quick 1) on synthetic_digits(12000, 1)
// (--quick 1280), evaluated on synthetic_digits(2000, 2) (held out: another seed); the weights of
// both policies start from the same seeded initializers.
// All-reduce: in a child process (device configuration is per process), MirroredStrategy over 2
// logical CPU devices, all_reduce of the MLP's gradient list (37 M float32), compression none
// against bfloat16 (two strategies on the same devices), alternating, R rounds (default 7;
// --quick 2): median time per all-reduce and the bytes handed to the collectives per replica
// (Strategy::all_reduce_counters()).
// Every figure is printed beside the CPU model and the path oneDNN's bfloat16 kernels took
// (native avx512_core_bf16, emulated avx512_core, or the float32 fallback on AVX2-only CPUs).
// Goals: wide MLP at batch 512, bf16 ÷ f32 ≥ 1.5 (on a CPU with native bf16); accuracy within 0.5
// points.
// Last line: one JSON line (bench/bench_util.h).
#include <chorus/chorus.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include <stdexcept>

#include "bench/bench_util.h"
#include <chorus/ops/cpu/dnn.h>

namespace cx = chorus;
namespace L = chorus::layers;

namespace {

using Clock = std::chrono::steady_clock;
using cx::bench::capture;
using cx::bench::median;
using cx::bench::result_field;
using cx::bench::self_path;

struct Spec {
  const char* name;
  std::int64_t batch;
  std::function<std::vector<L::LayerPtr>()> layers;
  bool goal;      // the goal: mixed_bfloat16 ≥ 1.5× float32
  bool accuracy;  // held-out accuracy measured
};

// Seeded initializers, so that both policies start from the same weights.
std::vector<L::LayerPtr> wide_mlp() {
  return {L::Flatten(), L::Dense(4096, "relu", true, cx::initializers::glorot_uniform(1)),
          L::Dense(4096, "relu", true, cx::initializers::glorot_uniform(2)),
          L::Dense(4096, "relu", true, cx::initializers::glorot_uniform(3)),
          L::Dense(10, "", true, cx::initializers::glorot_uniform(4))};
}

std::vector<L::LayerPtr> seed_cnn() {
  return {L::Conv2D(32, 3, "relu", 1, "valid", true, cx::initializers::glorot_uniform(1)),
          L::MaxPooling2D(2),
          L::Conv2D(64, 3, "relu", 1, "valid", true, cx::initializers::glorot_uniform(2)),
          L::MaxPooling2D(2),
          L::Conv2D(64, 3, "relu", 1, "valid", true, cx::initializers::glorot_uniform(3)),
          L::Flatten(),
          L::Dense(64, "relu", true, cx::initializers::glorot_uniform(4)),
          L::Dense(10, "", true, cx::initializers::glorot_uniform(5))};
}

std::unique_ptr<cx::model::Sequential> build(const Spec& spec, const char* policy) {
  cx::mixed_precision::set_global_policy(policy);
  auto m = std::make_unique<cx::model::Sequential>(spec.layers());
  cx::mixed_precision::set_global_policy("float32");
  m->compile(std::make_shared<cx::optimizers::Adam>(1e-3),
             std::make_shared<cx::losses::SparseCategoricalCrossentropy>(/*from_logits=*/true), {"accuracy"});
  return m;
}

cx::data::Dataset steady_data(std::int64_t batch) {
  return cx::data::synthetic_digits(4 * batch, /*seed=*/1).batch(batch, true).cache().repeat();
}

struct Speed {
  std::vector<double> f32, bf16;  // samples/s per round
};

Speed measure_speed(const Spec& spec, int steps, int repeats) {
  auto f32 = build(spec, "float32");
  auto bf16 = build(spec, "mixed_bfloat16");
  auto ds = steady_data(spec.batch);
  f32->fit(ds, {.epochs = 1, .steps_per_epoch = 3, .verbose = 0});
  bf16->fit(ds, {.epochs = 1, .steps_per_epoch = 3, .verbose = 0});
  Speed s;
  auto time = [&](cx::model::Sequential& m) {
    const auto t0 = Clock::now();
    m.fit(ds, {.epochs = 1, .steps_per_epoch = steps, .verbose = 0});
    return static_cast<double>(steps * spec.batch) / std::chrono::duration<double>(Clock::now() - t0).count();
  };
  for (int r = 0; r < repeats; ++r) {  // alternate, and alternate which goes first
    if (r % 2 == 0) {
      s.f32.push_back(time(*f32));
      s.bf16.push_back(time(*bf16));
    } else {
      s.bf16.push_back(time(*bf16));
      s.f32.push_back(time(*f32));
    }
  }
  return s;
}

double held_out_accuracy(const Spec& spec, const char* policy, int epochs, std::int64_t train_n) {
  auto m = build(spec, policy);
  m->fit(cx::data::synthetic_digits(train_n, 1).shuffle(train_n, 7).batch(spec.batch),
         {.epochs = epochs, .verbose = 0});
  return m->evaluate(cx::data::synthetic_digits(2000, 2).batch(500))["accuracy"];
}

// The MLP's gradient shapes (kernels and biases of wide_mlp()).
std::vector<cx::Shape> mlp_gradient_shapes() {
  return {{784, 4096}, {4096}, {4096, 4096}, {4096}, {4096, 4096}, {4096}, {4096, 10}, {10}};
}

// Child: prints "RESULT none_ms=... bf16_ms=... none_bytes=... bf16_bytes=... max_rel_diff=..."
// (bytes per all-reduce per replica; max_rel_diff = max |bf16 − none| / max |none| over elements).
int run_allreduce_child(int repeats) {
  const cx::PhysicalDevice cpu = cx::config::list_physical_devices("CPU")[0];
  cx::config::set_logical_device_configuration(cpu, {{.memory_limit_mb = 2048}, {.memory_limit_mb = 2048}});
  using cx::distribute::Compression;
  cx::distribute::MirroredStrategy plain({"/cpu:0", "/cpu:1"});
  cx::distribute::MirroredStrategy bf16({"/cpu:0", "/cpu:1"},
                                        {.communication_options = {.compression = Compression::kBFloat16}});
  // Each replica's gradients, made once on its device (values of a trained layer's magnitude).
  std::vector<std::vector<cx::Tensor>> grads(2);
  for (int r = 0; r < 2; ++r) {
    cx::ops::Generator gen = cx::ops::Generator::from_seed(static_cast<std::uint64_t>(r + 1));
    for (const cx::Shape& s : mlp_gradient_shapes())
      grads[static_cast<std::size_t>(r)].push_back(
          gen.normal(s, {.stddev = 1e-3, .device = "/cpu:" + std::to_string(r)}));
  }
  auto once = [&](cx::distribute::MirroredStrategy& s) {
    auto out = s.run([&] {
      auto* ctx = cx::get_replica_context();
      return ctx->all_reduce(cx::ReduceOp::kSum, grads[static_cast<std::size_t>(ctx->replica_id_in_sync_group())]);
    });
    return out.values()[0];
  };
  const auto a = once(plain), b = once(bf16);  // warm-up, and the accuracy of one round
  double max_diff = 0, max_abs = 0;
  for (std::size_t t = 0; t < a.size(); ++t) {
    const auto x = a[t].to_vector<float>(), y = b[t].to_vector<float>();
    for (std::size_t i = 0; i < x.size(); ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(x[i] - y[i])));
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(x[i])));
    }
  }
  plain.read_and_reset_all_reduce_counters();
  bf16.read_and_reset_all_reduce_counters();
  std::vector<double> t_none, t_bf16;
  auto time = [&](cx::distribute::MirroredStrategy& s) {
    const auto t0 = Clock::now();
    once(s);
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  for (int r = 0; r < repeats; ++r) {
    if (r % 2 == 0) {
      t_none.push_back(time(plain));
      t_bf16.push_back(time(bf16));
    } else {
      t_bf16.push_back(time(bf16));
      t_none.push_back(time(plain));
    }
  }
  const auto cn = plain.read_and_reset_all_reduce_counters(), cb = bf16.read_and_reset_all_reduce_counters();
  const double per = 2.0 * repeats;  // replicas × rounds
  std::printf("RESULT none_ms=%.6g bf16_ms=%.6g none_bytes=%.6g bf16_bytes=%.6g max_rel_diff=%.6g\n", median(t_none),
              median(t_bf16), static_cast<double>(cn.bytes) / per, static_cast<double>(cb.bytes) / per,
              max_diff / max_abs);
  return 0;
}

std::string min_max(const std::vector<double>& v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f–%.0f", *std::min_element(v.begin(), v.end()),
                *std::max_element(v.begin(), v.end()));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  if (auto rc = chorus::launch::answer_help_or_version(
          argc, argv, "bench_mixed_precision",
          "usage: bench_mixed_precision [--quick] [--steps N] [--repeats R] [--epochs E] [--only wide_mlp|wide_mlp_b256|seed_cnn]\n"))
    return *rc;
  return cx::bench::run_main("bench_mixed_precision", [&] {
    bool quick = false;
    int steps = 0, repeats = 5, epochs = 2;
    std::string only;
    if (argc == 3 && std::string(argv[1]) == "--allreduce-child") return run_allreduce_child(std::atoi(argv[2]));
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--quick") {
        quick = true;
        repeats = 1;
        epochs = 1;
      } else if (a == "--steps" && i + 1 < argc) {
        steps = std::atoi(argv[++i]);
      } else if (a == "--repeats" && i + 1 < argc) {
        repeats = std::atoi(argv[++i]);
      } else if (a == "--epochs" && i + 1 < argc) {
        epochs = std::atoi(argv[++i]);
      } else if (a == "--only" && i + 1 < argc &&
                 (std::string(argv[i + 1]) == "wide_mlp" || std::string(argv[i + 1]) == "wide_mlp_b256" ||
                  std::string(argv[i + 1]) == "seed_cnn")) {
        only = argv[++i];
      } else {
        return cx::launch::usage_error("bench_mixed_precision", a,
                                       "usage: bench_mixed_precision [--quick] [--steps N] [--repeats R] [--epochs E] "
                                       "[--only wide_mlp|wide_mlp_b256|seed_cnn]\n");
      }
    }
    const std::string machine = cx::bench::machine(/*cpu_model=*/true);
    const std::string path = cx::ops::cpu::bf16_path();
    std::printf("machine: %s\nbfloat16 kernels: %s\n", machine.c_str(), path.c_str());
    std::vector<cx::bench::Json> cases;

    // The wide MLP at batch 512 carries the goal; at 256 the per-parameter costs that do not
    // shrink with bfloat16 (Adam's update, the weight and gradient casts) weigh twice as much.
    const Spec specs[] = {{"wide_mlp", 512, wide_mlp, true, true},
                          {"wide_mlp_b256", 256, wide_mlp, false, false},
                          {"seed_cnn", 128, seed_cnn, false, true}};
    for (const Spec& spec : specs) {
      if (!only.empty() && only != spec.name) continue;
      const int n = steps > 0 ? steps : quick ? 2 : (spec.batch >= 256 ? 6 : 10);
      const Speed s = measure_speed(spec, n, repeats);
      const double f = median(s.f32), b = median(s.bf16), ratio = b / f;
      std::printf(
          "%-13s batch %3lld samples/s  float32 %6.0f (%s)  mixed_bfloat16 %6.0f (%s)  ratio %.2f%s  [%s; %s]\n",
          spec.name, static_cast<long long>(spec.batch), f, min_max(s.f32).c_str(), b, min_max(s.bf16).c_str(), ratio,
          !spec.goal     ? ""
          : ratio >= 1.5 ? "  goal >= 1.5: PASS"
                         : "  goal >= 1.5: FAIL",
          machine.c_str(), path.c_str());
      cases.push_back(cx::bench::json_case(std::string(spec.name) + " mixed_bfloat16 samples/s", b, "samples/s",
                                           "float32 samples/s", f, ratio));
    }

    if (!only.empty()) return 0;
    const std::int64_t train_n = quick ? 1280 : 12000;
    for (const Spec& spec : specs) {
      if (!spec.accuracy) continue;
      const double a32 = held_out_accuracy(spec, "float32", epochs, train_n);
      const double a16 = held_out_accuracy(spec, "mixed_bfloat16", epochs, train_n);
      const double diff = 100 * (a16 - a32);
      std::printf(
          "%-9s held-out accuracy after %d epoch(s) on %lld images: float32 %.4f  mixed_bfloat16 %.4f  "
          "(%+.2f points; goal within 0.5: %s)\n",
          spec.name, epochs, static_cast<long long>(train_n), a32, a16, diff, std::abs(diff) <= 0.5 ? "PASS" : "FAIL");
      cases.push_back(cx::bench::json_case(std::string(spec.name) + " mixed_bfloat16 held-out accuracy", a16,
                                           "accuracy", "float32 held-out accuracy", a32, a16 / a32));
    }
    {  // all-reduce with and without compression, in a child process
      const int rounds = quick ? 2 : 7;
      int status = 0;
      const std::string out =
          capture(self_path("bench_mixed_precision") + " --allreduce-child " + std::to_string(rounds), &status);
      const auto none_ms = result_field(out, "none_ms"), bf16_ms = result_field(out, "bf16_ms");
      const auto none_b = result_field(out, "none_bytes"), bf16_b = result_field(out, "bf16_bytes");
      const auto diff = result_field(out, "max_rel_diff");
      if (!none_ms || !bf16_ms || !none_b || !bf16_b || !diff)
        throw std::runtime_error("the all-reduce child printed no RESULT line:\n" + out);
      std::printf(
          "all-reduce of the MLP's gradients (37 M float32), 2 logical CPU devices: none %.1f ms, "
          "%.0f MB/replica; bfloat16 compression %.1f ms, %.0f MB/replica (bytes %.2f×, time %.2f×); "
          "max |diff| / max |value| %.2g  [%s]\n",
          *none_ms, *none_b / 1e6, *bf16_ms, *bf16_b / 1e6, *bf16_b / *none_b, *bf16_ms / *none_ms, *diff,
          machine.c_str());
      cases.push_back(cx::bench::json_case("all-reduce 37M float32, bfloat16 compression, ms", *bf16_ms, "ms",
                                           "no compression, ms", *none_ms, *bf16_ms / *none_ms));
      cases.push_back(cx::bench::json_case("all-reduce 37M float32, bfloat16 compression, bytes/replica", *bf16_b,
                                           "bytes", "no compression, bytes/replica", *none_b, *bf16_b / *none_b));
    }
    cx::bench::print_json_line("mixed_precision", machine + ", bf16: " + path, cases);
    return 0;
  });
}
