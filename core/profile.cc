#include "core/profile.h"

namespace chorus::profile {
namespace {
std::atomic<std::int64_t> g_ns[2];
}  // namespace

namespace internal {
std::atomic<bool> g_enabled{false};

void add(TimeCategory category, std::int64_t ns) {
  g_ns[static_cast<int>(category)].fetch_add(ns, std::memory_order_relaxed);
}
}  // namespace internal

void enable_profiling(bool enabled) { internal::g_enabled.store(enabled, std::memory_order_relaxed); }

bool profiling_enabled() { return internal::g_enabled.load(std::memory_order_relaxed); }

ProfileCounters read_and_reset() {
  ProfileCounters c;
  c.library_kernel_ns = g_ns[static_cast<int>(TimeCategory::kLibraryKernel)].exchange(0, std::memory_order_relaxed);
  c.collective_ns = g_ns[static_cast<int>(TimeCategory::kCollective)].exchange(0, std::memory_order_relaxed);
  return c;
}

}  // namespace chorus::profile
