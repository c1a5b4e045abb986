// bench_allreduce's reporting: the table rows as they are measured, the merge of rounds, and the
// summary after the measurements (latency table, goals, the JSON line) (allreduce_bench.h).
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "bench/bench_util.h"
#include "bench/collective/allreduce_bench.h"

namespace chorus::allreduce_bench {
namespace {

using bench::machine;
using bench::median;

double gbps(double bytes, double s) { return bytes / s / 1e9; }

// `spread` < 0: not known (the MPI yardstick reports only its median).
void print_line(int k, std::size_t bytes, const char* backend, double s, double spread, const std::string& ratios) {
  const double n = static_cast<double>(bytes);
  char spread_text[16] = "-";
  if (spread >= 0) std::snprintf(spread_text, sizeof spread_text, "%.0f", spread * 100);
  std::printf("%-2d %-7s %-24s %11.2f %7s %8.3f %8.3f %8.3f | %s\n", k, size_name(bytes).c_str(), backend, s * 1e6,
              spread_text, gbps(n, s), gbps(n, s) * 2.0 * (k - 1) / k, gbps(2.0 * k * n, s), ratios.c_str());
}

// One goal line per k: PASS/FAIL, the worst ratio, and every size's ratio.
// Sizes in [min_bytes, max_bytes] count (issue 4's goals: >= 1 MiB; issue 24's latency goal: <= 64 KiB).
void print_goal(const std::vector<Row>& rows, int k, const char* what, double goal,
                const std::function<std::optional<double>(const Row&)>& ratio, std::size_t min_bytes = kGoalMinBytes,
                std::size_t max_bytes = SIZE_MAX) {
  std::string detail;
  std::optional<double> worst;
  std::size_t worst_bytes = 0;
  bool any_missing = false;
  for (const Row& row : rows) {
    if (row.k != k || row.bytes < min_bytes || row.bytes > max_bytes) continue;
    const std::optional<double> r = ratio(row);
    char item[48];
    if (r)
      std::snprintf(item, sizeof item, "%s %.2f", size_name(row.bytes).c_str(), *r);
    else
      std::snprintf(item, sizeof item, "%s n/a", size_name(row.bytes).c_str());
    detail += (detail.empty() ? "" : ", ") + std::string(item);
    if (!r)
      any_missing = true;
    else if (!worst || *r < *worst)
      worst = r, worst_bytes = row.bytes;
  }
  if (detail.empty()) {
    std::printf("  [SKIP] k=%d %s: no size in [%s, %s] was measured\n", k, what, size_name(min_bytes).c_str(),
                max_bytes == SIZE_MAX ? "any" : size_name(max_bytes).c_str());
  } else if (!worst) {
    std::printf("  [SKIP] k=%d %s: yardstick not measured\n", k, what);
  } else {
    std::printf("  [%s] k=%d %s (goal >= %.2f): worst %.2f at %s (%s)%s\n", *worst >= goal ? "PASS" : "FAIL", k, what,
                goal, *worst, size_name(worst_bytes).c_str(), detail.c_str(), any_missing ? " [some sizes n/a]" : "");
  }
}

// The medians over rounds of one measured value, with the spread of the round medians.
Timing merge_timings(const std::vector<Timing>& t) {
  std::vector<double> s;
  for (const Timing& x : t) s.push_back(x.seconds);
  const auto [lo, hi] = std::minmax_element(s.begin(), s.end());
  const double m = median(s);
  int reps = 0;
  for (const Timing& x : t) reps += x.reps;
  return {m, t.size() > 1 ? (*hi - *lo) / m : t[0].spread, t[0].batch /* round 1's */, reps};
}

}  // namespace

std::string size_name(std::size_t bytes) {
  if (bytes >= kMiB && bytes % kMiB == 0) return std::to_string(bytes / kMiB) + "MiB";
  if (bytes >= kKiB && bytes % kKiB == 0) return std::to_string(bytes / kKiB) + "KiB";
  return std::to_string(bytes) + "B";
}

void print_header() {
  std::printf("%-2s %-7s %-24s %11s %7s %8s %8s %8s | %9s %10s %8s\n", "k", "size", "backend", "time (us)", "spread",
              "algbw", "busbw", "2kN bw", "vs memcpy", "vs reduce1", "vs MPI");
  std::printf("%-2s %-7s %-24s %11s %7s %8s %8s %8s | %9s %10s %8s\n", "", "", "", "", "(%)", "(GB/s)", "(GB/s)",
              "(GB/s)", "(x)", "(x)", "(x)");
}

void print_row(const Row& row) {
  const double sm = row.shared.seconds;
  char ratios[96];
  char mpi[16] = "skipped";
  if (row.mpi_s) std::snprintf(mpi, sizeof mpi, "%8.2f", *row.mpi_s / sm);
  std::snprintf(ratios, sizeof ratios, "%9.2f %10.2f %8s", row.yardstick().seconds / sm, row.reference.seconds / sm,
                mpi);
  print_line(row.k, row.bytes, "shared_memory", sm, row.shared.spread, ratios);
  print_line(row.k, row.bytes, "reduction_to_one_device", row.reference.seconds, row.reference.spread, "");
  print_line(row.k, row.bytes, "memcpy k*N (1 thread)", row.memcpy.seconds, row.memcpy.spread, "");
  print_line(row.k, row.bytes, "memcpy k*N ring (1 thr)", row.memcpy_ring.seconds, row.memcpy_ring.spread, "");
  if (row.mpi_s) print_line(row.k, row.bytes, "MPI_Allreduce k procs", *row.mpi_s, -1, "");
  std::fflush(stdout);
}

std::vector<Row> merge_rounds(const std::vector<std::vector<Row>>& rounds) {
  std::vector<Row> out;
  for (std::size_t i = 0; i < rounds[0].size(); ++i) {
    std::vector<Timing> shared, reference, mem, ring;
    std::vector<double> mpi;
    for (const std::vector<Row>& r : rounds) {
      shared.push_back(r[i].shared);
      reference.push_back(r[i].reference);
      mem.push_back(r[i].memcpy);
      ring.push_back(r[i].memcpy_ring);
      if (r[i].mpi_s) mpi.push_back(*r[i].mpi_s);
    }
    Row m{rounds[0][i].k,     rounds[0][i].bytes,  merge_timings(shared), merge_timings(reference),
          merge_timings(mem), merge_timings(ring), std::nullopt};
    if (mpi.size() == rounds.size()) m.mpi_s = median(mpi);  // a yardstick missing from a round: none
    out.push_back(m);
  }
  return out;
}

std::vector<Latency> merge_rounds(const std::vector<std::vector<Latency>>& rounds) {
  std::vector<Latency> out;
  for (std::size_t i = 0; i < rounds[0].size(); ++i) {
    std::vector<double> a, b, c, d;
    for (const std::vector<Latency>& r : rounds) {
      a.push_back(r[i].std_barrier_s);
      b.push_back(r[i].condvar_barrier_s);
      c.push_back(r[i].shared_4k_s);
      d.push_back(r[i].flag_barrier_s);
    }
    out.push_back({rounds[0][i].k, median(a), median(b), median(c), median(d)});
  }
  return out;
}

void print_report(const std::vector<Row>& rows, const std::vector<Latency>& latencies,
                  const std::map<int, std::string>& mpi_skipped, int rounds) {
  if (rounds > 1) {
    std::printf(
        "\nmedians of the %d rounds (each round: MPI, then the in-process cases; spread = that of the round "
        "medians):\n",
        rounds);
    print_header();
    for (const Row& row : rows) print_row(row);
  }
  for (const auto& [k, why] : mpi_skipped)
    std::printf("MPI_Allreduce yardstick skipped for k=%d: %s\n", k, why.c_str());
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) == 0)
    std::printf("peak resident memory of this process: %ld MiB\n", usage.ru_maxrss / 1024);

  std::printf("\nsmall-message latency: %s all_reduce vs k threads passing a bare barrier (per call)\n",
              size_name(kLatencyBytes).c_str());
  std::printf("%-2s %16s %16s %18s %10s %18s\n", "k", "all_reduce (us)", "std::barrier (us)", "condvar barrier (us)",
              "x barrier", "flag barrier (us)");
  for (const Latency& l : latencies)
    std::printf("%-2d %16.2f %17.2f %20.2f %10.2f %18.3f\n", l.k, l.shared_4k_s * 1e6, l.std_barrier_s * 1e6,
                l.condvar_barrier_s * 1e6, l.shared_4k_s / l.barrier_s(), l.flag_barrier_s * 1e6);
  std::printf(
      "(flag barrier: per-thread counters on their own cache lines, nothing else: the floor of an\n"
      " in-process meeting, not a goal)\n");

  std::printf("\ngoals (issue 4; sizes >= %s; ratio = yardstick time / shared_memory time):\n",
              size_name(kGoalMinBytes).c_str());
  for (int k : kKs) {
    print_goal(rows, k, "bandwidth vs memcpy 2kN", kGoalMemcpy,
               [](const Row& r) { return std::optional<double>(r.yardstick().seconds / r.shared.seconds); });
    print_goal(rows, k, "speedup vs reduction_to_one_device", kGoalReference,
               [](const Row& r) { return std::optional<double>(r.reference.seconds / r.shared.seconds); });
    print_goal(rows, k, "speedup vs MPI_Allreduce k procs", kGoalMpi, [](const Row& r) {
      return r.mpi_s ? std::optional<double>(*r.mpi_s / r.shared.seconds) : std::nullopt;
    });
  }
  std::printf("goals (issue 24; sizes <= %s): latency no worse than raw MPI_Allreduce between k processes\n",
              size_name(kGoalSmallMaxBytes).c_str());
  for (int k : kKs)
    print_goal(
        rows, k, "MPI_Allreduce time / shared_memory time", 1.0,
        [](const Row& r) { return r.mpi_s ? std::optional<double>(*r.mpi_s / r.shared.seconds) : std::nullopt; }, 0,
        kGoalSmallMaxBytes);
  for (const Latency& l : latencies) {
    const double x = l.shared_4k_s / l.barrier_s();
    std::printf(
        "  [%s] k=%d %s latency within %.0fx of a bare barrier: %.2f us = %.2fx the faster barrier "
        "(%s, %.2f us)\n",
        x <= kGoalLatency ? "PASS" : "FAIL", l.k, size_name(kLatencyBytes).c_str(), kGoalLatency, l.shared_4k_s * 1e6,
        x, l.barrier_name(), l.barrier_s() * 1e6);
  }

  // The JSON line (docs/style.md habit 11), last.
  std::vector<bench::Json> cases;
  auto add = [&](const std::string& name, double value, const char* unit, const std::string& yardstick,
                 double yardstick_value, double ratio) {
    cases.push_back(bench::json_case(name, value, unit, yardstick, yardstick_value, ratio));
  };
  for (const Row& r : rows) {
    const std::string name = "shared_memory k=" + std::to_string(r.k) + " " + size_name(r.bytes);
    const double n = static_cast<double>(r.bytes), sm = r.shared.seconds;
    add(name, gbps(2.0 * r.k * n, sm), "GB/s", r.yardstick_name(), gbps(2.0 * r.k * n, r.yardstick().seconds),
        r.yardstick().seconds / sm);
    add(name, gbps(n, sm), "GB/s", "reduction_to_one_device", gbps(n, r.reference.seconds), r.reference.seconds / sm);
    if (r.mpi_s) add(name, gbps(n, sm), "GB/s", "MPI_Allreduce k procs", gbps(n, *r.mpi_s), *r.mpi_s / sm);
  }
  for (const Latency& l : latencies) {
    const std::string name = "shared_memory k=" + std::to_string(l.k) + " " + size_name(kLatencyBytes) + " latency";
    add(name, l.shared_4k_s * 1e6, "us", "thread barrier (std::barrier)", l.std_barrier_s * 1e6,
        l.std_barrier_s / l.shared_4k_s);
    add(name, l.shared_4k_s * 1e6, "us", "thread barrier (condvar)", l.condvar_barrier_s * 1e6,
        l.condvar_barrier_s / l.shared_4k_s);
    add(name, l.shared_4k_s * 1e6, "us", "flag barrier (floor)", l.flag_barrier_s * 1e6,
        l.flag_barrier_s / l.shared_4k_s);
  }
  bench::Json skipped = bench::Json::object();
  for (const auto& [k, why] : mpi_skipped) skipped["skipped"]["MPI_Allreduce k=" + std::to_string(k)] = why;
  bench::print_json_line("allreduce", machine(/*cpu_model=*/true), cases, skipped);
}

}  // namespace chorus::allreduce_bench
