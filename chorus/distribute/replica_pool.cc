#include <chorus/distribute/replica_pool.h>

#include <chorus/core/device_spec.h>
#include <chorus/core/error.h>
#include <chorus/core/logging.h>
#include <chorus/core/placement.h>
#include <chorus/core/profile.h>

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
  wait_for_workers();
  stopping_ = true;
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void ReplicaPool::wait_for_workers() {
  for (int left; (left = remaining_.load(std::memory_order_acquire)) != 0;)
    remaining_.wait(left, std::memory_order_acquire);
}

void ReplicaPool::worker(int replica) {
  t_pool = this;
  ScopedLogContext context(rank_, replica);
  DeviceScope scope(devices_[replica]);
  std::uint32_t seen = 0;
  for (;;) {
    generation_.wait(seen, std::memory_order_acquire);
    seen = generation_.load(std::memory_order_acquire);  // publishes what run() wrote before its bump
    if (stopping_) return;
    const std::function<void(int)>* fn = fn_;
    const std::function<void(int, const std::string&)>* on_failure = on_failure_;
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
    // bench_train's accounting: this round's time waiting for a core, the wake-up included.
    profile::account_run_delay();
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) remaining_.notify_all();
  }
}

void ReplicaPool::run(const std::function<void(int)>& fn,
                      const std::function<void(int, const std::string&)>& on_failure) {
  CHORUS_REQUIRE(t_pool != this, FailedPreconditionError,
                 "ReplicaPool::run called from inside one of its replicas: it would wait for itself");
  CHORUS_REQUIRE(fn != nullptr, InvalidArgumentError, "ReplicaPool::run: fn is empty");
  int idle = 0;
  CHORUS_REQUIRE(remaining_.compare_exchange_strong(idle, size(), std::memory_order_acq_rel), FailedPreconditionError,
                 "ReplicaPool::run called while another run is in progress");
  fn_ = &fn;
  on_failure_ = &on_failure;
  {
    std::lock_guard<std::mutex> lock(mu_);
    first_error_ = nullptr;
    first_cause_ = nullptr;
  }
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  wait_for_workers();
  fn_ = nullptr;
  on_failure_ = nullptr;
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    error = first_cause_ ? first_cause_ : first_error_;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace chorus::distribute
