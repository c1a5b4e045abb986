// Dataset core: IteratorState, the iterator classes, element/error (de)serialization, and the
// Dataset handle itself. Sources are in sources.cc, the single-threaded transformations in
// transformations.cc, map and prefetch (which own threads) in parallel.cc.
#include <chorus/data/dataset.h>

#include <algorithm>

#include <chorus/core/device_spec.h>
#include <chorus/core/error.h>
#include <chorus/core/placement.h>
#include <chorus/data/internal.h>
#include <chorus/ops/shape_ops.h>

namespace chorus::data {

using chorus::internal::str_cat;

// ---------------------------------------------------------------------------------------------
// IteratorState, IteratorBase, Iterator

std::int64_t IteratorState::get_int(const std::string& key) const {
  auto it = ints_.find(key);
  CHORUS_REQUIRE(it != ints_.end(), NotFoundError, "iterator state has no integer '", key,
                 "': it was saved by a different pipeline (", ints_.size(), " integers, ", tensors_.size(),
                 " tensors)");
  return it->second;
}

const Tensor& IteratorState::get_tensor(const std::string& key) const {
  auto it = tensors_.find(key);
  CHORUS_REQUIRE(it != tensors_.end(), NotFoundError, "iterator state has no tensor '", key,
                 "': it was saved by a different pipeline (", ints_.size(), " integers, ", tensors_.size(),
                 " tensors)");
  return it->second;
}

void IteratorBase::save(IteratorState&, const std::string& prefix) {
  throw UnimplementedError(str_cat("this iterator (at '", prefix,
                                   "') does not support save(); override save() and "
                                   "restore() in a user-defined IteratorBase to checkpoint it"));
}
void IteratorBase::restore(const IteratorState&, const std::string& prefix) {
  throw UnimplementedError(str_cat("this iterator (at '", prefix, "') does not support restore()"));
}

std::optional<Element> Iterator::next() {
  CHORUS_REQUIRE(impl_ != nullptr, FailedPreconditionError, "use of a moved-from data::Iterator");
  return impl_->next();
}
IteratorState Iterator::save() {
  CHORUS_REQUIRE(impl_ != nullptr, FailedPreconditionError, "use of a moved-from data::Iterator");
  IteratorState state;
  impl_->save(state, "");
  return state;
}
void Iterator::restore(const IteratorState& state) {
  CHORUS_REQUIRE(impl_ != nullptr, FailedPreconditionError, "use of a moved-from data::Iterator");
  impl_->restore(state, "");
}

// ---------------------------------------------------------------------------------------------
// internal helpers

namespace internal {

std::string pipeline_device() {
  DeviceSpec spec = current_device_spec();
  if (!spec.type) return "/CPU:0";
  if (!spec.index) spec.index = 0;
  return spec.to_string();
}

std::string host_device_for(const std::string& device) {
  const DeviceSpec spec = DeviceSpec::parse(device);
  return spec.type && *spec.type != "CPU" ? std::string("/CPU:0") : device;
}

Tensor slice_row(const Tensor& c, std::int64_t i) {
  const auto& dims = c.shape().dims();
  std::vector<std::int64_t> rest(dims.begin() + 1, dims.end());
  if (!c.is_string()) {
    std::vector<std::int64_t> begin(dims.size(), 0), size = dims;
    begin[0] = i;
    size[0] = 1;
    return ops::reshape(ops::slice(c, begin, size), rest);
  }
  CHORUS_REQUIRE(!dims.empty() && i >= 0 && i < dims[0], InvalidArgumentError, "row ", i,
                 " of a string tensor of shape ", c.shape().to_string());
  Tensor out = Tensor::empty(Shape(rest), DType::kString, c.device_name());
  const std::int64_t n = out.num_elements();
  const std::span<const std::string> src = c.strings();
  std::copy_n(src.begin() + i * n, n, out.mutable_strings().begin());
  return out;
}

Tensor stack_rows(const std::vector<Tensor>& parts) {
  CHORUS_REQUIRE(!parts.empty(), InvalidArgumentError, "stack of no tensors");
  if (!parts[0].is_string()) return ops::stack(parts, 0);
  std::vector<std::int64_t> dims{static_cast<std::int64_t>(parts.size())};
  const auto& row = parts[0].shape().dims();
  dims.insert(dims.end(), row.begin(), row.end());
  Tensor out = Tensor::empty(Shape(dims), DType::kString, parts[0].device_name());
  const std::span<std::string> dst = out.mutable_strings();
  std::size_t at = 0;
  for (const Tensor& p : parts) {
    const std::span<const std::string> src = p.strings();
    std::copy(src.begin(), src.end(), dst.begin() + static_cast<std::ptrdiff_t>(at));
    at += src.size();
  }
  return out;
}

void save_element(IteratorState& state, const std::string& key, const Element& element) {
  state.set_int(key + ".size", static_cast<std::int64_t>(element.size()));
  for (std::size_t c = 0; c < element.size(); ++c) state.set_tensor(str_cat(key, ".", c), element[c]);
}

Element load_element(const IteratorState& state, const std::string& key) {
  const std::int64_t n = state.get_int(key + ".size");
  CHORUS_REQUIRE(n >= 0, InvalidArgumentError, "iterator state: '", key, ".size' is ", n, ", must be >= 0");
  Element e;
  for (std::int64_t c = 0; c < n; ++c) e.push_back(state.get_tensor(str_cat(key, ".", c)));
  return e;
}

void save_error(IteratorState& state, const std::string& key, const std::exception_ptr& error) {
  ErrorCode code = ErrorCode::kUnknown;
  std::string message;
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    code = e.code();
    message = e.message();
  } catch (const std::exception& e) {
    message = e.what();
  } catch (...) {
    message = "unknown exception";
  }
  state.set_int(key + ".code", static_cast<std::int64_t>(code));
  std::vector<std::uint8_t> bytes(message.begin(), message.end());
  state.set_tensor(key + ".message", Tensor::from_vector(bytes, "/CPU:0"));
}

std::exception_ptr load_error(const IteratorState& state, const std::string& key) {
  const auto code = static_cast<ErrorCode>(state.get_int(key + ".code"));
  const auto bytes = state.get_tensor(key + ".message").to_vector<std::uint8_t>();
  try {
    throw_error(code, std::string(bytes.begin(), bytes.end()));
  } catch (...) {
    return std::current_exception();
  }
}

}  // namespace internal

// ---------------------------------------------------------------------------------------------
// Dataset

const DatasetBase& Dataset::get() const {
  CHORUS_REQUIRE(impl_ != nullptr, FailedPreconditionError, "use of an undefined (default-constructed) Dataset");
  return *impl_;
}

Iterator Dataset::make_iterator() const { return Iterator(get().make_iterator()); }
std::int64_t Dataset::cardinality() const { return get().cardinality(); }

}  // namespace chorus::data
