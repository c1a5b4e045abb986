// Reductions along axes (tf.reduce_sum, reduce_mean, reduce_max, reduce_min, argmax, argmin).
//
//   Tensor total = ops::reduce_sum(x);                 // all axes → scalar
//   Tensor col   = ops::reduce_mean(x, {0}, true);     // axis 0, keepdims → shape (1, n)
//
// Axes may be negative (counted from the end); duplicates or out-of-range → InvalidArgumentError.
// Results are deterministic: a fixed summation order (CPU: double accumulation; GPU: a fixed tree).
// An empty reduction gives the identity (0 for sum, NaN for mean of nothing as TF, -inf/+inf for
// max/min of floats). Gradients: sum and mean broadcast back; max/min split the gradient evenly
// among tied maxima (TF's rule). argmax/argmin return int64 and have no gradient.
#pragma once

#include <initializer_list>
#include <vector>

#include <chorus/core/tensor.h>

namespace chorus::ops {

// Which axes to reduce: all of them (default), or a list.
struct Axes {
  Axes() = default;
  Axes(int axis) : list{axis}, all(false) {}  // NOLINT: implicit so that reduce_sum(x, 1) reads well
  Axes(std::initializer_list<int> axes) : list(axes), all(false) {}
  Axes(std::vector<int> axes) : list(std::move(axes)), all(false) {}  // NOLINT
  std::vector<int> list;
  bool all = true;
};

Tensor reduce_sum(const Tensor& x, const Axes& axes = {}, bool keepdims = false);
Tensor reduce_mean(const Tensor& x, const Axes& axes = {}, bool keepdims = false);
Tensor reduce_max(const Tensor& x, const Axes& axes = {}, bool keepdims = false);
Tensor reduce_min(const Tensor& x, const Axes& axes = {}, bool keepdims = false);
Tensor argmax(const Tensor& x, int axis = 0);
Tensor argmin(const Tensor& x, int axis = 0);

// The gradient helper of broadcasting ops: sums `g` over the dimensions that broadcasting added
// or stretched so that the result has `shape` (TF's reduction in BroadcastGradientArgs).
Tensor sum_to_shape(const Tensor& g, const Shape& shape);

}  // namespace chorus::ops
