// The sources: from_tensor_slices, from_tensors, range.
#include <chorus/core/error.h>
#include <chorus/data/dataset.h>
#include <chorus/data/internal.h>

namespace chorus::data {

using chorus::internal::str_cat;

namespace {

class SliceDataset final : public DatasetBase {
 public:
  explicit SliceDataset(std::vector<Tensor> components) : components_(std::move(components)) {
    CHORUS_REQUIRE(!components_.empty(), InvalidArgumentError, "from_tensor_slices: no components");
    for (std::size_t i = 0; i < components_.size(); ++i) {
      const Tensor& c = components_[i];
      CHORUS_REQUIRE(c.defined(), InvalidArgumentError, "from_tensor_slices: component ", i, " is undefined");
      CHORUS_REQUIRE(c.shape().rank() >= 1, InvalidArgumentError, "from_tensor_slices: component ", i,
                     " is a scalar; every component needs a first dimension to slice");
      CHORUS_REQUIRE(c.shape().dims()[0] == components_[0].shape().dims()[0], InvalidArgumentError,
                     "from_tensor_slices: component ", i, " has ", c.shape().dims()[0], " rows (shape ",
                     c.shape().to_string(), ") but component 0 has ", components_[0].shape().dims()[0]);
    }
  }
  std::string name() const override { return "TensorSliceDataset"; }
  std::int64_t cardinality() const override { return components_[0].shape().dims()[0]; }

  std::unique_ptr<IteratorBase> make_iterator() const override {
    class It final : public IteratorBase {
     public:
      explicit It(std::shared_ptr<const SliceDataset> ds) : keep_(std::move(ds)), ds_(*keep_) {}
      std::optional<Element> next() override {
        if (i_ >= ds_.cardinality()) return std::nullopt;
        Element e;
        for (const Tensor& c : ds_.components_) e.push_back(internal::slice_row(c, i_));
        ++i_;
        return e;
      }
      void save(IteratorState& state, const std::string& prefix) override { state.set_int(prefix + "slices.next", i_); }
      void restore(const IteratorState& state, const std::string& prefix) override {
        const std::int64_t i = state.get_int(prefix + "slices.next");
        CHORUS_REQUIRE(i >= 0 && i <= ds_.cardinality(), InvalidArgumentError,
                       "iterator state: from_tensor_slices position ", i, " is outside [0, ", ds_.cardinality(), "]");
        i_ = i;
      }

     private:
      std::shared_ptr<const SliceDataset> keep_;
      const SliceDataset& ds_;
      std::int64_t i_ = 0;
    };
    return std::make_unique<It>(std::static_pointer_cast<const SliceDataset>(shared_from_this()));
  }

 private:
  std::vector<Tensor> components_;
};

class TensorsDataset final : public DatasetBase {
 public:
  explicit TensorsDataset(std::vector<Tensor> components) : components_(std::move(components)) {
    for (std::size_t i = 0; i < components_.size(); ++i)
      CHORUS_REQUIRE(components_[i].defined(), InvalidArgumentError, "from_tensors: component ", i, " is undefined");
  }
  std::string name() const override { return "TensorDataset"; }
  std::int64_t cardinality() const override { return 1; }
  std::unique_ptr<IteratorBase> make_iterator() const override {
    class It final : public IteratorBase {
     public:
      explicit It(Element e) : e_(std::move(e)) {}
      std::optional<Element> next() override {
        if (done_) return std::nullopt;
        done_ = true;
        return e_;
      }
      void save(IteratorState& state, const std::string& prefix) override {
        state.set_int(prefix + "tensors.done", done_);
      }
      void restore(const IteratorState& state, const std::string& prefix) override {
        done_ = state.get_int(prefix + "tensors.done") != 0;
      }

     private:
      Element e_;
      bool done_ = false;
    };
    return std::make_unique<It>(components_);
  }

 private:
  std::vector<Tensor> components_;
};

class RangeDataset final : public DatasetBase {
 public:
  RangeDataset(std::int64_t start, std::int64_t stop, std::int64_t step) : start_(start), stop_(stop), step_(step) {
    CHORUS_REQUIRE(step != 0, InvalidArgumentError, "range: step must not be 0 (start ", start, ", stop ", stop, ")");
  }
  std::string name() const override { return "RangeDataset"; }
  std::int64_t cardinality() const override {
    // ceil((stop - start) / step) in the direction of step, computed without overflow for sane ranges.
    if (step_ > 0) return stop_ <= start_ ? 0 : (stop_ - start_ - 1) / step_ + 1;
    return stop_ >= start_ ? 0 : (start_ - stop_ - 1) / (-step_) + 1;
  }
  std::unique_ptr<IteratorBase> make_iterator() const override {
    class It final : public IteratorBase {
     public:
      It(std::shared_ptr<const RangeDataset> ds) : ds_(std::move(ds)), device_(internal::pipeline_device()) {}
      std::optional<Element> next() override {
        if (i_ >= ds_->cardinality()) return std::nullopt;
        const std::int64_t v = ds_->start_ + i_ * ds_->step_;
        ++i_;
        return Element{Tensor::scalar<std::int64_t>(v, device_)};
      }
      void save(IteratorState& state, const std::string& prefix) override { state.set_int(prefix + "range.index", i_); }
      void restore(const IteratorState& state, const std::string& prefix) override {
        const std::int64_t i = state.get_int(prefix + "range.index");
        CHORUS_REQUIRE(i >= 0 && i <= ds_->cardinality(), InvalidArgumentError, "iterator state: range index ", i,
                       " is outside [0, ", ds_->cardinality(), "]");
        i_ = i;
      }

     private:
      std::shared_ptr<const RangeDataset> ds_;
      std::string device_;
      std::int64_t i_ = 0;  // elements produced
    };
    return std::make_unique<It>(std::static_pointer_cast<const RangeDataset>(shared_from_this()));
  }

 private:
  std::int64_t start_, stop_, step_;
};

}  // namespace

Dataset Dataset::from_tensor_slices(const std::vector<Tensor>& components) {
  return Dataset(std::make_shared<SliceDataset>(components));
}
Dataset Dataset::from_tensors(const std::vector<Tensor>& components) {
  return Dataset(std::make_shared<TensorsDataset>(components));
}
Dataset Dataset::range(std::int64_t stop) { return range(0, stop, 1); }
Dataset Dataset::range(std::int64_t start, std::int64_t stop, std::int64_t step) {
  return Dataset(std::make_shared<RangeDataset>(start, stop, step));
}

}  // namespace chorus::data
