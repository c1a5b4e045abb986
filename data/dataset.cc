#include "data/dataset.h"

#include "core/error.h"
#include "ops/shape_ops.h"

namespace chorus::data {
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
        for (const Tensor& c : ds_.components_) {
          std::vector<std::int64_t> begin(static_cast<std::size_t>(c.shape().rank()), 0), size = c.shape().dims();
          begin[0] = i_;
          size[0] = 1;
          std::vector<std::int64_t> rest(c.shape().dims().begin() + 1, c.shape().dims().end());
          e.push_back(ops::reshape(ops::slice(c, begin, size), rest));
        }
        ++i_;
        return e;
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

class BatchDataset final : public DatasetBase {
 public:
  BatchDataset(std::shared_ptr<const DatasetBase> input, std::int64_t batch, bool drop)
      : input_(std::move(input)), batch_(batch), drop_(drop) {
    CHORUS_REQUIRE(batch_ > 0, InvalidArgumentError, "batch: batch_size must be > 0, got ", batch_);
  }
  std::string name() const override { return "BatchDataset"; }
  std::int64_t cardinality() const override {
    const std::int64_t n = input_->cardinality();
    if (n < 0) return n;
    return drop_ ? n / batch_ : (n + batch_ - 1) / batch_;
  }
  std::unique_ptr<IteratorBase> make_iterator() const override {
    class It final : public IteratorBase {
     public:
      It(std::unique_ptr<IteratorBase> in, std::int64_t batch, bool drop) : in_(std::move(in)), batch_(batch), drop_(drop) {}
      std::optional<Element> next() override {
        std::vector<Element> rows;
        while (static_cast<std::int64_t>(rows.size()) < batch_) {
          auto e = in_->next();
          if (!e) break;
          rows.push_back(std::move(*e));
        }
        if (rows.empty() || (drop_ && static_cast<std::int64_t>(rows.size()) < batch_)) return std::nullopt;
        Element out;
        for (std::size_t c = 0; c < rows[0].size(); ++c) {
          std::vector<Tensor> parts;
          for (auto& r : rows) {
            CHORUS_REQUIRE(r.size() == rows[0].size() && r[c].shape() == rows[0][c].shape(), InvalidArgumentError,
                           "batch: elements differ in structure or shape (component ", c, ": ",
                           rows[0][c].shape().to_string(), " vs ", r[c].shape().to_string(), ")");
            parts.push_back(r[c]);
          }
          out.push_back(ops::stack(parts, 0));
        }
        return out;
      }

     private:
      std::unique_ptr<IteratorBase> in_;
      std::int64_t batch_;
      bool drop_;
    };
    return std::make_unique<It>(input_->make_iterator(), batch_, drop_);
  }

 private:
  std::shared_ptr<const DatasetBase> input_;
  std::int64_t batch_;
  bool drop_;
};

}  // namespace

const DatasetBase& Dataset::get() const {
  CHORUS_REQUIRE(impl_ != nullptr, FailedPreconditionError, "use of an undefined (default-constructed) Dataset");
  return *impl_;
}

Dataset Dataset::from_tensor_slices(const std::vector<Tensor>& components) {
  return Dataset(std::make_shared<SliceDataset>(components));
}

Dataset Dataset::batch(std::int64_t batch_size, bool drop_remainder) const {
  get();
  return Dataset(std::make_shared<BatchDataset>(impl_, batch_size, drop_remainder));
}

Iterator Dataset::make_iterator() const { return Iterator(get().make_iterator()); }
std::int64_t Dataset::cardinality() const { return get().cardinality(); }

}  // namespace chorus::data
