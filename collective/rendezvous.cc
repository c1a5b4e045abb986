#include <chorus/collective/rendezvous.h>

#include <sched.h>

#include <algorithm>
#include <thread>

#include <chorus/core/error.h>
#include <chorus/core/logging.h>

namespace chorus::collective {
namespace {
// Read once: glibc reads /sys on every call.
const int kCores = static_cast<int>(std::thread::hardware_concurrency());
constexpr int kPauseSpins = 16;
constexpr std::chrono::microseconds kSpin{50};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

// Why the phases are lock-free on the fast path: a futex sleep and wake-up costs 25-60 us on a
// loaded machine, far more than a collective of a small tensor. Arrival is an atomic counter; the
// last arriver validates, resets the phase and bumps the generation; waiters poll for up to 50 us
// and only then sleep on the condition variable, with the timeout. The last arriver takes the
// mutex to wake sleepers only when there are any (sleepers_ and state_ are seq_cst, so a sleeper
// either sees the new generation or is seen and woken).
//
// Why the poll yields after a few pauses instead of pause-spinning while every participant "has a
// core": on a machine with other work (two replica threads and two compilers on two cores), the
// scheduler often puts both replica threads on one core; a waiter pause-spinning there keeps the
// peer it waits for from running. Measured on the 2-core dev VM under load 4: k=2 4 KiB all_reduce
// 111 us with 50 us of pauses per wait, 300 us with ~85 us of pauses, 2-13 us yielding after 16
// pauses. sched_yield with nothing else runnable returns at once, so an idle machine loses little.
using internal::str_cat;

namespace {
// `to = from`, writing only the fields that differ: consecutive collectives mostly differ only in
// the sequence number, and a shape vector left untouched stays in the peers' caches (the last
// arriver compares it) instead of moving back and forth every call.
void post(Fingerprint& to, const Fingerprint& from) {
  to.sequence = from.sequence;
  to.dtype = from.dtype;
  to.root = from.root;
  to.reduce_op = from.reduce_op;
  if (to.op != from.op) to.op = from.op;
  if (to.shape != from.shape) to.shape = from.shape;
}
}  // namespace

Rendezvous::Rendezvous(int size, std::string name) : size_(size), name_(std::move(name)) {
  CHORUS_REQUIRE(size >= 1, InvalidArgumentError, "a communicator needs at least 1 participant, got ", size);
  part_.reset(new Participant[size]);
  staging_.reset(new StagingLine[2 * static_cast<std::size_t>(size) * kStagingBytes / sizeof(StagingLine)]);
}

void Rendezvous::arrive(int rank, const Fingerprint& fp, const Slot& slot, std::chrono::milliseconds timeout) {
  part_[rank].slot = slot;  // own slot; published by the arrival's release
  wait_phase(rank, fp, timeout, /*validate=*/true);
}

void Rendezvous::sync(int rank, const Fingerprint& fp, std::chrono::milliseconds timeout) {
  wait_phase(rank, fp, timeout, /*validate=*/false);
}

void Rendezvous::wait_phase(int rank, const Fingerprint& fp, std::chrono::milliseconds timeout, bool validate) {
  // The closing phase (sync) cannot be given up: every rank is past the opening phase and only
  // moves memory, so all will arrive; leaving early would let peers still write into this
  // caller's buffers after it got an error. Failures are reported by the next call.
  const bool closing = !validate;
  if (closing) {
    wait_closing(rank, fp, timeout);
    return;
  }
  if (failed_flag_.load()) {
    std::lock_guard<std::mutex> lock(mu_);
    throw AbortedError(str_cat(name_, ": ", fp.to_string(), " on rank ", rank, " cannot run: ", failure_));
  }
  if (validate) post(part_[rank].posted, fp);
  // The phase this rank arrives in (it cannot complete before this rank arrives), recorded as its
  // number + 1 instead of a flag, so that nobody has to clear it for the next phase (clearing it
  // made the last arriver write into every peer's cache line).
  part_[rank].here.store(generation() + 1, std::memory_order_relaxed);
  const std::uint64_t before = state_.fetch_add(1);  // seq_cst: publishes this rank's Participant
  const auto gen = static_cast<std::uint32_t>(before >> 32);
  if ((before & 0xffffffffu) + 1 == static_cast<std::uint64_t>(size_)) {
    // Last to arrive: nobody can withdraw any more (withdraw() sees the full count), so the phase
    // completes. Validate, reset for the next phase, then open it.
    if (!verdict_.empty()) verdict_.clear();  // not written when unchanged: every rank reads it next
    if (validate) {
      for (int r = 1; r < size_ && verdict_.empty(); ++r) {
        if (part_[r].posted == part_[0].posted) continue;
        verdict_ = str_cat(name_, ": participants called different collectives: rank 0 called ",
                           part_[0].posted.to_string(), " but rank ", r, " called ", part_[r].posted.to_string(),
                           ". Every replica must call the same collectives in the same order with the same "
                           "shapes and dtypes.");
      }
    }
    if (validate) {
      // Written only when used (the chunked path): an unchanged line stays in every cache.
      if (work_.load(std::memory_order_relaxed) != 0) work_.store(0, std::memory_order_relaxed);
      if (work_done_.load(std::memory_order_relaxed) != 0) work_done_.store(0, std::memory_order_relaxed);
      post(agreed_[agreed_count_++ % kAgreed], part_[0].posted);
    }
    open_next(gen);
  } else {
    spin([&] { return generation() != gen || failed_flag_.load(std::memory_order_relaxed); });
    if (generation() == gen) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1);
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      cv_.wait_until(lock, deadline, [&] { return generation() != gen || failed_; });
      sleepers_.fetch_sub(1);
      if (generation() == gen) {
        if (withdraw(rank, gen)) {
          if (!failed_) {  // our own deadline passed: fail the group, naming who never came
            std::string missing;
            for (int r = 0; r < size_; ++r)
              if (r != rank && part_[r].here.load() != gen + 1)
                missing += (missing.empty() ? "" : ", ") + std::to_string(r);
            failed_ = true;
            failed_flag_ = true;
            failed_by_timeout_ = true;
            failure_ = str_cat(fp.to_string(), " timed out after ", timeout.count(), " ms waiting for rank(s) [",
                               missing, "] of ", size_, ". Last completed collectives: ", history_locked(),
                               ". A replica is stuck, died, or called a different sequence of collectives.");
            cv_.notify_all();
            CHORUS_LOG(ERROR) << name_ << ": " << failure_;
            throw DeadlineExceededError(str_cat(name_, ": ", failure_));
          }
          if (failed_by_timeout_) throw DeadlineExceededError(str_cat(name_, ": ", failure_));
          throw AbortedError(str_cat(name_, ": ", fp.to_string(), " on rank ", rank, " aborted: ", failure_));
        }
        // The phase completed while we were giving up: the last arriver is about to open the next
        // generation. We are part of this collective after all.
        lock.unlock();
        while (generation() == gen) cpu_relax();
      }
    }
  }
  if (validate && !verdict_.empty()) throw InvalidArgumentError(verdict_);
}

void Rendezvous::wait_closing(int rank, const Fingerprint& fp, std::chrono::milliseconds timeout) {
  const std::uint64_t before = state_.fetch_add(1);
  const auto gen = static_cast<std::uint32_t>(before >> 32);
  if ((before & 0xffffffffu) + 1 == static_cast<std::uint64_t>(size_)) {
    open_next(gen);
    return;
  }
  spin([&] { return generation() != gen; });
  if (generation() == gen) {
    std::unique_lock<std::mutex> lock(mu_);
    sleepers_.fetch_add(1);
    if (!cv_.wait_for(lock, timeout, [&] { return generation() != gen; })) {
      CHORUS_LOG(ERROR) << name_ << ": rank " << rank << " has waited " << timeout.count()
                        << " ms in the closing phase of " << fp.to_string()
                        << " for peers still moving data; waiting on (leaving would let them write "
                        << "into buffers its caller may free)";
      cv_.wait(lock, [&] { return generation() != gen; });
    }
    sleepers_.fetch_sub(1);
  }
}

template <typename Done>
void Rendezvous::spin(const Done& done) const {
  // A short pause-spin catches a peer running on the other core; past it the peer is probably not
  // running (descheduled for another thread, possibly on this core), so yield to let it run.
  const int pauses = size_ <= kCores ? kPauseSpins : 0;
  for (int i = 0; i < pauses; ++i) {
    if (done()) return;
    cpu_relax();
  }
  const auto spin_until = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0; !done(); ++i) {
    sched_yield();
    if ((i & 3) == 3 && std::chrono::steady_clock::now() > spin_until) return;
  }
}

void Rendezvous::finish_work(std::size_t count, std::size_t total) {
  if (count == 0) return;
  // seq_cst, paired with sleepers_: a waiter either sees the last chunk done or is seen and woken.
  if (work_done_.fetch_add(count) + count == total && sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
}

void Rendezvous::wait_work(int rank, const Fingerprint& fp, std::size_t total, std::chrono::milliseconds timeout) {
  auto done = [&] { return work_done_.load() >= total; };
  spin(done);
  if (done()) return;
  std::unique_lock<std::mutex> lock(mu_);
  sleepers_.fetch_add(1);
  if (!cv_.wait_for(lock, timeout, done)) {
    CHORUS_LOG(ERROR) << name_ << ": rank " << rank << " has waited " << timeout.count() << " ms for peers to finish "
                      << "their chunks of " << fp.to_string() << "; waiting on (leaving would let them write into "
                      << "buffers its caller may free)";
    cv_.wait(lock, done);
  }
  sleepers_.fetch_sub(1);
}

void Rendezvous::open_next(std::uint32_t gen) {
  state_.store(static_cast<std::uint64_t>(gen + 1) << 32);  // seq_cst: pairs with sleepers_ below
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
}

bool Rendezvous::withdraw(int rank, std::uint32_t gen) {
  std::uint64_t s = state_.load();
  for (;;) {
    if (static_cast<std::uint32_t>(s >> 32) != gen) return false;              // completed
    if ((s & 0xffffffffu) == static_cast<std::uint64_t>(size_)) return false;  // completing
    if (state_.compare_exchange_weak(s, s - 1)) {
      part_[rank].here.store(0);
      return true;
    }
  }
}

void Rendezvous::abort(int rank, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failed_) return;
  failed_ = true;
  failed_flag_ = true;
  failure_ = str_cat("rank ", rank, " aborted the communicator: ", reason);
  cv_.notify_all();
}

void Rendezvous::check_usable() const {
  if (!failed_flag_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (failed_) throw AbortedError(str_cat(name_, " is unusable: ", failure_));
}

std::string Rendezvous::history_locked() const {
  std::string s;
  const std::size_t kept = std::min<std::uint64_t>(agreed_count_, kAgreed);
  for (int r = 0; r < size_; ++r) {
    s += (r ? "; " : "") + str_cat("rank ", r, ": ");
    const std::uint64_t next = part_[r].completed.load(std::memory_order_relaxed);
    std::string mine;
    std::size_t shown = 0;
    // Newest first through the ring, keeping those this rank completed; printed oldest first.
    for (std::size_t i = 0; i < kept && shown < kHistory; ++i) {
      const Fingerprint& fp = agreed_[(agreed_count_ - 1 - i) % kAgreed];
      if (fp.sequence >= next) continue;
      mine = fp.to_string() + (shown++ ? ", " : "") + mine;
    }
    s += shown ? mine : "none";
  }
  return s;
}

}  // namespace chorus::collective
