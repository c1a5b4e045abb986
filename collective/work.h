// The two kinds of Work backends return: already completed (host backends finish before
// returning), and completing with device work (an event recorded after the collective's kernels).
#pragma once

#include <memory>
#include <string>

#include "collective/communicator.h"
#include "core/stream.h"

namespace chorus::collective {

class CompletedWork final : public Work {
 public:
  explicit CompletedWork(std::string description) : description_(std::move(description)) {}
  void wait(std::chrono::milliseconds) override {}
  bool is_completed() const override { return true; }
  const std::string& description() const override { return description_; }

 private:
  std::string description_;
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
