#include <chorus/checkpoint/async_writer.h>

#include <sched.h>

#include <chorus/core/error.h>
#include <chorus/core/logging.h>

namespace chorus::train::internal {

AsyncWriter::~AsyncWriter() {
  if (thread_.joinable()) thread_.join();
  if (error_) {
    try {
      std::rethrow_exception(error_);
    } catch (const std::exception& e) {
      CHORUS_LOG(ERROR) << "async checkpoint write failed and nobody called sync(): " << e.what();
    }
  }
}

void AsyncWriter::wait() {
  if (thread_.joinable()) thread_.join();
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void AsyncWriter::start(std::function<void()> job) {
  CHORUS_ENFORCE(!thread_.joinable(), "AsyncWriter::start with a write in flight");
  thread_ = std::thread([this, job = std::move(job)] {
    // The writer runs at SCHED_IDLE: only on a core nothing else wants, and never preempting a
    // training thread when its I/O completes. A save's CPU and kernel work is small, but each time
    // it took a core from a replica (or its op threads) the others waited at the next all-reduce:
    // with a save every 10 steps of the seed CNN (2 replicas on 2 cores) the steps slowed 7.4%
    // at normal priority and 4.8% at SCHED_IDLE (bench_train, 9 paired rounds, 2026-11-27; nice 19
    // had measured no better than 0). Training threads that wait (all-reduce, a write hold on a
    // variable the writer still copies) leave their core to it, so it is not starved for long.
    sched_param idle{};
    (void)::sched_setscheduler(0, SCHED_IDLE, &idle);  // best effort: the write runs either way
    try {
      job();
    } catch (...) {
      error_ = std::current_exception();  // read by wait() after join (happens-before)
    }
  });
}

}  // namespace chorus::train::internal
