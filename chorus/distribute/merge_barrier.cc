#include <chorus/distribute/merge_barrier.h>

#include <sstream>

#include <chorus/core/error.h>

namespace chorus::distribute::internal {

using chorus::internal::str_cat;

MergeBarrier::MergeBarrier(int size, std::chrono::milliseconds timeout)
    : size_(size),
      timeout_(timeout),
      slots_(static_cast<std::size_t>(size)),
      arrived_(static_cast<std::size_t>(size)) {}

std::any MergeBarrier::arrive(int replica, std::any mine, const std::function<std::any(std::vector<std::any>&)>& fn) {
  std::unique_lock<std::mutex> lock(mu_);
  if (aborted_) throw AbortedError(str_cat("merge_call: aborted: ", abort_reason_));
  const std::uint64_t gen = generation_;
  slots_[static_cast<std::size_t>(replica)] = std::move(mine);
  arrived_[static_cast<std::size_t>(replica)] = true;
  if (++count_ == size_) {
    std::vector<std::any> all = std::move(slots_);
    slots_.assign(static_cast<std::size_t>(size_), std::any());
    // fn may take long (creating variables on every device): run it without the lock; the others
    // wait for the generation to move on.
    lock.unlock();
    std::any result;
    std::exception_ptr error;
    try {
      result = fn(all);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    result_ = result;
    error_ = error;
    count_ = 0;
    arrived_.assign(static_cast<std::size_t>(size_), false);
    ++generation_;
    cv_.notify_all();
    if (error) std::rethrow_exception(error);
    return result;
  }
  const bool done = cv_.wait_for(lock, timeout_, [&] { return generation_ != gen || aborted_; });
  if (generation_ != gen) {
    if (error_) std::rethrow_exception(error_);
    return result_;
  }
  if (aborted_) throw AbortedError(str_cat("merge_call: aborted: ", abort_reason_));
  (void)done;
  std::ostringstream missing;
  bool first = true;
  for (int r = 0; r < size_; ++r) {
    if (!arrived_[static_cast<std::size_t>(r)]) {
      missing << (first ? "" : ", ") << r;
      first = false;
    }
  }
  aborted_ = true;
  abort_reason_ = str_cat("replica(s) ", missing.str(), " did not reach merge_call within ", timeout_.count(), " ms");
  cv_.notify_all();
  throw DeadlineExceededError(str_cat("merge_call: replica(s) ", missing.str(), " did not arrive within ",
                                      timeout_.count(),
                                      " ms (every replica must make the same merge_call / variable "
                                      "creations in the same order)"));
}

void MergeBarrier::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) return;
  aborted_ = true;
  abort_reason_ = reason;
  cv_.notify_all();
}

bool MergeBarrier::aborted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return aborted_;
}

}  // namespace chorus::distribute::internal
