// bench_gloo: chorus's Gloo all_reduce against its MPI all_reduce (the yardstick), in the same
// run, on the same processes.
//
//   mpirun -np <k> bench_gloo [--sizes 4K,64K,1M,16M,64M] [--rounds R] [--target-s S]
//                             [--gloo-host 127.0.0.1|auto] [--no-validate] [--no-busy-poll] [--quick]
//
// Every rank makes both communicators: make_mpi_communicator() and make_gloo_communicator() over a
// TCP store (collective/store/tcp_store.h) that rank 0 serves on a port the OS picks, as a job
// without MPI would (c10d's TCPStore); rank 0 broadcasts its address (its --gloo-host, or its host
// name with "auto"; --no-validate: Gloo without fingerprints, to show what they cost; --no-busy-poll: Gloo's waits
// without a spinning thread (collective/busy_poll.h), to show what it saves; with GLOO_SOCKET_IFNAME set, each
// rank's address on that interface, as MultiWorkerMirroredStrategy takes it: the way across test hosts, bench_hosts)
// and the port over MPI. Both run with fingerprint validation on, as a training step would. For each size: a
// zero-filled float32 CPU tensor, in-place all_reduce(t, t) + wait(). Timing: 2 warm-up calls; a batch size B doubled
// until a batch takes >= 5 ms; then R rounds, each timing one batch of B calls per backend, in alternating order (MPI
// first in even rounds, Gloo first in odd ones); one batch = MPI_Barrier, B calls, the slowest rank's time. Reported:
// the median over rounds of batch time / B, the bus bandwidth 2(k-1)/k * bytes / time, and ratio = MPI time / Gloo time
// (> 1: Gloo faster). The last line is the JSON line of docs/style.md habit 11.
#include <mpi.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include <chorus/collective/gloo/gloo.h>
#include <chorus/collective/mpi/mpi.h>
#include <chorus/collective/store/tcp_store.h>
#include <chorus/core/env.h>
#include <chorus/core/tensor.h>
#include <chorus/launch/cli.h>

namespace {

using chorus::collective::Communicator;

constexpr const char* kUsage =
    "usage: mpirun -np <k> bench_gloo [--sizes 4K,64K,1M,16M,64M] [--rounds R] [--target-s S]\n"
    "                                 [--gloo-host 127.0.0.1|auto] [--no-validate] [--no-busy-poll] [--quick]\n"
    "Gloo all_reduce against the MPI backend's, in the same run; sizes in bytes (K, M suffixes).\n";
constexpr double kCalibrateSeconds = 5e-3;

// One batch of `batch` calls; the slowest rank's seconds (the same on every rank).
double run_batch(const std::function<void()>& call, int batch) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < batch; ++i) call();
  double local = MPI_Wtime() - t0, slowest = 0;
  MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

// The batch size that makes a batch take about target_s / rounds (at least 5 ms, at least 1 call).
int calibrate(const std::function<void()>& call, double target_s, int rounds) {
  run_batch(call, 2);
  int batch = 1;
  double t = run_batch(call, batch);
  while (t < kCalibrateSeconds && batch < (1 << 20)) {
    batch *= 2;
    t = run_batch(call, batch);
  }
  const double per_call = t / batch;
  return static_cast<int>(std::clamp(std::llround(target_s / (rounds * per_call)), 1LL, 1LL << 20));
}

bool parse_sizes(const std::string& s, std::vector<std::size_t>* out) {
  for (std::size_t start = 0; start <= s.size();) {
    const std::size_t comma = std::min(s.find(',', start), s.size());
    std::string item = s.substr(start, comma - start);
    std::size_t mult = 1;
    if (!item.empty() && (item.back() == 'K' || item.back() == 'M')) {
      mult = item.back() == 'K' ? 1024 : 1024 * 1024;
      item.pop_back();
    }
    char* end = nullptr;
    const unsigned long long v = std::strtoull(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v == 0 || (v * mult) % 4 != 0) return false;
    out->push_back(static_cast<std::size_t>(v * mult));
    start = comma + 1;
  }
  return !out->empty();
}

// Rank 0 serves the store (returned; null elsewhere); every rank gets a client of it at rank 0's
// `host` (its --gloo-host, or its host name when that is empty) and the port, broadcast over MPI.
std::unique_ptr<chorus::collective::TcpStoreServer> serve_store(int rank, const std::string& host,
                                                                std::unique_ptr<chorus::collective::TcpStore>* store) {
  std::unique_ptr<chorus::collective::TcpStoreServer> server;
  char address[256] = {};
  int port = 0;
  if (rank == 0) {
    server = std::make_unique<chorus::collective::TcpStoreServer>(0, "0.0.0.0");
    port = server->port();
    if (host.empty()) {
      ::gethostname(address, sizeof address - 1);
    } else {
      std::snprintf(address, sizeof address, "%s", host.c_str());
    }
  }
  MPI_Bcast(address, sizeof address, MPI_CHAR, 0, MPI_COMM_WORLD);
  MPI_Bcast(&port, 1, MPI_INT, 0, MPI_COMM_WORLD);
  address[sizeof address - 1] = '\0';
  *store = std::make_unique<chorus::collective::TcpStore>(
      address, port, chorus::collective::TcpStoreOptions{.connect_timeout = std::chrono::seconds(60)});
  return server;
}

std::string human(std::size_t bytes) {
  if (bytes % (1024 * 1024) == 0) return std::to_string(bytes / (1024 * 1024)) + "MiB";
  if (bytes % 1024 == 0) return std::to_string(bytes / 1024) + "KiB";
  return std::to_string(bytes) + "B";
}

int run(int argc, char** argv) {
  std::vector<std::size_t> sizes;
  int rounds = 5;
  double target_s = 1.0;
  std::string host = "127.0.0.1";
  bool validate = true;
  bool busy_poll = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has = i + 1 < argc;
    if (a == "--sizes" && has) {
      if (!parse_sizes(argv[++i], &sizes)) return chorus::launch::usage_error("bench_gloo", argv[i], kUsage);
    } else if (a == "--rounds" && has) {
      rounds = std::atoi(argv[++i]);
      if (rounds < 1) return chorus::launch::usage_error("bench_gloo", argv[i], kUsage);
    } else if (a == "--target-s" && has) {
      target_s = std::atof(argv[++i]);
      if (!(target_s > 0)) return chorus::launch::usage_error("bench_gloo", argv[i], kUsage);
    } else if (a == "--gloo-host" && has) {
      host = argv[++i];
      if (host == "auto") host.clear();
    } else if (a == "--no-validate") {
      validate = false;
    } else if (a == "--no-busy-poll") {
      busy_poll = false;
    } else if (a == "--quick") {
      sizes = {4096, 1 << 20};
      rounds = 3;
      target_s = 0.2;
    } else {
      return chorus::launch::usage_error("bench_gloo", a, kUsage);
    }
  }
  if (sizes.empty()) sizes = {4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20};
  if (const auto ifname = chorus::env::get("GLOO_SOCKET_IFNAME"); ifname && !ifname->empty())
    host = chorus::collective::interface_address(*ifname);

  chorus::collective::MpiEnvironment mpi;
  const int rank = mpi.world_rank(), np = mpi.world_size();
  std::unique_ptr<chorus::collective::TcpStore> store;
  auto server = serve_store(rank, host, &store);
  auto mpi_comm = chorus::collective::make_mpi_communicator();
  auto gloo_comm = chorus::collective::make_gloo_communicator(
      *store, rank, np, {.prefix = "bench", .hostname = host, .validate = validate, .busy_poll = busy_poll});

  if (rank == 0) {
    std::printf("bench_gloo: all_reduce (sum, float32, in place), %d processes, %d rounds\n", np, rounds);
    std::printf("machine: %s\n", chorus::bench::machine(/*cpu_model=*/true).c_str());
    std::printf("gloo meets through: %s (served by rank 0); fingerprints %s; busy polling %s\n",
                store->describe().c_str(), validate ? "on" : "off (--no-validate)",
                busy_poll ? "on" : "off (--no-busy-poll)");
    std::printf("%-8s %12s %12s %12s %12s %8s\n", "size", "gloo_us", "mpi_us", "gloo_GB/s", "mpi_GB/s", "ratio");
  }
  std::vector<chorus::bench::Json> cases;
  for (std::size_t bytes : sizes) {
    const auto n = static_cast<std::int64_t>(bytes / 4);
    chorus::Tensor tg = chorus::Tensor::zeros({n}, chorus::DType::kFloat32, "/cpu:0");
    chorus::Tensor tm = chorus::Tensor::zeros({n}, chorus::DType::kFloat32, "/cpu:0");
    std::function<void()> g = [&] { gloo_comm->all_reduce(tg, tg)->wait(); };
    std::function<void()> m = [&] { mpi_comm->all_reduce(tm, tm)->wait(); };
    const int bg = calibrate(g, target_s, rounds), bm = calibrate(m, target_s, rounds);
    std::vector<double> tgs, tms;
    for (int r = 0; r < rounds; ++r) {
      if (r % 2 == 0) tms.push_back(run_batch(m, bm) / bm);
      tgs.push_back(run_batch(g, bg) / bg);
      if (r % 2 == 1) tms.push_back(run_batch(m, bm) / bm);
    }
    const double gs = chorus::bench::median(tgs), ms = chorus::bench::median(tms);
    const double bus = 2.0 * (np - 1) / np * static_cast<double>(bytes) / 1e9;
    if (rank == 0) {
      std::printf("%-8s %12.1f %12.1f %12.3f %12.3f %8.2f\n", human(bytes).c_str(), gs * 1e6, ms * 1e6, bus / gs,
                  bus / ms, ms / gs);
      std::fflush(stdout);
      cases.push_back(chorus::bench::json_case("gloo_all_reduce_np" + std::to_string(np) + "_" + human(bytes), gs * 1e6,
                                               "us", "mpi backend all_reduce", ms * 1e6, ms / gs));
      cases.back()["bytes"] = bytes;  // for bench_hosts (bench_util.h gloo_medians_us)
    }
  }
  gloo_comm.reset();
  mpi_comm.reset();             // before MPI ends
  MPI_Barrier(MPI_COMM_WORLD);  // every rank is done with the store before rank 0 stops serving it
  store.reset();
  server.reset();
  if (rank == 0) {
    chorus::bench::print_json_line("gloo", chorus::bench::machine(/*cpu_model=*/true), cases);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (auto rc = chorus::launch::answer_help_or_version(argc, argv, "bench_gloo", kUsage)) return *rc;
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    chorus::launch::print_error("bench_gloo", e.what());
    return 1;
  }
}
