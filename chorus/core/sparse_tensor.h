// SparseTensor: tf.sparse.SparseTensor as a small value type — the COO layout TensorFlow uses for
// VarLenFeature outputs of tf.io.parse_example (data/io/example.h) and for tf.sparse ops.
//
//   indices      int64 [N, rank]  the coordinates of the N stored values, one row each
//   values       any dtype [N]    the stored values, in the order of `indices`
//   dense_shape  rank dims >= 0   the shape of the dense tensor this stands for
//
//   // [[1, 0, 2],
//   //  [0, 0, 0]]  as sparse:
//   SparseTensor st(Tensor::from_vector<std::int64_t>({0, 0, 0, 2}, {2, 2}),
//                   Tensor::from_vector<float>({1, 2}), Shape{2, 3});
//   Tensor d = st.to_dense();   // float [2, 3]; positions not in `indices` hold 0
//
// Invariants, checked by the constructor (InvalidArgumentError naming the bad index and value,
// worded like TF's SparseTensor checks): indices is int64 of rank 2 with indices.dim(1) == rank of
// dense_shape; values is rank 1 with values.dim(0) == indices.dim(0); every dense_shape dim >= 0;
// every index row lies inside dense_shape. As in TF, the constructor does NOT require the rows to
// be sorted or unique (tf.sparse.reorder fixes that); to_dense() requires both (TF's
// validate_indices=True) and says which row breaks the order.
//
// Value semantics: copying a SparseTensor copies the Tensor handles (shared storage, as Tensor).
// The tensors may live on any device; the host-side methods (the checks, to_dense) wait for pending
// work and copy to the host, so they cost O(N) host work — they are for inputs and tests, not for
// inner loops. to_dense's output is on values' device. Thread-safety: as Tensor (concurrent
// readers fine).
#pragma once

#include <cstdint>
#include <vector>

#include <chorus/core/shape.h>
#include <chorus/core/tensor.h>

namespace chorus {

class SparseTensor {
 public:
  SparseTensor() = default;  // undefined: indices(), values() are undefined tensors, rank 0
  // Validates the invariants above (the indices are copied to the host once for the bounds check).
  SparseTensor(Tensor indices, Tensor values, Shape dense_shape);

  const Tensor& indices() const { return indices_; }
  const Tensor& values() const { return values_; }
  const Shape& dense_shape() const { return dense_shape_; }
  // dense_shape as TF holds it: an int64 tensor [rank] on the host.
  Tensor dense_shape_tensor() const;
  DType dtype() const { return values_.dtype(); }
  int rank() const { return dense_shape_.rank(); }
  // Number of stored values, N.
  std::int64_t nnz() const { return values_.defined() ? values_.shape().dim(0) : 0; }

  // tf.sparse.to_dense(sp, default_value): a tensor of dense_shape and values' dtype, default_value
  // (a scalar of values' dtype; undefined = zero, or "" for strings) where no index names a
  // position. Unsorted or repeated index rows → InvalidArgumentError ("indices[3] = [0,2] is out of
  // order" / "is repeated", as TF); a default of another dtype or not a scalar → InvalidArgumentError.
  Tensor to_dense(const Tensor& default_value = Tensor()) const;

 private:
  Tensor indices_;
  Tensor values_;
  Shape dense_shape_;
};

}  // namespace chorus
