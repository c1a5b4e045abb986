// BusyPoller (busy_poll.h): a thread that spins while collectives wait.
#include <chorus/collective/busy_poll.h>

#include <sched.h>

namespace chorus::collective {

namespace {

using Clock = std::chrono::steady_clock;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace

BusyPoller::BusyPoller(std::chrono::microseconds linger) : linger_(linger), thread_([this] { run(); }) {}

BusyPoller::~BusyPoller() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_.store(true, std::memory_order_relaxed);
  }
  cv_.notify_one();
  thread_.join();
}

void BusyPoller::start() noexcept {
  if (active_.fetch_add(1, std::memory_order_acq_rel) > 0) return;
  // The spinner may be asleep: wake it (it checks active_ under mu_, so this cannot be lost).
  std::lock_guard<std::mutex> lock(mu_);
  cv_.notify_one();
}

void BusyPoller::stop() noexcept {
  last_stop_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  active_.fetch_sub(1, std::memory_order_acq_rel);
}

void BusyPoller::run() {
  const auto linger_ticks = std::chrono::duration_cast<Clock::duration>(linger_).count();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock,
             [&] { return quit_.load(std::memory_order_relaxed) || active_.load(std::memory_order_acquire) > 0; });
    if (quit_.load(std::memory_order_relaxed)) return;
    lock.unlock();
    periods_.fetch_add(1, std::memory_order_relaxed);
    for (;;) {
      for (int i = 0; i < 64; ++i) cpu_relax();
      sched_yield();  // any runnable thread of this CPU goes first
      rounds_.fetch_add(1, std::memory_order_relaxed);
      if (quit_.load(std::memory_order_relaxed)) break;
      if (active_.load(std::memory_order_acquire) > 0) continue;
      const auto since_stop = Clock::now().time_since_epoch().count() - last_stop_.load(std::memory_order_relaxed);
      if (since_stop < linger_ticks) continue;
      break;
    }
    lock.lock();
  }
}

}  // namespace chorus::collective
