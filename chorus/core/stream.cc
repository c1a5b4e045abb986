#include <chorus/core/stream.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include <chorus/core/error.h>
#include <chorus/core/logging.h>

namespace chorus {
namespace {

// Who serves a CPU stream, so waits that could only deadlock are refused.
struct WorkerIdentity {
  std::atomic<std::thread::id> id{};
  std::string stream_name;
};

[[noreturn]] void throw_self_wait(const WorkerIdentity& w) {
  throw FailedPreconditionError(
      w.stream_name +
      ": work running on this stream waits for the stream itself (e.g. reads a tensor of the same "
      "device inside enqueue_host); that can never finish. Read the data before enqueueing, or enqueue the "
      "follow-up work instead of waiting.");
}

// Completed by the CPU stream's worker when it reaches the event in its queue.
class CpuEvent final : public Event {
 public:
  explicit CpuEvent(std::shared_ptr<const WorkerIdentity> worker) : worker_(std::move(worker)) {}
  void complete() {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  }
  void synchronize() override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!done_ && worker_->id.load() == std::this_thread::get_id()) throw_self_wait(*worker_);
    cv_.wait(lock, [&] { return done_; });
  }
  bool query() override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }

 private:
  std::shared_ptr<const WorkerIdentity> worker_;
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
  explicit CpuStream(std::string name) : state_(std::make_shared<State>()) {
    state_->name = name;
    state_->identity = std::make_shared<WorkerIdentity>();
    state_->identity->stream_name = std::move(name);
  }
  ~CpuStream() override {
    std::thread worker;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->stopping = true;
      state_->cv.notify_all();
      worker = std::move(state_->worker);
    }
    if (!worker.joinable()) return;
    if (worker.get_id() == std::this_thread::get_id()) {
      // The last owner of this stream let go from inside the stream's own work (a buffer captured
      // by a task held the device). The worker owns the shared state, drains the queue and exits.
      worker.detach();
    } else {
      worker.join();
    }
  }

  void synchronize() override {
    // Fast path: nothing queued or running, so nothing to wait for (a thread hand-off costs tens of
    // microseconds; collectives and host reads call this on every use).
    if (state_->pending.load(std::memory_order_acquire) != 0) {
      auto event = record_event();
      event->synchronize();
    }
    // No lock when no task failed (the flag is set before the failed task's pending count drops,
    // so the acquire above sees it): collectives call this on every use of a tensor.
    if (!state_->failed.load(std::memory_order_acquire)) return;
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      std::swap(error, state_->error);
      state_->failed.store(false, std::memory_order_relaxed);
    }
    if (error) std::rethrow_exception(error);
  }

  std::shared_ptr<Event> record_event() override {
    auto event = std::make_shared<CpuEvent>(state_->identity);
    push(Task{[event] { event->complete(); }, /*always=*/true, /*completes_event=*/true});
    return event;
  }

  void wait_event(const std::shared_ptr<Event>& event) override {
    CHORUS_REQUIRE(event != nullptr, InvalidArgumentError, state_->name, ": wait_event(nullptr)");
    // Waiting always runs, even in the error state: skipping it could let later work overtake.
    push(Task{[event] { event->synchronize(); }, /*always=*/true});
  }

  void enqueue_host(std::function<void()> fn) override { push(Task{std::move(fn), false}); }
  void execute_host(std::function<void()> fn) override {
    // Inside this stream's own work, fn is already in stream order.
    if (state_->identity->id.load() != std::this_thread::get_id()) synchronize();  // fast when idle
    fn();
  }
  gpu::StreamHandle native_handle() const override { return nullptr; }
  int gpu_ordinal() const override { return -1; }
  const std::string& name() const override { return state_->name; }

 private:
  struct Task {
    std::function<void()> fn;
    bool always;  // events and waits run even when the stream is in the error state
    // record_event's task: it stops counting as pending before it completes the event, so a
    // thread that synchronized finds the stream idle (execute_host then runs inline).
    bool completes_event = false;
  };
  // Shared by the stream object and its worker thread, so the worker can outlive the object.
  struct State {
    std::string name;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Task> queue;
    std::exception_ptr error;
    bool stopping = false;
    std::thread worker;
    std::shared_ptr<WorkerIdentity> identity;
    std::atomic<int> pending{0};      // tasks pushed and not yet finished (including their captures)
    std::atomic<bool> failed{false};  // error is set (written under mu)
  };

  void push(Task task) {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->worker.joinable()) {
      state_->worker = std::thread([s = state_] { run(s); });
      state_->identity->id = state_->worker.get_id();
    }
    state_->queue.push_back(std::move(task));
    state_->pending.fetch_add(1, std::memory_order_relaxed);
    state_->cv.notify_one();
  }

  static void run(const std::shared_ptr<State>& s) {
    for (;;) {
      Task task;
      bool skip = false;
      {
        std::unique_lock<std::mutex> lock(s->mu);
        s->cv.wait(lock, [&] { return s->stopping || !s->queue.empty(); });
        if (s->queue.empty()) break;  // stopping and drained
        task = std::move(s->queue.front());
        s->queue.pop_front();
        skip = s->error != nullptr && !task.always;
      }
      if (task.completes_event) {
        s->pending.fetch_sub(1, std::memory_order_release);
        task.fn();
        task.fn = nullptr;
        continue;
      }
      if (!skip) {
        try {
          task.fn();
        } catch (...) {
          std::lock_guard<std::mutex> lock(s->mu);
          if (!s->error) s->error = std::current_exception();
          s->failed.store(true, std::memory_order_relaxed);  // published by the pending release below
        }
      }
      // Release what the task captured (tensor storage) before any later event completes, so
      // memory statistics are settled once synchronize() returns.
      task.fn = nullptr;
      s->pending.fetch_sub(1, std::memory_order_release);
    }
    if (s->error) CHORUS_LOG(WARNING) << s->name << " stopped with an error nobody synchronized on";
  }

  std::shared_ptr<State> state_;
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
  void execute_host(std::function<void()> fn) override { enqueue_host(std::move(fn)); }
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
