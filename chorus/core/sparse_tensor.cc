#include <chorus/core/sparse_tensor.h>

#include <algorithm>
#include <cstring>

#include <chorus/core/error.h>
#include <chorus/core/sparse_ragged_internal.h>

namespace chorus {
namespace internal {

std::vector<std::int64_t> host_int64s(const Tensor& t, const char* what) {
  CHORUS_REQUIRE(t.defined(), InvalidArgumentError, what, " is undefined");
  CHORUS_REQUIRE(t.dtype() == DType::kInt64, InvalidArgumentError, what, " must be int64; got ", dtype_name(t.dtype()));
  std::vector<std::int64_t> out(static_cast<std::size_t>(t.num_elements()));
  if (!out.empty()) t.copy_to_host(out.data());
  return out;
}

namespace {

// assemble_rows for string tensors: elements are std::string objects (no memcpy), on the host.
Tensor assemble_string_rows(const Tensor& values, std::int64_t row_elems, const Shape& out_shape,
                            const std::vector<std::pair<std::int64_t, std::int64_t>>& moves,
                            const Tensor& default_value) {
  Tensor out = Tensor::empty(out_shape, DType::kString, values.device_name());
  const std::span<std::string> dst = out.mutable_strings();
  if (default_value.defined()) std::fill(dst.begin(), dst.end(), default_value.strings()[0]);
  const std::span<const std::string> src = values.strings();
  for (const auto& [from, to] : moves)
    for (std::int64_t k = 0; k < row_elems; ++k)
      dst[static_cast<std::size_t>(to * row_elems + k)] = src[static_cast<std::size_t>(from * row_elems + k)];
  return out;
}

}  // namespace

Tensor assemble_rows(const Tensor& values, std::int64_t row_elems, const Shape& out_shape,
                     const std::vector<std::pair<std::int64_t, std::int64_t>>& moves, const Tensor& default_value,
                     const char* op) {
  const DType dtype = values.dtype();
  if (default_value.defined())
    CHORUS_REQUIRE(default_value.dtype() == dtype && default_value.shape().rank() == 0, InvalidArgumentError, op,
                   ": default_value must be a scalar of the values' dtype ", dtype_name(dtype), "; got ",
                   dtype_name(default_value.dtype()), " of shape ", default_value.shape().to_string());
  if (dtype == DType::kString) return assemble_string_rows(values, row_elems, out_shape, moves, default_value);
  const std::size_t width = dtype_size(dtype);
  std::vector<unsigned char> out(static_cast<std::size_t>(out_shape.num_elements()) * width, 0);
  if (default_value.defined()) {
    std::vector<unsigned char> d(width);
    default_value.copy_to_host(d.data());
    for (std::size_t at = 0; at < out.size(); at += width) std::memcpy(out.data() + at, d.data(), width);
  }
  std::vector<unsigned char> src(values.nbytes());
  if (!src.empty()) values.copy_to_host(src.data());
  const std::size_t row_bytes = static_cast<std::size_t>(row_elems) * width;
  for (const auto& [from, to] : moves) {
    if (row_bytes == 0) break;
    std::memcpy(out.data() + static_cast<std::size_t>(to) * row_bytes,
                src.data() + static_cast<std::size_t>(from) * row_bytes, row_bytes);
  }
  return Tensor::from_host(out.data(), out_shape, dtype, values.device_name());
}

}  // namespace internal

namespace {

std::string index_row(const std::vector<std::int64_t>& idx, std::int64_t row, int rank) {
  std::string s = "[";
  for (int d = 0; d < rank; ++d) {
    if (d > 0) s += ",";
    s += std::to_string(idx[static_cast<std::size_t>(row * rank + d)]);
  }
  return s + "]";
}

}  // namespace

SparseTensor::SparseTensor(Tensor indices, Tensor values, Shape dense_shape)
    : indices_(std::move(indices)), values_(std::move(values)), dense_shape_(std::move(dense_shape)) {
  CHORUS_REQUIRE(indices_.defined() && values_.defined(), InvalidArgumentError,
                 "SparseTensor: indices and values must be defined tensors");
  const int rank = dense_shape_.rank();
  CHORUS_REQUIRE(indices_.dtype() == DType::kInt64 && indices_.shape().rank() == 2, InvalidArgumentError,
                 "SparseTensor: indices must be an int64 matrix [N, rank]; got ", dtype_name(indices_.dtype()), " ",
                 indices_.shape().to_string());
  CHORUS_REQUIRE(indices_.shape().dim(1) == rank, InvalidArgumentError, "SparseTensor: indices ",
                 indices_.shape().to_string(), " has ", indices_.shape().dim(1), " columns but dense_shape ",
                 dense_shape_.to_string(), " has rank ", rank);
  CHORUS_REQUIRE(values_.shape().rank() == 1 && values_.shape().dim(0) == indices_.shape().dim(0), InvalidArgumentError,
                 "SparseTensor: values must be a vector [N] with N = indices.dim(0) = ", indices_.shape().dim(0),
                 "; got ", values_.shape().to_string());
  for (int d = 0; d < rank; ++d)
    CHORUS_REQUIRE(dense_shape_.dim(d) >= 0, InvalidArgumentError, "SparseTensor: dense_shape ",
                   dense_shape_.to_string(), " has a negative dimension");
  const std::vector<std::int64_t> idx = internal::host_int64s(indices_, "SparseTensor: indices");
  const std::int64_t n = indices_.shape().dim(0);
  const std::vector<std::int64_t>& dims = dense_shape_.dims();
  for (std::int64_t i = 0; i < n; ++i)
    for (int d = 0; d < rank; ++d) {
      const std::int64_t v = idx[static_cast<std::size_t>(i * rank + d)];
      CHORUS_REQUIRE(v >= 0 && v < dims[static_cast<std::size_t>(d)], InvalidArgumentError, "SparseTensor: indices[", i,
                     "] = ", index_row(idx, i, rank), " is out of bounds: need 0 <= index < ",
                     dense_shape_.to_string());
    }
}

Tensor SparseTensor::dense_shape_tensor() const {
  return Tensor::from_vector<std::int64_t>(dense_shape_.dims(), Shape{rank()});
}

Tensor SparseTensor::to_dense(const Tensor& default_value) const {
  CHORUS_REQUIRE(values_.defined(), InvalidArgumentError, "to_dense: undefined SparseTensor");
  const int rank = this->rank();
  (void)dense_shape_.num_elements();  // InvalidArgumentError if it overflows int64
  const std::vector<std::int64_t> idx = internal::host_int64s(indices_, "SparseTensor: indices");
  std::vector<std::pair<std::int64_t, std::int64_t>> moves;
  moves.reserve(static_cast<std::size_t>(nnz()));
  std::int64_t previous = -1;
  for (std::int64_t i = 0; i < nnz(); ++i) {
    std::int64_t flat = 0;
    for (int d = 0; d < rank; ++d) flat = flat * dense_shape_.dim(d) + idx[static_cast<std::size_t>(i * rank + d)];
    CHORUS_REQUIRE(flat != previous, InvalidArgumentError, "to_dense: indices[", i, "] = ", index_row(idx, i, rank),
                   " is repeated");
    CHORUS_REQUIRE(flat > previous, InvalidArgumentError, "to_dense: indices[", i, "] = ", index_row(idx, i, rank),
                   " is out of order. Many sparse ops require sorted indices (row-major); reorder them first");
    previous = flat;
    moves.emplace_back(i, flat);
  }
  return internal::assemble_rows(values_, 1, dense_shape_, moves, default_value, "to_dense");
}

}  // namespace chorus
