// RaggedTensor: tf.RaggedTensor with one ragged dimension, as a small value type — the output of a
// RaggedFeature in tf.io.parse_example (data/io/example.h): rows of different lengths stored as
// one flat `values` tensor and int64 `row_splits`.
//
//   values      any dtype [total, d1, ...]  the rows' elements, row after row
//   row_splits  int64 [nrows + 1]           row i is values[row_splits[i] : row_splits[i + 1]]
//
//   // [[1, 2, 3], [], [4]]:
//   RaggedTensor rt(Tensor::from_vector<float>({1, 2, 3, 4}),
//                   Tensor::from_vector<std::int64_t>({0, 3, 3, 4}));
//   rt.nrows();              // 3
//   rt.row(0);               // float [3]: 1 2 3
//   rt.to_tensor();          // float [3, 3]: rows padded with 0 to the longest row
//
// Invariants, checked by the constructor (InvalidArgumentError saying which and the value seen,
// as tf.RaggedTensor.from_row_splits(validate=True)): values has rank >= 1; row_splits is int64 of
// rank 1 with at least one element; row_splits[0] == 0; row_splits never decreases;
// row_splits[nrows] == values.dim(0).
//
// Value semantics: copying shares the tensors' storage (as Tensor). The tensors may live on any
// device; row(), row_lengths() and to_tensor() wait for pending work and copy to the host (their
// outputs are on values' device), so row(i) costs O(size of values): for bulk access use values()
// and row_splits() or to_tensor(). Thread-safety: as Tensor.
#pragma once

#include <cstdint>
#include <vector>

#include <chorus/core/shape.h>
#include <chorus/core/tensor.h>

namespace chorus {

class RaggedTensor {
 public:
  RaggedTensor() = default;  // undefined: nrows() == 0
  RaggedTensor(Tensor values, Tensor row_splits);
  // From row lengths (tf.RaggedTensor.from_row_lengths): lengths >= 0 summing to values.dim(0).
  static RaggedTensor from_row_lengths(Tensor values, const std::vector<std::int64_t>& row_lengths);

  const Tensor& values() const { return values_; }
  const Tensor& row_splits() const { return row_splits_; }
  DType dtype() const { return values_.dtype(); }
  std::int64_t nrows() const { return splits_.empty() ? 0 : static_cast<std::int64_t>(splits_.size()) - 1; }
  // The splits as host integers (kept beside the tensor; nrows() + 1 of them).
  const std::vector<std::int64_t>& splits() const { return splits_; }
  std::vector<std::int64_t> row_lengths() const;

  // Row i (0 <= i < nrows(), else OutOfRangeError): values[splits[i]:splits[i+1]], shape
  // [length, d1, ...].
  Tensor row(std::int64_t i) const;
  // rt.to_tensor(default_value): [nrows, longest row, d1, ...], each row padded at the end with
  // default_value (a scalar of values' dtype; undefined = zero, or "" for strings; otherwise
  // InvalidArgumentError).
  Tensor to_tensor(const Tensor& default_value = Tensor()) const;

 private:
  Tensor values_;
  Tensor row_splits_;
  std::vector<std::int64_t> splits_;
};

}  // namespace chorus
