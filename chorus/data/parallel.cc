// The transformations that own threads: map (sequential or parallel) and prefetch.
//
// Locking: each iterator has one mutex guarding everything its threads share. The input iterator
// is only ever used by one thread at a time: parallel map pulls input on the consumer thread (so
// workers only run fn), prefetch's producer owns the input while it runs and save/restore touch
// it only after joining the producer.
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include <chorus/core/error.h>
#include <chorus/core/placement.h>
#include <chorus/data/autotune_internal.h>
#include <chorus/data/dataset.h>
#include <chorus/data/internal.h>

namespace chorus::data {

using chorus::internal::str_cat;

using internal::input_prefix;

namespace {

class MapDataset final : public DatasetBase {
 public:
  MapDataset(std::shared_ptr<const DatasetBase> input, MapFn fn, std::int64_t parallel)
      : input_(std::move(input)), fn_(std::move(fn)), parallel_(parallel) {
    CHORUS_REQUIRE(fn_ != nullptr, InvalidArgumentError, "map: the map function is empty");
    CHORUS_REQUIRE(parallel == kAutotune || parallel >= 1, InvalidArgumentError,
                   "map: num_parallel_calls must be >= 1 or kAutotune (-1), got ", parallel);
  }
  std::string name() const override { return parallel_ == 1 ? "MapDataset" : "ParallelMapDataset"; }
  std::int64_t cardinality() const override { return input_->cardinality(); }
  std::unique_ptr<IteratorBase> make_iterator() const override;

 private:
  class SequentialIterator;
  class ParallelIterator;
  std::shared_ptr<const DatasetBase> input_;
  MapFn fn_;
  std::int64_t parallel_;
};

class MapDataset::SequentialIterator final : public IteratorBase {
 public:
  explicit SequentialIterator(std::shared_ptr<const MapDataset> ds)
      : ds_(std::move(ds)), in_(ds_->input_->make_iterator()), device_(internal::pipeline_device()) {}
  std::optional<Element> next() override {
    auto e = in_->next();
    if (!e) return std::nullopt;
    DeviceScope scope(device_);
    return ds_->fn_(*e);
  }
  void save(IteratorState& state, const std::string& prefix) override { in_->save(state, input_prefix(prefix)); }
  void restore(const IteratorState& state, const std::string& prefix) override {
    in_->restore(state, input_prefix(prefix));
  }

 private:
  std::shared_ptr<const MapDataset> ds_;
  std::unique_ptr<IteratorBase> in_;
  std::string device_;
};

// Up to `width` calls in flight on `width` worker threads (kAutotune: width = the hardware
// threads, and the calls in flight follow the ParallelismTuner's measurements). Slots are kept in
// input order; next() waits for the oldest, so the output order is the input order whatever order
// calls finish in.
class MapDataset::ParallelIterator final : public IteratorBase {
 public:
  ParallelIterator(std::shared_ptr<const MapDataset> ds, std::size_t width, bool autotune)
      : ds_(std::move(ds)), in_(ds_->input_->make_iterator()), device_(internal::pipeline_device()), width_(width) {
    if (autotune) tuner_ = std::make_unique<internal::ParallelismTuner>(width);
  }

  ~ParallelIterator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();  // calls already running finish; queued ones are dropped
  }

  std::optional<Element> next() override {
    const internal::ConsumerScope scope(tuner_.get());
    fill();
    if (slots_.empty()) return std::nullopt;
    std::shared_ptr<Slot> slot = slots_.front();
    slots_.pop_front();
    {
      std::unique_lock<std::mutex> lock(mu_);
      done_cv_.wait(lock, [&] { return slot->done; });
    }
    fill();  // keep the workers busy while the caller uses this element
    if (slot->error) std::rethrow_exception(slot->error);
    return std::move(slot->output);
  }

  void save(IteratorState& state, const std::string& prefix) override {
    wait_all();
    state.set_int(prefix + "map.input_ended", input_ended_);
    state.set_int(prefix + "map.buffer_size", static_cast<std::int64_t>(slots_.size()));
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      const std::string key = str_cat(prefix, "map.buffer[", i, "]");
      state.set_int(key + ".is_error", slots_[i]->error != nullptr);
      if (slots_[i]->error) {
        internal::save_error(state, key, slots_[i]->error);
      } else {
        internal::save_element(state, key, *slots_[i]->output);
      }
    }
    in_->save(state, input_prefix(prefix));
  }

  void restore(const IteratorState& state, const std::string& prefix) override {
    wait_all();
    const std::int64_t n = state.get_int(prefix + "map.buffer_size");
    CHORUS_REQUIRE(n >= 0, InvalidArgumentError, "iterator state: parallel map buffer size ", n, " is negative");
    std::deque<std::shared_ptr<Slot>> slots;
    for (std::int64_t i = 0; i < n; ++i) {
      const std::string key = str_cat(prefix, "map.buffer[", i, "]");
      auto slot = std::make_shared<Slot>();
      slot->done = true;
      if (state.get_int(key + ".is_error") != 0) {
        slot->error = internal::load_error(state, key);
      } else {
        slot->output = internal::load_element(state, key);
      }
      slots.push_back(std::move(slot));
    }
    in_->restore(state, input_prefix(prefix));
    input_ended_ = state.get_int(prefix + "map.input_ended") != 0;
    slots_ = std::move(slots);
  }

 private:
  struct Slot {
    Element input;                  // written before queuing, read by one worker
    std::optional<Element> output;  // written by the worker under mu_, then done = true
    std::exception_ptr error;
    bool done = false;
  };

  // Pulls input (on this thread) until `width_` calls are in flight or buffered. An input error
  // takes a slot of its own, so it surfaces in order.
  void fill() {
    while (!input_ended_ && slots_.size() < (tuner_ ? tuner_->parallelism() : width_)) {
      auto slot = std::make_shared<Slot>();
      try {
        auto e = in_->next();
        if (!e) {
          input_ended_ = true;
          break;
        }
        slot->input = std::move(*e);
      } catch (...) {
        slot->error = std::current_exception();
        slot->done = true;
        slots_.push_back(std::move(slot));
        continue;
      }
      start_workers();
      {
        std::lock_guard<std::mutex> lock(mu_);
        queue_.push_back(slot);
      }
      work_cv_.notify_one();
      slots_.push_back(std::move(slot));
    }
  }

  void start_workers() {
    if (!workers_.empty()) return;
    for (std::size_t i = 0; i < width_; ++i) workers_.emplace_back([this] { work(); });
  }

  void work() {
    for (;;) {
      std::shared_ptr<Slot> slot;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        slot = std::move(queue_.front());
        queue_.pop_front();
      }
      std::optional<Element> out;
      std::exception_ptr error;
      const double start = tuner_ ? internal::steady_seconds() : 0;
      try {
        DeviceScope scope(device_);
        out = ds_->fn_(slot->input);
      } catch (...) {
        error = std::current_exception();
      }
      if (tuner_) tuner_->record_call(internal::steady_seconds() - start);
      {
        std::lock_guard<std::mutex> lock(mu_);
        slot->output = std::move(out);
        slot->error = std::move(error);
        slot->input.clear();
        slot->done = true;
        // The consumer holds the slot too (in slots_ or waiting on it): dropping ours here, under
        // the lock, makes the consumer the last owner, so the element and any exception are freed on
        // its thread. (exception_ptr's count lives in uninstrumented libsupc++: TSan cannot see it.)
        slot.reset();
      }
      done_cv_.notify_all();
    }
  }

  void wait_all() {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] {
      for (const auto& s : slots_)
        if (!s->done) return false;
      return true;
    });
  }

  std::shared_ptr<const MapDataset> ds_;
  std::unique_ptr<IteratorBase> in_;  // consumer thread only
  std::string device_;
  std::size_t width_;
  std::unique_ptr<internal::ParallelismTuner> tuner_;  // kAutotune only
  bool input_ended_ = false;                           // consumer thread only
  std::deque<std::shared_ptr<Slot>> slots_;            // consumer thread only: in flight or done, input order

  std::mutex mu_;
  std::condition_variable work_cv_;  // queue_ non-empty or stop_
  std::condition_variable done_cv_;  // some slot became done
  std::deque<std::shared_ptr<Slot>> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;  // last member: joined in the destructor before the rest dies
};

std::unique_ptr<IteratorBase> MapDataset::make_iterator() const {
  auto self = std::static_pointer_cast<const MapDataset>(shared_from_this());
  if (parallel_ == 1) return std::make_unique<SequentialIterator>(std::move(self));
  std::size_t width =
      parallel_ == kAutotune ? std::thread::hardware_concurrency() : static_cast<std::size_t>(parallel_);
  return std::make_unique<ParallelIterator>(std::move(self), std::max<std::size_t>(width, 1), parallel_ == kAutotune);
}

class PrefetchDataset final : public DatasetBase {
 public:
  PrefetchDataset(std::shared_ptr<const DatasetBase> input, std::int64_t buffer)
      : input_(std::move(input)), buffer_(buffer) {
    CHORUS_REQUIRE(buffer >= -1, InvalidArgumentError, "prefetch: buffer_size must be >= 0 or kAutotune (-1), got ",
                   buffer);
  }
  std::string name() const override { return "PrefetchDataset"; }
  std::int64_t cardinality() const override { return input_->cardinality(); }
  std::unique_ptr<IteratorBase> make_iterator() const override {
    if (buffer_ == 0) return input_->make_iterator();
    if (buffer_ == kAutotune)
      return std::make_unique<It>(
          input_->make_iterator(), 0,
          std::make_unique<internal::PrefetchTuner>(static_cast<std::size_t>(kAutotunePrefetchMax)));
    return std::make_unique<It>(input_->make_iterator(), static_cast<std::size_t>(buffer_), nullptr);
  }

 private:
  class It final : public IteratorBase {
   public:
    // capacity: the fixed buffer size; ignored when `tuner` (kAutotune) sets it.
    It(std::unique_ptr<IteratorBase> in, std::size_t capacity, std::unique_ptr<internal::PrefetchTuner> tuner)
        : in_(std::move(in)), capacity_(capacity), tuner_(std::move(tuner)), device_(internal::pipeline_device()) {}
    ~It() override { stop_producer(); }

    std::optional<Element> next() override {
      std::unique_lock<std::mutex> lock(mu_);
      if (!producer_.joinable() && !input_done_) producer_ = std::thread([this] { produce(); });
      if (tuner_) tuner_->on_request(buffer_.size(), !input_done_);
      cv_.wait(lock, [&] { return !buffer_.empty() || input_done_; });
      if (buffer_.empty()) return std::nullopt;
      Item item = std::move(buffer_.front());
      buffer_.pop_front();
      lock.unlock();
      cv_.notify_all();  // room for the producer
      if (item.error) std::rethrow_exception(item.error);
      return std::move(item.element);
    }

    void save(IteratorState& state, const std::string& prefix) override {
      stop_producer();  // restarted by the next next()
      state.set_int(prefix + "prefetch.input_done", input_done_);
      state.set_int(prefix + "prefetch.buffer_size", static_cast<std::int64_t>(buffer_.size()));
      for (std::size_t i = 0; i < buffer_.size(); ++i) {
        const std::string key = str_cat(prefix, "prefetch.buffer[", i, "]");
        state.set_int(key + ".is_error", buffer_[i].error != nullptr);
        if (buffer_[i].error) {
          internal::save_error(state, key, buffer_[i].error);
        } else {
          internal::save_element(state, key, *buffer_[i].element);
        }
      }
      if (!input_done_) in_->save(state, input_prefix(prefix));
    }

    void restore(const IteratorState& state, const std::string& prefix) override {
      stop_producer();
      const std::int64_t n = state.get_int(prefix + "prefetch.buffer_size");
      CHORUS_REQUIRE(n >= 0, InvalidArgumentError, "iterator state: prefetch buffer size ", n, " is negative");
      std::deque<Item> items;
      for (std::int64_t i = 0; i < n; ++i) {
        const std::string key = str_cat(prefix, "prefetch.buffer[", i, "]");
        Item item;
        if (state.get_int(key + ".is_error") != 0) {
          item.error = internal::load_error(state, key);
        } else {
          item.element = internal::load_element(state, key);
        }
        items.push_back(std::move(item));
      }
      const bool done = state.get_int(prefix + "prefetch.input_done") != 0;
      if (!done) in_->restore(state, input_prefix(prefix));
      buffer_ = std::move(items);  // no producer: no lock needed
      input_done_ = done;
    }

   private:
    struct Item {
      std::optional<Element> element;
      std::exception_ptr error;
    };

    void produce() {
      try {
        DeviceScope scope(device_);
        for (;;) {
          {
            std::unique_lock<std::mutex> lock(mu_);
            cv_.wait(lock, [&] { return stop_ || buffer_.size() < capacity(); });
            if (stop_) return;
          }
          Item item;
          bool end = false;
          try {
            item.element = in_->next();
            end = !item.element.has_value();
          } catch (...) {
            item.error = std::current_exception();
          }
          {
            std::lock_guard<std::mutex> lock(mu_);
            if (end) {
              input_done_ = true;
            } else {
              buffer_.push_back(std::move(item));
            }
          }
          cv_.notify_all();
          if (end) return;
        }
      } catch (...) {  // DeviceScope failed: report it as the next element, then end
        {
          std::lock_guard<std::mutex> lock(mu_);
          buffer_.push_back(Item{std::nullopt, std::current_exception()});
          input_done_ = true;
        }
        cv_.notify_all();
      }
    }

    // Stops the producer after the element it is producing (kept in the buffer) and joins it.
    void stop_producer() {
      if (!producer_.joinable()) return;
      {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
      }
      cv_.notify_all();
      producer_.join();
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = false;
    }

    std::size_t capacity() const { return tuner_ ? tuner_->buffer_limit() : capacity_; }

    std::unique_ptr<IteratorBase> in_;  // the producer's while it runs
    std::size_t capacity_;
    std::unique_ptr<internal::PrefetchTuner> tuner_;  // kAutotune only
    std::string device_;
    std::mutex mu_;
    std::condition_variable cv_;  // buffer changed, input_done_ or stop_
    std::deque<Item> buffer_;
    bool input_done_ = false;
    bool stop_ = false;
    std::thread producer_;
  };

  std::shared_ptr<const DatasetBase> input_;
  std::int64_t buffer_;
};

}  // namespace

Dataset Dataset::map(MapFn fn, std::int64_t num_parallel_calls) const {
  CHORUS_REQUIRE(defined(), FailedPreconditionError, "use of an undefined (default-constructed) Dataset");
  return Dataset(std::make_shared<MapDataset>(impl_, std::move(fn), num_parallel_calls));
}

Dataset Dataset::prefetch(std::int64_t buffer_size) const {
  CHORUS_REQUIRE(defined(), FailedPreconditionError, "use of an undefined (default-constructed) Dataset");
  return Dataset(std::make_shared<PrefetchDataset>(impl_, buffer_size));
}

}  // namespace chorus::data
