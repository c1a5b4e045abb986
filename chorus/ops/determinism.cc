#include <chorus/ops/determinism.h>

#include <atomic>

#include <chorus/core/logging.h>

namespace chorus::ops {
namespace {
std::atomic<bool> g_deterministic{false};
}

void enable_op_determinism() {
  if (!g_deterministic.exchange(true)) CHORUS_LOG(INFO) << "op determinism enabled: deterministic kernels only";
}

bool op_determinism_enabled() { return g_deterministic.load(std::memory_order_relaxed); }

}  // namespace chorus::ops
