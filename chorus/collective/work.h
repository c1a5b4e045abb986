// The two kinds of Work backends return: already completed (host backends finish before
// returning), and completing with device work (an event recorded after the collective's kernels).
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include <chorus/collective/communicator.h>
#include <chorus/collective/fingerprint.h>
#include <chorus/core/stream.h>

namespace chorus::collective {

class CompletedWork final : public Work {
 public:
  // The description is formatted from `fp` only when asked for: host collectives of a few bytes
  // take about a microsecond, and formatting a string each time cost a third of it.
  // description(): `prefix` followed by fp.to_string().
  explicit CompletedWork(const Fingerprint& fp, std::string prefix = "") : fp_(fp), prefix_(std::move(prefix)) {}
  void wait(std::chrono::milliseconds) override {}
  void wait() override {}
  bool is_completed() const override { return true; }
  const std::string& description() const override;

 private:
  friend class CompletedWorkSlot;
  Fingerprint fp_;
  std::string prefix_;
  mutable std::mutex mu_;  // guards description_, formatted on the first description()
  mutable std::string description_;
};

// The CompletedWork of a communicator's calls, reused: when the caller dropped the previous call's
// Work (use count 1: only this slot holds it), the next call rewrites it in place instead of
// allocating one (an allocation and a copy of the fingerprint's shape: a fifth of a 4-byte
// shared-memory all_reduce). A caller still holding an earlier Work gets a fresh one, so a Work
// never changes under its holder. Used by one thread at a time (the communicator's).
class CompletedWorkSlot {
 public:
  explicit CompletedWorkSlot(std::string prefix = "") : prefix_(std::move(prefix)) {}
  std::shared_ptr<Work> get(const Fingerprint& fp);

 private:
  std::string prefix_;
  std::shared_ptr<CompletedWork> work_;
};

class EventWork final : public Work {
 public:
  EventWork(std::shared_ptr<Event> done, std::string description)
      : done_(std::move(done)), description_(std::move(description)) {}
  // Polls the event (so the timeout is honoured, unlike a blocking event synchronize).
  using Work::wait;
  void wait(std::chrono::milliseconds timeout) override;
  bool is_completed() const override { return done_->query(); }
  const std::string& description() const override { return description_; }
  std::shared_ptr<Event> event() const override { return done_; }

 private:
  std::shared_ptr<Event> done_;
  std::string description_;
};

}  // namespace chorus::collective
