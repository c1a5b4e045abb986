// Shape and indexing ops (tf.reshape, transpose, concat, split, slice, gather, one_hot, pad, ...).
//
// Every op returns a new dense tensor (chorus tensors are always contiguous, row-major, as TF's;
// transpose and slice copy). All are differentiable with respect to their float inputs except
// one_hot; gather's gradient is a dense scatter-add (TF builds IndexedSlices; chorus sums into a
// dense tensor of the params' shape). Bad arguments → InvalidArgumentError with the numbers.
#pragma once

#include <cstdint>
#include <vector>

#include <chorus/core/tensor.h>

namespace chorus::ops {

// One dimension may be -1 (inferred). The result shares x's storage (like Tensor::reshape) but is
// a new tensor for the tape.
Tensor reshape(const Tensor& x, const std::vector<std::int64_t>& shape);
// perm empty: reverse the axes (TF's default).
Tensor transpose(const Tensor& x, const std::vector<int>& perm = {});
Tensor concat(const std::vector<Tensor>& xs, int axis);
// Into `num` equal parts along axis (InvalidArgumentError if the dim is not divisible).
std::vector<Tensor> split(const Tensor& x, int num, int axis);
// Into parts of the given sizes (one may be -1).
std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes, int axis);
// x[begin : begin + size] per dim; size -1 = to the end (tf.slice).
Tensor slice(const Tensor& x, const std::vector<std::int64_t>& begin, const std::vector<std::int64_t>& size);
// params gathered along `axis` at int32/int64 `indices` (tf.gather; embedding lookup with axis 0).
// Output shape: params.shape[:axis] + indices.shape + params.shape[axis+1:]. An index outside
// [0, dim): InvalidArgumentError on the CPU (at the next read); a zero row on the GPU (as TF).
Tensor gather(const Tensor& params, const Tensor& indices, int axis = 0);
// indices (int32/int64, any shape) → indices.shape + [depth] of `dtype`; out-of-range → all off.
Tensor one_hot(const Tensor& indices, std::int64_t depth, double on_value = 1.0, double off_value = 0.0,
               DType dtype = DType::kFloat32);
// paddings: one {before, after} pair per dim, >= 0 (tf.pad, mode CONSTANT).
Tensor pad(const Tensor& x, const std::vector<std::pair<std::int64_t, std::int64_t>>& paddings, double constant = 0.0);
Tensor broadcast_to(const Tensor& x, const Shape& shape);
Tensor expand_dims(const Tensor& x, int axis);
// Removes the given size-1 axes (all size-1 axes when empty).
Tensor squeeze(const Tensor& x, const std::vector<int>& axes = {});
Tensor stack(const std::vector<Tensor>& xs, int axis = 0);

}  // namespace chorus::ops
