// Process-wide time accounting for benchmarks: how much of a training step goes to library
// kernels and to collectives. Always compiled, off by default.
//
//   chorus::profile::enable_profiling(true);
//   ... run steps ...
//   chorus::profile::ProfileCounters c = chorus::profile::read_and_reset();
//   double kernel_fraction = c.library_kernel_ns / (replicas * wall_ns);
//
// Categories:
//   kLibraryKernel — the body of every CPU kernel of the op layer (ops/internal.cc run_cpu): the
//                    oneDNN primitives and chorus's own loops alike ("CPU kernels (oneDNN + chorus
//                    loops)"). GPU kernels are asynchronous and are not timed here.
//   kCollective    — the replica-context collectives (all_reduce, all_gather, broadcast), from the
//                    communicator call to the end of its wait, so it includes waiting for the
//                    slowest replica.
//                    With the all-reduce overlapped with the backward pass
//                    (docs/overlap.md) the gradient buckets are timed on the replicas'
//                    communication threads, during kReplicaStep: then kCollective overlaps it.
//   kReplicaStep   — the whole per-replica body of a training step (Model::fit's strategy.run
//                    function), so that "time a replica thread spent between steps" (waiting for
//                    the loop thread) can be told from time inside the step.
//
// Each timer records two clocks: wall time (steady_clock) and the calling thread's CPU time
// (CLOCK_THREAD_CPUTIME_ID). Wall − CPU is time the thread was not running: blocked (a lock, a
// condition variable, a futex-based wait) or runnable but descheduled (more threads than cores,
// other processes). CPU time of OpenMP helper threads a kernel wakes is not in its caller's CPU
// time.
//
// Concurrency: the counters are std::atomic and may be updated from any thread. Times from
// concurrent threads (one per replica under MirroredStrategy) ADD UP: with R replicas busy for the
// whole of a wall interval W a category can reach R × W. Compute fractions over the summed
// per-replica time, i.e. divide by R × W, not by W.
//
// Cost: a disabled ScopedTimer is one relaxed atomic load; an enabled one is two steady_clock reads,
// two thread-CPU-clock reads (a system call each, ~0.2 µs) and two relaxed fetch_adds. Enabling or disabling while
// timers are live is safe: a timer decides at construction whether it records.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace chorus::profile {

enum class TimeCategory { kLibraryKernel = 0, kCollective = 1, kReplicaStep = 2 };
inline constexpr int kNumTimeCategories = 3;

// Nanoseconds accumulated per category since the last read_and_reset (summed over threads):
// `_ns` wall time, `_cpu_ns` the timed threads' own CPU time.
struct ProfileCounters {
  std::int64_t library_kernel_ns = 0;
  std::int64_t collective_ns = 0;
  std::int64_t replica_step_ns = 0;
  std::int64_t library_kernel_cpu_ns = 0;
  std::int64_t collective_cpu_ns = 0;
  std::int64_t replica_step_cpu_ns = 0;
};

namespace internal {
extern std::atomic<bool> g_enabled;
void add(TimeCategory category, std::int64_t wall_ns, std::int64_t cpu_ns);
// The calling thread's CPU time in nanoseconds (CLOCK_THREAD_CPUTIME_ID).
std::int64_t thread_cpu_ns();
}  // namespace internal

// Turns recording on or off for the whole process. Does not reset the counters.
void enable_profiling(bool enabled);
bool profiling_enabled();

// Returns the counters and sets them to zero (each counter is exchanged atomically; a timer that
// ends between the two exchanges lands in the next read).
ProfileCounters read_and_reset();

// Adds the time from construction to destruction to `category` when profiling was enabled at
// construction. Not copyable or movable; use on the stack.
class ScopedTimer {
 public:
  explicit ScopedTimer(TimeCategory category)
      : category_(category), active_(internal::g_enabled.load(std::memory_order_relaxed)) {
    if (active_) {
      start_ = std::chrono::steady_clock::now();
      start_cpu_ns_ = internal::thread_cpu_ns();
    }
  }
  ~ScopedTimer() {
    if (active_) {
      const std::int64_t cpu = internal::thread_cpu_ns() - start_cpu_ns_;
      internal::add(
          category_,
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count(), cpu);
    }
  }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  TimeCategory category_;
  bool active_;
  std::chrono::steady_clock::time_point start_{};
  std::int64_t start_cpu_ns_ = 0;
};

}  // namespace chorus::profile
