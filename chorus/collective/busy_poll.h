// Keeps a CPU of this process busy while a host collective waits on its sockets, so that the
// threads it wakes (the transport's event loop, the caller) find a CPU that is running rather than
// one that must first leave its idle state.
//
// Why. A host collective of a few KiB is a chain of wake-ups: a message arrives, the transport's
// event-loop thread wakes, reads it and wakes the caller, the caller posts the next message. Each
// wake-up of an idle CPU costs that CPU's idle-exit latency: microseconds on bare metal, but on a
// virtual machine the idle vCPU has halted and the hypervisor must schedule it again, about a
// millisecond per wake-up on the 2-vCPU VMs chorus is tested on (a Gloo all_reduce of 4 KiB took
// 4–7 ms there, and 0.44 ms with the CPUs kept busy; docs/benchmarks.md, "Gloo ... busy polling").
// MPI and NCCL avoid it the same way: their waits spin.
//
// How. One thread per BusyPoller, at the priority of the thread that made it. While at least one
// Scope is alive, and for `linger` after the last one ends (so that a training step's back-to-back
// collectives keep it hot), it spins: a short run of pause instructions, then sched_yield, so that
// any thread that becomes runnable on its CPU runs first. Otherwise it sleeps on a condition
// variable and costs nothing.
// Measured alternatives (bench_gloo, 2 ranks on the 2-vCPU VM, docs/benchmarks.md): a spinner at
// SCHED_IDLE or at nice 19 saved much less (the kernel lets an idle-class spinner's CPU be treated
// as idle and stacks low-weight spinners on one CPU), and spinning without sched_yield was worse.
// The cost: during collectives and `linger` after them, the spinner takes CPU time that compute
// threads on the same CPU share with it (it yields whenever another thread is runnable there, but
// the scheduler still gives it turns). CHORUS_BUSY_POLL=0 (core/env.h) or the backend's option turns
// it off.
//
// Thread-safety: start()/stop() (and Scope) from any thread. The destructor joins the thread (it
// returns within one spin of the loop, also while a Scope is alive).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace chorus::collective {

class BusyPoller {
 public:
  static constexpr std::chrono::microseconds kDefaultLinger{2000};

  explicit BusyPoller(std::chrono::microseconds linger = kDefaultLinger);
  ~BusyPoller();
  BusyPoller(const BusyPoller&) = delete;
  BusyPoller& operator=(const BusyPoller&) = delete;

  // While a Scope lives, the poller spins. Never blocks, never throws.
  class Scope {
   public:
    explicit Scope(BusyPoller* poller) : poller_(poller) {
      if (poller_ != nullptr) poller_->start();
    }
    ~Scope() {
      if (poller_ != nullptr) poller_->stop();
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    BusyPoller* poller_;
  };

  void start() noexcept;
  void stop() noexcept;

  // How many times the thread began spinning (after a sleep) since construction: for tests.
  long spin_periods() const { return periods_.load(std::memory_order_relaxed); }
  // How many rounds (pauses, then sched_yield) it spun since construction: for tests.
  long spin_rounds() const { return rounds_.load(std::memory_order_relaxed); }

 private:
  void run();

  const std::chrono::microseconds linger_;
  std::atomic<int> active_{0};
  // steady_clock ticks of the last stop(): the spinner lingers until this + linger_.
  std::atomic<std::chrono::steady_clock::rep> last_stop_{0};
  std::atomic<long> periods_{0};
  std::atomic<long> rounds_{0};
  std::atomic<bool> quit_{false};  // written under mu_ (the sleeping spinner checks it there)
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace chorus::collective
