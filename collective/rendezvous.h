// The meeting point of the participants of an in-process communicator (replica threads).
//
// A Rendezvous is shared by the `size` Communicator objects of one group. Each collective passes
// through one or more phases; a phase is a barrier with a timeout, abort, and (for the first
// phase of a collective) fingerprint validation done once by the last participant to arrive:
//
//   arrive(rank, fp, slot, timeout)   post this rank's buffers, wait for all, check fingerprints
//   sync(rank, fp, timeout)           the closing barrier of a collective: never abandoned (after
//                                     `timeout` it logs an error and keeps waiting, since peers
//                                     may still write into this rank's buffers); never throws
//   work() / finish_work / wait_work  instead of sync(): a closing wait on a chunk counter, for
//                                     work handed out at run time (the shared-memory all_reduce)
//
// Errors (thrown by arrive; sync and wait_work never throw):
//   InvalidArgumentError   fingerprints differ: every participant gets the same message naming
//                          the ranks and both fingerprints (the group stays usable);
//   DeadlineExceededError  someone did not arrive in time: names the missing ranks, the
//                          collective and each rank's last completed collectives; the group is
//                          failed from then on;
//   AbortedError           the group failed earlier (timeout, abort()): names who and why.
//
// Thread-safety: all methods are thread-safe. slot(r) may be read by any participant between the
// arrive() that posted it and the next phase that ends the collective (with wait_work: only while
// the reader holds an unfinished chunk).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
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

  void arrive(int rank, const Fingerprint& fp, const Slot& slot, std::chrono::milliseconds timeout);
  void sync(int rank, const Fingerprint& fp, std::chrono::milliseconds timeout);
  const Slot& slot(int rank) const { return part_[rank].slot; }
  // Work shared by the participants of the current collective, for backends that split it into
  // `total` chunks handed out at run time instead of closing with sync(): work() hands out chunk
  // indices (fetch_add), finish_work(count, total) records `count` chunks done by the caller (a
  // release), wait_work(...) blocks until all `total` are done (an acquire). Both counters are
  // reset by the last arriver of arrive(), when every participant has left the previous
  // collective. Slots may be read by a participant only while it holds an unfinished chunk:
  // peers leave the collective (and may post new slots) as soon as all chunks are done.
  // wait_work is never abandoned, like sync(): after `timeout` it logs and keeps waiting.
  std::atomic<std::size_t>& work() { return work_; }
  void finish_work(std::size_t count, std::size_t total);
  void wait_work(int rank, const Fingerprint& fp, std::size_t total, std::chrono::milliseconds timeout);

  // Staging for collectives small enough to be copied whole (the shared-memory all_reduce of at
  // most kStagingBytes): before arrive(), a rank copies its input into staging(rank, phase()),
  // where phase() is read just before (it cannot change until this rank arrives); once arrive()
  // returns, every rank's staging(j, that phase) holds j's input, and each rank reduces them all
  // into its own output. No closing wait is needed: the buffers alternate between even and odd
  // phases, and a rank writes the buffer of phase p only after phase p-1 completed, that is after
  // every rank has left phase p-2, the last one that used it. One meeting per call instead of two
  // (arrive and the chunks' wait): what makes a 4-byte all_reduce of 2 threads take a third of a
  // microsecond. Each buffer is 64-byte aligned and its own cache lines. 2 KiB: from 4 KiB on, the
  // chunked path (each rank reduces a share) was faster on the 2-core VM (bench_allreduce).
  static constexpr std::size_t kStagingBytes = 2048;
  std::uint32_t phase() const { return generation(); }
  void* staging(int rank, std::uint32_t phase) {
    return staging_[0].bytes +
           (static_cast<std::size_t>(phase & 1) * static_cast<std::size_t>(size_) + static_cast<std::size_t>(rank)) *
               kStagingBytes;
  }

  // Records that `rank` completed `fp` (for timeout messages). One relaxed store: no lock.
  void completed(int rank, const Fingerprint& fp) {
    part_[rank].completed.store(fp.sequence + 1, std::memory_order_relaxed);
  }
  // Fails the group: current and later waits raise AbortedError naming `rank` and `reason`.
  void abort(int rank, const std::string& reason);
  // Throws AbortedError if the group has failed.
  void check_usable() const;

 private:
  void wait_phase(int rank, const Fingerprint& fp, std::chrono::milliseconds timeout, bool validate);
  std::uint32_t generation() const { return static_cast<std::uint32_t>(state_.load() >> 32); }
  // Takes back this rank's arrival in generation `gen`; false when the phase completed (or is
  // completing), in which case the caller must go on as if it had succeeded.
  bool withdraw(int rank, std::uint32_t gen);
  // Waits a little for `done()` before the caller sleeps on the condition variable.
  template <typename Done>
  void spin(const Done& done) const;
  void wait_closing(int rank, const Fingerprint& fp, std::chrono::milliseconds timeout);
  // By the last arriver: reset the arrivals, open generation gen + 1, wake sleepers if any.
  void open_next(std::uint32_t gen);
  std::string history_locked() const;

  const int size_;
  const std::string name_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Layout: what every participant writes on every call (state_, its own Participant) and what
  // is only read on the fast path (sleepers_, failed_flag_) live on separate cache lines; sharing
  // one made each call move it between cores several times.
  //
  // Generation (high 32 bits) and arrivals in it (low 32 bits) in one word, so that a waiter
  // giving up (timeout, abort) can withdraw its arrival only if the phase has not completed:
  // completing and giving up exclude each other, and nobody leaves a phase the others went past.
  alignas(64) std::atomic<std::uint64_t> state_{0};
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<bool> failed_flag_{false};
  alignas(64) std::atomic<std::size_t> work_{0};
  std::atomic<std::size_t> work_done_{0};
  // What one participant posts for a phase, on cache lines of its own.
  struct alignas(64) Participant {
    Slot slot;
    Fingerprint posted;
    std::atomic<std::uint32_t> here{0};       // 1 + the phase it last arrived in (for timeout messages)
    std::atomic<std::uint64_t> completed{0};  // 1 + the sequence number of its last completed call
  };
  std::unique_ptr<Participant[]> part_;
  // For timeout messages, the last completed collectives of every rank, without a lock on the hot
  // path: the last arriver of each validating phase (one per collective) copies the collective's
  // fingerprint into a ring of the group's last kAgreed (in place: no allocation once warm), and
  // each rank records only the sequence number it completed (Participant::completed). A rank's
  // history is the ring's entries below its mark; ranks are at most one collective apart, so the
  // ring holds the last kHistory of each. Written before the phase opens, read only by a rank that timed out (the
  // phase cannot complete then), so no reader meets a writer.
  static constexpr std::size_t kHistory = 3;
  static constexpr std::size_t kAgreed = kHistory + 2;
  std::array<Fingerprint, kAgreed> agreed_;
  std::uint64_t agreed_count_ = 0;  // validating phases completed so far
  struct alignas(64) StagingLine {
    unsigned char bytes[64];
  };
  std::unique_ptr<StagingLine[]> staging_;  // 2 × size × kStagingBytes
  alignas(64) std::string verdict_;         // mismatch message of the last completed validating phase ("" = match)
  bool failed_ = false;
  bool failed_by_timeout_ = false;
  std::string failure_;
};

}  // namespace chorus::collective
