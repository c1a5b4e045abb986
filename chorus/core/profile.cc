#include <chorus/core/profile.h>

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>

namespace chorus::profile {
namespace {
std::atomic<std::int64_t> g_ns[kNumTimeCategories];
std::atomic<std::int64_t> g_cpu_ns[kNumTimeCategories];

std::atomic<std::int64_t> g_run_queue_ns[kNumTimeCategories];
std::atomic<std::int64_t> g_round_run_queue_ns{0};  // account_run_delay

std::int64_t take(std::atomic<std::int64_t>* counters, TimeCategory category) {
  return counters[static_cast<int>(category)].exchange(0, std::memory_order_relaxed);
}
}  // namespace

namespace internal {
std::atomic<bool> g_enabled{false};

void add(TimeCategory category, std::int64_t wall_ns, std::int64_t cpu_ns, std::int64_t run_queue_ns) {
  g_ns[static_cast<int>(category)].fetch_add(wall_ns, std::memory_order_relaxed);
  g_cpu_ns[static_cast<int>(category)].fetch_add(cpu_ns, std::memory_order_relaxed);
  if (run_queue_ns != 0) g_run_queue_ns[static_cast<int>(category)].fetch_add(run_queue_ns, std::memory_order_relaxed);
}

// schedstat reads "cpu_ns run_delay_ns timeslices".
std::int64_t thread_run_delay_ns() {
  struct Fd {
    int fd = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  };
  thread_local Fd file;
  if (file.fd < 0) return -1;
  char buf[96];
  const ssize_t n = ::pread(file.fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return -1;
  buf[n] = '\0';
  char* end = nullptr;
  std::strtoll(buf, &end, 10);  // CPU time
  if (end == buf) return -1;
  const char* second = end;
  const long long delay = std::strtoll(second, &end, 10);
  return end == second ? -1 : delay;
}

std::int64_t thread_cpu_ns() {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;  // profiling only: no clock, no CPU time
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
}  // namespace internal

void account_run_delay() {
  thread_local std::int64_t last = -1;
  if (!internal::g_enabled.load(std::memory_order_relaxed)) {
    last = -1;
    return;
  }
  const std::int64_t now = internal::thread_run_delay_ns();
  if (last >= 0 && now >= last) g_round_run_queue_ns.fetch_add(now - last, std::memory_order_relaxed);
  last = now;
}

void enable_profiling(bool enabled) { internal::g_enabled.store(enabled, std::memory_order_relaxed); }

bool profiling_enabled() { return internal::g_enabled.load(std::memory_order_relaxed); }

ProfileCounters read_and_reset() {
  ProfileCounters c;
  c.library_kernel_ns = take(g_ns, TimeCategory::kLibraryKernel);
  c.collective_ns = take(g_ns, TimeCategory::kCollective);
  c.replica_step_ns = take(g_ns, TimeCategory::kReplicaStep);
  c.library_kernel_cpu_ns = take(g_cpu_ns, TimeCategory::kLibraryKernel);
  c.collective_cpu_ns = take(g_cpu_ns, TimeCategory::kCollective);
  c.replica_step_cpu_ns = take(g_cpu_ns, TimeCategory::kReplicaStep);
  c.collective_run_queue_ns = take(g_run_queue_ns, TimeCategory::kCollective);
  c.replica_step_run_queue_ns = take(g_run_queue_ns, TimeCategory::kReplicaStep);
  c.run_queue_ns = g_round_run_queue_ns.exchange(0, std::memory_order_relaxed);
  return c;
}

}  // namespace chorus::profile
