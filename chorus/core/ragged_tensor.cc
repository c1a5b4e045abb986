#include <chorus/core/ragged_tensor.h>

#include <algorithm>

#include <chorus/core/error.h>
#include <chorus/core/sparse_ragged_internal.h>

namespace chorus {
namespace {

// Elements per row of values (the product of its dims after the first).
std::int64_t inner_elems(const Shape& s) {
  std::int64_t n = 1;
  for (int d = 1; d < s.rank(); ++d) n *= s.dim(d);
  return n;
}

Shape with_leading(std::vector<std::int64_t> lead, const Shape& values_shape) {
  for (int d = 1; d < values_shape.rank(); ++d) lead.push_back(values_shape.dim(d));
  return Shape(std::move(lead));
}

}  // namespace

RaggedTensor::RaggedTensor(Tensor values, Tensor row_splits)
    : values_(std::move(values)), row_splits_(std::move(row_splits)) {
  CHORUS_REQUIRE(values_.defined() && values_.shape().rank() >= 1, InvalidArgumentError,
                 "RaggedTensor: values must have rank >= 1; got ",
                 values_.defined() ? values_.shape().to_string() : std::string("an undefined tensor"));
  CHORUS_REQUIRE(row_splits_.defined() && row_splits_.shape().rank() == 1 && row_splits_.num_elements() >= 1,
                 InvalidArgumentError, "RaggedTensor: row_splits must be a non-empty vector [nrows + 1]; got ",
                 row_splits_.defined() ? row_splits_.shape().to_string() : std::string("an undefined tensor"));
  splits_ = internal::host_int64s(row_splits_, "RaggedTensor: row_splits");
  CHORUS_REQUIRE(splits_[0] == 0, InvalidArgumentError, "RaggedTensor: row_splits[0] must be 0; got ", splits_[0]);
  for (std::size_t i = 1; i < splits_.size(); ++i)
    CHORUS_REQUIRE(splits_[i] >= splits_[i - 1], InvalidArgumentError, "RaggedTensor: row_splits must not decrease; ",
                   "row_splits[", i, "] = ", splits_[i], " < row_splits[", i - 1, "] = ", splits_[i - 1]);
  CHORUS_REQUIRE(splits_.back() == values_.shape().dim(0), InvalidArgumentError,
                 "RaggedTensor: the last row split must equal the number of values ", values_.shape().dim(0), "; got ",
                 splits_.back());
}

RaggedTensor RaggedTensor::from_row_lengths(Tensor values, const std::vector<std::int64_t>& row_lengths) {
  std::vector<std::int64_t> splits{0};
  for (std::size_t i = 0; i < row_lengths.size(); ++i) {
    CHORUS_REQUIRE(row_lengths[i] >= 0, InvalidArgumentError, "RaggedTensor::from_row_lengths: row_lengths[", i,
                   "] = ", row_lengths[i], " is negative");
    splits.push_back(splits.back() + row_lengths[i]);
  }
  return RaggedTensor(std::move(values), Tensor::from_vector(splits));
}

std::vector<std::int64_t> RaggedTensor::row_lengths() const {
  std::vector<std::int64_t> out;
  for (std::size_t i = 1; i < splits_.size(); ++i) out.push_back(splits_[i] - splits_[i - 1]);
  return out;
}

Tensor RaggedTensor::row(std::int64_t i) const {
  CHORUS_REQUIRE(i >= 0 && i < nrows(), OutOfRangeError, "RaggedTensor::row(", i, "): the tensor has ", nrows(),
                 " rows");
  const std::int64_t begin = splits_[static_cast<std::size_t>(i)];
  const std::int64_t length = splits_[static_cast<std::size_t>(i) + 1] - begin;
  std::vector<std::pair<std::int64_t, std::int64_t>> moves;
  for (std::int64_t k = 0; k < length; ++k) moves.emplace_back(begin + k, k);
  return internal::assemble_rows(values_, inner_elems(values_.shape()), with_leading({length}, values_.shape()), moves,
                                 Tensor(), "RaggedTensor::row");
}

Tensor RaggedTensor::to_tensor(const Tensor& default_value) const {
  CHORUS_REQUIRE(values_.defined(), InvalidArgumentError, "RaggedTensor::to_tensor: undefined RaggedTensor");
  std::int64_t longest = 0;
  for (std::int64_t n : row_lengths()) longest = std::max(longest, n);
  std::vector<std::pair<std::int64_t, std::int64_t>> moves;
  for (std::int64_t r = 0; r < nrows(); ++r)
    for (std::int64_t k = splits_[static_cast<std::size_t>(r)]; k < splits_[static_cast<std::size_t>(r) + 1]; ++k)
      moves.emplace_back(k, r * longest + (k - splits_[static_cast<std::size_t>(r)]));
  return internal::assemble_rows(values_, inner_elems(values_.shape()),
                                 with_leading({nrows(), longest}, values_.shape()), moves, default_value,
                                 "RaggedTensor::to_tensor");
}

}  // namespace chorus
