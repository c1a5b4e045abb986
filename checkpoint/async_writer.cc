#include <chorus/checkpoint/async_writer.h>

#include <sys/resource.h>
#include <unistd.h>

#include <chorus/core/env.h>
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
  const int nice = env::async_save_nice();  // the caller sees a bad CHORUS_ASYNC_SAVE_NICE
  thread_ = std::thread([this, nice, job = std::move(job)] {
    // The write yields the cores to training: at nice 19 this thread gets 1/70 of a nice-0 thread's
    // share of a busy core, and the whole of an idle one (replicas waiting in a collective or
    // between steps). Mostly it waits on the disk (fsync), which nice does not slow. Linux nice is
    // per thread; failure (a sandbox refusing it) only leaves the default priority.
    if (nice != 0) (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), nice);
    try {
      job();
    } catch (...) {
      error_ = std::current_exception();  // read by wait() after join (happens-before)
    }
  });
}

}  // namespace chorus::train::internal
