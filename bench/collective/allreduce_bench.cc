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
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include <chorus/collective/communicator.h>
#include <chorus/collective/reference.h>
#include <chorus/collective/shared_memory.h>
#include <chorus/core/config.h>
#include <chorus/core/strings.h>
#include <chorus/core/tensor.h>
#include <chorus/launch/cli.h>
#include <chorus/launch/mpirun_command.h>

namespace chorus {
namespace {

using Clock = std::chrono::steady_clock;
using bench::machine;
using bench::median;
using collective::Communicator;

constexpr int kMaxK = 4;
constexpr int kKs[] = {2, 4};
constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = 1024 * kKiB;
constexpr std::size_t kGoalMinBytes = kMiB;
constexpr std::size_t kLatencyBytes = 4 * kKiB;
constexpr double kGoalMemcpy = 0.8;
constexpr double kGoalReference = 1.3;
constexpr double kGoalMpi = 2.0;
// Issue 24: at every size up to this one, the in-process all_reduce is at least as fast as raw
// MPI_Allreduce between k processes (its processes against our threads).
constexpr std::size_t kGoalSmallMaxBytes = 64 * kKiB;
constexpr double kGoalLatency = 3.0;  // all_reduce time <= 3x barrier time
constexpr double kSlowCallSeconds = 0.1;
constexpr int kMaxBatch = 1 << 20;
constexpr std::chrono::milliseconds kCollectiveTimeout{120'000};

struct Policy {
  double target_s;     // all repetitions of one case together
  double calibrate_s;  // a calibration batch must take at least this long
  int reps;
};

// Keeps the compiler from treating a buffer as dead and dropping the copies into it.
inline void escape(void* p) { asm volatile("" : : "g"(p) : "memory"); }

// k persistent threads running `op(rank)` B times back to back per batch, started together.
class Team {
 public:
  Team(int k, std::function<void(int)> op)
      : op_(std::move(op)), start_(k + 1), done_(k + 1), t0_(k), t1_(k), errors_(k) {
    for (int r = 0; r < k; ++r) threads_.emplace_back([this, r] { loop(r); });
  }
  ~Team() {
    stop_ = true;
    start_.arrive_and_wait();
    for (auto& t : threads_) t.join();
  }
  Team(const Team&) = delete;
  Team& operator=(const Team&) = delete;

  // One batch of `batch` calls per thread; seconds from the earliest start to the latest end.
  double run(int batch) {
    batch_ = batch;
    start_.arrive_and_wait();
    done_.arrive_and_wait();
    for (auto& e : errors_)
      if (e) std::rethrow_exception(e);
    return std::chrono::duration<double>(*std::max_element(t1_.begin(), t1_.end()) -
                                         *std::min_element(t0_.begin(), t0_.end()))
        .count();
  }

 private:
  void loop(int r) {
    for (;;) {
      start_.arrive_and_wait();  // batch_ and stop_ were written before the main thread arrived
      if (stop_) return;
      t0_[r] = Clock::now();
      try {
        for (int i = 0; i < batch_; ++i) op_(r);
      } catch (...) {
        errors_[r] = std::current_exception();
      }
      t1_[r] = Clock::now();
      done_.arrive_and_wait();
    }
  }

  std::function<void(int)> op_;
  std::barrier<> start_;
  std::barrier<> done_;
  int batch_ = 0;
  bool stop_ = false;
  std::vector<Clock::time_point> t0_, t1_;
  std::vector<std::exception_ptr> errors_;
  std::vector<std::thread> threads_;
};

struct Timing {
  double seconds = 0;  // median per call
  double spread = 0;   // (slowest - fastest repetition) / median
  int batch = 0;
  int reps = 0;
};

// One thing to time: `op(rank)` on `threads` threads.
struct Contender {
  int threads;
  std::function<void(int)> op;
};

// Times the contenders of one case with interleaved repetitions (A B C A B C ...), so a slow
// drift of the machine (another VM on the host, frequency changes) moves them alike and their
// ratios stay meaningful. Each contender gets its own batch size (see the header).
std::vector<Timing> measure(const std::vector<Contender>& contenders, const Policy& p) {
  std::vector<std::unique_ptr<Team>> teams;
  std::vector<double> per_call;
  int reps = p.reps;
  for (const Contender& c : contenders) {
    teams.push_back(std::make_unique<Team>(c.threads, c.op));
    Team& team = *teams.back();
    team.run(1);  // warm-up: first touch, caches, lazily created state
    int batch = 1;
    double t = team.run(batch);
    while (t < p.calibrate_s && batch < kMaxBatch) {
      batch *= 2;
      t = team.run(batch);
    }
    per_call.push_back(t / batch);
    if (per_call.back() > kSlowCallSeconds) reps = std::min(reps, 3);
  }
  std::vector<int> batches;
  for (double c : per_call)
    batches.push_back(
        static_cast<int>(std::clamp(std::llround(p.target_s / (reps * c)), 1LL, static_cast<long long>(kMaxBatch))));
  std::vector<std::vector<double>> times(contenders.size());
  for (int r = 0; r < reps; ++r)
    for (std::size_t i = 0; i < teams.size(); ++i) times[i].push_back(teams[i]->run(batches[i]) / batches[i]);
  std::vector<Timing> out;
  for (std::size_t i = 0; i < teams.size(); ++i) {
    const double m = median(times[i]);
    const auto [lo, hi] = std::minmax_element(times[i].begin(), times[i].end());
    out.push_back({m, (*hi - *lo) / m, batches[i], reps});
  }
  return out;
}

// The bare barrier the rendezvous is built from (mutex, condvar, generation), without
// fingerprints, timeouts or abort.
class CondvarBarrier {
 public:
  explicit CondvarBarrier(int n) : n_(n) {}
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const std::uint64_t gen = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != gen; });
    }
  }

 private:
  const int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
};

// The floor of any in-process meeting: each thread bumps a counter on a cache line of its own and
// waits until every other counter has caught up (no shared read-modify-write, nothing else). Waits
// pause 16 times, then yield, as the rendezvous does (with more threads than cores a pure spin
// would wait for a descheduled peer a whole time slice). Shown beside the all_reduce's latency, not
// used by a goal: it does none of a collective's work (fingerprints, timeouts, abort, data).
class FlagBarrier {
 public:
  explicit FlagBarrier(int n) : n_(n), slots_(static_cast<std::size_t>(n)) {}
  void wait(int rank) {
    const std::uint64_t mine = slots_[static_cast<std::size_t>(rank)].seq.load(std::memory_order_relaxed) + 1;
    slots_[static_cast<std::size_t>(rank)].seq.store(mine, std::memory_order_seq_cst);
    for (int j = 0; j < n_; ++j) {
      for (int spins = 0; slots_[static_cast<std::size_t>(j)].seq.load(std::memory_order_acquire) < mine; ++spins) {
        if (spins < 16) {
#if defined(__x86_64__)
          __builtin_ia32_pause();
#endif
        } else {
          sched_yield();
        }
      }
    }
  }

 private:
  struct alignas(64) Slot {
    std::atomic<std::uint64_t> seq{0};
  };
  const int n_;
  std::vector<Slot> slots_;
};

// ---------------------------------------------------------------------------------------------
// MPI yardstick: bench_mpi_allreduce under mpirun, its JSON line parsed.

struct MpiRun {
  std::map<std::size_t, double> seconds;  // bytes -> median seconds per call
  std::string skipped;                    // non-empty: why there are no numbers
};

#if defined(CHORUS_MPI_BENCH_PATH) && defined(CHORUS_MPIEXEC)
using chorus::launch::shell_quote;
#endif

MpiRun run_mpi(int k, const std::vector<std::size_t>& sizes, const Policy& p, bool disabled) {
  MpiRun run;
#if defined(CHORUS_MPI_BENCH_PATH) && defined(CHORUS_MPIEXEC)
  if (disabled) {
    run.skipped = "disabled by --no-mpi";
    return run;
  }
  const std::string exe = CHORUS_MPI_BENCH_PATH;
  if (access(exe.c_str(), X_OK) != 0) {
    run.skipped = exe + " is not built (build target bench_mpi_allreduce)";
    return run;
  }
  std::string list;
  for (std::size_t s : sizes) list += (list.empty() ? "" : ",") + std::to_string(s);
  char policy[96];
  std::snprintf(policy, sizeof policy, " --target-s %g --reps %d", p.target_s, p.reps);
  // `timeout` so a wedged mpirun (no network, a stuck launcher) cannot hang the benchmark.
  const int limit_s = 60 + static_cast<int>(sizes.size() * 60);
  const std::string cmd = "timeout -k 10 " + std::to_string(limit_s) + " " + shell_quote(CHORUS_MPIEXEC) +
                          " --oversubscribe" + (geteuid() == 0 ? " --allow-run-as-root" : "") + " -np " +
                          std::to_string(k) + " " + shell_quote(exe) + " --sizes " + list + policy + " 2>&1";
  std::fflush(stdout);
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    run.skipped = std::string("popen(") + cmd + ") failed: " + std::strerror(errno);
    return run;
  }
  std::string output;
  char line[4096];
  while (std::fgets(line, sizeof line, pipe) != nullptr) output += line;
  const int status = pclose(pipe);
  // The result is bench_mpi_allreduce's JSON line ({"bench":"mpi_allreduce",...}), found by
  // parsing each line, not by its spelling (a prefix match broke when the writer went compact).
  const auto medians_us = bench::mpi_allreduce_medians_us(output);
  if (status != 0 || medians_us.empty()) {
    // The tail of mpirun's output says what went wrong.
    std::string tail = output;
    if (tail.size() > 600) tail = std::string("...").append(output, output.size() - 600, std::string::npos);
    run.skipped = "`" + cmd + "` exited with status " + std::to_string(status) +
                  (medians_us.empty() ? " and printed no result line" : "") + "; output: " + tail;
    for (char& c : run.skipped)
      if (c == '\n') c = ' ';
    return run;
  }
  for (const auto& [bytes, us] : medians_us) run.seconds[bytes] = us * 1e-6;
  if (run.seconds.size() != sizes.size())
    run.skipped = "bench_mpi_allreduce's line lacks some of the sizes asked for; output: " + output;
#else
  (void)k, (void)sizes, (void)p, (void)disabled;
  run.skipped = "built without MPI (CHORUS_WITH_MPI was off at configure time)";
#endif
  return run;
}

// ---------------------------------------------------------------------------------------------
// Chorus measurements.

std::string device(int r) { return "/cpu:" + std::to_string(r); }

// Every rank's buffer holds k(k+1)/2 after an all-reduce of (r+1)s; throws otherwise.
void check_all_reduce(std::vector<std::unique_ptr<Communicator>>& comms, std::vector<Tensor>& bufs) {
  const int k = static_cast<int>(comms.size());
  for (int r = 0; r < k; ++r) {
    bufs[r].device_context().stream().synchronize();  // the fill that created it may still be queued
    float* p = static_cast<float*>(bufs[r].data());
    std::fill(p, p + bufs[r].num_elements(), static_cast<float>(r + 1));
  }
  Team team(k, [&](int r) { comms[r]->all_reduce(bufs[r], bufs[r], {.timeout = kCollectiveTimeout})->wait(); });
  team.run(1);
  const float want = static_cast<float>(k * (k + 1) / 2);
  for (int r = 0; r < k; ++r) {
    const float* p = static_cast<const float*>(bufs[r].data());
    for (std::int64_t i = 0; i < bufs[r].num_elements(); ++i)
      if (p[i] != want)
        throw std::runtime_error(std::string(comms[r]->backend()) + " all_reduce with k=" + std::to_string(k) +
                                 ": rank " + std::to_string(r) + " element " + std::to_string(i) + " is " +
                                 std::to_string(p[i]) + ", expected " + std::to_string(want));
  }
}

// Checks the backend's result, then returns its timed call. Sums keep growing (x k per call)
// and reach inf: x86 adds infinities at full speed, and values never pass through denormals.
Contender all_reduce_contender(std::vector<std::unique_ptr<Communicator>>& comms, std::vector<Tensor>& bufs) {
  check_all_reduce(comms, bufs);
  return {static_cast<int>(comms.size()), [&comms, &bufs](int r) {
            try {
              comms[r]->all_reduce(bufs[r], bufs[r], {.timeout = kCollectiveTimeout})->wait();
            } catch (const std::exception& e) {
              comms[r]->abort(e.what());  // wake the other ranks instead of leaving them to time out
              throw;
            }
          }};
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using HostBuffer = std::unique_ptr<void, FreeDeleter>;

// memcpy yardstick: one thread, k copies of N bytes from the ranks' buffers into `dst`.
Contender memcpy_contender(const std::vector<Tensor>& bufs, std::size_t bytes, std::vector<HostBuffer>* dst) {
  const int k = static_cast<int>(bufs.size());
  for (int j = 0; j < k; ++j) {
    void* d = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (d == nullptr) throw std::runtime_error("aligned_alloc of " + std::to_string(bytes) + " bytes failed");
    std::memset(d, 0, bytes);  // first touch outside the timed runs
    dst->emplace_back(d);
  }
  return {1, [&bufs, bytes, dst, k](int) {
            for (int j = 0; j < k; ++j) std::memcpy((*dst)[j].get(), bufs[j].data(), bytes);
            escape((*dst)[0].get());
          }};
}

// The ring variant: k copies of N bytes between the ranks' own buffers (j into j+1 mod k), so the
// yardstick touches exactly the bytes the all-reduce touches (k >= 2: the buffers are distinct).
// The contents are not used after the result check, so overwriting them is harmless.
Contender memcpy_ring_contender(const std::vector<Tensor>& bufs, std::size_t bytes) {
  const int k = static_cast<int>(bufs.size());
  return {1, [&bufs, bytes, k](int) {
            for (int j = 0; j < k; ++j) std::memcpy(bufs[(j + 1) % k].data(), bufs[j].data(), bytes);
            escape(bufs[0].data());
          }};
}

// ---------------------------------------------------------------------------------------------
// Reporting.

std::string size_name(std::size_t bytes) {
  if (bytes >= kMiB && bytes % kMiB == 0) return std::to_string(bytes / kMiB) + "MiB";
  if (bytes >= kKiB && bytes % kKiB == 0) return std::to_string(bytes / kKiB) + "KiB";
  return std::to_string(bytes) + "B";
}

struct Row {  // one (k, size)
  int k;
  std::size_t bytes;
  Timing shared, reference, memcpy, memcpy_ring;
  // The bandwidth goal's yardstick: the faster memcpy.
  const Timing& yardstick() const { return memcpy_ring.seconds < memcpy.seconds ? memcpy_ring : memcpy; }
  const char* yardstick_name() const { return memcpy_ring.seconds < memcpy.seconds ? "memcpy 2kN ring" : "memcpy 2kN"; }
  std::optional<double> mpi_s;
};

struct Latency {  // one k, measured with the 4 KiB case
  int k;
  double std_barrier_s, condvar_barrier_s;
  double shared_4k_s;
  double flag_barrier_s;  // the floor (FlagBarrier), not a goal's yardstick
  double barrier_s() const { return std::min(std_barrier_s, condvar_barrier_s); }
  const char* barrier_name() const {
    return std_barrier_s <= condvar_barrier_s ? "thread barrier (std::barrier)" : "thread barrier (condvar)";
  }
};

double gbps(double bytes, double s) { return bytes / s / 1e9; }

void print_header() {
  std::printf("%-2s %-7s %-24s %11s %7s %8s %8s %8s | %9s %10s %8s\n", "k", "size", "backend", "time (us)", "spread",
              "algbw", "busbw", "2kN bw", "vs memcpy", "vs reduce1", "vs MPI");
  std::printf("%-2s %-7s %-24s %11s %7s %8s %8s %8s | %9s %10s %8s\n", "", "", "", "", "(%)", "(GB/s)", "(GB/s)",
              "(GB/s)", "(x)", "(x)", "(x)");
}

// `spread` < 0: not known (the MPI yardstick reports only its median).
void print_line(int k, std::size_t bytes, const char* backend, double s, double spread, const std::string& ratios) {
  const double n = static_cast<double>(bytes);
  char spread_text[16] = "-";
  if (spread >= 0) std::snprintf(spread_text, sizeof spread_text, "%.0f", spread * 100);
  std::printf("%-2d %-7s %-24s %11.2f %7s %8.3f %8.3f %8.3f | %s\n", k, size_name(bytes).c_str(), backend, s * 1e6,
              spread_text, gbps(n, s), gbps(n, s) * 2.0 * (k - 1) / k, gbps(2.0 * k * n, s), ratios.c_str());
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

// Row i of the result: the medians of row i of every round (rounds measure the same rows in the
// same order).
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

// ---------------------------------------------------------------------------------------------

int usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s [--quick] [--max-mib N] [--sizes 4K,1M,...] [--no-mpi] [--rounds R]\n", argv0);
  return 2;
}

int run(int argc, char** argv) {
  bool quick = false, no_mpi = false;
  int rounds = 1;
  std::size_t max_bytes = 256 * kMiB;
  std::vector<std::size_t> sizes;
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
        return usage(argv[0]);
      }
    } else if (std::strcmp(argv[i], "--max-mib") == 0 && i + 1 < argc) {
      const long v = std::atol(argv[++i]);
      if (v < 1 || v > 4096) {
        std::fprintf(stderr, "--max-mib: expected 1..4096, got '%s'\n", argv[i]);
        return usage(argv[0]);
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
          return usage(argv[0]);
        }
        sizes.push_back(bytes);
        p = *end == ',' ? end + 1 : end;
      }
    } else {
      std::fprintf(stderr, "bench_allreduce: unknown flag '%s'\n", argv[i]);
      return usage(argv[0]);
    }
  }
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
  return 0;
}

}  // namespace
}  // namespace chorus

int main(int argc, char** argv) {
  if (auto rc = chorus::launch::answer_help_or_version(
          argc, argv, "bench_allreduce",
          "usage: bench_allreduce [--quick] [--max-mib N] [--sizes 4K,1M,...] [--no-mpi] [--rounds R]\n"))
    return *rc;
  return chorus::bench::run_main("allreduce bench failed", [&] { return chorus::run(argc, argv); });
}
