// Internal to checkpoint/: the background thread of an async save (one write in flight).
#pragma once

#include <exception>
#include <functional>
#include <thread>

namespace chorus::train::internal {

class AsyncWriter {
 public:
  AsyncWriter() = default;
  // Waits for the write in flight; its error is logged (a destructor cannot throw).
  ~AsyncWriter();
  AsyncWriter(const AsyncWriter&) = delete;
  AsyncWriter& operator=(const AsyncWriter&) = delete;

  // Waits for the write in flight, then rethrows its exception, if any (once).
  void wait();
  // Runs `job` on a new background thread, at SCHED_BATCH (see the .cc). Call wait() first
  // (InternalError if one is in flight). With the timeline on (core/timeline.h) the job is an
  // "async write" span on the "checkpoint writer" track with its CPU time, run-queue wait and
  // minor page faults.
  void start(std::function<void()> job);
  bool in_flight() const { return thread_.joinable(); }

 private:
  std::thread thread_;
  std::exception_ptr error_;
};

}  // namespace chorus::train::internal
