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
  explicit CompletedWork(Fingerprint fp, std::string prefix = "") : fp_(std::move(fp)), prefix_(std::move(prefix)) {}
  void wait(std::chrono::milliseconds) override {}
  bool is_completed() const override { return true; }
  const std::string& description() const override {
    std::call_once(formatted_, [this] { description_ = prefix_ + fp_.to_string(); });
    return description_;
  }

 private:
  Fingerprint fp_;
  std::string prefix_;
  mutable std::once_flag formatted_;
  mutable std::string description_;
};

class EventWork final : public Work {
 public:
  EventWork(std::shared_ptr<Event> done, std::string description)
      : done_(std::move(done)), description_(std::move(description)) {}
  // Polls the event (so the timeout is honoured, unlike a blocking event synchronize).
  void wait(std::chrono::milliseconds timeout) override;
  bool is_completed() const override { return done_->query(); }
  const std::string& description() const override { return description_; }
  std::shared_ptr<Event> event() const override { return done_; }

 private:
  std::shared_ptr<Event> done_;
  std::string description_;
};

}  // namespace chorus::collective
