#include "distribute/replica_pool.h"

#include "core/device_spec.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/placement.h"

namespace chorus::distribute {
namespace {
thread_local const ReplicaPool* t_pool = nullptr;  // the pool whose replica thread this is
}

ReplicaPool::ReplicaPool(std::vector<std::string> devices, int rank) : devices_(std::move(devices)), rank_(rank) {
  CHORUS_REQUIRE(!devices_.empty(), InvalidArgumentError, "ReplicaPool: no devices");
  for (const auto& d : devices_) DeviceSpec::parse(d);  // reject bad strings here, not on a replica thread
  for (int r = 0; r < size(); ++r) threads_.emplace_back([this, r] { worker(r); });
}

ReplicaPool::~ReplicaPool() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return remaining_ == 0; });
    stopping_ = true;
    start_cv_.notify_all();
  }
  for (auto& t : threads_) t.join();
}

void ReplicaPool::worker(int replica) {
  t_pool = this;
  ScopedLogContext context(rank_, replica);
  DeviceScope scope(devices_[replica]);
  std::uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* fn;
    const std::function<void(int, const std::string&)>* on_failure;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      fn = fn_;
      on_failure = on_failure_;
    }
    try {
      (*fn)(replica);
    } catch (...) {
      std::exception_ptr error = std::current_exception();
      std::string message = "unknown exception";
      bool consequence = false;
      try {
        std::rethrow_exception(error);
      } catch (const AbortedError& e) {
        message = e.what();
        consequence = true;
      } catch (const DeadlineExceededError& e) {
        message = e.what();
        consequence = true;
      } catch (const std::exception& e) {
        message = e.what();
      } catch (...) {
      }
      bool first = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        first = first_error_ == nullptr;
        if (first) first_error_ = error;
        if (!consequence && first_cause_ == nullptr) first_cause_ = error;
      }
      if (first) {
        CHORUS_LOG(ERROR) << "replica " << replica << " failed: " << message;
        if (on_failure != nullptr && *on_failure) {
          try {
            (*on_failure)(replica, internal::str_cat("replica ", replica, " failed: ", message));
          } catch (const std::exception& e) {
            CHORUS_LOG(ERROR) << "on_failure for replica " << replica << " threw: " << e.what();
          }
        }
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (--remaining_ == 0) done_cv_.notify_all();
  }
}

void ReplicaPool::run(const std::function<void(int)>& fn,
                      const std::function<void(int, const std::string&)>& on_failure) {
  CHORUS_REQUIRE(t_pool != this, FailedPreconditionError,
                 "ReplicaPool::run called from inside one of its replicas: it would wait for itself");
  CHORUS_REQUIRE(fn != nullptr, InvalidArgumentError, "ReplicaPool::run: fn is empty");
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mu_);
    CHORUS_REQUIRE(remaining_ == 0, FailedPreconditionError,
                   "ReplicaPool::run called while another run is in progress");
    fn_ = &fn;
    on_failure_ = &on_failure;
    first_error_ = nullptr;
    first_cause_ = nullptr;
    remaining_ = size();
    ++generation_;
    start_cv_.notify_all();
    done_cv_.wait(lock, [&] { return remaining_ == 0; });
    fn_ = nullptr;
    on_failure_ = nullptr;
    error = first_cause_ ? first_cause_ : first_error_;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace chorus::distribute
