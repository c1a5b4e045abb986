// Dataset: an input pipeline of elements, each a tuple of tensors (tf.data.Dataset, minimal).
//
//   auto ds = chorus::data::Dataset::from_tensor_slices({images, labels}).batch(64);
//   auto it = ds.make_iterator();
//   while (auto element = it.next()) { const Tensor& x = (*element)[0]; ... }
//
// A Dataset is an immutable description (cheap to copy); each make_iterator() starts a fresh
// pass. Elements are std::vector<Tensor> (the components, in order). This is the part the
// strategies need; the full pipeline (map, shuffle, prefetch, readers) builds on DatasetBase.
//
// Errors: components with different first dimensions, batch_size <= 0, a scalar component to
// slice → InvalidArgumentError naming the numbers.
// Thread-safety: a Dataset may be shared by threads; an Iterator is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace chorus::data {

using Element = std::vector<Tensor>;

class IteratorBase {
 public:
  virtual ~IteratorBase() = default;
  // The next element, or nullopt at the end (and on every later call).
  virtual std::optional<Element> next() = 0;
};

// Iterators keep their dataset alive (shared_from_this), so an Iterator may outlive its Dataset.
class DatasetBase : public std::enable_shared_from_this<DatasetBase> {
 public:
  virtual ~DatasetBase() = default;
  virtual std::unique_ptr<IteratorBase> make_iterator() const = 0;
  // "TensorSliceDataset", "BatchDataset", ... for messages.
  virtual std::string name() const = 0;
  // Number of elements, or -1 when unknown (tf.data.experimental.cardinality).
  virtual std::int64_t cardinality() const = 0;
};

class Iterator {
 public:
  explicit Iterator(std::unique_ptr<IteratorBase> impl) : impl_(std::move(impl)) {}
  std::optional<Element> next() { return impl_->next(); }

 private:
  std::unique_ptr<IteratorBase> impl_;
};

class Dataset {
 public:
  Dataset() = default;
  explicit Dataset(std::shared_ptr<const DatasetBase> impl) : impl_(std::move(impl)) {}

  // Element i is (c[i] for c in components): slices along axis 0, which must agree.
  static Dataset from_tensor_slices(const std::vector<Tensor>& components);
  // Consecutive elements stacked on a new axis 0; the last batch may be smaller unless
  // drop_remainder.
  Dataset batch(std::int64_t batch_size, bool drop_remainder = false) const;

  Iterator make_iterator() const;
  std::int64_t cardinality() const;
  bool defined() const { return impl_ != nullptr; }
  const std::shared_ptr<const DatasetBase>& impl() const { return impl_; }

 private:
  const DatasetBase& get() const;
  std::shared_ptr<const DatasetBase> impl_;
};

}  // namespace chorus::data
