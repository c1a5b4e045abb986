// Attention benchmark: ops::scaled_dot_product_attention (chorus's fused CPU kernel) against the
// same attention composed of ops (matmul, where, softmax, matmul — what a layer would write
// without the fused op), measured in the same run on /cpu:0 with all cores.
//
//   bench_attention [--quick]
//
// Cases (float32, [batch, heads, seq, 64]): seq 256 and 1024 (--quick: 128), causal and not;
// forward only, and forward + backward (the tape's gradient of sum(out) with respect to q, k, v).
// Per case: median time of 5 runs after 1 warm-up, and the peak bytes the device allocator held
// above what was live before the call (config::get_memory_info's peak after reset_memory_stats):
// the composed version holds the [B, H, T, T] logits and weights, the fused one only out and lse.
// Ratio = composed / fused (> 1: the fused op is better). The machine line names the CPU and
// oneDNN's ISA (the composed matmuls run on oneDNN; the fused kernel is chorus's own loops).
// Last line: one JSON line.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include <chorus/core/config.h>
#include <chorus/core/tensor.h>
#include <chorus/launch/cli.h>
#include <chorus/ops/attention.h>
#include <chorus/ops/cpu/dnn.h>
#include <chorus/ops/ops.h>

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kDevice = "/cpu:0";
constexpr const char* kUsage = "usage: bench_attention [--quick]\n";

struct Shape4 {
  std::int64_t b, h, t, d;
};

Tensor causal_mask(std::int64_t t) {
  std::vector<bool> m(static_cast<std::size_t>(t * t));
  for (std::int64_t i = 0; i < t; ++i)
    for (std::int64_t j = 0; j < t; ++j) m[static_cast<std::size_t>(i * t + j)] = j <= i;
  return Tensor::from_vector(m, Shape{t, t}, kDevice);
}

// Keras's MultiHeadAttention computation, op by op.
Tensor composed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& causal) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.shape().dims()[3]));
  Tensor logits = ops::mul(ops::matmul(q, k, false, true), ops::scalar_like(q, scale));
  if (causal.defined()) logits = ops::where(causal, logits, ops::scalar_like(logits, -1e9));
  return ops::matmul(ops::softmax(logits), v);
}

struct Measure {
  double seconds = 0;
  double peak_bytes = 0;
};

// Median time of fn (which must finish its work before returning), and the allocator's peak above
// the bytes live before the first timed call.
Measure measure(const std::function<void()>& fn) {
  fn();
  std::vector<double> t;
  const std::size_t before = config::get_memory_info(kDevice).current;
  config::reset_memory_stats(kDevice);
  for (int i = 0; i < 5; ++i) {
    const auto a = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - a).count());
  }
  const std::size_t peak = config::get_memory_info(kDevice).peak;
  return {bench::median(t), static_cast<double>(peak > before ? peak - before : 0)};
}

// Runs attention (fused or composed) once; with `backward`, also the gradient of sum(out).
void step(bool fused, bool backward, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& causal) {
  auto attend = [&] {
    return fused ? ops::scaled_dot_product_attention(q, k, v, {}, {.causal = causal.defined()})
                 : composed(q, k, v, causal);
  };
  if (!backward) {
    attend().to_vector<float>();  // waits for the result
    return;
  }
  ops::GradientTape tape;
  tape.watch(q);
  tape.watch(k);
  tape.watch(v);
  Tensor out = attend();
  std::vector<Tensor> g = tape.gradient(ops::reduce_sum(out), {q, k, v});
  g[0].to_vector<float>();
}

struct Row {
  std::string name;
  Measure fused, composed;
};

int run(bool quick) {
  std::vector<Shape4> shapes =
      quick ? std::vector<Shape4>{{2, 4, 128, 64}} : std::vector<Shape4>{{4, 8, 256, 64}, {1, 8, 1024, 64}};
  std::vector<Row> rows;
  for (const Shape4& s : shapes) {
    Tensor q = ops::random_uniform({s.b, s.h, s.t, s.d}, {.minval = -1, .device = kDevice});
    Tensor k = ops::random_uniform({s.b, s.h, s.t, s.d}, {.minval = -1, .device = kDevice});
    Tensor v = ops::random_uniform({s.b, s.h, s.t, s.d}, {.minval = -1, .device = kDevice});
    for (bool causal : {false, true}) {
      Tensor mask = causal ? causal_mask(s.t) : Tensor();
      for (bool backward : {false, true}) {
        Row r;
        r.name = chorus::internal::str_cat(s.b, "x", s.h, "x", s.t, "x", s.d, causal ? " causal" : "",
                                           backward ? " fwd+bwd" : " fwd");
        r.fused = measure([&] { step(true, backward, q, k, v, mask); });
        r.composed = measure([&] { step(false, backward, q, k, v, mask); });
        rows.push_back(r);
      }
    }
  }
  const std::string machine = bench::machine(true) + ", oneDNN " + ops::cpu::onednn_isa();
  std::printf("machine: %s\n", machine.c_str());
  std::printf("%-30s %11s %11s %7s %11s %11s %7s\n", "case (float32, B x H x T x D)", "fused ms", "composed ms",
              "ratio", "fused MiB", "composed MiB", "ratio");
  std::vector<bench::Json> cases;
  for (const Row& r : rows) {
    const double mib = 1024.0 * 1024.0;
    std::printf("%-30s %11.3f %11.3f %7.2f %11.2f %11.2f %7.2f\n", r.name.c_str(), r.fused.seconds * 1e3,
                r.composed.seconds * 1e3, r.composed.seconds / r.fused.seconds, r.fused.peak_bytes / mib,
                r.composed.peak_bytes / mib, r.fused.peak_bytes > 0 ? r.composed.peak_bytes / r.fused.peak_bytes : 0.0);
    cases.push_back(bench::json_case(r.name + " time", r.fused.seconds * 1e3, "ms", "composed ops",
                                     r.composed.seconds * 1e3, r.composed.seconds / r.fused.seconds));
    cases.push_back(bench::json_case(
        r.name + " peak", r.fused.peak_bytes, "bytes", "composed ops", r.composed.peak_bytes,
        r.fused.peak_bytes > 0 ? std::optional<double>(r.composed.peak_bytes / r.fused.peak_bytes) : std::nullopt));
  }
  bench::print_json_line("attention", machine, cases);
  return 0;
}

}  // namespace
}  // namespace chorus

int main(int argc, char** argv) {
  if (auto rc = chorus::launch::answer_help_or_version(argc, argv, "bench_attention", chorus::kUsage)) return *rc;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--quick") != 0)
      return chorus::launch::usage_error("bench_attention", argv[i], chorus::kUsage);
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  return chorus::bench::run_main("bench_attention", [&] { return chorus::run(quick); });
}
