// All-reduce benchmark: chorus's shared-memory all_reduce against its yardsticks (issue 4).
//
//   bench_allreduce [--quick] [--max-mib N] [--sizes LIST] [--no-mpi] [--rounds R]
//
// Setup. Four logical CPU devices are configured once (the configuration can be set only once per
// process, before devices are used); a case with k participants uses /cpu:0 .. /cpu:k-1, one
// replica thread each, as MirroredStrategy's replicas do. Threads are persistent for a case and
// not pinned. Data: float32, SUM, in place (input == output), k = 2 and 4, message sizes N = 4 B,
// 256 B, 4 KiB, 16 KiB, ..., 256 MiB (x4 steps from 4 KiB; --max-mib caps the largest; --quick: 4 KiB, 64 KiB, 1 MiB
// with short runs, a smoke test under 5 s; --sizes 1M,4M,... picks the sizes, K/M suffixes, e.g. to rerun the 1-4 MiB
// cases several times). Before timing, each backend's result is checked exactly (rank r contributes r+1 everywhere;
// every element of every output must be k(k+1)/2).
//
// Contenders, each timed in the same run:
//   shared_memory            chorus's bandwidth-optimal in-process all_reduce (the one under test);
//   reduction_to_one_device  chorus's reference backend, TF's ReductionToOneDevice (baseline);
//   memcpy k*N               yardstick: ONE thread doing k memcpy's of N bytes, from the k ranks'
//                            buffers into k other buffers. It moves 2*k*N bytes (k*N read, k*N
//                            written), the least any in-process all-reduce must move: each of the
//                            k inputs read once and each of the k outputs written once;
//   memcpy k*N ring          the same k memcpy's, but rank j's buffer into rank j+1's (mod k): the
//                            same bytes with the all-reduce's own footprint (k*N, the ranks'
//                            buffers, as hot or cold as they are for the all-reduce), where the
//                            first one touches 2*k*N and can spill a cache level the all-reduce
//                            still fits in. The bandwidth goal takes the FASTER of the two;
//   MPI_Allreduce k procs    yardstick: raw MPI_Allreduce (in place, float32, SUM) between k
//                            processes, bench_mpi_allreduce launched with mpirun (skipped, with
//                            the reason, when MPI was not built or mpirun fails);
//   thread barrier           yardstick for small-message latency: k threads passing a bare barrier
//                            back to back, both a std::barrier and a mutex+condvar barrier (the
//                            mechanism of chorus's rendezvous); the faster of the two is the goal's
//                            yardstick. Beside them, not a goal: a flag barrier (one counter per
//                            thread on its own cache line), the floor of any in-process meeting.
//
// Timing (the same policy in bench_mpi_allreduce): one warm-up call; a batch size B found by
// doubling until one batch takes >= 5 ms (1 ms with --quick); then R = 5 repetitions (3 when a
// call takes > 100 ms; 3 with --quick) of B back-to-back calls, B chosen so the R batches take about
// 0.3 s (0.02 s with --quick). A repetition's time runs from the earliest thread's start to the
// latest thread's end; reported is the median over repetitions of (repetition time / B), and the
// spread (slowest - fastest repetition) / median. The in-process contenders of one (k, size) —
// and, at 4 KiB, the barriers — run their repetitions interleaved (A B C A B C ...), so a drifting
// machine moves them alike; MPI runs in its own processes before the in-process cases of its k.
// --rounds R repeats that (MPI, then the in-process cases) R times per k and reports, and judges
// the goals on, the median of the R round medians: a burst of the machine during one round, on
// either side, no longer decides a goal.
//
// Metrics: time t per call; algbw = N / t; busbw = algbw * 2(k-1)/k (nccl-tests' convention);
// 2kN bandwidth = 2*k*N / t, the in-process traffic rate compared with memcpy's 2*k*N / t_memcpy.
// GB/s = 1e9 bytes/s. Every ratio is yardstick time / shared_memory time, so > 1 means chorus is
// faster (for memcpy it equals the ratio of the 2kN bandwidths).
//
// Goal (issue 24), for each k: at every size <= 64 KiB, MPI_Allreduce's time / shared_memory's
// time >= 1 (the threads of one process at least as fast as MPI's processes).
// Goals (issue 4), evaluated on sizes >= 1 MiB for each k: ratio vs memcpy >= 0.8, vs
// reduction_to_one_device >= 1.3, vs MPI_Allreduce >= 2; and the 4 KiB all_reduce time <= 3x the
// faster bare barrier. Failures are printed as FAIL with their numbers; the exit status is 0
// unless something broke (a wrong result, a chorus error), so noisy machines do not fail CI.
//
// Output: the table (rows as they are measured), the latency table, the goals, and last the JSON
// line of docs/style.md habit 11.
//
// Files: this one (flags, devices, the loop over k, rounds and sizes); allreduce_measure.cc (the
// timing, the MPI yardstick, the contenders); allreduce_report.cc (tables, goals, the JSON line);
// allreduce_bench.h (what they share).
#include <algorithm>
#include <barrier>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/collective/allreduce_bench.h"
#include <chorus/collective/reference.h>
#include <chorus/collective/shared_memory.h>
#include <chorus/core/config.h>
#include <chorus/core/tensor.h>
#include <chorus/launch/cli.h>

namespace chorus::allreduce_bench {
namespace {

using bench::machine;

int usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s [--quick] [--max-mib N] [--sizes 4K,1M,...] [--no-mpi] [--rounds R]\n", argv0);
  return 2;
}

// The command line; nullopt (after the usage line) when a flag is wrong.
struct Args {
  bool quick = false, no_mpi = false;
  int rounds = 1;
  std::size_t max_bytes = 256 * kMiB;
  std::vector<std::size_t> sizes;
};

std::optional<Args> parse_args(int argc, char** argv) {
  Args a;
  bool& quick = a.quick;
  bool& no_mpi = a.no_mpi;
  int& rounds = a.rounds;
  std::size_t& max_bytes = a.max_bytes;
  std::vector<std::size_t>& sizes = a.sizes;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--no-mpi") == 0) {
      no_mpi = true;
    } else if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
      char* end = nullptr;
      const long v = std::strtol(argv[++i], &end, 10);
      rounds = static_cast<int>(v);
      if (end == argv[i] || *end != '\0' || v < 1 || v > 20) {
        std::fprintf(stderr, "--rounds: expected 1..20, got '%s'\n", argv[i]);
        (void)usage(argv[0]);
        return std::nullopt;
      }
    } else if (std::strcmp(argv[i], "--max-mib") == 0 && i + 1 < argc) {
      const long v = std::atol(argv[++i]);
      if (v < 1 || v > 4096) {
        std::fprintf(stderr, "--max-mib: expected 1..4096, got '%s'\n", argv[i]);
        (void)usage(argv[0]);
        return std::nullopt;
      }
      max_bytes = static_cast<std::size_t>(v) * kMiB;
    } else if (std::strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) {
      // Comma-separated sizes with a K or M suffix (KiB, MiB), multiples of 4 bytes.
      for (const char* p = argv[++i]; *p != '\0';) {
        char* end = nullptr;
        const unsigned long long v = std::strtoull(p, &end, 10);
        std::size_t bytes = v;
        if (*end == 'K')
          bytes = v * kKiB, ++end;
        else if (*end == 'M')
          bytes = v * kMiB, ++end;
        if (end == p || v == 0 || bytes % sizeof(float) != 0 || bytes > 4096 * kMiB || (*end != ',' && *end != '\0')) {
          std::fprintf(stderr, "--sizes: expected a list like 4K,1M,16M, got '%s'\n", argv[i]);
          (void)usage(argv[0]);
          return std::nullopt;
        }
        sizes.push_back(bytes);
        p = *end == ',' ? end + 1 : end;
      }
    } else {
      std::fprintf(stderr, "bench_allreduce: unknown flag '%s'\n", argv[i]);
      (void)usage(argv[0]);
      return std::nullopt;
    }
  }
  return a;
}

int run(int argc, char** argv) {
  const std::optional<Args> args = parse_args(argc, argv);
  if (!args) return 2;
  const bool quick = args->quick, no_mpi = args->no_mpi;
  const int rounds = args->rounds;
  const std::size_t max_bytes = args->max_bytes;
  std::vector<std::size_t> sizes = args->sizes;
  if (!sizes.empty()) {
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  } else if (quick) {
    for (std::size_t s : {4 * kKiB, 64 * kKiB, kMiB})
      if (s <= max_bytes) sizes.push_back(s);
  } else {
    sizes = {4, 256};  // small-message latency (issue 24), then 4 KiB, 16 KiB, ... (x4)
    for (std::size_t s = 4 * kKiB; s <= max_bytes; s *= 4) sizes.push_back(s);
  }
  const Policy policy = quick ? Policy{0.02, 1e-3, 3} : Policy{0.3, 5e-3, 5};
  const std::size_t largest = sizes.back();

  // Each device holds its own buffer; device 0 also the reference backend's k+1 temporaries
  // (k input copies and the result), so (k+2) x largest, doubled for arena slack across sizes.
  const PhysicalDevice cpu = config::list_physical_devices("CPU")[0];
  const std::int64_t want_mb = static_cast<std::int64_t>(2 * (kMaxK + 2) * largest / kMiB) + 64;
  const std::int64_t cap_mb = static_cast<std::int64_t>((cpu.memory_bytes >> 20) * 9 / 10 / kMaxK);
  const std::int64_t limit_mb = std::min(want_mb, cap_mb);
  config::set_visible_devices({}, "GPU");
  config::set_logical_device_configuration(
      cpu, std::vector<LogicalDeviceConfiguration>(kMaxK, LogicalDeviceConfiguration{.memory_limit_mb = limit_mb}));

  std::printf(
      "allreduce bench: float32 sum in place, one thread per logical CPU device (/cpu:0..k-1, %lld MiB "
      "limit each), sizes %s..%s, median of %d repetitions (3 when a call takes > 100 ms), ~%.2g s per case%s\n",
      static_cast<long long>(limit_mb), size_name(sizes.front()).c_str(), size_name(largest).c_str(), policy.reps,
      policy.target_s, quick ? " (--quick)" : "");
  std::printf("machine: %s\n", machine(/*cpu_model=*/true).c_str());
  std::printf(
      "ratios = yardstick time / shared_memory time (> 1: chorus faster); 2kN bw = 2*k*N/t; "
      "memcpy = 1 thread, k copies of N bytes (ring: rank j's buffer into rank j+1's); vs memcpy uses the faster "
      "of the two\n\n");

  std::vector<std::vector<Row>> round_rows(static_cast<std::size_t>(rounds));
  std::vector<std::vector<Latency>> round_latencies(static_cast<std::size_t>(rounds));
  std::map<int, std::string> mpi_skipped;
  print_header();
  for (int k : kKs) {
    auto shared = collective::make_shared_memory_group(k, "bench_shared_memory");
    auto reference = collective::make_reference_group(k, "bench_reference");
    for (int round = 0; round < rounds; ++round) {
      if (rounds > 1) std::printf("k=%d, round %d of %d\n", k, round + 1, rounds);
      const MpiRun mpi = run_mpi(k, sizes, policy, no_mpi);
      if (!mpi.skipped.empty())
        mpi_skipped[k] = rounds > 1 ? "round " + std::to_string(round + 1) + ": " + mpi.skipped : mpi.skipped;
      std::vector<Row>& rows = round_rows[static_cast<std::size_t>(round)];
      std::vector<Latency>& latencies = round_latencies[static_cast<std::size_t>(round)];

      for (std::size_t bytes : sizes) {
        std::vector<Tensor> bufs;
        for (int r = 0; r < k; ++r)
          bufs.push_back(Tensor::zeros({static_cast<std::int64_t>(bytes / sizeof(float))}, DType::kFloat32, device(r)));
        std::vector<HostBuffer> memcpy_dst;
        std::vector<Contender> contenders = {all_reduce_contender(shared, bufs), all_reduce_contender(reference, bufs),
                                             memcpy_contender(bufs, bytes, &memcpy_dst),
                                             memcpy_ring_contender(bufs, bytes)};
        // The latency yardsticks run interleaved with the 4 KiB case they are compared with.
        std::barrier<> bar(k);
        CondvarBarrier cbar(k);
        FlagBarrier fbar(k);
        if (bytes == kLatencyBytes) {
          contenders.push_back({k, [&bar](int) { bar.arrive_and_wait(); }});
          contenders.push_back({k, [&cbar](int) { cbar.wait(); }});
          contenders.push_back({k, [&fbar](int r) { fbar.wait(r); }});
        }
        const std::vector<Timing> t = measure(contenders, policy);
        Row row{k, bytes, t[0], t[1], t[2], t[3], std::nullopt};
        if (auto it = mpi.seconds.find(bytes); it != mpi.seconds.end()) row.mpi_s = it->second;
        if (bytes == kLatencyBytes) latencies.push_back({k, t[4].seconds, t[5].seconds, t[0].seconds, t[6].seconds});
        print_row(row);
        rows.push_back(row);
      }
    }
  }
  const std::vector<Row> rows = merge_rounds(round_rows);
  const std::vector<Latency> latencies = merge_rounds(round_latencies);
  print_report(rows, latencies, mpi_skipped, rounds);
  return 0;
}

}  // namespace
}  // namespace chorus::allreduce_bench

int main(int argc, char** argv) {
  if (auto rc = chorus::launch::answer_help_or_version(
          argc, argv, "bench_allreduce",
          "usage: bench_allreduce [--quick] [--max-mib N] [--sizes 4K,1M,...] [--no-mpi] [--rounds R]\n"))
    return *rc;
  return chorus::bench::run_main("allreduce bench failed", [&] { return chorus::allreduce_bench::run(argc, argv); });
}
