// GPT training benchmark (issue 43): tokens/s of training steps of the GPT of examples/gpt_mirrored.cc
// (examples/gpt_model.h: 2 blocks, d_model 128, 4 heads, seq 64, byte vocabulary; float32) with
// Model::fit, global batch 32 sequences (2048 tokens a step), AdamW with the example's warm-up and
// cosine schedule, weight decay 0.01 and global_clipnorm 1 — chorus on 1 logical CPU device (its
// op threads on both cores) and under MirroredStrategy on 2 logical CPU devices (one op thread
// each), against yardsticks measured in the same run:
//   TF/Keras: the same model in tf_keras 2.21 (bench/train/gpt_yardstick.py --framework tf, through
//     $CHORUS_TF_PYTHON or the test venv), Model.fit on one CPU device, TensorFlow's intra-op and
//     inter-op pools 2 threads each; and under tf.distribute.MirroredStrategy over 2 logical CPU
//     devices (--replicas 2), the same global batch — chorus's 2-device side's own yardstick;
//   PyTorch: the same model in eager PyTorch (gpt_yardstick.py --framework torch), with
//     torch.set_num_threads(2) — the same threads — and OMP_WAIT_POLICY=PASSIVE: with libgomp's
//     default (active) waiting, each parallel region's barrier spins for a thread that a loaded,
//     shared 2-vCPU machine has descheduled, and a step took 10x longer (docs/benchmarks.md, "GPT");
//     and, for reference, with 1 thread. The Python: $CHORUS_TORCH_PYTHON,
//     ~/.cache/chorus/torch-venv/bin/python, python3, /usr/bin/python3 — the first that imports
//     torch; none → the PyTorch rows say why and the JSON cases have yardstick_value null.
//
//   bench_gpt [--quick] [--steps N] [--rounds K]
//   bench_gpt --replicas R [--steps N] [--warmup W]      (one chorus child run)
//
// Every run is a fresh process (a device configuration is frozen per process; the yardsticks are
// other programs): W warm-up steps (default 3; --quick 1), then N timed steps (default 20; --quick
// 2), tokens/s = N × 2048 / the timed wall time. K rounds (default 5; --quick 1) alternate the
// sides: chorus 1 device, TF/Keras, chorus 2 devices, TF/Keras MirroredStrategy 2 devices, PyTorch 2
// threads, PyTorch 1 thread. Each
// side's figure is the median of its rounds, with their min-max. The header names the machine, its
// CPU, the ISA oneDNN chose and the load average before and after (the machine may be shared:
// read the figures with it). The data: chorus reads the example's byte windows of
// /usr/share/common-licenses (pseudo-random bytes where it is missing) through its pipeline
// (shuffle, repeat, batch); the yardsticks cycle cached random batches (a step's cost does not
// depend on the token values). chorus's rows also say the share of the replica threads' time spent
// in CPU kernels and in collectives (core/profile.h's counters, as bench_train).
// Last line: one JSON line; ratio = chorus tokens/s ÷ the yardstick's (> 1: chorus is faster).
#include <chorus/chorus.h>
#include <chorus/core/profile.h>
#include <chorus/ops/cpu/dnn.h>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "examples/gpt_model.h"

namespace cx = chorus;

namespace {

using Clock = std::chrono::steady_clock;
using cx::bench::capture;
using cx::bench::median;
using cx::bench::result_field;

constexpr cx::examples::GptConfig kModel{.seq = 64, .layers = 2, .d_model = 128, .heads = 4};
constexpr std::int64_t kGlobalBatch = 32;
constexpr std::int64_t kTokensPerStep = kGlobalBatch * kModel.seq;
constexpr const char* kUsage =
    "usage: bench_gpt [--quick] [--steps N] [--rounds K]\n"
    "       bench_gpt --replicas R [--steps N] [--warmup W]\n";

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  double one = 0, five = 0, fifteen = 0;
  if (!(f >> one >> five >> fifteen)) return "unknown";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f %.2f %.2f", one, five, fifteen);
  return buf;
}

// The example's training text, or 1 MiB of pseudo-random bytes where the corpus is missing.
std::string training_text() {
  std::string text = cx::examples::read_corpus("/usr/share/common-licenses");
  if (text.size() >= 64 * 1024) return text;
  text.resize(1 << 20);
  std::uint64_t s = 43;
  for (char& c : text) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    c = static_cast<char>(s >> 56);
  }
  return text;
}

// One chorus run, in this (child) process: `replicas` logical CPU devices. Prints a RESULT line.
int run_child(int replicas, int steps, int warmup) {
  const cx::PhysicalDevice cpu = cx::config::list_physical_devices("CPU")[0];
  cx::config::set_logical_device_configuration(
      cpu, std::vector<cx::LogicalDeviceConfiguration>(static_cast<std::size_t>(replicas), {.memory_limit_mb = 2048}));
  cx::distribute::MirroredStrategy strategy;
  auto scope = strategy.scope();
  auto model = cx::examples::gpt(kModel);
  namespace opt = cx::optimizers;
  const std::int64_t total = warmup + steps;
  const std::int64_t warm = std::max<std::int64_t>(total / 10, 1);
  model->compile(
      std::make_shared<opt::AdamW>(opt::AdamWOptions{
          .learning_rate = opt::schedules::CosineDecay(0.0, std::max<std::int64_t>(total - warm, 1), 0.1, 3e-3, warm),
          .weight_decay = 0.01,
          .global_clipnorm = 1.0}),
      std::make_shared<cx::losses::SparseCategoricalCrossentropy>(/*from_logits=*/true));
  auto ds = cx::examples::byte_windows(training_text(), kModel.seq, kModel.seq / 2)
                .shuffle(4096, 1)
                .repeat()
                .batch(kGlobalBatch, /*drop_remainder=*/true);
  cx::profile::enable_profiling(true);  // from the warm-up on, as bench_train (its counts dropped below)
  model->fit(ds, {.epochs = 1, .steps_per_epoch = warmup, .verbose = 0});
  cx::profile::read_and_reset();
  const auto start = Clock::now();
  const auto h = model->fit(ds, {.epochs = 1, .steps_per_epoch = steps, .verbose = 0});
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  const cx::profile::ProfileCounters c = cx::profile::read_and_reset();
  const double tps = static_cast<double>(steps * kTokensPerStep) / wall;
  const double busy = replicas * wall * 1e9;  // summed replica-thread time, ns
  std::printf(
      "RESULT replicas=%d tokens_per_s=%.6g ms_per_step=%.6g peak_rss_mib=%.6g params=%lld loss=%.6g kernels=%.6g "
      "collectives=%.6g\n",
      replicas, tps, 1e3 * wall / steps, peak_rss_mib(), static_cast<long long>(model->count_params()),
      h.history.at("loss").back(), static_cast<double>(c.library_kernel_ns) / busy,
      static_cast<double>(c.collective_ns) / busy);
  return 0;
}

// One side of the comparison: its rounds' tokens/s and the largest peak RSS.
struct Side {
  std::string name;     // the table's row
  std::string skipped;  // why it did not run ("" when it did)
  std::vector<double> tps;
  std::vector<double> kernels, collectives;  // chorus's: fractions of replica-thread time
  double peak_rss_mib = 0;
  std::string line;  // a yardstick's own readable line, the last round's
  std::optional<double> median_tps() const { return tps.empty() ? std::nullopt : std::optional<double>(median(tps)); }
};

// Runs `command` once for `side`, reading its RESULT line; on failure the side is skipped with
// the output's start as the reason. `tag` starts the yardstick's readable line.
void run_side(Side& side, const std::string& command, const std::string& tag) {
  if (!side.skipped.empty()) return;
  int status = 0;
  const std::string out = capture(command + " 2>&1", &status);
  const auto tps = result_field(out, "tokens_per_s");
  if (status != 0 || !tps) {
    side.skipped = "run failed (exit " + std::to_string(status) + "): " + out.substr(0, 400);
    return;
  }
  side.tps.push_back(*tps);
  if (const auto k = result_field(out, "kernels")) side.kernels.push_back(*k);
  if (const auto k = result_field(out, "collectives")) side.collectives.push_back(*k);
  side.peak_rss_mib = std::max(side.peak_rss_mib, result_field(out, "peak_rss_mib").value_or(0.0));
  if (!tag.empty()) {
    const std::size_t p = out.find(tag);
    if (p != std::string::npos) side.line = out.substr(p, out.find('\n', p) - p);
  }
}

int run_parent(int steps, int warmup, int rounds) {
  const std::string self = cx::bench::self_path("bench_gpt");
  const std::string script = std::string(CHORUS_TRAIN_BENCH_DIR) + "/gpt_yardstick.py";
  const std::string load_before = load_average();
  const std::string common = " --steps " + std::to_string(steps) + " --warmup " + std::to_string(warmup) +
                             " --repeats 1 --batch " + std::to_string(kGlobalBatch) + " --seq " +
                             std::to_string(kModel.seq) + " --layers " + std::to_string(kModel.layers) + " --d-model " +
                             std::to_string(kModel.d_model) + " --heads " + std::to_string(kModel.heads);
  Side chorus1{"chorus, 1 logical CPU device (2 op threads)"};
  Side chorus2{"chorus, MirroredStrategy, 2 logical CPU devices (1 op thread each)"};
  Side tf{"TF/Keras (tf_keras), one CPU device, 2 intra-op + 2 inter-op threads"};
  Side tf2{"TF/Keras, MirroredStrategy, 2 logical CPU devices, 2 + 2 threads"};
  Side torch2{"PyTorch eager, 2 threads (set_num_threads(2), OMP_WAIT_POLICY=PASSIVE)"};
  Side torch1{"PyTorch eager, 1 thread (reference)"};

  std::string tf_py = cx::bench::tf_python();
  if (tf_py.empty()) {
    tf.skipped = "no Python for TensorFlow (set CHORUS_TF_PYTHON, or make the test venv: scripts/test-python-env.sh)";
  } else {
    int status = 0;
    capture("'" + tf_py + "' -c 'import tensorflow, tf_keras' >/dev/null 2>&1", &status);
    if (status != 0) tf.skipped = "'" + tf_py + "' cannot import tensorflow and tf_keras";
  }
  tf2.skipped = tf.skipped;
  std::string torch_why;
  const std::string torch_py = cx::bench::python_with_torch(&torch_why);
  if (torch_py.empty()) torch2.skipped = torch1.skipped = torch_why;

  for (int round = 0; round < rounds; ++round) {
    const std::string child = "'" + self + "' --steps " + std::to_string(steps) + " --warmup " + std::to_string(warmup);
    run_side(chorus1, child + " --replicas 1", "");
    run_side(tf, "'" + tf_py + "' '" + script + "' --framework tf --threads 2" + common, "tensorflow ");
    run_side(chorus2, child + " --replicas 2", "");
    run_side(tf2, "'" + tf_py + "' '" + script + "' --framework tf --threads 2 --replicas 2" + common, "tensorflow ");
    run_side(torch2,
             "OMP_WAIT_POLICY=PASSIVE '" + torch_py + "' '" + script + "' --framework torch --threads 2" + common,
             "torch ");
    run_side(torch1, "'" + torch_py + "' '" + script + "' --framework torch --threads 1" + common, "torch ");
  }
  if (!chorus1.skipped.empty() || !chorus2.skipped.empty()) {
    std::fprintf(stderr, "bench_gpt: a chorus run failed:\n%s\n%s\n", chorus1.skipped.c_str(), chorus2.skipped.c_str());
    return 1;
  }

  const std::string machine = cx::bench::machine(true) + ", oneDNN " + cx::ops::cpu::onednn_isa();
  std::printf(
      "GPT (examples/gpt_model.h): %lld blocks, d_model %lld, %lld heads, seq %lld, byte vocabulary; float32; "
      "global batch %lld x %lld = %lld tokens a step; AdamW, warm-up + cosine, global_clipnorm 1\n"
      "machine: %s\nload average (1, 5, 15 min): %s before, %s after\n"
      "each run a fresh process: %d warm-up steps, then %d timed steps; %d round(s) alternating the sides "
      "(tokens/s: median of the rounds [min-max])\n",
      static_cast<long long>(kModel.layers), static_cast<long long>(kModel.d_model),
      static_cast<long long>(kModel.heads), static_cast<long long>(kModel.seq), static_cast<long long>(kGlobalBatch),
      static_cast<long long>(kModel.seq), static_cast<long long>(kTokensPerStep), machine.c_str(), load_before.c_str(),
      load_average().c_str(), warmup, steps, rounds);
  std::printf("%-72s %10s %17s %9s %9s\n", "side", "tokens/s", "[min-max]", "ms/step", "peak RSS");
  for (const Side* s : {&chorus1, &chorus2, &tf, &tf2, &torch2, &torch1}) {
    if (s->tps.empty()) {
      std::printf("%-72s skipped: %s\n", s->name.c_str(), s->skipped.c_str());
      continue;
    }
    const double m = median(s->tps);
    char range[48];
    std::snprintf(range, sizeof range, "[%.0f-%.0f]", *std::min_element(s->tps.begin(), s->tps.end()),
                  *std::max_element(s->tps.begin(), s->tps.end()));
    std::printf("%-72s %10.0f %17s %9.1f %5.0f MiB\n", s->name.c_str(), m, range, 1e3 * kTokensPerStep / m,
                s->peak_rss_mib);
  }
  for (const Side* s : {&chorus1, &chorus2})
    std::printf(
        "  %s: in kernels (oneDNN + chorus loops) %.0f%%, in collectives %.0f%% of replica-thread time "
        "(medians; core/profile.h)\n",
        s == &chorus1 ? "chorus 1 device" : "chorus 2 devices", 100 * median(s->kernels), 100 * median(s->collectives));
  for (const Side* s : {&tf, &tf2, &torch2, &torch1})
    if (!s->line.empty()) std::printf("  %s\n", s->line.c_str());

  std::vector<cx::bench::Json> cases;
  for (const Side* mine : {&chorus1, &chorus2}) {
    const double v = median(mine->tps);
    const std::string who = mine == &chorus1 ? "chorus 1 device" : "chorus 2 devices";
    for (const Side* yard : {&tf, &tf2, &torch2, &torch1}) {
      const std::optional<double> y = yard->median_tps();
      if (y) std::printf("ratio %-17s / %-66s %.2f\n", who.c_str(), yard->name.c_str(), v / *y);
      cases.push_back(cx::bench::json_case("tokens/s " + who, v, "tokens/s", yard->name, y,
                                           y ? std::optional<double>(v / *y) : std::nullopt, 5, 3));
    }
  }
  cx::bench::print_json_line("gpt", machine, cases);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (auto rc = cx::launch::answer_help_or_version(argc, argv, "bench_gpt", kUsage)) return *rc;
  bool quick = false;
  int replicas = 0, steps = -1, warmup = -1, rounds = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--quick") {
      quick = true;
    } else if (flag == "--replicas" && i + 1 < argc) {
      replicas = std::atoi(argv[++i]);
    } else if (flag == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (flag == "--warmup" && i + 1 < argc) {
      warmup = std::atoi(argv[++i]);
    } else if (flag == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else {
      return cx::launch::usage_error("bench_gpt", flag, kUsage);
    }
  }
  if (steps <= 0) steps = quick ? 2 : 20;
  if (warmup <= 0) warmup = quick ? 1 : 3;
  if (rounds <= 0) rounds = quick ? 1 : 5;
  return cx::bench::run_main("bench_gpt", [&] {
    return replicas > 0 ? run_child(replicas, steps, warmup) : run_parent(steps, warmup, rounds);
  });
}
