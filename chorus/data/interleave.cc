// interleave (tf.data.Dataset.interleave), sequential and parallel.
//
// The order is TF's InterleaveDataset's (kernels/data/interleave_dataset_op.cc): a cycle of
// cycle_length slots; the slot whose turn it is gives block_length elements, then the turn moves
// on; an empty slot whose turn it is takes fn(next input element); a slot whose inner dataset
// ends is emptied and the turn moves on. The parallel form computes the same sequence: worker
// threads only pull elements ahead from the open inner iterators into per-slot buffers, and the
// consumer walks the cycle exactly as the sequential form does (deterministic), or takes a ready
// element of another slot when the current one has none ready (deterministic = false).
//
// Locking: mu_ guards the slots (iterator pointers, buffers, flags) and the cycle position. A
// worker marks a slot busy and calls its iterator without the lock; nobody else touches a busy
// slot's iterator. The input iterator and fn run on the consumer thread only.
#include <algorithm>
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

std::size_t hardware_threads() { return std::max<std::size_t>(1, std::thread::hardware_concurrency()); }

class InterleaveDataset final : public DatasetBase {
 public:
  InterleaveDataset(std::shared_ptr<const DatasetBase> input, DatasetFn fn, std::int64_t cycle, std::int64_t block,
                    std::int64_t parallel, bool deterministic)
      : input_(std::move(input)), fn_(std::move(fn)), block_(block), deterministic_(deterministic) {
    CHORUS_REQUIRE(fn_ != nullptr, InvalidArgumentError, "interleave: the function is empty");
    CHORUS_REQUIRE(cycle == kAutotune || cycle > 0, InvalidArgumentError,
                   "interleave: cycle_length must be greater than zero or kAutotune (-1), got ", cycle);
    CHORUS_REQUIRE(block > 0, InvalidArgumentError, "interleave: block_length must be greater than zero, got ", block);
    CHORUS_REQUIRE(parallel == kAutotune || parallel > 0, InvalidArgumentError,
                   "interleave: num_parallel_calls must be greater than zero or kAutotune (-1), got ", parallel);
    CHORUS_REQUIRE(cycle == kAutotune || parallel == kAutotune || parallel <= cycle, InvalidArgumentError,
                   "interleave: if cycle_length is set to a fixed value, num_parallel_calls must be either "
                   "kAutotune or at most cycle_length; got num_parallel_calls ",
                   parallel, " and cycle_length ", cycle);
    cycle_ = cycle == kAutotune ? hardware_threads() : static_cast<std::size_t>(cycle);
    autotune_ = parallel == kAutotune;
    workers_ = parallel == kAutotune ? cycle_ : parallel == 1 ? 0 : static_cast<std::size_t>(parallel);
  }
  std::string name() const override { return workers_ == 0 ? "InterleaveDataset" : "ParallelInterleaveDataset"; }
  std::int64_t cardinality() const override { return input_->cardinality() == 0 ? 0 : kUnknownCardinality; }
  std::unique_ptr<IteratorBase> make_iterator() const override;

 private:
  class It;
  std::shared_ptr<const DatasetBase> input_;
  DatasetFn fn_;
  std::size_t cycle_ = 1;
  std::int64_t block_;
  std::size_t workers_ = 0;  // 0: sequential
  bool autotune_ = false;
  bool deterministic_;
};

class InterleaveDataset::It final : public IteratorBase {
 public:
  explicit It(std::shared_ptr<const InterleaveDataset> ds)
      : ds_(std::move(ds)),
        in_(ds_->input_->make_iterator()),
        device_(internal::pipeline_device()),
        slots_(ds_->cycle_) {
    if (ds_->autotune_) tuner_ = std::make_unique<internal::ParallelismTuner>(ds_->workers_);
  }
  ~It() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  std::optional<Element> next() override {
    const internal::ConsumerScope scope(tuner_.get());
    start_workers();
    prefill();
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (end_of_input_ && num_open_ == 0) return std::nullopt;
      }
      Slot& s = slots_[cycle_index_];
      if (s.pending) {  // an input or fn error met while prefilling this slot: its turn now
        std::exception_ptr error;
        {
          std::lock_guard<std::mutex> lock(mu_);
          std::swap(error, s.pending);
          --num_open_;
        }
        std::rethrow_exception(error);
      }
      if (s.it) {
        Item item;
        if (take(cycle_index_, item)) {
          if (item.error) std::rethrow_exception(item.error);  // TF: the position does not advance
          advance_position();
          return std::move(item.element);
        }
        if (item.from_other) {  // deterministic = false: another slot's ready element
          if (item.error) std::rethrow_exception(item.error);
          return std::move(item.element);
        }
        {
          std::lock_guard<std::mutex> lock(mu_);
          s.it.reset();
          s.arg.clear();
          s.ended = false;
          --num_open_;
        }
        advance_to_next_in_cycle();
      } else if (!end_of_input_) {
        auto arg = in_->next();  // an input error propagates; the next call reads on
        if (!arg) {
          std::lock_guard<std::mutex> lock(mu_);
          end_of_input_ = true;
          continue;
        }
        auto it = open(*arg);  // fn's error propagates; the element is consumed (as TF)
        {
          std::lock_guard<std::mutex> lock(mu_);
          s.it = std::move(it);
          s.arg = std::move(*arg);
          ++num_open_;
        }
        cv_.notify_all();
      } else {
        advance_to_next_in_cycle();
      }
    }
  }

  void save(IteratorState& state, const std::string& prefix) override {
    Pause pause(*this);
    state.set_int(prefix + "interleave.cycle_index", static_cast<std::int64_t>(cycle_index_));
    state.set_int(prefix + "interleave.block_index", block_index_);
    state.set_int(prefix + "interleave.end_of_input", end_of_input_);
    state.set_int(prefix + "interleave.cycle_length", static_cast<std::int64_t>(slots_.size()));
    if (!end_of_input_) in_->save(state, input_prefix(prefix));
    for (std::size_t j = 0; j < slots_.size(); ++j) {
      const Slot& s = slots_[j];
      const std::string key = str_cat(prefix, "interleave.slot[", j, "]");
      state.set_int(key + ".open", s.it != nullptr);
      state.set_int(key + ".pending", s.pending != nullptr);
      if (s.pending) internal::save_error(state, key + ".pending", s.pending);
      if (!s.it) continue;
      internal::save_element(state, key + ".arg", s.arg);
      state.set_int(key + ".ended", s.ended);
      state.set_int(key + ".buffer_size", static_cast<std::int64_t>(s.buffer.size()));
      for (std::size_t i = 0; i < s.buffer.size(); ++i) {
        const std::string k = str_cat(key, ".buffer[", i, "]");
        state.set_int(k + ".is_error", s.buffer[i].error != nullptr);
        if (s.buffer[i].error) {
          internal::save_error(state, k, s.buffer[i].error);
        } else {
          internal::save_element(state, k, *s.buffer[i].element);
        }
      }
      if (!s.ended) s.it->save(state, key + "/");
    }
  }

  void restore(const IteratorState& state, const std::string& prefix) override {
    Pause pause(*this);
    const std::int64_t n = state.get_int(prefix + "interleave.cycle_length");
    const std::int64_t ci = state.get_int(prefix + "interleave.cycle_index");
    const std::int64_t bi = state.get_int(prefix + "interleave.block_index");
    CHORUS_REQUIRE(n == static_cast<std::int64_t>(slots_.size()) && ci >= 0 && ci < n && bi >= 0 && bi < ds_->block_,
                   InvalidArgumentError, "iterator state: interleave cycle_length ", n, ", cycle index ", ci,
                   ", block index ", bi, " do not fit cycle_length ", slots_.size(), " and block_length ", ds_->block_);
    std::vector<Slot> slots(slots_.size());
    std::int64_t open_count = 0;
    for (std::size_t j = 0; j < slots.size(); ++j) {
      Slot& s = slots[j];
      const std::string key = str_cat(prefix, "interleave.slot[", j, "]");
      if (state.get_int(key + ".pending") != 0) {
        s.pending = internal::load_error(state, key + ".pending");
        ++open_count;
      }
      if (state.get_int(key + ".open") == 0) continue;
      ++open_count;
      s.arg = internal::load_element(state, key + ".arg");
      s.ended = state.get_int(key + ".ended") != 0;
      const std::int64_t b = state.get_int(key + ".buffer_size");
      CHORUS_REQUIRE(b >= 0 && b <= static_cast<std::int64_t>(state.ints().size()), InvalidArgumentError,
                     "iterator state: interleave buffer size ", b, " is invalid");
      for (std::int64_t i = 0; i < b; ++i) {
        const std::string k = str_cat(key, ".buffer[", i, "]");
        Item item;
        if (state.get_int(k + ".is_error") != 0) {
          item.error = internal::load_error(state, k);
        } else {
          item.element = internal::load_element(state, k);
        }
        s.buffer.push_back(std::move(item));
      }
      s.it = open(s.arg);
      if (!s.ended) s.it->restore(state, key + "/");
    }
    const bool end_of_input = state.get_int(prefix + "interleave.end_of_input") != 0;
    if (!end_of_input) in_->restore(state, input_prefix(prefix));
    std::lock_guard<std::mutex> lock(mu_);  // paused workers still look at the slots in pick()
    end_of_input_ = end_of_input;
    slots_ = std::move(slots);
    num_open_ = open_count;
    cycle_index_ = static_cast<std::size_t>(ci);
    block_index_ = bi;
  }

 private:
  struct Item {
    std::optional<Element> element;
    std::exception_ptr error;
    bool from_other = false;
  };
  struct Slot {
    std::unique_ptr<IteratorBase> it;  // null: empty
    Element arg;                       // the input element it was made from (saved, as TF's args)
    std::deque<Item> buffer;           // pulled ahead by the workers
    bool ended = false;                // its iterator returned the end (the buffer may still hold items)
    bool busy = false;                 // a worker is calling it
    std::exception_ptr pending;        // empty slot: the error met filling it, thrown at its turn
  };

  // Parallel form: opens every empty slot now, in turn order, so the workers can pull from all of
  // them (TF's parallel interleave does the same). The turn reaches empty slots in this order, so
  // each gets the input element the sequential form would give it; an input or fn error is kept
  // in its slot and thrown when the turn reaches it, where the sequential form throws it, and
  // filling stops there until then (the sequential form refills that slot first).
  void prefill() {
    if (ds_->workers_ == 0) return;
    for (std::size_t k = 0; k < slots_.size() && !end_of_input_; ++k) {
      Slot& s = slots_[(cycle_index_ + k) % slots_.size()];
      if (s.it || s.pending) continue;
      std::unique_ptr<IteratorBase> it;
      std::exception_ptr error;
      std::optional<Element> arg;
      try {
        arg = in_->next();
        if (arg) it = open(*arg);
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (!error && !arg) {
        end_of_input_ = true;
        break;
      }
      ++num_open_;
      if (error) {  // no input is read past an error before it is thrown: the slot is refilled first
        s.pending = error;
        break;
      }
      s.it = std::move(it);
      s.arg = std::move(*arg);
    }
    cv_.notify_all();
  }

  // Stops the workers from starting calls and waits for the calls in flight (save, restore).
  struct Pause {
    explicit Pause(It& it) : it_(it) {
      std::unique_lock<std::mutex> lock(it_.mu_);
      ++it_.paused_;
      it_.cv_.wait(lock, [&] { return it_.busy_ == 0; });
    }
    ~Pause() {
      {
        std::lock_guard<std::mutex> lock(it_.mu_);
        --it_.paused_;
      }
      it_.cv_.notify_all();
    }
    It& it_;
  };

  std::unique_ptr<IteratorBase> open(const Element& arg) {
    DeviceScope scope(device_);
    Dataset d = ds_->fn_(arg);
    CHORUS_REQUIRE(d.defined(), InvalidArgumentError, "interleave: the function returned an undefined Dataset");
    return d.impl()->make_iterator();
  }

  // The consumer moves the turn; workers read it (pick) under mu_.
  void advance_to_next_in_cycle() {
    std::lock_guard<std::mutex> lock(mu_);
    block_index_ = 0;
    cycle_index_ = (cycle_index_ + 1) % slots_.size();
  }
  void advance_position() {
    std::lock_guard<std::mutex> lock(mu_);
    if (++block_index_ == ds_->block_) {
      block_index_ = 0;
      cycle_index_ = (cycle_index_ + 1) % slots_.size();
    }
  }

  // The next item of slot j: true with it, or false when the slot's iterator ended with nothing
  // buffered (or, nondeterministic, false with item.from_other set: another slot's ready item).
  bool take(std::size_t j, Item& item) {
    Slot& s = slots_[j];
    if (ds_->workers_ == 0) {  // sequential: pull on this thread
      if (s.ended) return false;
      try {
        DeviceScope scope(device_);
        auto e = s.it->next();
        if (!e) {
          s.ended = true;
          return false;
        }
        item.element = std::move(e);
      } catch (...) {
        item.error = std::current_exception();
      }
      return true;
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.notify_all();  // the slot whose turn it is may need a worker
    for (;;) {
      if (!s.buffer.empty()) {
        item = std::move(s.buffer.front());
        s.buffer.pop_front();
        lock.unlock();
        cv_.notify_all();  // room in the buffer
        return true;
      }
      if (s.ended) return false;
      if (!ds_->deterministic_) {
        for (std::size_t k = 1; k < slots_.size(); ++k) {
          Slot& o = slots_[(j + k) % slots_.size()];
          if (!o.buffer.empty()) {
            item = std::move(o.buffer.front());
            o.buffer.pop_front();
            item.from_other = true;
            lock.unlock();
            cv_.notify_all();
            return false;
          }
        }
      }
      cv_.wait(lock);
    }
  }

  void start_workers() {
    if (ds_->workers_ == 0 || !threads_.empty()) return;
    for (std::size_t i = 0; i < ds_->workers_; ++i) threads_.emplace_back([this] { work(); });
  }

  // A slot for a worker: open, not ended, not busy, buffer not full; the nearest in turn order
  // from the current one, so the element needed next is produced first. Under mu_.
  Slot* pick() {
    if (paused_ > 0) return nullptr;
    if (tuner_ && busy_ >= tuner_->parallelism()) return nullptr;
    const auto cap = static_cast<std::size_t>(ds_->block_);
    for (std::size_t k = 0; k < slots_.size(); ++k) {
      Slot& s = slots_[(cycle_index_ + k) % slots_.size()];
      if (s.it && !s.ended && !s.busy && s.buffer.size() < cap) return &s;
    }
    return nullptr;
  }

  void work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      Slot* s = nullptr;
      cv_.wait(lock, [&] { return stop_ || (s = pick()) != nullptr; });
      if (stop_) return;
      s->busy = true;
      ++busy_;
      IteratorBase* it = s->it.get();
      lock.unlock();
      Item item;
      bool end = false;
      const double start = tuner_ ? internal::steady_seconds() : 0;
      try {
        DeviceScope scope(device_);
        item.element = it->next();
        end = !item.element;
      } catch (...) {
        item.error = std::current_exception();
      }
      if (tuner_) tuner_->record_call(internal::steady_seconds() - start);
      lock.lock();
      s->busy = false;
      --busy_;
      if (end) {
        s->ended = true;
      } else {
        s->buffer.push_back(std::move(item));
      }
      cv_.notify_all();
    }
  }

  std::shared_ptr<const InterleaveDataset> ds_;
  std::unique_ptr<IteratorBase> in_;  // consumer thread only
  std::string device_;
  std::unique_ptr<internal::ParallelismTuner> tuner_;

  std::mutex mu_;
  std::condition_variable cv_;  // any slot, the cycle position, paused_, busy_ or stop_ changed
  std::vector<Slot> slots_;
  std::size_t cycle_index_ = 0;
  std::int64_t block_index_ = 0;
  std::int64_t num_open_ = 0;
  bool end_of_input_ = false;
  std::size_t busy_ = 0;  // workers inside a call
  int paused_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;  // last: joined by the destructor before the rest dies
};

std::unique_ptr<IteratorBase> InterleaveDataset::make_iterator() const {
  return std::make_unique<It>(std::static_pointer_cast<const InterleaveDataset>(shared_from_this()));
}

}  // namespace

Dataset Dataset::interleave(DatasetFn fn, std::int64_t cycle_length, std::int64_t block_length,
                            std::int64_t num_parallel_calls, bool deterministic) const {
  return Dataset(std::make_shared<InterleaveDataset>(get().shared_from_this(), std::move(fn), cycle_length,
                                                     block_length, num_parallel_calls, deterministic));
}

}  // namespace chorus::data
