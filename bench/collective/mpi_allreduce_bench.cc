// Raw MPI_Allreduce, the multi-process yardstick of bench_allreduce and bench_hosts, and (with
// --backend chorus) the same all-reduce through chorus's MPI communicator.
//
//   mpirun -np <k> bench_mpi_allreduce --sizes <bytes>,<bytes>,... [--target-s S] [--reps R]
//                                      [--backend raw|chorus]
//
// For each size N (bytes, a multiple of 4): raw (the default, no chorus code in the timed loop):
// MPI_Allreduce(MPI_IN_PLACE, buf, N/4, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) on a zero-filled buffer
// (sums stay 0: no denormals, no overflow); chorus: collective::make_mpi_communicator()'s
// all_reduce(t, t) and wait() on a zero-filled float32 CPU tensor of N/4 elements — what a
// MultiWorkerMirroredStrategy step pays, fingerprint validation (on by default) included.
// Timing follows bench_allreduce's policy so the two are comparable: 2 warm-up calls; a batch
// size B found by doubling until one batch takes >= 5 ms; then R repetitions (R = 3 when one call
// takes > 100 ms) of B back-to-back calls, B chosen so the R batches together take about S
// seconds; one repetition = MPI_Barrier, then B calls, its time the slowest rank's; reported is
// the median over repetitions of (repetition time / B).
//
// Rank 0 prints one line per size and, last, one JSON line that bench_allreduce parses:
//   {"bench": "mpi_allreduce", "np": 4, "cases": [{"bytes": 4096, "median_us": 12.5, "batch": 800,
//    "reps": 5}, ...]}
// Any MPI error aborts the job with the library's error string (exit status != 0).
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <chorus/collective/communicator.h>
#include <chorus/collective/mpi/mpi.h>
#include <chorus/core/json_internal.h>
#include <chorus/core/tensor.h>
#include <chorus/launch/cli.h>

namespace {

// Every MPI call is checked; a failure names the call, the place and MPI's own message.
#define BENCH_MPI_CHECK(call)                                                                  \
  do {                                                                                         \
    const int bench_rc_ = (call);                                                              \
    if (bench_rc_ != MPI_SUCCESS) {                                                            \
      char bench_msg_[MPI_MAX_ERROR_STRING] = {};                                              \
      int bench_len_ = 0;                                                                      \
      MPI_Error_string(bench_rc_, bench_msg_, &bench_len_);                                    \
      std::fprintf(stderr, "%s failed at %s:%d: %s\n", #call, __FILE__, __LINE__, bench_msg_); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                            \
    }                                                                                          \
  } while (0)

constexpr double kCalibrateSeconds = 5e-3;
constexpr double kSlowCallSeconds = 0.1;
constexpr int kMaxBatch = 1 << 20;

// MPI_Init/MPI_Finalize as a scope (docs/style.md habit 6).
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv) { BENCH_MPI_CHECK(MPI_Init(argc, argv)); }
  ~MpiSession() { MPI_Finalize(); }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
};

// One all-reduce of the buffer being measured.
using Call = std::function<void()>;

// One repetition: B in-place all-reduces; returns the slowest rank's seconds (same on all ranks,
// so every rank takes the same calibration decisions).
double run_batch(const Call& call, int batch) {
  BENCH_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  const double t0 = MPI_Wtime();
  for (int i = 0; i < batch; ++i) call();
  double local = MPI_Wtime() - t0;
  double slowest = 0;
  BENCH_MPI_CHECK(MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  return slowest;
}

struct Result {
  std::size_t bytes;
  double median_s;
  int batch;
  int reps;
};

Result measure(std::size_t bytes, double target_s, int reps, chorus::collective::Communicator* comm) {
  std::vector<float> buf(bytes / sizeof(float), 0.0f);  // zero-filled: pages touched before timing
  chorus::Tensor t;
  Call call;
  if (comm != nullptr) {
    t = chorus::Tensor::zeros({static_cast<std::int64_t>(buf.size())}, chorus::DType::kFloat32, "/cpu:0");
    call = [&] { comm->all_reduce(t, t)->wait(); };
  } else {
    call = [&] {
      BENCH_MPI_CHECK(
          MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(buf.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    };
  }
  run_batch(call, 2);
  int batch = 1;
  double t_batch = run_batch(call, batch);
  while (t_batch < kCalibrateSeconds && batch < kMaxBatch) {
    batch *= 2;
    t_batch = run_batch(call, batch);
  }
  const double per_call = t_batch / batch;
  if (per_call > kSlowCallSeconds) reps = std::min(reps, 3);
  batch =
      static_cast<int>(std::clamp(std::llround(target_s / (reps * per_call)), 1LL, static_cast<long long>(kMaxBatch)));
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) times.push_back(run_batch(call, batch) / batch);
  std::sort(times.begin(), times.end());
  return {bytes, times[times.size() / 2], batch, reps};
}

int usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s --sizes <bytes>[,<bytes>...] [--target-s S] [--reps R] [--backend raw|chorus]\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // Answered before MPI starts (launch/cli.h).
  if (auto rc = chorus::launch::answer_help_or_version(
          argc, argv, "bench_mpi_allreduce",
          "usage: bench_mpi_allreduce --sizes <bytes>[,<bytes>...] [--target-s S] [--reps R] [--backend raw|chorus]\n"))
    return *rc;
  bool use_chorus = false;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--backend") == 0) use_chorus = std::strcmp(argv[i + 1], "chorus") == 0;
  // raw: plain MPI_Init; chorus: its MpiEnvironment (MPI_Init_thread, the level chorus needs).
  std::optional<MpiSession> raw_mpi;
  std::optional<chorus::collective::MpiEnvironment> chorus_mpi;
  if (use_chorus)
    chorus_mpi.emplace();
  else
    raw_mpi.emplace(&argc, &argv);
  int rank = 0, np = 0;
  BENCH_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  BENCH_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &np));

  std::vector<std::size_t> sizes;
  double target_s = 0.3;
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (std::strcmp(argv[i], "--sizes") == 0 && has_value) {
      for (char* p = argv[++i]; *p != '\0';) {
        char* end = nullptr;
        const unsigned long long v = std::strtoull(p, &end, 10);
        if (end == p || v == 0 || v % sizeof(float) != 0 || v / sizeof(float) > 0x7fffffffULL) {
          if (rank == 0) std::fprintf(stderr, "--sizes: '%s' is not a positive multiple of 4 bytes < 8 GiB\n", p);
          return usage(argv[0]);
        }
        sizes.push_back(static_cast<std::size_t>(v));
        p = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0') return usage(argv[0]);
      }
    } else if (std::strcmp(argv[i], "--target-s") == 0 && has_value) {
      target_s = std::atof(argv[++i]);
      if (!(target_s > 0)) return usage(argv[0]);
    } else if (std::strcmp(argv[i], "--backend") == 0 && has_value) {
      const std::string b = argv[++i];
      if (b != "raw" && b != "chorus") return usage(argv[0]);
    } else if (std::strcmp(argv[i], "--reps") == 0 && has_value) {
      reps = std::atoi(argv[++i]);
      if (reps < 1) return usage(argv[0]);
    } else {
      if (rank == 0) std::fprintf(stderr, "bench_mpi_allreduce: unknown flag '%s'\n", argv[i]);
      return usage(argv[0]);
    }
  }
  if (sizes.empty()) return usage(argv[0]);

  std::unique_ptr<chorus::collective::Communicator> comm;
  if (use_chorus) comm = chorus::collective::make_mpi_communicator();
  const char* backend = use_chorus ? "chorus" : "raw";
  chorus::internal::Json json = {
      {"bench", "mpi_allreduce"}, {"np", np}, {"backend", backend}, {"cases", chorus::internal::Json::array()}};
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const Result r = measure(sizes[i], target_s, reps, comm.get());
    if (rank == 0) {
      std::printf("mpi_allreduce %s np=%d bytes=%zu median_us=%.2f batch=%d reps=%d\n", backend, np, r.bytes,
                  r.median_s * 1e6, r.batch, r.reps);
      std::fflush(stdout);
      json["cases"].push_back({{"bytes", r.bytes},
                               {"median_us", std::round(r.median_s * 1e9) / 1e3},
                               {"batch", r.batch},
                               {"reps", r.reps}});
    }
  }
  if (rank == 0) std::printf("%s\n", json.dump().c_str());
  comm.reset();  // before MPI ends
  return 0;
}
