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
//   run queue      — the time a thread was ready to run but waited for a core (Linux's per-thread
//                    schedstat run delay): recorded by the kCollective and kReplicaStep timers
//                    (not per kernel: a /proc read each), and by account_run_delay(), which each
//                    ReplicaPool worker calls after every run, so that it covers the whole round,
//                    the wake-up before the step included. It tells "waiting for a core" (more
//                    replica threads than cores, other processes) from framework overhead.
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
// two thread-CPU-clock reads (a system call each, ~0.2 µs) and two relaxed fetch_adds; a collective
// or replica-step timer also two preads of /proc/thread-self/schedstat (~1 µs each). Enabling or disabling while
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
  // Run-queue time inside the timed collectives and replica steps, and of the threads that call
  // account_run_delay over their whole rounds (all 0 where the kernel has no
  // /proc/thread-self/schedstat).
  std::int64_t collective_run_queue_ns = 0;
  std::int64_t replica_step_run_queue_ns = 0;
  std::int64_t run_queue_ns = 0;
};

namespace internal {
extern std::atomic<bool> g_enabled;
void add(TimeCategory category, std::int64_t wall_ns, std::int64_t cpu_ns, std::int64_t run_queue_ns);
// The calling thread's CPU time in nanoseconds (CLOCK_THREAD_CPUTIME_ID).
std::int64_t thread_cpu_ns();
// The calling thread's run delay in nanoseconds (the second field of /proc/thread-self/schedstat,
// read through a per-thread descriptor); -1 where it cannot be read.
std::int64_t thread_run_delay_ns();
}  // namespace internal

// Turns recording on or off for the whole process. Does not reset the counters.
void enable_profiling(bool enabled);
bool profiling_enabled();

// Adds the calling thread's run-queue time since its previous call (on this thread, with
// profiling enabled) to run_queue_ns. The first call on a thread, or the first after profiling
// was off, only sets the starting point. Cost when enabled: one pread of a /proc file (~1 us);
// disabled: one relaxed load.
void account_run_delay();

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
      if (category_ != TimeCategory::kLibraryKernel) start_run_queue_ns_ = internal::thread_run_delay_ns();
    }
  }
  ~ScopedTimer() {
    if (active_) {
      const std::int64_t cpu = internal::thread_cpu_ns() - start_cpu_ns_;
      std::int64_t run_queue = 0;
      if (start_run_queue_ns_ >= 0) {
        const std::int64_t now = internal::thread_run_delay_ns();
        if (now >= start_run_queue_ns_) run_queue = now - start_run_queue_ns_;
      }
      internal::add(
          category_,
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count(), cpu,
          run_queue);
    }
  }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  TimeCategory category_;
  bool active_;
  std::chrono::steady_clock::time_point start_{};
  std::int64_t start_cpu_ns_ = 0;
  std::int64_t start_run_queue_ns_ = -1;  // -1: not recorded (kernels, disabled, no schedstat)
};

}  // namespace chorus::profile
