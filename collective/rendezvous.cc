#include "collective/rendezvous.h"

#include "core/error.h"
#include "core/logging.h"

#include <algorithm>
#include <thread>

namespace chorus::collective {
namespace {
constexpr std::size_t kHistory = 3;
// How long a waiter polls before sleeping on the condition variable. A futex wake-up costs tens of
// microseconds on a loaded machine; collectives of small tensors finish faster than that when the
// others are already close. Past the first iterations the poll yields, so oversubscribed cores
// (more replicas than cores) still make progress.
constexpr auto kSpinFor = std::chrono::microseconds(50);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
}

using internal::str_cat;

Rendezvous::Rendezvous(int size, std::string name)
    : size_(size), name_(std::move(name)), here_(size, 0), posted_(size), slots_(size), history_(size) {
  CHORUS_REQUIRE(size >= 1, InvalidArgumentError, "a communicator needs at least 1 participant, got ", size);
}

void Rendezvous::arrive(int rank, const Fingerprint& fp, const Slot& slot, std::chrono::milliseconds timeout) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    slots_[rank] = slot;
  }
  wait_phase(rank, fp, timeout, /*validate=*/true);
}

void Rendezvous::sync(int rank, const Fingerprint& fp, std::chrono::milliseconds timeout) {
  wait_phase(rank, fp, timeout, /*validate=*/false);
}

void Rendezvous::wait_phase(int rank, const Fingerprint& fp, std::chrono::milliseconds timeout, bool validate) {
  std::unique_lock<std::mutex> lock(mu_);
  if (failed_) throw AbortedError(str_cat(name_, ": ", fp.to_string(), " on rank ", rank, " cannot run: ", failure_));
  const std::uint64_t gen = generation_;
  here_[rank] = 1;
  posted_[rank] = fp;
  if (++arrived_ == size_) {
    verdict_.clear();
    if (validate) {
      for (int r = 1; r < size_ && verdict_.empty(); ++r) {
        if (posted_[r] == posted_[0]) continue;
        verdict_ = str_cat(name_, ": participants called different collectives: rank 0 called ", posted_[0].to_string(),
                           " but rank ", r, " called ", posted_[r].to_string(),
                           ". Every replica must call the same collectives in the same order with the same "
                           "shapes and dtypes.");
      }
    }
    arrived_ = 0;
    std::fill(here_.begin(), here_.end(), 0);
    ++generation_;
    spin_generation_.store(generation_, std::memory_order_release);
    cv_.notify_all();
  } else {
    lock.unlock();
    const auto spin_until = std::chrono::steady_clock::now() + std::min<std::chrono::steady_clock::duration>(kSpinFor, timeout);
    for (int i = 0; spin_generation_.load(std::memory_order_acquire) == gen && !spin_failed_.load(std::memory_order_acquire); ++i) {
      if (i < 64) {
        cpu_relax();
      } else {
        if (std::chrono::steady_clock::now() > spin_until) break;
        std::this_thread::yield();
      }
    }
    lock.lock();
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const bool done = cv_.wait_until(lock, deadline, [&] { return generation_ != gen || failed_; });
    if (generation_ == gen) {
      if (!done && !failed_) {
        std::string missing;
        for (int r = 0; r < size_; ++r)
          if (!here_[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        failed_ = true;
        spin_failed_ = true;
        failed_by_timeout_ = true;
        failure_ = str_cat(fp.to_string(), " timed out after ", timeout.count(), " ms waiting for rank(s) [", missing,
                           "] of ", size_, ". Last completed collectives: ", history_locked(),
                           ". A replica is stuck, died, or called a different sequence of collectives.");
        cv_.notify_all();
        CHORUS_LOG(ERROR) << name_ << ": " << failure_;
        throw DeadlineExceededError(str_cat(name_, ": ", failure_));
      }
      // Failed while we waited in this phase: the same error class for everyone who was waiting.
      if (failed_by_timeout_) throw DeadlineExceededError(str_cat(name_, ": ", failure_));
      throw AbortedError(str_cat(name_, ": ", fp.to_string(), " on rank ", rank, " aborted: ", failure_));
    }
  }
  if (validate && !verdict_.empty()) throw InvalidArgumentError(verdict_);
}

void Rendezvous::completed(int rank, const Fingerprint& fp) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& h = history_[rank];
  h.push_back(fp.to_string());
  if (h.size() > kHistory) h.pop_front();
}

void Rendezvous::abort(int rank, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failed_) return;
  failed_ = true;
  spin_failed_ = true;
  failure_ = str_cat("rank ", rank, " aborted the communicator: ", reason);
  cv_.notify_all();
}

void Rendezvous::check_usable() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (failed_) throw AbortedError(str_cat(name_, " is unusable: ", failure_));
}

std::string Rendezvous::history_locked() const {
  std::string s;
  for (int r = 0; r < size_; ++r) {
    s += (r ? "; " : "") + str_cat("rank ", r, ": ");
    if (history_[r].empty()) {
      s += "none";
      continue;
    }
    for (std::size_t i = 0; i < history_[r].size(); ++i) s += (i ? ", " : "") + history_[r][i];
  }
  return s;
}

}  // namespace chorus::collective
