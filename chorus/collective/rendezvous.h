// The meeting point of the participants of an in-process communicator (replica threads).
//
// A Rendezvous is shared by the `size` Communicator objects of one group. Each collective passes
// through one or more phases; a phase is a barrier with a timeout, abort, and (for the first
// phase of a collective) fingerprint validation, done by every participant on its own:
//
//   arrive(rank, fp, slot, timeout)   post this rank's buffers, wait for all, check fingerprints
//   sync(rank, fp, timeout)           the closing barrier of a collective: never abandoned (after
//                                     `timeout` it logs an error and keeps waiting, since peers
//                                     may still write into this rank's buffers); never throws
//   work() / finish_work / wait_work  instead of sync(): a closing wait on a chunk counter, for
//                                     work handed out at run time (the shared-memory all_reduce)
//
// Fingerprints are compared by a 64-bit digest of every field (sequence number included); the
// full fingerprints are read only to name both calls when digests differ. Two different calls
// with equal digests would go unnoticed: a chance of 2^-64 per pair.
//
// Errors (thrown by arrive; sync and wait_work never throw):
//   InvalidArgumentError   fingerprints differ: every participant gets the same message naming
//                          the ranks and both fingerprints (the group stays usable);
//   DeadlineExceededError  someone did not arrive in time: names the missing ranks, the
//                          collective and each rank's last completed collectives; the group is
//                          failed from then on;
//   AbortedError           the group failed earlier (timeout, abort()): names who and why.
// A phase completes for every participant or for none: a rank that gives up withdraws its
// arrival unless the phase has completed, and then goes on as if it had not given up.
//
// Thread-safety: all methods are thread-safe; a rank's own methods are called by one thread at a
// time. slot(r) may be read by any participant between the arrive() that posted it and the next
// phase that ends the collective (with wait_work: only while the reader holds an unfinished chunk).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <chorus/collective/fingerprint.h>

namespace chorus::collective {

// What a participant shares for one collective.
struct Slot {
  const void* input = nullptr;
  void* output = nullptr;
  const void* context = nullptr;  // backend-specific, owned by the poster until the collective ends
};

class Rendezvous {
 public:
  Rendezvous(int size, std::string name);
  int size() const { return size_; }
  const std::string& name() const { return name_; }

  // `stage`: if not null, arrive() copies `stage_bytes` (at most kStagingBytes) from it into
  // staging(rank, next_phase(rank), stage_bytes) right before raising the flag, so that data,
  // digest and flag reach the flag's cache line in one burst (peers poll that line: every pause
  // between two writes to it lets a poll take it back, and the next write waits for it again).
  // Staging lines of their own are PREFETCHW'ed on entry (a hint; a no-op where unsupported), so
  // that the peers' copies from two phases ago are invalidated while the digest is computed.
  void arrive(int rank, const Fingerprint& fp, const Slot& slot, std::chrono::milliseconds timeout,
              const void* stage = nullptr, std::size_t stage_bytes = 0);
  void sync(int rank, const Fingerprint& fp, std::chrono::milliseconds timeout);
  const Slot& slot(int rank) const { return part_[rank].slot; }
  // Work shared by the participants of the current collective, for backends that split it into
  // `total` chunks handed out at run time instead of closing with sync(): work(rank) hands out
  // chunk indices (fetch_add), finish_work(rank, count, total) records `count` chunks done by the
  // caller (a release), wait_work(...) blocks until all `total` are done (an acquire). The counters
  // belong to the phase of the caller's last arrive() (two sets, for even and odd phases); rank 0
  // resets a set when it completes the phase before the next one that uses it, when every
  // participant has left the last one that did. Slots may be read by a participant only while it
  // holds an unfinished chunk: peers leave the collective (and may post new slots) as soon as all
  // chunks are done. wait_work is never abandoned, like sync(): after `timeout` it logs and keeps
  // waiting.
  std::atomic<std::size_t>& work(int rank) {
    return chunks_[flags_[rank].phase.load(std::memory_order_relaxed) & 1].next;
  }
  void finish_work(int rank, std::size_t count, std::size_t total);
  void wait_work(int rank, const Fingerprint& fp, std::size_t total, std::chrono::milliseconds timeout);

  // Staging for collectives small enough to be copied whole (the shared-memory all_reduce of at
  // most kStagingBytes): arrive() copies a rank's input into staging(rank, next_phase(rank),
  // bytes); once it returns, every rank's staging(j, that phase, bytes) holds j's input, and each
  // rank reduces them all into its own output. No closing wait is needed: the buffers alternate
  // between even and odd phases, and a rank writes the buffer of phase p only after it completed
  // phase p-1, that is after every rank has left phase p-2, the last one that used it. One meeting
  // per call instead of two (arrive and the chunks' wait).
  // Up to kInlineBytes live on the rank's arrival flag's own cache line, so that a peer fetches
  // flag, digest and data in one transfer (a scalar loss or a metric's count); larger inputs get
  // 64-byte aligned buffers of their own cache lines. 2 KiB: from 4 KiB on, the chunked path
  // (each rank reduces a share) was faster on the 2-core VM (bench_allreduce).
  static constexpr std::size_t kStagingBytes = 2048;
  static constexpr std::size_t kInlineBytes = 16;
  std::uint64_t next_phase(int rank) const { return flags_[rank].phase.load(std::memory_order_relaxed) + 1; }
  void* staging(int rank, std::uint64_t phase, std::size_t bytes) {
    if (bytes <= kInlineBytes) return flags_[rank].data[phase & 1];
    return staging_[0].bytes +
           (static_cast<std::size_t>(phase & 1) * static_cast<std::size_t>(size_) + static_cast<std::size_t>(rank)) *
               kStagingBytes;
  }

  // Records that `rank` completed `fp` (for timeout messages). One store, no lock; a release, so
  // that a reader who sees it also sees the mismatch marks of the calls before it (a plain store
  // on x86).
  void completed(int rank, const Fingerprint& fp) {
    part_[rank].completed.store(fp.sequence + 1, std::memory_order_release);
  }
  // Fails the group: current and later waits raise AbortedError naming `rank` and `reason`.
  void abort(int rank, const std::string& reason);
  // Throws AbortedError if the group has failed.
  void check_usable() const;
  // For tests: runs inside a withdrawal, under the mutex, after the withdrawing rank's last look at
  // the flags and before it lowers its own (the window a completing rank must not slip through).
  // Set before the group is used.
  void set_withdrawal_hook(std::function<void()> hook) { withdrawal_hook_ = std::move(hook); }

 private:
  // Waits until every rank arrived in phase p. Closing phases (`may_give_up` false) wait for ever;
  // opening ones give up at the deadline or when the group fails, unless the phase completed.
  void meet(int rank, std::uint64_t p, const Fingerprint& fp, std::chrono::milliseconds timeout, bool may_give_up);
  // The slow end of meet(): sleeps until the phase completes, the deadline passes or the group
  // fails; returns if the phase completed, else withdraws this rank's arrival and throws.
  void give_up_or_complete(int rank, std::uint64_t p, const Fingerprint& fp, std::chrono::milliseconds timeout);
  // True when every rank's flag reached phase p, checking from rank *from on (advanced past the
  // ranks seen there: a flag leaves p only by a withdrawal, which the caller checks for after).
  bool all_arrived(std::uint64_t p, int* from) const;
  // Wakes waiters sleeping on the condition variable, if any (after a flag or counter moved).
  void wake();
  // Waits a little for `done()` before the caller sleeps on the condition variable.
  template <typename Done>
  void spin(const Done& done) const;
  // The message every rank throws when the fingerprints of validating arrival `post` differ.
  std::string mismatch(std::uint64_t post) const;
  std::string history_locked() const;
  // Rank r's last completed calls (at most `max`, at most kRing - 1), oldest first. Under mu_.
  std::vector<Fingerprint> completed_locked(int r, std::size_t max) const;
  // The flight record of `rank`'s timed-out call `fp` (collective/flight_record.h), collected under
  // mu_ (held by `lock`), written after unlocking it; returns the note for the error message.
  std::string record_flight(std::unique_lock<std::mutex>& lock, int rank, const Fingerprint& fp);

  const int size_;
  const std::string name_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Arrival: each rank raises its own flag (the phase number) on a cache line of its own, and
  // waits until every flag reached that phase. Against one shared counter with a last arriver
  // (this file until 2026-11-27), nobody writes a line another rank writes, and no rank waits for
  // a last arriver that first has to read everyone's lines: a 4-byte all_reduce of two threads
  // takes about one cache-line exchange each way.
  //
  // Giving up (timeout, abort) must never split the group (one rank completes the phase, and
  // touches the buffers of a peer that left with an error). Withdrawals happen under mu_ and
  // first raise withdraw_phase_ (seq_cst); a rank that saw every flag then reads
  // withdraw_phase_ (seq_cst), and re-decides under mu_ when a withdrawal of its phase began.
  // Either the completer's read comes first, and the withdrawer's later reads of the flags see
  // every arrival and it completes too, or the completer sees the withdrawal and waits for its
  // outcome. Flags are lowered only by withdrawals (by one: phase p-1), so a rank that raised
  // its flag to p stays "arrived" for every reader of phase p.
  struct alignas(64) Flag {
    std::atomic<std::uint64_t> phase{0};              // the last phase this rank arrived in (0: none yet)
    std::uint64_t digest[2] = {0, 0};                 // its fingerprint's digest for validating phase p at [p & 1]
    alignas(16) unsigned char data[2][kInlineBytes];  // staging(rank, p, bytes <= kInlineBytes) at [p & 1]
  };
  static_assert(sizeof(Flag) == 64);
  std::unique_ptr<Flag[]> flags_;
  // Read on the fast path, written only when something goes wrong.
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<bool> failed_flag_{false};
  std::atomic<std::uint64_t> withdraw_phase_{0};  // highest phase a withdrawal began in
  struct alignas(64) Chunks {
    std::atomic<std::size_t> next{0};
    std::atomic<std::size_t> done{0};
  };
  Chunks chunks_[2];  // for even and odd phases
  // What one participant posts, on cache lines of its own. `posted` keeps its last kRing
  // fingerprints ([post % kRing]): a peer compares them only when the digests differ (to name
  // both calls), or reads them for a timeout message; a rank is never more than one post ahead
  // of any reader, so the entries read are never the one being written.
  static constexpr std::size_t kHistory = 3;
  // A rank's own current call is posted but not completed: the completed ones are looked for among
  // the kRing - 1 entries below `published` (timeout messages show the last kHistory of them, flight
  // records all; fewer when some failed validation), and the one above them may be being written.
  // 16 rather than kHistory + 2 for the flight record (collective/flight_record.h): the same one
  // store per call, a power of two for the index, ~1.5 KB per participant.
  static constexpr std::size_t kRing = 16;
  struct alignas(64) Participant {
    std::uint64_t posts = 0;  // its validating arrivals so far (written and read by itself only)
    Slot slot;
    std::array<Fingerprint, kRing> posted;
    std::array<std::uint64_t, kRing> statics{};         // the digest of each entry's fields but its sequence
    std::array<std::atomic<bool>, kRing> mismatched{};  // the entry's call failed validation: not "completed"
    std::atomic<std::uint64_t> published{0};            // posts visible to timeout messages
    std::atomic<std::uint64_t> completed{0};            // 1 + the sequence number of its last completed call
  };
  std::unique_ptr<Participant[]> part_;
  struct alignas(64) StagingLine {
    unsigned char bytes[64];
  };
  std::unique_ptr<StagingLine[]> staging_;  // 2 × size × kStagingBytes
  std::function<void()> withdrawal_hook_;
  bool failed_ = false;
  bool failed_by_timeout_ = false;
  std::string failure_;
};

}  // namespace chorus::collective
