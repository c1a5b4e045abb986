// The meeting point of the participants of an in-process communicator (replica threads).
//
// A Rendezvous is shared by the `size` Communicator objects of one group. Each collective passes
// through one or more phases; a phase is a barrier with a timeout, abort, and (for the first
// phase of a collective) fingerprint validation done once by the last participant to arrive:
//
//   arrive(rank, fp, slot, timeout)   post this rank's buffers, wait for all, check fingerprints
//   sync(rank, fp, timeout)           a plain barrier between phases of the same collective
//
// Errors (thrown by both):
//   InvalidArgumentError   fingerprints differ: every participant gets the same message naming
//                          the ranks and both fingerprints (the group stays usable);
//   DeadlineExceededError  someone did not arrive in time: names the missing ranks, the
//                          collective and each rank's last completed collectives; the group is
//                          failed from then on;
//   AbortedError           the group failed earlier (timeout, abort()): names who and why.
//
// Thread-safety: all methods are thread-safe. slot(r) may be read by any participant between the
// arrive() that posted it and the next phase that ends the collective.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "collective/fingerprint.h"

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
  const Slot& slot(int rank) const { return slots_[rank]; }

  // Records that `rank` completed `fp` (for timeout messages).
  void completed(int rank, const Fingerprint& fp);
  // Fails the group: current and later waits raise AbortedError naming `rank` and `reason`.
  void abort(int rank, const std::string& reason);
  // Throws AbortedError if the group has failed.
  void check_usable() const;

 private:
  void wait_phase(int rank, const Fingerprint& fp, std::chrono::milliseconds timeout, bool validate);
  std::string history_locked() const;

  const int size_;
  const std::string name_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::uint64_t generation_ = 0;
  // Mirrors generation_ and failed_ for waiters that spin briefly before sleeping on cv_.
  std::atomic<std::uint64_t> spin_generation_{0};
  std::atomic<bool> spin_failed_{false};
  int arrived_ = 0;
  std::vector<char> here_;
  std::vector<Fingerprint> posted_;
  std::vector<Slot> slots_;
  std::string verdict_;  // mismatch message of the last completed validating phase ("" = match)
  bool failed_ = false;
  bool failed_by_timeout_ = false;
  std::string failure_;
  std::vector<std::deque<std::string>> history_;  // last completed collectives per rank
};

}  // namespace chorus::collective
