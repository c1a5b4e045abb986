// A small decoder-only transformer (GPT) trained under MirroredStrategy on two logical devices
// (two virtual GPUs when there is a GPU, else two logical CPUs), with Keras's functional API:
//   token + position embeddings; N blocks of pre-LayerNormalization causal MultiHeadAttention and
//   an MLP (Dense 4d gelu, Dense d), each with a residual Add; a final LayerNormalization; logits
//   over 256 byte values.
// The model and the byte windows live in examples/gpt_model.h (shared with the parity test against
// tf_keras and bench_gpt).
// Training: AdamW with linear warm-up and cosine decay (schedules::CosineDecay), global gradient
// clipping, the mixed_bfloat16 policy (--mixed-bfloat16 0 for float32), ZeRO stage 2 (--zero-stage).
// Data: byte-level tokens of a text corpus that ships with every Debian system — the license
// texts in /usr/share/common-licenses (--corpus DIR or FILE for another) — split 90/10 into
// training and held-out text. Prints the held-out loss (nats per byte) before and after training;
// exits non-zero unless it fell below --max-heldout-loss (CTest runs it short with a bound a
// unigram model cannot reach: log(256) = 5.55 is chance, the bytes' unigram entropy about 3.1).
//   gpt_mirrored                                  # the long run (a few minutes on 2 CPU cores)
//   gpt_mirrored --steps 60 --max-heldout-loss 3.0  # CTest's
#include <chorus/chorus.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>

#include "gpt_model.h"  // the model (gpt) and the byte windows, shared with the parity test and bench_gpt

namespace cx = chorus;

namespace {

const char* kUsage =
    "usage: gpt_mirrored [--steps N] [--seq N] [--layers N] [--d-model N] [--heads N] [--batch N]\n"
    "                    [--corpus PATH] [--max-bytes N] [--zero-stage 0-3] [--mixed-bfloat16 0|1]\n"
    "                    [--max-heldout-loss X]\n"
    "  a small GPT trained on byte tokens under MirroredStrategy on two logical devices\n";

struct Flags {
  std::int64_t steps = 600, seq = 64, layers = 2, d_model = 128, heads = 4, batch = 32;
  std::string corpus = "/usr/share/common-licenses";
  std::int64_t max_bytes = 2 << 20;
  int zero_stage = 2;
  bool mixed = true;
  double max_heldout_loss = 2.5;
};

int parse(int argc, char** argv, Flags& f) {
  if (argc % 2 == 0) {
    std::cerr << "gpt_mirrored: '" << argv[argc - 1] << "' needs a value\n" << kUsage;
    return 2;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* v = argv[i + 1];
    if (flag == "--steps")
      f.steps = std::atoll(v);
    else if (flag == "--seq")
      f.seq = std::atoll(v);
    else if (flag == "--layers")
      f.layers = std::atoll(v);
    else if (flag == "--d-model")
      f.d_model = std::atoll(v);
    else if (flag == "--heads")
      f.heads = std::atoll(v);
    else if (flag == "--batch")
      f.batch = std::atoll(v);
    else if (flag == "--corpus")
      f.corpus = v;
    else if (flag == "--max-bytes")
      f.max_bytes = std::atoll(v);
    else if (flag == "--zero-stage")
      f.zero_stage = std::atoi(v);
    else if (flag == "--mixed-bfloat16")
      f.mixed = std::atoi(v) != 0;
    else if (flag == "--max-heldout-loss")
      f.max_heldout_loss = std::atof(v);
    else
      return cx::launch::usage_error("gpt_mirrored", flag, kUsage);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (auto rc = cx::launch::answer_help_or_version(argc, argv, "gpt_mirrored", kUsage)) return *rc;
  Flags f;
  if (int rc = parse(argc, argv, f)) return rc;
  try {
    auto gpus = cx::config::list_physical_devices("GPU");
    const cx::PhysicalDevice base = gpus.empty() ? cx::config::list_physical_devices("CPU")[0] : gpus[0];
    cx::config::set_logical_device_configuration(base, {{.memory_limit_mb = 2048}, {.memory_limit_mb = 2048}});
    cx::distribute::MirroredStrategy strategy({}, {.sharding = {.stage = f.zero_stage}});
    if (f.mixed) cx::mixed_precision::set_global_policy("mixed_bfloat16");

    const std::string text = cx::examples::read_corpus(f.corpus, f.max_bytes);
    const auto split = static_cast<std::int64_t>(text.size()) * 9 / 10;
    if (split < 4 * (f.seq + 1)) {
      std::cerr << "gpt_mirrored: the corpus at " << f.corpus << " has only " << text.size() << " bytes\n";
      return 1;
    }
    auto train = cx::examples::byte_windows(text.substr(0, static_cast<std::size_t>(split)), f.seq, f.seq / 2)
                     .shuffle(4096, 1)
                     .repeat()
                     .batch(f.batch, /*drop_remainder=*/true);
    auto heldout =
        cx::examples::byte_windows(text.substr(static_cast<std::size_t>(split)), f.seq, f.seq).take(512).batch(f.batch);

    auto scope = strategy.scope();
    auto model = cx::examples::gpt({.seq = f.seq, .layers = f.layers, .d_model = f.d_model, .heads = f.heads});
    namespace opt = cx::optimizers;
    const std::int64_t warmup = std::max<std::int64_t>(f.steps / 10, 1);
    auto schedule = opt::schedules::CosineDecay(0.0, f.steps - warmup, 0.1, 3e-3, warmup);
    model->compile(std::make_shared<opt::AdamW>(
                       opt::AdamWOptions{.learning_rate = schedule, .weight_decay = 0.01, .global_clipnorm = 1.0}),
                   std::make_shared<cx::losses::SparseCategoricalCrossentropy>(/*from_logits=*/true));
    std::printf(
        "gpt: %lld blocks, d_model %lld, %lld heads, seq %lld, %lld parameters; %zu bytes of text; "
        "%d replicas, ZeRO stage %d, policy %s\n",
        static_cast<long long>(f.layers), static_cast<long long>(f.d_model), static_cast<long long>(f.heads),
        static_cast<long long>(f.seq), static_cast<long long>(model->count_params()), text.size(),
        strategy.num_replicas_in_sync(), f.zero_stage, f.mixed ? "mixed_bfloat16" : "float32");
    const double before = model->evaluate(heldout).at("loss");
    model->fit(train, {.epochs = 1, .steps_per_epoch = f.steps, .verbose = 0});
    const double after = model->evaluate(heldout).at("loss");
    std::printf("held-out loss (nats per byte): %.3f before, %.3f after %lld steps (bound %.3f)\n", before, after,
                static_cast<long long>(f.steps), f.max_heldout_loss);
    if (!(after < f.max_heldout_loss)) {
      std::cerr << "gpt_mirrored: the held-out loss " << after << " is not below " << f.max_heldout_loss << "\n";
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "gpt_mirrored: " << e.what() << "\n";
    return 1;
  }
}
