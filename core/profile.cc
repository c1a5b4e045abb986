#include "core/profile.h"

#include <time.h>

namespace chorus::profile {
namespace {
std::atomic<std::int64_t> g_ns[kNumTimeCategories];
std::atomic<std::int64_t> g_cpu_ns[kNumTimeCategories];

std::int64_t take(std::atomic<std::int64_t>* counters, TimeCategory category) {
  return counters[static_cast<int>(category)].exchange(0, std::memory_order_relaxed);
}
}  // namespace

namespace internal {
std::atomic<bool> g_enabled{false};

void add(TimeCategory category, std::int64_t wall_ns, std::int64_t cpu_ns) {
  g_ns[static_cast<int>(category)].fetch_add(wall_ns, std::memory_order_relaxed);
  g_cpu_ns[static_cast<int>(category)].fetch_add(cpu_ns, std::memory_order_relaxed);
}

std::int64_t thread_cpu_ns() {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;  // profiling only: no clock, no CPU time
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
}  // namespace internal

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
  return c;
}

}  // namespace chorus::profile
