// The element-wise combinators without threads: filter, zip, concatenate, enumerate, shard,
// flat_map. (interleave is in interleave.cc, padded_batch and unbatch in batching.cc.)
#include <algorithm>

#include <chorus/core/error.h>
#include <chorus/core/placement.h>
#include <chorus/data/dataset.h>
#include <chorus/data/internal.h>

namespace chorus::data {

using chorus::internal::str_cat;
using internal::input_prefix;

namespace {

std::string structure_string(const Element& e) {
  std::string s = "(";
  for (std::size_t c = 0; c < e.size(); ++c) s += str_cat(c ? ", " : "", dtype_name(e[c].dtype()));
  return s + ")";
}

class FilterDataset final : public DatasetBase {
 public:
  FilterDataset(std::shared_ptr<const DatasetBase> input, PredicateFn predicate)
      : input_(std::move(input)), predicate_(std::move(predicate)) {
    CHORUS_REQUIRE(predicate_ != nullptr, InvalidArgumentError, "filter: the predicate is empty");
  }
  std::string name() const override { return "FilterDataset"; }
  std::int64_t cardinality() const override {
    const std::int64_t n = input_->cardinality();
    return n == 0 ? 0 : kUnknownCardinality;  // TF: unknown unless empty
  }
  std::unique_ptr<IteratorBase> make_iterator() const override {
    class It final : public IteratorBase {
     public:
      explicit It(std::shared_ptr<const FilterDataset> ds)
          : ds_(std::move(ds)), in_(ds_->input_->make_iterator()), device_(internal::pipeline_device()) {}
      std::optional<Element> next() override {
        for (;;) {
          auto e = in_->next();
          if (!e) return std::nullopt;
          DeviceScope scope(device_);
          if (ds_->predicate_(*e)) return e;
        }
      }
      void save(IteratorState& state, const std::string& prefix) override { in_->save(state, input_prefix(prefix)); }
      void restore(const IteratorState& state, const std::string& prefix) override {
        in_->restore(state, input_prefix(prefix));
      }

     private:
      std::shared_ptr<const FilterDataset> ds_;
      std::unique_ptr<IteratorBase> in_;
      std::string device_;
    };
    return std::make_unique<It>(std::static_pointer_cast<const FilterDataset>(shared_from_this()));
  }

 private:
  std::shared_ptr<const DatasetBase> input_;
  PredicateFn predicate_;
};

class ZipDataset final : public DatasetBase {
 public:
  explicit ZipDataset(std::vector<std::shared_ptr<const DatasetBase>> inputs) : inputs_(std::move(inputs)) {
    CHORUS_REQUIRE(!inputs_.empty(), InvalidArgumentError, "zip: needs at least one dataset, got none");
  }
  std::string name() const override { return "ZipDataset"; }
  std::int64_t cardinality() const override {
    // As TF: unknown if any input's is; else the smallest finite count; infinite if all are.
    std::int64_t finite = -1;
    bool unknown = false;
    for (const auto& in : inputs_) {
      const std::int64_t n = in->cardinality();
      if (n == kUnknownCardinality) unknown = true;
      if (n >= 0) finite = finite < 0 ? n : std::min(finite, n);
    }
    if (unknown) return kUnknownCardinality;
    return finite >= 0 ? finite : kInfiniteCardinality;
  }
  std::unique_ptr<IteratorBase> make_iterator() const override {
    class It final : public IteratorBase {
     public:
      explicit It(const std::vector<std::shared_ptr<const DatasetBase>>& inputs) {
        for (const auto& in : inputs) ins_.push_back(in->make_iterator());
      }
      std::optional<Element> next() override {
        if (ended_) return std::nullopt;
        Element out;
        for (auto& in : ins_) {
          auto e = in->next();
          if (!e) {  // as TF: the inputs before this one have moved on; the zip ends here
            ended_ = true;
            return std::nullopt;
          }
          for (auto& t : *e) out.push_back(std::move(t));
        }
        return out;
      }
      void save(IteratorState& state, const std::string& prefix) override {
        state.set_int(prefix + "zip.ended", ended_);
        for (std::size_t k = 0; k < ins_.size(); ++k) ins_[k]->save(state, str_cat(prefix, "zip[", k, "]/"));
      }
      void restore(const IteratorState& state, const std::string& prefix) override {
        ended_ = state.get_int(prefix + "zip.ended") != 0;
        for (std::size_t k = 0; k < ins_.size(); ++k) ins_[k]->restore(state, str_cat(prefix, "zip[", k, "]/"));
      }

     private:
      std::vector<std::unique_ptr<IteratorBase>> ins_;
      bool ended_ = false;
    };
    return std::make_unique<It>(inputs_);
  }

 private:
  std::vector<std::shared_ptr<const DatasetBase>> inputs_;
};

class ConcatenateDataset final : public DatasetBase {
 public:
  ConcatenateDataset(std::shared_ptr<const DatasetBase> first, std::shared_ptr<const DatasetBase> second)
      : first_(std::move(first)), second_(std::move(second)) {}
  std::string name() const override { return "ConcatenateDataset"; }
  std::int64_t cardinality() const override {
    const std::int64_t a = first_->cardinality(), b = second_->cardinality();
    if (a == kInfiniteCardinality || b == kInfiniteCardinality) return kInfiniteCardinality;
    if (a == kUnknownCardinality || b == kUnknownCardinality) return kUnknownCardinality;
    return a + b;
  }
  std::unique_ptr<IteratorBase> make_iterator() const override {
    class It final : public IteratorBase {
     public:
      explicit It(std::shared_ptr<const ConcatenateDataset> ds)
          : ds_(std::move(ds)), in_(ds_->first_->make_iterator()) {}
      std::optional<Element> next() override {
        while (in_) {
          auto e = in_->next();
          if (e) {
            check_structure(*e);
            return e;
          }
          in_ = index_ == 0 ? ds_->second_->make_iterator() : nullptr;
          ++index_;
        }
        return std::nullopt;
      }
      void save(IteratorState& state, const std::string& prefix) override {
        state.set_int(prefix + "concatenate.index", index_);
        state.set_int(prefix + "concatenate.dtypes", static_cast<std::int64_t>(dtypes_.size()));
        for (std::size_t c = 0; c < dtypes_.size(); ++c)
          state.set_int(str_cat(prefix, "concatenate.dtype[", c, "]"), static_cast<std::int64_t>(dtypes_[c]));
        if (in_) in_->save(state, input_prefix(prefix));
      }
      void restore(const IteratorState& state, const std::string& prefix) override {
        const std::int64_t index = state.get_int(prefix + "concatenate.index");
        const std::int64_t n = state.get_int(prefix + "concatenate.dtypes");
        CHORUS_REQUIRE(index >= 0 && index <= 2 && n >= 0 && n <= static_cast<std::int64_t>(state.ints().size()),
                       InvalidArgumentError, "iterator state: concatenate input ", index, " / ", n,
                       " components do not fit");
        dtypes_.clear();
        for (std::int64_t c = 0; c < n; ++c) {
          const std::int64_t d = state.get_int(str_cat(prefix, "concatenate.dtype[", c, "]"));
          CHORUS_REQUIRE(d >= 0 && d < kNumDTypes, InvalidArgumentError, "iterator state: concatenate dtype ", d,
                         " is not a dtype");
          dtypes_.push_back(static_cast<DType>(d));
        }
        index_ = index;
        in_ = index == 0 ? ds_->first_->make_iterator() : index == 1 ? ds_->second_->make_iterator() : nullptr;
        if (in_) in_->restore(state, input_prefix(prefix));
      }

     private:
      // TF checks the element specs when the dataset is built; chorus datasets carry none, so the
      // first element seen fixes the structure and every later one is compared with it.
      void check_structure(const Element& e) {
        if (dtypes_.empty() && !seen_) {
          seen_ = true;
          for (const auto& t : e) dtypes_.push_back(t.dtype());
          return;
        }
        bool same = e.size() == dtypes_.size();
        for (std::size_t c = 0; same && c < e.size(); ++c) same = e[c].dtype() == dtypes_[c];
        if (!same) {
          std::string want = "(";
          for (std::size_t c = 0; c < dtypes_.size(); ++c) want += str_cat(c ? ", " : "", dtype_name(dtypes_[c]));
          throw InvalidArgumentError(str_cat("concatenate: incompatible dataset elements: ", want, ") vs ",
                                             structure_string(e), " (from the ", index_ == 0 ? "first" : "second",
                                             " dataset); both must have the same number of components and dtypes"));
        }
      }
      std::shared_ptr<const ConcatenateDataset> ds_;
      std::unique_ptr<IteratorBase> in_;  // null after the second ended
      std::int64_t index_ = 0;            // 0: first, 1: second, 2: done
      std::vector<DType> dtypes_;
      bool seen_ = false;
    };
    return std::make_unique<It>(std::static_pointer_cast<const ConcatenateDataset>(shared_from_this()));
  }

 private:
  std::shared_ptr<const DatasetBase> first_, second_;
};

class EnumerateDataset final : public DatasetBase {
 public:
  EnumerateDataset(std::shared_ptr<const DatasetBase> input, std::int64_t start)
      : input_(std::move(input)), start_(start) {}
  std::string name() const override { return "EnumerateDataset"; }
  std::int64_t cardinality() const override { return input_->cardinality(); }
  std::unique_ptr<IteratorBase> make_iterator() const override {
    class It final : public IteratorBase {
     public:
      It(std::unique_ptr<IteratorBase> in, std::int64_t start)
          : in_(std::move(in)), next_(start), device_(internal::pipeline_device()) {}
      std::optional<Element> next() override {
        auto e = in_->next();
        if (!e) return std::nullopt;
        Element out;
        out.reserve(e->size() + 1);
        out.push_back(Tensor::scalar<std::int64_t>(next_++, device_));
        for (auto& t : *e) out.push_back(std::move(t));
        return out;
      }
      void save(IteratorState& state, const std::string& prefix) override {
        state.set_int(prefix + "enumerate.next", next_);
        in_->save(state, input_prefix(prefix));
      }
      void restore(const IteratorState& state, const std::string& prefix) override {
        next_ = state.get_int(prefix + "enumerate.next");
        in_->restore(state, input_prefix(prefix));
      }

     private:
      std::unique_ptr<IteratorBase> in_;
      std::int64_t next_;
      std::string device_;
    };
    return std::make_unique<It>(input_->make_iterator(), start_);
  }

 private:
  std::shared_ptr<const DatasetBase> input_;
  std::int64_t start_;
};

class ShardDataset final : public DatasetBase {
 public:
  ShardDataset(std::shared_ptr<const DatasetBase> input, std::int64_t num_shards, std::int64_t index)
      : input_(std::move(input)), num_shards_(num_shards), index_(index) {
    CHORUS_REQUIRE(num_shards > 0, InvalidArgumentError,
                   "shard: number of shards must be greater than zero (currently num_shards = ", num_shards, ")");
    CHORUS_REQUIRE(index >= 0 && index < num_shards, InvalidArgumentError, "shard: index must be between 0 and ",
                   num_shards - 1, " (currently index = ", index, ")");
  }
  std::string name() const override { return "ShardDataset"; }
  std::int64_t cardinality() const override {
    const std::int64_t n = input_->cardinality();
    if (n < 0) return n;
    return n / num_shards_ + (index_ < n % num_shards_ ? 1 : 0);
  }
  std::unique_ptr<IteratorBase> make_iterator() const override {
    class It final : public IteratorBase {
     public:
      It(std::unique_ptr<IteratorBase> in, std::int64_t n, std::int64_t index)
          : in_(std::move(in)), n_(n), index_(index) {}
      std::optional<Element> next() override {
        // Reads input elements pos_ .. up to the next one with pos % n == index (TF: it stops at
        // the input's end without reading past it).
        for (;;) {
          auto e = in_->next();
          if (!e) return std::nullopt;
          const std::int64_t pos = pos_++;
          if (pos % n_ == index_) return e;
        }
      }
      void save(IteratorState& state, const std::string& prefix) override {
        state.set_int(prefix + "shard.pos", pos_);
        in_->save(state, input_prefix(prefix));
      }
      void restore(const IteratorState& state, const std::string& prefix) override {
        const std::int64_t pos = state.get_int(prefix + "shard.pos");
        CHORUS_REQUIRE(pos >= 0, InvalidArgumentError, "iterator state: shard position ", pos, " is negative");
        pos_ = pos;
        in_->restore(state, input_prefix(prefix));
      }

     private:
      std::unique_ptr<IteratorBase> in_;
      std::int64_t n_, index_;
      std::int64_t pos_ = 0;  // input elements read
    };
    return std::make_unique<It>(input_->make_iterator(), num_shards_, index_);
  }

 private:
  std::shared_ptr<const DatasetBase> input_;
  std::int64_t num_shards_, index_;
};

class FlatMapDataset final : public DatasetBase {
 public:
  FlatMapDataset(std::shared_ptr<const DatasetBase> input, DatasetFn fn)
      : input_(std::move(input)), fn_(std::move(fn)) {
    CHORUS_REQUIRE(fn_ != nullptr, InvalidArgumentError, "flat_map: the function is empty");
  }
  std::string name() const override { return "FlatMapDataset"; }
  std::int64_t cardinality() const override { return input_->cardinality() == 0 ? 0 : kUnknownCardinality; }
  std::unique_ptr<IteratorBase> make_iterator() const override {
    class It final : public IteratorBase {
     public:
      explicit It(std::shared_ptr<const FlatMapDataset> ds)
          : ds_(std::move(ds)), in_(ds_->input_->make_iterator()), device_(internal::pipeline_device()) {}
      std::optional<Element> next() override {
        for (;;) {
          if (inner_) {
            auto e = inner_->next();
            if (e) return e;
            inner_.reset();
          }
          auto arg = in_->next();
          if (!arg) return std::nullopt;
          open(*arg);
        }
      }
      void save(IteratorState& state, const std::string& prefix) override {
        in_->save(state, input_prefix(prefix));
        state.set_int(prefix + "flat_map.has_inner", inner_ != nullptr);
        if (inner_) {
          internal::save_element(state, prefix + "flat_map.arg", arg_);
          inner_->save(state, prefix + "flat_map.inner/");
        }
      }
      void restore(const IteratorState& state, const std::string& prefix) override {
        in_->restore(state, input_prefix(prefix));
        inner_.reset();
        if (state.get_int(prefix + "flat_map.has_inner") != 0) {
          open(internal::load_element(state, prefix + "flat_map.arg"));
          inner_->restore(state, prefix + "flat_map.inner/");
        }
      }

     private:
      void open(Element arg) {
        DeviceScope scope(device_);
        Dataset d = ds_->fn_(arg);
        CHORUS_REQUIRE(d.defined(), InvalidArgumentError, "flat_map: the function returned an undefined Dataset");
        inner_ = d.impl()->make_iterator();
        arg_ = std::move(arg);
      }
      std::shared_ptr<const FlatMapDataset> ds_;
      std::unique_ptr<IteratorBase> in_;
      std::unique_ptr<IteratorBase> inner_;  // the current inner dataset's iterator
      Element arg_;                          // the input element it was made from
      std::string device_;
    };
    return std::make_unique<It>(std::static_pointer_cast<const FlatMapDataset>(shared_from_this()));
  }

 private:
  std::shared_ptr<const DatasetBase> input_;
  DatasetFn fn_;
};

}  // namespace

Dataset Dataset::filter(PredicateFn predicate) const {
  return Dataset(std::make_shared<FilterDataset>(get().shared_from_this(), std::move(predicate)));
}
Dataset Dataset::zip(const std::vector<Dataset>& datasets) {
  std::vector<std::shared_ptr<const DatasetBase>> inputs;
  for (const Dataset& d : datasets) inputs.push_back(d.get().shared_from_this());
  return Dataset(std::make_shared<ZipDataset>(std::move(inputs)));
}
Dataset Dataset::concatenate(const Dataset& other) const {
  return Dataset(std::make_shared<ConcatenateDataset>(get().shared_from_this(), other.get().shared_from_this()));
}
Dataset Dataset::enumerate(std::int64_t start) const {
  return Dataset(std::make_shared<EnumerateDataset>(get().shared_from_this(), start));
}
Dataset Dataset::shard(std::int64_t num_shards, std::int64_t index) const {
  return Dataset(std::make_shared<ShardDataset>(get().shared_from_this(), num_shards, index));
}
Dataset Dataset::flat_map(DatasetFn fn) const {
  return Dataset(std::make_shared<FlatMapDataset>(get().shared_from_this(), std::move(fn)));
}

}  // namespace chorus::data
