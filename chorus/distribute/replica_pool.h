// Persistent replica threads: the execution engine under MirroredStrategy::run.
//
//   ReplicaPool pool({"/cpu:0", "/cpu:1"});
//   pool.run([&](int r) { ... per-replica step on its own device ... },
//            [&](int r, const std::string& why) { for (auto& c : comms) c->abort(why); });
//
// One thread per replica, started once and reused for every run() (no thread creation per step).
// Replica r's thread lives inside DeviceScope(devices[r]) — ops it runs are placed on its device
// unless they name another — and ScopedLogContext(rank, r), so its log lines and errors name it.
//
// run(fn, on_failure) runs fn(r) on every replica concurrently and returns when all finished.
// If any replica throws, on_failure(r, message) is called once, right away, from that replica's
// thread: strategies abort their communicators there, so replicas blocked in a collective waiting
// for the failed one are released at once instead of at the timeout. run() then waits for every
// replica and rethrows the root cause: the first exception thrown, unless that is an
// AbortedError/DeadlineExceededError and a replica threw something else (the consequences of an
// abort never hide its cause).
//
// Thread-safety: run() is called by one thread at a time (the program's training loop); calling
// it from inside a replica throws FailedPreconditionError (it would wait for itself). The
// destructor waits for a running step and joins the threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace chorus::distribute {

class ReplicaPool {
 public:
  // `devices`: one logical device per replica (any DeviceSpec form). `rank`: this process's rank
  // for log lines (-1 outside multi-process runs). Bad device strings → InvalidArgumentError.
  explicit ReplicaPool(std::vector<std::string> devices, int rank = -1);
  ~ReplicaPool();
  ReplicaPool(const ReplicaPool&) = delete;
  ReplicaPool& operator=(const ReplicaPool&) = delete;

  int size() const { return static_cast<int>(devices_.size()); }
  const std::string& device(int replica) const { return devices_[replica]; }

  void run(const std::function<void(int)>& fn,
           const std::function<void(int, const std::string&)>& on_failure = nullptr);

 private:
  void worker(int replica);
  void wait_for_workers();  // until remaining_ is 0

  std::vector<std::string> devices_;
  int rank_;
  // The hand-off is two atomics waited on with futexes (C++20 atomic wait/notify), not a mutex and
  // condition variables: woken replicas do not queue on a mutex the waker holds (on 2 cores with 4
  // replicas that convoy and the wake-ups cost ~100 us of every step).
  std::atomic<std::uint32_t> generation_{0};  // bumped by run() (and the destructor) to start the workers
  std::atomic<int> remaining_{0};             // replicas of the current run still running; run() waits for 0
  bool stopping_ = false;                     // set before the destructor's bump, read after it
  std::mutex mu_;                             // guards the errors below (the failure path)
  const std::function<void(int)>* fn_ = nullptr;
  const std::function<void(int, const std::string&)>* on_failure_ = nullptr;
  std::exception_ptr first_error_;
  std::exception_ptr first_cause_;  // first error that is not an abort/timeout consequence
  std::vector<std::thread> threads_;
};

}  // namespace chorus::distribute
