// A replica's communication thread: runs the collectives the replica hands it, one at a time and
// in the order handed, while the replica thread goes on computing (the overlapped gradient
// all-reduce and, at ZeRO stages 2-3, reduce-scatter: distribute/overlapped_reduction.h; stage 3's
// prefetched parameter gathers: distribute/gather_prefetch.h). A replica's communicator is used by one thread
// at a time (collective/communicator.h), so the replica thread drains this worker before it calls
// a collective itself (StrategyReplicaContext::comm()).
//
//   CommWorker worker(2000 + replica, "replica 0 all-reduce");   // its timeline track
//   std::uint64_t t = worker.submit([&] { comm.all_reduce(send, out)->wait(); });
//   ... compute ...
//   worker.wait(t);      // rethrows the task's error
//
// Errors: a task that throws fails it and every task queued after it (they do not run: their
// collectives would meet peers in a different order); wait() of any of them, and drain(),
// rethrow the first error. The worker stays failed (a failed step rebuilds the replica contexts,
// and with them their workers).
// Lifetime: the thread starts with the first submit and is joined by the destructor, which first
// waits for the queued tasks (a collective's own timeout bounds that; abort the communicator
// first to end them at once).
// Thread-safety: submit, wait and drain from the owning replica thread; idle() from any.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace chorus::distribute::internal {

class CommWorker {
 public:
  // `track`, `track_name`: the worker thread's timeline track (core/timeline.h).
  CommWorker(int track, std::string track_name);
  ~CommWorker();
  CommWorker(const CommWorker&) = delete;
  CommWorker& operator=(const CommWorker&) = delete;

  // Queues `task`; returns its ticket (1, 2, ... in submission order).
  std::uint64_t submit(std::function<void()> task);
  // Blocks until task `ticket` ran (or was failed), then rethrows the first error of any task up
  // to it.
  void wait(std::uint64_t ticket);
  // wait() for every task submitted so far.
  void drain();
  // True when no task is queued or running.
  bool idle() const;

 private:
  void loop();

  const int track_;
  const std::string track_name_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::function<void()>> queue_;
  std::uint64_t submitted_ = 0, completed_ = 0;
  std::uint64_t failed_at_ = 0;  // the first failed ticket, 0: none
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace chorus::distribute::internal
