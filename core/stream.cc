#include "core/stream.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/logging.h"

namespace chorus {
namespace {

// Completed by the CPU stream's worker when it reaches the event in its queue.
class CpuEvent final : public Event {
 public:
  void complete() {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  }
  void synchronize() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
  }
  bool query() override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

class GpuEvent final : public Event {
 public:
  explicit GpuEvent(int ordinal) : ordinal_(ordinal), handle_(gpu::create_event(ordinal)) {}
  ~GpuEvent() override { gpu::destroy_event(ordinal_, handle_); }
  void synchronize() override { gpu::synchronize_event(ordinal_, handle_); }
  bool query() override { return gpu::event_done(ordinal_, handle_); }
  int ordinal() const { return ordinal_; }
  gpu::EventHandle handle() const { return handle_; }

 private:
  int ordinal_;
  gpu::EventHandle handle_;
};

class CpuStream final : public Stream {
 public:
  explicit CpuStream(std::string name) : name_(std::move(name)) {}
  ~CpuStream() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      cv_.notify_all();
    }
    if (worker_.joinable()) worker_.join();
    if (error_) CHORUS_LOG(WARNING) << name_ << " destroyed with an unreported error";
  }

  void synchronize() override {
    auto event = record_event();
    event->synchronize();
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::swap(error, error_);
    }
    if (error) std::rethrow_exception(error);
  }

  std::shared_ptr<Event> record_event() override {
    auto event = std::make_shared<CpuEvent>();
    push(Task{[event] { event->complete(); }, /*always=*/true});
    return event;
  }

  void wait_event(const std::shared_ptr<Event>& event) override {
    CHORUS_REQUIRE(event != nullptr, InvalidArgumentError, name_, ": wait_event(nullptr)");
    // Waiting always runs, even in the error state: skipping it could let later work overtake.
    push(Task{[event] { event->synchronize(); }, /*always=*/true});
  }

  void enqueue_host(std::function<void()> fn) override { push(Task{std::move(fn), false}); }
  gpu::StreamHandle native_handle() const override { return nullptr; }
  int gpu_ordinal() const override { return -1; }
  const std::string& name() const override { return name_; }

 private:
  struct Task {
    std::function<void()> fn;
    bool always;  // events and waits run even when the stream is in the error state
  };

  void push(Task task) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!worker_.joinable()) worker_ = std::thread([this] { run(); });
    queue_.push_back(std::move(task));
    cv_.notify_one();
  }

  void run() {
    for (;;) {
      Task task;
      bool skip = false;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping and drained
        task = std::move(queue_.front());
        queue_.pop_front();
        skip = error_ != nullptr && !task.always;
      }
      if (skip) continue;
      try {
        task.fn();
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
      }
    }
  }

  std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  std::exception_ptr error_;
  bool stopping_ = false;
  std::thread worker_;
};

class GpuStream final : public Stream {
 public:
  GpuStream(int ordinal, std::string name)
      : ordinal_(ordinal), name_(std::move(name)), handle_(gpu::create_stream(ordinal)) {}
  ~GpuStream() override {
    try {
      gpu::synchronize_stream(ordinal_, handle_);
    } catch (const Error& e) {
      CHORUS_LOG(ERROR) << name_ << ": error while draining at destruction: " << e.what();
    }
    gpu::destroy_stream(ordinal_, handle_);
  }
  void synchronize() override { gpu::synchronize_stream(ordinal_, handle_); }
  std::shared_ptr<Event> record_event() override {
    auto event = std::make_shared<GpuEvent>(ordinal_);
    gpu::record_event(ordinal_, event->handle(), handle_);
    return event;
  }
  void wait_event(const std::shared_ptr<Event>& event) override {
    CHORUS_REQUIRE(event != nullptr, InvalidArgumentError, name_, ": wait_event(nullptr)");
    if (auto* g = dynamic_cast<GpuEvent*>(event.get())) {
      // cudaStreamWaitEvent works across devices: the event's device need not be ours.
      gpu::stream_wait_event(ordinal_, handle_, g->handle());
    } else {
      event->synchronize();  // host work: CUDA cannot wait on it, so the caller does
    }
  }
  void enqueue_host(std::function<void()> fn) override {
    synchronize();
    fn();
  }
  gpu::StreamHandle native_handle() const override { return handle_; }
  int gpu_ordinal() const override { return ordinal_; }
  const std::string& name() const override { return name_; }

 private:
  int ordinal_;
  std::string name_;
  gpu::StreamHandle handle_;
};

}  // namespace

std::unique_ptr<Stream> make_cpu_stream(std::string name) { return std::make_unique<CpuStream>(std::move(name)); }
std::unique_ptr<Stream> make_gpu_stream(int ordinal, std::string name) {
  return std::make_unique<GpuStream>(ordinal, std::move(name));
}

}  // namespace chorus
