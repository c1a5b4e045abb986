// The rendezvous behind ReplicaContext::merge_call (internal to distribute/).
//
// Each of `size` replicas deposits a value; the last to arrive runs fn(all values) in
// cross-replica context and publishes its result (or exception) to every replica. A replica that
// does not arrive within the timeout → DeadlineExceededError in the waiting ones naming who is
// missing; abort(reason) (a replica failed) → AbortedError in every waiting and later caller.
// Reusable: one round after another, as long as it is not aborted.
#pragma once

#include <any>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace chorus::distribute::internal {

class MergeBarrier {
 public:
  MergeBarrier(int size, std::chrono::milliseconds timeout);
  std::any arrive(int replica, std::any mine, const std::function<std::any(std::vector<std::any>&)>& fn);
  void abort(const std::string& reason);
  bool aborted() const;

 private:
  const int size_;
  const std::chrono::milliseconds timeout_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::any> slots_;
  std::vector<bool> arrived_;
  int count_ = 0;
  std::uint64_t generation_ = 0;
  std::any result_;
  std::exception_ptr error_;
  std::string abort_reason_;
  bool aborted_ = false;
};

}  // namespace chorus::distribute::internal
