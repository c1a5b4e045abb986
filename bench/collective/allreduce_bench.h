// The all-reduce benchmark's parts (bench_allreduce, allreduce_bench.cc says what it measures and
// how): the constants and goals, the measured values, the measurements (allreduce_measure.cc) and
// the reporting (allreduce_report.cc). Internal to the benchmark.
#pragma once

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <chorus/collective/communicator.h>
#include <chorus/core/tensor.h>

namespace chorus::allreduce_bench {

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
// ratios stay meaningful. Each contender gets its own batch size (allreduce_bench.cc's header).
std::vector<Timing> measure(const std::vector<Contender>& contenders, const Policy& p);

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

// MPI yardstick: bench_mpi_allreduce under mpirun, its JSON line parsed.
struct MpiRun {
  std::map<std::size_t, double> seconds;  // bytes -> median seconds per call
  std::string skipped;                    // non-empty: why there are no numbers
};
// bench_mpi_allreduce with k processes over `sizes`; `disabled` (--no-mpi), a build without MPI or a
// failed run: no numbers and the reason in `skipped`.
MpiRun run_mpi(int k, const std::vector<std::size_t>& sizes, const Policy& p, bool disabled);

// Chorus measurements and the memcpy yardsticks.
inline std::string device(int r) { return "/cpu:" + std::to_string(r); }

// Checks the backend's result (every rank's buffer holds k(k+1)/2 after an all-reduce of (r+1)s;
// throws otherwise), then returns its timed call. Sums keep growing (x k per call) and reach inf:
// x86 adds infinities at full speed, and values never pass through denormals.
Contender all_reduce_contender(std::vector<std::unique_ptr<Communicator>>& comms, std::vector<Tensor>& bufs);

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using HostBuffer = std::unique_ptr<void, FreeDeleter>;

// memcpy yardstick: one thread, k copies of N bytes from the ranks' buffers into `dst`.
Contender memcpy_contender(const std::vector<Tensor>& bufs, std::size_t bytes, std::vector<HostBuffer>* dst);
// The ring variant: k copies of N bytes between the ranks' own buffers (j into j+1 mod k), so the
// yardstick touches exactly the bytes the all-reduce touches (k >= 2: the buffers are distinct).
Contender memcpy_ring_contender(const std::vector<Tensor>& bufs, std::size_t bytes);

// Reporting (allreduce_report.cc).
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

std::string size_name(std::size_t bytes);  // "4B", "4KiB", "1MiB"
void print_header();
// The rows of one (k, size) as they are measured.
void print_row(const Row& row);
// Row i of the result: the medians of row i of every round (rounds measure the same rows in the
// same order); the same for the latencies.
std::vector<Row> merge_rounds(const std::vector<std::vector<Row>>& rounds);
std::vector<Latency> merge_rounds(const std::vector<std::vector<Latency>>& rounds);
// Everything after the measurements: the medians' table (rounds > 1), the skipped MPI yardsticks,
// peak memory, the latency table, the goals and, last, the JSON line.
void print_report(const std::vector<Row>& rows, const std::vector<Latency>& latencies,
                  const std::map<int, std::string>& mpi_skipped, int rounds);

}  // namespace chorus::allreduce_bench
