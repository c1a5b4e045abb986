#include <chorus/distribute/comm_worker.h>

#include <chorus/collective/communicator.h>
#include <chorus/core/error.h>
#include <chorus/core/timeline.h>

namespace chorus::distribute::internal {

CommWorker::CommWorker(int track, std::string track_name) : track_(track), track_name_(std::move(track_name)) {}

CommWorker::~CommWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) return;
    stop_ = true;  // the loop runs what is queued first
  }
  work_cv_.notify_one();
  thread_.join();
}

std::uint64_t CommWorker::submit(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  queue_.push_back(std::move(task));
  const std::uint64_t ticket = ++submitted_;
  work_cv_.notify_one();
  return ticket;
}

void CommWorker::loop() {
  timeline::set_thread_track(track_, track_name_);
  // The replica threads compute while this one waits for its peers: it must not spin on their cores.
  const collective::PassiveWaitScope passive;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_, with nothing left
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    const std::uint64_t ticket = completed_ + 1;
    if (failed_at_ == 0) {
      lock.unlock();
      std::exception_ptr error;
      try {
        task();
      } catch (...) {
        error = std::current_exception();
      }
      task = nullptr;  // its captures (the pack's buffers) go before the ticket completes
      lock.lock();
      if (error) {
        failed_at_ = ticket;
        error_ = error;
      }
    }
    completed_ = ticket;
    done_cv_.notify_all();
  }
}

void CommWorker::wait(std::uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  CHORUS_ENFORCE(ticket <= submitted_, "CommWorker::wait: ticket ", ticket, " was never submitted");
  done_cv_.wait(lock, [&] { return completed_ >= ticket; });
  if (failed_at_ != 0 && failed_at_ <= ticket) std::rethrow_exception(error_);
}

void CommWorker::drain() {
  std::uint64_t last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    last = submitted_;
  }
  if (last > 0) wait(last);
}

bool CommWorker::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_ == submitted_;
}

}  // namespace chorus::distribute::internal
