// The single-threaded transformations: batch, shuffle, repeat, take, skip, cache. map and
// prefetch (which own threads) are in parallel.cc.
#include <algorithm>
#include <atomic>
#include <mutex>

#include <chorus/core/error.h>
#include <chorus/data/dataset.h>
#include <chorus/data/internal.h>
#include <chorus/ops/random.h>

namespace chorus::data {

using chorus::internal::str_cat;
using internal::input_prefix;

namespace {

// The common part of a one-input transformation: the input dataset.
class UnaryDataset : public DatasetBase {
 public:
  explicit UnaryDataset(std::shared_ptr<const DatasetBase> input) : input_(std::move(input)) {}
  const std::shared_ptr<const DatasetBase>& input() const { return input_; }

 protected:
  std::shared_ptr<const DatasetBase> input_;
};

class BatchDataset final : public UnaryDataset {
 public:
  BatchDataset(std::shared_ptr<const DatasetBase> input, std::int64_t batch, bool drop)
      : UnaryDataset(std::move(input)), batch_(batch), drop_(drop) {
    CHORUS_REQUIRE(batch_ > 0, InvalidArgumentError, "batch: batch_size must be > 0, got ", batch_);
  }
  std::string name() const override { return "BatchDataset"; }
  std::int64_t cardinality() const override {
    return internal::batched_cardinality(input_->cardinality(), batch_, drop_);
  }
  std::unique_ptr<IteratorBase> make_iterator() const override {
    class It final : public IteratorBase {
     public:
      It(std::unique_ptr<IteratorBase> in, std::int64_t batch, bool drop)
          : in_(std::move(in)), batch_(batch), drop_(drop) {}
      std::optional<Element> next() override {
        std::vector<Element> rows;
        while (static_cast<std::int64_t>(rows.size()) < batch_) {
          auto e = in_->next();
          if (!e) break;
          rows.push_back(std::move(*e));
        }
        if (rows.empty() || (drop_ && static_cast<std::int64_t>(rows.size()) < batch_)) return std::nullopt;
        // Every element is compared with the batch's first before anything is stacked: counting
        // components per element first, so that an element with none is not a batch of none.
        internal::check_batch_structure("batch", rows, /*same_shape=*/true);
        Element out;
        for (std::size_t c = 0; c < rows[0].size(); ++c) {
          std::vector<Tensor> parts;
          parts.reserve(rows.size());
          for (auto& r : rows) parts.push_back(r[c]);
          out.push_back(internal::stack_rows(parts));
        }
        return out;
      }
      void save(IteratorState& state, const std::string& prefix) override { in_->save(state, input_prefix(prefix)); }
      void restore(const IteratorState& state, const std::string& prefix) override {
        in_->restore(state, input_prefix(prefix));
      }

     private:
      std::unique_ptr<IteratorBase> in_;
      std::int64_t batch_;
      bool drop_;
    };
    return std::make_unique<It>(input_->make_iterator(), batch_, drop_);
  }

 private:
  std::int64_t batch_;
  bool drop_;
};

class ShuffleDataset final : public UnaryDataset {
 public:
  ShuffleDataset(std::shared_ptr<const DatasetBase> input, std::int64_t buffer, std::uint64_t seed, bool reshuffle)
      : UnaryDataset(std::move(input)), buffer_(buffer), seed_(seed), reshuffle_(reshuffle) {}
  std::string name() const override { return "ShuffleDataset"; }
  std::int64_t cardinality() const override { return input_->cardinality(); }

  std::unique_ptr<IteratorBase> make_iterator() const override {
    class It final : public IteratorBase {
     public:
      explicit It(std::shared_ptr<const ShuffleDataset> ds)
          : ds_(std::move(ds)),
            in_(ds_->input_->make_iterator()),
            pass_(ds_->passes_.fetch_add(1)),
            rng_(pass_seed(*ds_, pass_)) {}
      std::optional<Element> next() override {
        // Fill (the first call) or top up (later calls: the slot freed by the last pick).
        while (in_ && static_cast<std::int64_t>(buffer_.size()) < ds_->buffer_) {
          auto e = in_->next();
          if (!e) {
            in_.reset();
            break;
          }
          buffer_.push_back(std::move(*e));
        }
        if (buffer_.empty()) return std::nullopt;
        const auto pick = static_cast<std::size_t>(rng_.uniform(buffer_.size()));
        Element out = std::move(buffer_[pick]);
        if (pick + 1 != buffer_.size()) buffer_[pick] = std::move(buffer_.back());
        buffer_.pop_back();
        return out;
      }
      void save(IteratorState& state, const std::string& prefix) override {
        state.set_int(prefix + "shuffle.pass", pass_);
        state.set_int(prefix + "shuffle.rng", static_cast<std::int64_t>(rng_.state()));
        state.set_int(prefix + "shuffle.buffer_size", static_cast<std::int64_t>(buffer_.size()));
        for (std::size_t i = 0; i < buffer_.size(); ++i)
          internal::save_element(state, str_cat(prefix, "shuffle.buffer[", i, "]"), buffer_[i]);
        state.set_int(prefix + "shuffle.input_ended", in_ == nullptr);
        if (in_) in_->save(state, input_prefix(prefix));
      }
      void restore(const IteratorState& state, const std::string& prefix) override {
        const std::int64_t pass = state.get_int(prefix + "shuffle.pass");
        const std::int64_t n = state.get_int(prefix + "shuffle.buffer_size");
        CHORUS_REQUIRE(pass >= 0 && n >= 0 && n <= ds_->buffer_, InvalidArgumentError, "iterator state: shuffle pass ",
                       pass, " / buffered elements ", n, " do not fit a buffer of ", ds_->buffer_);
        pass_ = pass;
        rng_ = internal::SplitMix64(static_cast<std::uint64_t>(state.get_int(prefix + "shuffle.rng")));
        buffer_.clear();
        for (std::int64_t i = 0; i < n; ++i)
          buffer_.push_back(internal::load_element(state, str_cat(prefix, "shuffle.buffer[", i, "]")));
        if (state.get_int(prefix + "shuffle.input_ended") != 0) {
          in_.reset();
        } else {
          if (!in_) in_ = ds_->input_->make_iterator();
          in_->restore(state, input_prefix(prefix));
        }
        // The next pass (the next epoch under repeat) continues the saved seed sequence.
        ds_->passes_.store(pass_ + 1);
      }

     private:
      static std::uint64_t pass_seed(const ShuffleDataset& ds, std::int64_t pass) {
        const std::uint64_t p = ds.reshuffle_ ? static_cast<std::uint64_t>(pass) : 0;
        return internal::splitmix64_mix(ds.seed_ ^ internal::splitmix64_mix(p + 0x5EED));
      }
      std::shared_ptr<const ShuffleDataset> ds_;
      std::unique_ptr<IteratorBase> in_;  // null once the input ended
      std::int64_t pass_;
      internal::SplitMix64 rng_;
      std::vector<Element> buffer_;
    };
    return std::make_unique<It>(std::static_pointer_cast<const ShuffleDataset>(shared_from_this()));
  }

 private:
  std::int64_t buffer_;
  std::uint64_t seed_;
  bool reshuffle_;
  // Passes begun over this dataset: pass k shuffles with the k-th seed of the sequence. Shared by
  // every iterator of the description, as TF's seed generator resource is.
  mutable std::atomic<std::int64_t> passes_{0};
};

class RepeatDataset final : public UnaryDataset {
 public:
  RepeatDataset(std::shared_ptr<const DatasetBase> input, std::int64_t count)
      : UnaryDataset(std::move(input)), count_(count) {
    CHORUS_REQUIRE(count >= -1, InvalidArgumentError, "repeat: count must be >= -1 (-1 repeats forever), got ", count);
  }
  std::string name() const override { return "RepeatDataset"; }
  std::int64_t cardinality() const override {
    const std::int64_t n = input_->cardinality();
    if (count_ == 0 || n == 0) return 0;
    if (count_ == -1) return n == kUnknownCardinality ? kUnknownCardinality : kInfiniteCardinality;
    if (n < 0) return n;
    return n * count_;
  }
  std::unique_ptr<IteratorBase> make_iterator() const override {
    class It final : public IteratorBase {
     public:
      explicit It(std::shared_ptr<const RepeatDataset> ds) : ds_(std::move(ds)) {}
      std::optional<Element> next() override {
        for (;;) {
          if (ended_ || (ds_->count_ >= 0 && passes_ >= ds_->count_)) return std::nullopt;
          if (!in_) {
            in_ = ds_->input_->make_iterator();
            pass_empty_ = true;
          }
          auto e = in_->next();
          if (e) {
            pass_empty_ = false;
            return e;
          }
          in_.reset();
          ++passes_;
          if (pass_empty_) ended_ = true;  // an empty pass: the next ones would be empty too
        }
      }
      void save(IteratorState& state, const std::string& prefix) override {
        state.set_int(prefix + "repeat.passes", passes_);
        state.set_int(prefix + "repeat.ended", ended_);
        state.set_int(prefix + "repeat.pass_empty", pass_empty_);
        state.set_int(prefix + "repeat.has_input", in_ != nullptr);
        if (in_) in_->save(state, input_prefix(prefix));
      }
      void restore(const IteratorState& state, const std::string& prefix) override {
        passes_ = state.get_int(prefix + "repeat.passes");
        ended_ = state.get_int(prefix + "repeat.ended") != 0;
        pass_empty_ = state.get_int(prefix + "repeat.pass_empty") != 0;
        in_.reset();
        if (state.get_int(prefix + "repeat.has_input") != 0) {
          in_ = ds_->input_->make_iterator();
          in_->restore(state, input_prefix(prefix));
        }
      }

     private:
      std::shared_ptr<const RepeatDataset> ds_;
      std::unique_ptr<IteratorBase> in_;  // the current pass; made lazily
      std::int64_t passes_ = 0;           // passes completed
      bool pass_empty_ = true;
      bool ended_ = false;
    };
    return std::make_unique<It>(std::static_pointer_cast<const RepeatDataset>(shared_from_this()));
  }

 private:
  std::int64_t count_;
};

class TakeDataset final : public UnaryDataset {
 public:
  TakeDataset(std::shared_ptr<const DatasetBase> input, std::int64_t count)
      : UnaryDataset(std::move(input)), count_(count) {
    CHORUS_REQUIRE(count >= -1, InvalidArgumentError, "take: count must be >= -1 (-1 takes all), got ", count);
  }
  std::string name() const override { return "TakeDataset"; }
  std::int64_t cardinality() const override {
    const std::int64_t n = input_->cardinality();
    if (count_ == -1) return n;
    if (n == kInfiniteCardinality) return count_;
    if (n == kUnknownCardinality) return count_ == 0 ? 0 : kUnknownCardinality;
    return std::min(n, count_);
  }
  std::unique_ptr<IteratorBase> make_iterator() const override {
    class It final : public IteratorBase {
     public:
      It(std::unique_ptr<IteratorBase> in, std::int64_t count) : in_(std::move(in)), count_(count) {}
      std::optional<Element> next() override {
        if (count_ >= 0 && taken_ >= count_) return std::nullopt;  // never pulls element count+1
        auto e = in_->next();
        if (e) ++taken_;
        return e;
      }
      void save(IteratorState& state, const std::string& prefix) override {
        state.set_int(prefix + "take.taken", taken_);
        in_->save(state, input_prefix(prefix));
      }
      void restore(const IteratorState& state, const std::string& prefix) override {
        taken_ = state.get_int(prefix + "take.taken");
        in_->restore(state, input_prefix(prefix));
      }

     private:
      std::unique_ptr<IteratorBase> in_;
      std::int64_t count_;
      std::int64_t taken_ = 0;
    };
    return std::make_unique<It>(input_->make_iterator(), count_);
  }

 private:
  std::int64_t count_;
};

class SkipDataset final : public UnaryDataset {
 public:
  SkipDataset(std::shared_ptr<const DatasetBase> input, std::int64_t count)
      : UnaryDataset(std::move(input)), count_(count) {
    CHORUS_REQUIRE(count >= -1, InvalidArgumentError, "skip: count must be >= -1 (-1 skips all), got ", count);
  }
  std::string name() const override { return "SkipDataset"; }
  std::int64_t cardinality() const override {
    const std::int64_t n = input_->cardinality();
    if (n < 0) return n;
    if (count_ == -1) return 0;
    return std::max<std::int64_t>(0, n - count_);
  }
  std::unique_ptr<IteratorBase> make_iterator() const override {
    class It final : public IteratorBase {
     public:
      It(std::unique_ptr<IteratorBase> in, std::int64_t count) : in_(std::move(in)), count_(count) {}
      std::optional<Element> next() override {
        while (count_ == -1 || skipped_ < count_) {  // lazily, at the first call
          if (!in_->next()) return std::nullopt;
          ++skipped_;
        }
        return in_->next();
      }
      void save(IteratorState& state, const std::string& prefix) override {
        state.set_int(prefix + "skip.skipped", skipped_);
        in_->save(state, input_prefix(prefix));
      }
      void restore(const IteratorState& state, const std::string& prefix) override {
        skipped_ = state.get_int(prefix + "skip.skipped");
        in_->restore(state, input_prefix(prefix));
      }

     private:
      std::unique_ptr<IteratorBase> in_;
      std::int64_t count_;
      std::int64_t skipped_ = 0;
    };
    return std::make_unique<It>(input_->make_iterator(), count_);
  }

 private:
  std::int64_t count_;
};

class CacheDataset final : public UnaryDataset {
 public:
  using Store = std::vector<Element>;
  explicit CacheDataset(std::shared_ptr<const DatasetBase> input) : UnaryDataset(std::move(input)) {}
  std::string name() const override { return "CacheDataset"; }
  std::int64_t cardinality() const override { return input_->cardinality(); }

  std::shared_ptr<const Store> completed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return completed_;
  }
  // The first pass to finish publishes its elements; a later finisher's copy is dropped.
  void publish(std::shared_ptr<const Store> store) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (!completed_) completed_ = std::move(store);
  }

  std::unique_ptr<IteratorBase> make_iterator() const override {
    class It final : public IteratorBase {
     public:
      explicit It(std::shared_ptr<const CacheDataset> ds) : ds_(std::move(ds)), reading_(ds_->completed()) {
        if (!reading_) in_ = ds_->input_->make_iterator();
      }
      std::optional<Element> next() override {
        if (reading_) {
          if (pos_ >= reading_->size()) return std::nullopt;
          return (*reading_)[pos_++];
        }
        if (!in_) return std::nullopt;  // filled and published: the end
        auto e = in_->next();
        if (!e) {
          in_.reset();
          ds_->publish(std::make_shared<const Store>(std::move(filling_)));
          filling_.clear();
          return std::nullopt;
        }
        filling_.push_back(*e);
        return e;
      }
      void save(IteratorState& state, const std::string& prefix) override {
        state.set_int(prefix + "cache.reading", reading_ != nullptr);
        const Store& elements = reading_ ? *reading_ : filling_;
        state.set_int(prefix + "cache.size", static_cast<std::int64_t>(elements.size()));
        for (std::size_t i = 0; i < elements.size(); ++i)
          internal::save_element(state, str_cat(prefix, "cache[", i, "]"), elements[i]);
        if (reading_) {
          state.set_int(prefix + "cache.pos", static_cast<std::int64_t>(pos_));
        } else {
          state.set_int(prefix + "cache.input_ended", in_ == nullptr);
          if (in_) in_->save(state, input_prefix(prefix));
        }
      }
      void restore(const IteratorState& state, const std::string& prefix) override {
        const std::int64_t n = state.get_int(prefix + "cache.size");
        CHORUS_REQUIRE(n >= 0, InvalidArgumentError, "iterator state: cache size ", n, " is negative");
        Store elements;
        for (std::int64_t i = 0; i < n; ++i)
          elements.push_back(internal::load_element(state, str_cat(prefix, "cache[", i, "]")));
        if (state.get_int(prefix + "cache.reading") != 0) {
          const std::int64_t pos = state.get_int(prefix + "cache.pos");
          CHORUS_REQUIRE(pos >= 0 && pos <= n, InvalidArgumentError, "iterator state: cache position ", pos,
                         " is outside [0, ", n, "]");
          auto store = std::make_shared<const Store>(std::move(elements));
          ds_->publish(store);  // a restored process has no cache yet: the checkpoint's becomes it
          reading_ = std::move(store);
          pos_ = static_cast<std::size_t>(pos);
          in_.reset();
          filling_.clear();
        } else {
          reading_.reset();
          filling_ = std::move(elements);
          if (state.get_int(prefix + "cache.input_ended") != 0) {
            in_.reset();
          } else {
            if (!in_) in_ = ds_->input_->make_iterator();
            in_->restore(state, input_prefix(prefix));
          }
        }
      }

     private:
      std::shared_ptr<const CacheDataset> ds_;
      std::shared_ptr<const Store> reading_;  // set: this pass reads the cache
      std::size_t pos_ = 0;
      std::unique_ptr<IteratorBase> in_;  // filling: the input (null once it ended)
      Store filling_;
    };
    return std::make_unique<It>(std::static_pointer_cast<const CacheDataset>(shared_from_this()));
  }

 private:
  mutable std::mutex mu_;
  mutable std::shared_ptr<const Store> completed_;
};

}  // namespace

Dataset Dataset::shuffle(std::int64_t buffer_size, std::optional<std::uint64_t> seed,
                         bool reshuffle_each_iteration) const {
  get();
  CHORUS_REQUIRE(buffer_size > 0, InvalidArgumentError, "shuffle: buffer_size must be > 0, got ", buffer_size);
  std::uint64_t s = 0;
  if (seed) {
    s = *seed;
  } else {
    // From the global generator: reproducible after ops::set_seed, fresh otherwise.
    const auto words =
        ops::random_uniform({2}, {.minval = 0, .maxval = 2147483647.0, .dtype = DType::kInt32, .device = "/CPU:0"})
            .to_vector<std::int64_t>();
    s = static_cast<std::uint64_t>(words[0]) << 32 ^ static_cast<std::uint64_t>(words[1]);
  }
  return Dataset(std::make_shared<ShuffleDataset>(impl_, buffer_size, s, reshuffle_each_iteration));
}

Dataset Dataset::batch(std::int64_t batch_size, bool drop_remainder) const {
  get();
  return Dataset(std::make_shared<BatchDataset>(impl_, batch_size, drop_remainder));
}
Dataset Dataset::repeat(std::int64_t count) const {
  get();
  return Dataset(std::make_shared<RepeatDataset>(impl_, count));
}
Dataset Dataset::take(std::int64_t count) const {
  get();
  return Dataset(std::make_shared<TakeDataset>(impl_, count));
}
Dataset Dataset::skip(std::int64_t count) const {
  get();
  return Dataset(std::make_shared<SkipDataset>(impl_, count));
}
Dataset Dataset::cache() const {
  get();
  return Dataset(std::make_shared<CacheDataset>(impl_));
}

}  // namespace chorus::data
