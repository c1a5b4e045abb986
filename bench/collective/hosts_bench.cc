// Many hosts (issue 18): all-reduce latency and bandwidth, and seed-CNN samples/s, between 2 test
// hosts over TCP (tests/hosts/test_hosts.sh: network namespaces joined by veth pairs; Open MPI's
// tcp BTL only), each against its yardstick measured in the same run.
//
//   bench_hosts [--quick] [--rounds K] [--sizes LIST] [--steps N]
//
// Needs root and iproute2 (the test hosts); otherwise it prints why it skipped and exits 0. It
// brings 2 hosts up and takes them down again.
//
// Cases, K rounds (default 5, --quick 1) alternating the contenders, each a fresh mpirun:
//   all-reduce, for each size (default 4 B, 4 KiB, 64 KiB, 1 MiB, 16 MiB; float32 SUM, in place):
//     chorus   bench_mpi_allreduce --backend chorus: collective::make_mpi_communicator()'s
//              all_reduce + wait, validation on (what MultiWorkerMirroredStrategy pays);
//     raw      bench_mpi_allreduce: MPI_Allreduce on MPI_COMM_WORLD, with Open MPI's
//              mpi_yield_when_idle 1 (the yardstick): the 2 test hosts share this machine's cores
//              with each other and with the kernel's veth work, and Open MPI's default busy
//              polling starves that work (a 4-byte all-reduce took 4.3 ms instead of 21 us on the
//              2-core dev VM); Open MPI itself yields when it knows a node is oversubscribed;
//     ratio = raw time / chorus time (> 1: chorus faster); busbw = N / t (k = 2: 2(k-1)/k = 1).
//   Gloo against MPI (issue 46; built with Gloo), for the same sizes: bench_gloo, which times
//     chorus's Gloo all_reduce and its MPI backend's in the same processes, alternating:
//     2 hosts   one process on each host (GLOO_SOCKET_IFNAME=eth0, Open MPI's tcp BTL);
//     1 host    the same 2 processes on h0 (Gloo over loopback TCP, MPI over shared memory);
//     ratio = MPI backend time / Gloo time (> 1: Gloo faster).
//   seed CNN (bench_train --worker-child: MultiWorkerMirroredStrategy, 1 logical CPU device and 1
//     op thread per process, global batch 128, 3 warm-up + N steps, default 30):
//     2 hosts   one process on each host, over TCP;
//     1 host    the same 2 processes on h0 (Open MPI's shared-memory transport): the yardstick,
//               so ratio = what the network costs.
// Medians of the rounds with min-max. Timing inside each program follows bench_mpi_allreduce's and
// bench_train's own policies. The header names the machine; the last line is one JSON line.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include <chorus/launch/cli.h>
#include <chorus/launch/mpirun_command.h>

namespace {

namespace bench = chorus::bench;

const std::string kHosts = CHORUS_TEST_HOSTS;  // tests/hosts/test_hosts.sh
const std::string kMpiBench = CHORUS_MPI_BENCH_PATH;
const std::string kTrainBench = CHORUS_TRAIN_BENCH_PATH;

std::string quote(const std::string& s) { return chorus::launch::shell_quote(s); }

// Runs `command` (a shell line); its output, or nothing (after printing why) when it failed.
std::optional<std::string> run(const std::string& command) {
  int status = 0;
  std::string out = bench::capture("timeout -k 10 600 " + command + " 2>&1", &status);
  if (status == 0) return out;
  std::fprintf(stderr, "bench_hosts: `%s` exited with status %d:\n%s\n", command.c_str(), status,
               out.substr(out.size() > 2000 ? out.size() - 2000 : 0).c_str());
  return std::nullopt;
}

struct Spread {
  double median = 0, min = 0, max = 0;
};
Spread spread(const std::vector<double>& v) {
  return {bench::median(v), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
}

std::string size_name(std::size_t b) {
  if (b >= (1u << 20) && b % (1u << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

struct Options {
  int rounds = 5, steps = 30;
  std::vector<std::size_t> sizes = {4, 4096, 65536, 1u << 20, 16u << 20};
};

constexpr const char* kUsage = "usage: bench_hosts [--quick] [--rounds K] [--sizes LIST] [--steps N]\n";

// The command line; nullopt after printing why (exit 2).
std::optional<Options> parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      o.rounds = 1;
      o.steps = 4;
      o.sizes = {4, 65536, 1u << 20};
    } else if (a == "--rounds" && i + 1 < argc) {
      o.rounds = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--steps" && i + 1 < argc) {
      o.steps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--sizes" && i + 1 < argc) {
      o.sizes.clear();
      for (char* p = argv[++i]; *p != '\0';) {
        char* end = nullptr;
        const unsigned long long v = std::strtoull(p, &end, 10);
        if (end == p || v == 0 || v % 4 != 0) {
          std::fprintf(stderr, "bench_hosts: --sizes wants positive multiples of 4 bytes\n");
          return std::nullopt;
        }
        o.sizes.push_back(static_cast<std::size_t>(v));
        p = *end == ',' ? end + 1 : end;
      }
    } else {
      std::fprintf(stderr, "bench_hosts: unknown flag '%s'\n%s", a.c_str(), kUsage);
      return std::nullopt;
    }
  }
  return o;
}

// Per-round samples of every contender.
struct Samples {
  std::map<std::size_t, std::vector<double>> chorus_us, raw_us;
  // Gloo against MPI, on 2 hosts and on 1: bytes -> per-round Gloo / MPI backend microseconds.
  std::map<std::size_t, std::vector<double>> gloo2_us, mpi2_us, gloo1_us, mpi1_us;
  std::vector<double> cnn_two, cnn_one;
};

// The rounds on the test hosts (up already); false when a run failed (printed).
bool measure(const Options& o, Samples& s) {
  std::string list;
  for (std::size_t b : o.sizes) list += (list.empty() ? "" : ",") + std::to_string(b);
  const std::string root = geteuid() == 0 ? " --allow-run-as-root" : "";
  const std::string two_hosts = quote(kHosts) + " mpirun 2" + root + " -np 2 ";
  // The yardstick of the CNN: the same two processes on h0 alone (shared memory between them).
  const std::string one_host = quote(kHosts) + " exec h0 mpirun" + root + " --oversubscribe -np 2 ";
  const std::string policy = " --target-s 0.3 --reps 5";
  for (int r = 0; r < o.rounds; ++r) {
    for (const char* backend : {"chorus", "raw"}) {
      const std::string yield = std::string(backend) == "raw" ? "--mca mpi_yield_when_idle 1 " : "";
      const auto out = run(quote(kHosts) + " mpirun 2" + root + " " + yield + "-np 2 " + quote(kMpiBench) +
                           " --backend " + backend + " --sizes " + list + policy);
      const auto us = out ? bench::mpi_allreduce_medians_us(*out) : std::map<std::size_t, double>{};
      if (us.size() != o.sizes.size()) return false;
      for (const auto& [b, t] : us) (std::string(backend) == "chorus" ? s.chorus_us : s.raw_us)[b].push_back(t);
    }
#ifdef CHORUS_GLOO_BENCH_PATH
    for (const bool two : {true, false}) {
      const std::string where =
          two ? quote(kHosts) + " mpirun 2" + root + " -x GLOO_SOCKET_IFNAME=eth0 -np 2 " : one_host;
      const auto out = run(where + quote(CHORUS_GLOO_BENCH_PATH) + " --sizes " + list + " --rounds 3 --target-s 0.3");
      const auto us = out ? bench::gloo_medians_us(*out) : std::map<std::size_t, std::pair<double, double>>{};
      if (us.size() != o.sizes.size()) return false;
      for (const auto& [b, t] : us) {
        (two ? s.gloo2_us : s.gloo1_us)[b].push_back(t.first);
        (two ? s.mpi2_us : s.mpi1_us)[b].push_back(t.second);
      }
    }
#endif
    for (const std::string& where : {two_hosts, one_host}) {
      const auto out =
          run(where + quote(kTrainBench) + " --worker-child --steps " + std::to_string(o.steps) + " --repeats 1");
      const auto sps = out ? bench::result_field(*out, "samples_per_s") : std::nullopt;
      if (!sps) return false;
      (where == two_hosts ? s.cnn_two : s.cnn_one).push_back(*sps);
    }
  }
  return true;
}

// The tables and the JSON line.
void report(const Options& o, Samples& s, const std::string& machine) {
  std::printf(
      "2 test hosts (network namespaces, veth + bridge), Open MPI tcp BTL only, 1 process per host; %d round(s), "
      "alternating; medians [min-max]\n",
      o.rounds);
  std::printf("%-8s %12s %22s %12s %22s %8s %12s\n", "size", "chorus us", "[min-max]", "raw MPI us", "[min-max]",
              "ratio", "chorus GB/s");
  std::printf(
      "(raw: MPI_Allreduce with --mca mpi_yield_when_idle 1; ratio = raw time / chorus time, > 1: chorus "
      "faster)\n");
  std::vector<bench::Json> cases;
  for (std::size_t b : o.sizes) {
    const Spread c = spread(s.chorus_us[b]), m = spread(s.raw_us[b]);
    char cr[48], mr[48];
    std::snprintf(cr, sizeof cr, "[%.1f-%.1f]", c.min, c.max);
    std::snprintf(mr, sizeof mr, "[%.1f-%.1f]", m.min, m.max);
    std::printf("%-8s %12.1f %22s %12.1f %22s %8.2f %12.3f\n", size_name(b).c_str(), c.median, cr, m.median, mr,
                m.median / c.median, static_cast<double>(b) / (c.median * 1e3));
    cases.push_back(bench::json_case("all_reduce " + size_name(b) + " 2 hosts", c.median, "us",
                                     "raw MPI_Allreduce (mpi_yield_when_idle 1), same hosts", m.median,
                                     m.median / c.median));
  }
  if (!s.gloo2_us.empty()) {
    std::printf(
        "Gloo against chorus's MPI backend (bench_gloo: both in the same processes, alternating; ratio = MPI time / "
        "Gloo time, > 1: Gloo faster)\n");
    std::printf("%-8s %12s %12s %8s   %12s %12s %8s\n", "size", "2h gloo us", "2h mpi us", "ratio", "1h gloo us",
                "1h mpi us", "ratio");
    for (std::size_t b : o.sizes) {
      const double g2 = bench::median(s.gloo2_us[b]), m2 = bench::median(s.mpi2_us[b]);
      const double g1 = bench::median(s.gloo1_us[b]), m1 = bench::median(s.mpi1_us[b]);
      std::printf("%-8s %12.1f %12.1f %8.2f   %12.1f %12.1f %8.2f\n", size_name(b).c_str(), g2, m2, m2 / g2, g1, m1,
                  m1 / g1);
      cases.push_back(bench::json_case("gloo all_reduce " + size_name(b) + " 2 hosts", g2, "us",
                                       "chorus MPI backend all_reduce, same processes", m2, m2 / g2));
      cases.push_back(bench::json_case("gloo all_reduce " + size_name(b) + " 1 host", g1, "us",
                                       "chorus MPI backend all_reduce, same processes", m1, m1 / g1));
    }
  }
  const Spread two = spread(s.cnn_two), one = spread(s.cnn_one);
  std::printf("seed CNN, MultiWorkerMirroredStrategy, 2 processes x 1 CPU device, global batch 128, %d steps:\n",
              o.steps);
  std::printf("  2 hosts over TCP:           %9.1f samples/s [%.0f-%.0f]\n", two.median, two.min, two.max);
  std::printf("  1 host (shared memory):     %9.1f samples/s [%.0f-%.0f]\n", one.median, one.min, one.max);
  std::printf("  ratio (2 hosts / 1 host):   %9.2f\n", two.median / one.median);
  cases.push_back(bench::json_case("seed CNN samples/s 2 hosts", two.median, "samples/s",
                                   "the same 2 processes on 1 host", one.median, two.median / one.median));
  bench::print_json_line("hosts", machine, cases, {});
}

}  // namespace

int main(int argc, char** argv) {
  if (auto rc = chorus::launch::answer_help_or_version(argc, argv, "bench_hosts", kUsage)) return *rc;
  const auto options = parse_options(argc, argv);
  if (!options) return 2;
  const std::string machine = bench::machine(true);
  std::printf("machine: %s\n", machine.c_str());
  int status = 0;
  const std::string up = bench::capture(quote(kHosts) + " up 2 2>&1", &status);
  if (status != 0 || up.find("up on") == std::string::npos) {
    std::string why = up;
    while (!why.empty() && why.back() == '\n') why.pop_back();
    std::printf("skipped: no test hosts: %s\n", why.c_str());
    bench::print_json_line("hosts", machine, {}, {{"skipped", "no test hosts: " + why}});
    return 0;
  }
  Samples samples;
  const bool ok = measure(*options, samples);
  bench::capture(quote(kHosts) + " down 2>&1", &status);
  if (!ok) {
    std::printf("bench_hosts: a run failed (see above)\n");
    return 1;
  }
  report(*options, samples, machine);
  return 0;
}
