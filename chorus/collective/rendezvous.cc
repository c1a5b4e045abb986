#include <chorus/collective/rendezvous.h>

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include <chorus/collective/deadline.h>
#include <chorus/collective/flight_record.h>
#include <chorus/core/env.h>
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
// loaded machine, far more than a collective of a small tensor. Arrival is a store to the rank's
// own flag (rendezvous.h, Flag); waiters poll every flag for up to 50 us and only then sleep on the
// condition variable, with the timeout. An arriving rank takes the mutex to wake sleepers only
// when there are any (sleepers_ and the flags are seq_cst, so a sleeper either sees the flag or
// is seen and woken).
//
// Why the poll yields after a few pauses instead of pause-spinning while every participant "has a
// core": on a machine with other work (two replica threads and two compilers on two cores), the
// scheduler often puts both replica threads on one core; a waiter pause-spinning there keeps the
// peer it waits for from running. Measured on the 2-core dev VM under load 4: k=2 4 KiB all_reduce
// 111 us with 50 us of pauses per wait, 300 us with ~85 us of pauses, 2-13 us yielding after 16
// pauses. sched_yield with nothing else runnable returns at once, so an idle machine loses little.
using internal::str_cat;

namespace {
// A 64-bit digest of the fields of `fp` but its sequence number, a word at a time: each step is a
// bijection of (h ^ word), so two fingerprints that differ in one word always differ after it. A
// few nanoseconds: it runs on every collective.
inline std::uint64_t step(std::uint64_t h, std::uint64_t v) {
  h = (h ^ v) * 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 29);
}

std::uint64_t static_digest(const Fingerprint& fp) {
  std::uint64_t h = step(0, fp.op.size());
  for (std::size_t i = 0; i < fp.op.size(); i += 8) {
    // Shifted in, not memcpy'd into a word on the stack: a partial store read back whole
    // stalls store forwarding (an eighth of arrive()'s time when it did).
    std::uint64_t w = 0;
    for (std::size_t b = 0; b < 8 && i + b < fp.op.size(); ++b)
      w |= static_cast<std::uint64_t>(static_cast<unsigned char>(fp.op[i + b])) << (8 * b);
    h = step(h, w);
  }
  h = step(h, static_cast<std::uint64_t>(fp.dtype) | static_cast<std::uint64_t>(fp.reduce_op & 0xffffff) << 8 |
                  static_cast<std::uint64_t>(static_cast<std::uint32_t>(fp.root)) << 32);
  h = step(h, fp.shape.size());
  for (const std::int64_t d : fp.shape) h = step(h, static_cast<std::uint64_t>(d));
  return h;
}

// The digest of the whole fingerprint: the sequence number stepped in, splitmix64's finalizer.
std::uint64_t digest(std::uint64_t statics, std::uint64_t sequence) {
  std::uint64_t h = step(statics, sequence);
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}
}  // namespace

Rendezvous::Rendezvous(int size, std::string name) : size_(size), name_(std::move(name)) {
  CHORUS_REQUIRE(size >= 1, InvalidArgumentError, "a communicator needs at least 1 participant, got ", size);
  flags_.reset(new Flag[size]);
  part_.reset(new Participant[size]);
  staging_.reset(new StagingLine[2 * static_cast<std::size_t>(size) * kStagingBytes / sizeof(StagingLine)]);
}

void Rendezvous::arrive(int rank, const Fingerprint& fp, const Slot& slot, std::chrono::milliseconds timeout,
                        const void* stage, std::size_t stage_bytes) {
  if (failed_flag_.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> lock(mu_);
    throw AbortedError(str_cat(name_, ": ", fp.to_string(), " on rank ", rank, " cannot run: ", failure_));
  }
  Flag& me = flags_[rank];
  Participant& mine = part_[rank];
  const std::uint64_t p = me.phase.load(std::memory_order_relaxed) + 1;
#if defined(__x86_64__)
  if (stage != nullptr && stage_bytes > kInlineBytes) {  // inline data shares the flag's line: peers poll it
    const auto* line = static_cast<const unsigned char*>(staging(rank, p, stage_bytes));
    for (std::size_t off = 0; off < stage_bytes; off += 64) asm volatile("prefetchw %0" : : "m"(line[off]));
  }
#endif
  const std::uint64_t n = mine.posts++;
  mine.slot = slot;
  // The entry is rewritten whole only when more than the sequence number changed (as told by the
  // digests): consecutive collectives mostly differ only in it, and copying or comparing the op's
  // string and the shape was a tenth of a 4-byte all_reduce's own time. Two digests colliding
  // would leave a stale op or shape in the text of a message, never in the validation.
  const std::uint64_t statics = static_digest(fp);
  Fingerprint& entry = mine.posted[n % kRing];
  if (mine.statics[n % kRing] != statics) {
    entry = fp;
    mine.statics[n % kRing] = statics;
  } else {
    entry.sequence = fp.sequence;
  }
  // Set only after a mismatch; a relaxed load of the rank's own line otherwise.
  if (mine.mismatched[n % kRing].load(std::memory_order_relaxed))
    mine.mismatched[n % kRing].store(false, std::memory_order_relaxed);
  mine.published.store(n + 1, std::memory_order_release);
  const std::uint64_t d = digest(statics, fp.sequence);
  if (stage != nullptr) std::memcpy(staging(rank, p, stage_bytes), stage, stage_bytes);
  me.digest[p & 1] = d;
  me.phase.store(p);  // seq_cst: publishes the above; ordered before the reads of withdraw_phase_
  wake();
  meet(rank, p, fp, timeout, /*may_give_up=*/true);
  for (int j = 0; j < size_; ++j)
    if (flags_[j].digest[p & 1] != d) {
      // Later calls complete with higher sequence numbers; this one must not count as completed.
      mine.mismatched[n % kRing].store(true, std::memory_order_relaxed);
      throw InvalidArgumentError(mismatch(n));
    }
}

void Rendezvous::sync(int rank, const Fingerprint& fp, std::chrono::milliseconds timeout) {
  Flag& me = flags_[rank];
  const std::uint64_t p = me.phase.load(std::memory_order_relaxed) + 1;
  me.phase.store(p);
  wake();
  meet(rank, p, fp, timeout, /*may_give_up=*/false);
}

bool Rendezvous::all_arrived(std::uint64_t p, int* from) const {
  for (; *from < size_; ++*from)
    if (flags_[*from].phase.load() < p) return false;  // seq_cst: see Flag
  return true;
}

void Rendezvous::wake() {
  if (sleepers_.load() > 0) {  // seq_cst, after the flag's store: a sleeper sees the flag or is seen
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
}

void Rendezvous::meet(int rank, std::uint64_t p, const Fingerprint& fp, std::chrono::milliseconds timeout,
                      bool may_give_up) {
  int from = 0;
  if (may_give_up) {
    spin([&] { return all_arrived(p, &from) || failed_flag_.load(std::memory_order_relaxed); });
    if (!all_arrived(p, &from) || withdraw_phase_.load() >= p) give_up_or_complete(rank, p, fp, timeout);
  } else {
    // The closing phase cannot be given up: every rank is past the opening phase and only moves
    // memory, so all will arrive; leaving early would let peers still write into this caller's
    // buffers after it got an error. Failures are reported by the next call.
    spin([&] { return all_arrived(p, &from); });
    if (!all_arrived(p, &from)) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1);
      auto done = [&] { return all_arrived(p, &from); };
      if (!cv_.wait_until(lock, deadline_after(std::chrono::steady_clock::now(), timeout), done)) {
        CHORUS_LOG(ERROR) << name_ << ": rank " << rank << " has waited " << timeout.count()
                          << " ms in the closing phase of " << fp.to_string()
                          << " for peers still moving data; waiting on (leaving would let them write "
                          << "into buffers its caller may free)";
        cv_.wait(lock, done);
      }
      sleepers_.fetch_sub(1);
    }
  }
  // Rank 0 readies the chunk counters of the next phase: every rank has left phase p-1, the last
  // one that may have used them, and nobody completes phase p+1 before rank 0 arrives in it.
  if (rank == 0) {
    Chunks& next = chunks_[(p + 1) & 1];
    // Written only when used (the chunked path): an unchanged line stays in every cache.
    if (next.next.load(std::memory_order_relaxed) != 0) next.next.store(0, std::memory_order_relaxed);
    if (next.done.load(std::memory_order_relaxed) != 0) next.done.store(0, std::memory_order_relaxed);
  }
}

void Rendezvous::give_up_or_complete(int rank, std::uint64_t p, const Fingerprint& fp,
                                     std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  // Under mu_ the flags are final unless they rise (withdrawals hold mu_): a complete phase stays so.
  int from = 0;
  sleepers_.fetch_add(1);
  cv_.wait_until(lock, deadline_after(std::chrono::steady_clock::now(), timeout), [&] {
    from = 0;
    return all_arrived(p, &from) || failed_;
  });
  sleepers_.fetch_sub(1);
  from = 0;
  if (all_arrived(p, &from)) return;
  // Withdraw, unless a rank that saw every flag before this store completes the phase: then the
  // re-check below sees every flag too (Flag's comment), and this rank completes with it.
  if (withdraw_phase_.load() < p) withdraw_phase_.store(p);
  from = 0;
  if (all_arrived(p, &from)) return;
  if (withdrawal_hook_) withdrawal_hook_();
  flags_[rank].phase.store(p - 1);
  if (failed_) {
    if (failed_by_timeout_) {
      const std::string message = str_cat(name_, ": ", failure_);
      throw DeadlineExceededError(message + record_flight(lock, rank, fp));
    }
    throw AbortedError(str_cat(name_, ": ", fp.to_string(), " on rank ", rank, " aborted: ", failure_));
  }
  // Our own deadline passed: fail the group, naming who never came.
  std::string missing;
  for (int r = 0; r < size_; ++r)
    if (r != rank && flags_[r].phase.load() < p) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  failed_ = true;
  failed_flag_ = true;
  failed_by_timeout_ = true;
  failure_ = str_cat(fp.to_string(), " timed out after ", timeout.count(), " ms waiting for rank(s) [", missing,
                     "] of ", size_, ". Last completed collectives: ", history_locked(),
                     ". A replica is stuck, died, or called a different sequence of collectives.");
  cv_.notify_all();
  CHORUS_LOG(ERROR) << name_ << ": " << failure_;
  const std::string message = str_cat(name_, ": ", failure_);
  throw DeadlineExceededError(message + record_flight(lock, rank, fp));
}

std::string Rendezvous::record_flight(std::unique_lock<std::mutex>& lock, int rank, const Fingerprint& fp) {
  if (env::flight_record_dir().empty()) return "";
  FlightRecord r;
  r.rank = rank;
  r.size = size_;
  r.communicator = name_;
  r.backend = "in_process";
  r.trigger = "timeout";
  r.error = str_cat(name_, ": ", failure_);
  r.failing_call = {fp.to_string(), fp.sequence, 0, 0};
  for (const Fingerprint& done : completed_locked(rank, kRing))
    r.completed.push_back({done.to_string(), done.sequence, 0, 0});
  for (int q = 0; q < size_; ++q) {
    if (q == rank) continue;
    auto& calls = r.peers[q];
    for (const Fingerprint& done : completed_locked(q, kRing)) calls.push_back(done.to_string());
  }
  lock.unlock();  // the file is written without holding up the other ranks
  return flight_record_note(write_flight_record(r));
}

std::string Rendezvous::mismatch(std::uint64_t post) const {
  // Every rank reads the same posted fingerprints (a peer posts at most once more before this rank
  // arrives in the next phase, into another of its kRing entries), so every rank throws the same
  // message.
  const Fingerprint& first = part_[0].posted[post % kRing];
  int r = 1;
  while (r < size_ - 1 && part_[r].posted[post % kRing] == first) ++r;
  return str_cat(name_, ": participants called different collectives: rank 0 called ", first.to_string(), " but rank ",
                 r, " called ", part_[r].posted[post % kRing].to_string(),
                 ". Every replica must call the same collectives in the same order with the same shapes and dtypes.");
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

void Rendezvous::finish_work(int rank, std::size_t count, std::size_t total) {
  if (count == 0) return;
  // seq_cst, paired with sleepers_: a waiter either sees the last chunk done or is seen and woken.
  Chunks& c = chunks_[flags_[rank].phase.load(std::memory_order_relaxed) & 1];
  if (c.done.fetch_add(count) + count == total) wake();
}

void Rendezvous::wait_work(int rank, const Fingerprint& fp, std::size_t total, std::chrono::milliseconds timeout) {
  const Chunks& c = chunks_[flags_[rank].phase.load(std::memory_order_relaxed) & 1];
  auto done = [&] { return c.done.load() >= total; };
  spin(done);
  if (done()) return;
  std::unique_lock<std::mutex> lock(mu_);
  sleepers_.fetch_add(1);
  if (!cv_.wait_until(lock, deadline_after(std::chrono::steady_clock::now(), timeout), done)) {
    CHORUS_LOG(ERROR) << name_ << ": rank " << rank << " has waited " << timeout.count() << " ms for peers to finish "
                      << "their chunks of " << fp.to_string() << "; waiting on (leaving would let them write into "
                      << "buffers its caller may free)";
    cv_.wait(lock, done);
  }
  sleepers_.fetch_sub(1);
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

std::vector<Fingerprint> Rendezvous::completed_locked(int r, std::size_t max) const {
  const Participant& pr = part_[r];
  const std::uint64_t posts = pr.published.load(std::memory_order_acquire);
  const std::uint64_t next = pr.completed.load(std::memory_order_acquire);  // and the marks before it
  std::vector<Fingerprint> out;
  // Newest first through its posts, keeping those it completed; returned oldest first. Entry
  // `posts` may be being written (Participant's comment): only those below it are read.
  for (std::uint64_t i = posts; i > 0 && posts - i < kRing - 1 && out.size() < max; --i) {
    const Fingerprint& fp = pr.posted[(i - 1) % kRing];
    if (fp.sequence >= next || pr.mismatched[(i - 1) % kRing].load(std::memory_order_relaxed)) continue;
    out.push_back(fp);
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::string Rendezvous::history_locked() const {
  std::string s;
  for (int r = 0; r < size_; ++r) {
    s += (r ? "; " : "") + str_cat("rank ", r, ": ");
    std::string mine;
    for (const Fingerprint& fp : completed_locked(r, kHistory)) mine += (mine.empty() ? "" : ", ") + fp.to_string();
    s += mine.empty() ? "none" : mine;
  }
  return s;
}

}  // namespace chorus::collective
