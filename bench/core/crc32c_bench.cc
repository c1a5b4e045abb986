// CRC32C throughput: chorus::crc32c (three crc32 streams joined with the zeros operator) against
// one dependent crc32 chain (what chorus did before 2026-11-27, and what a plain loop over
// _mm_crc32_u64 gives) and against memcpy of the same bytes.
//
//   bench_crc32c [--quick]
//
// Two working sets: 512 KiB (in L2: a restore checksums each 512 KiB piece right after reading
// it) and 64 MiB (from memory). GB/s = bytes / seconds; each contender runs ~0.2 s per repetition,
// contenders alternating, median of 5 (--quick: 3 short ones). ratio = chorus / yardstick (> 1:
// chorus faster). The last line printed is the JSON line of docs/style.md habit 11.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

#include "bench/bench_util.h"
#include <chorus/core/crc32c.h>
#include <chorus/launch/cli.h>

namespace {

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t one_chain(const unsigned char* p, std::size_t n) {
  std::uint64_t c = 0xffffffffu;
  for (; n >= 8; p += 8, n -= 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
  }
  auto c32 = static_cast<std::uint32_t>(c);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}
#endif

volatile std::uint32_t g_sink;

// GB/s of `fn` over `bytes`, median of `reps` repetitions of ~`seconds` each.
double throughput(const std::function<void()>& fn, std::size_t bytes, int reps, double seconds) {
  std::vector<double> rates;
  for (int r = 0; r < reps; ++r) {
    std::size_t calls = 0;
    const auto start = std::chrono::steady_clock::now();
    double elapsed = 0;
    do {
      fn();
      ++calls;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } while (elapsed < seconds);
    rates.push_back(static_cast<double>(bytes) * static_cast<double>(calls) / elapsed / 1e9);
  }
  return chorus::bench::median(rates);
}

}  // namespace

int main(int argc, char** argv) {
  static constexpr const char* kUsage = "usage: bench_crc32c [--quick]\n";
  if (auto rc = chorus::launch::answer_help_or_version(argc, argv, "bench_crc32c", kUsage)) return *rc;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) != "--quick") return chorus::launch::usage_error("bench_crc32c", argv[i], kUsage);
  const bool quick = argc > 1;
  const int reps = quick ? 3 : 5;
  const double seconds = quick ? 0.02 : 0.2;
  std::printf("crc32c bench: median of %d, hardware crc32: %s; machine: %s\n", reps,
              chorus::crc32c_uses_hardware() ? "yes" : "no", chorus::bench::machine(true).c_str());
  std::printf("%-10s %-22s %10s %10s %8s\n", "size", "yardstick", "chorus", "yardstick", "ratio");
  std::vector<chorus::bench::Json> cases;
  for (const std::size_t bytes : {std::size_t{512} << 10, std::size_t{64} << 20}) {
    std::vector<unsigned char> src(bytes), dst(bytes);
    for (std::size_t i = 0; i < bytes; ++i) src[i] = static_cast<unsigned char>(i * 131 + (i >> 11));
    const std::string size =
        bytes < (1u << 20) ? std::to_string(bytes >> 10) + " KiB" : std::to_string(bytes >> 20) + " MiB";
    struct Yardstick {
      const char* name;
      std::function<void()> fn;
    };
    std::vector<Yardstick> yardsticks = {{"memcpy", [&] { std::memcpy(dst.data(), src.data(), bytes); }}};
#if defined(__x86_64__)
    if (chorus::crc32c_uses_hardware())
      yardsticks.insert(yardsticks.begin(), {"one crc32 chain", [&] { g_sink = one_chain(src.data(), bytes); }});
#endif
    for (const Yardstick& y : yardsticks) {
      double ours = 0, theirs = 0;
      // Alternate, so a drift of the machine hits both.
      std::vector<double> a, b;
      for (int r = 0; r < reps; ++r) {
        a.push_back(throughput([&] { g_sink = chorus::crc32c(src.data(), bytes); }, bytes, 1, seconds));
        b.push_back(throughput(y.fn, bytes, 1, seconds));
      }
      ours = chorus::bench::median(a);
      theirs = chorus::bench::median(b);
      std::printf("%-10s %-22s %10.2f %10.2f %8.2f\n", size.c_str(), y.name, ours, theirs, ours / theirs);
      cases.push_back(chorus::bench::json_case("crc32c " + size, ours, "GB/s", y.name, theirs, ours / theirs));
    }
  }
  chorus::bench::print_json_line("crc32c", chorus::bench::machine(), cases);
  return 0;
}
