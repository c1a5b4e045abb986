#include <chorus/checkpoint/async_writer.h>

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
    try {
      job();
    } catch (...) {
      error_ = std::current_exception();  // read by wait() after join (happens-before)
    }
  });
}

}  // namespace chorus::train::internal
