// Gradient clipping as the optimizers' clipnorm / global_clipnorm / clipvalue options do it
// (Keras 3's BaseOptimizer._clip_gradients, tf.clip_by_norm, tf.clip_by_global_norm).
//
//   Tensor g2 = optimizers::clip_by_norm(g, 1.0);                     // ‖g2‖ <= 1
//   std::vector<Tensor> gs = optimizers::clip_by_global_norm(grads, 5.0);  // ‖all‖ <= 5
//
// Formulas:
//   clip_by_norm(g, c)        = g · c / max(‖g‖₂, c)   (‖g‖ over all elements; a zero gradient
//                               stays zero, no NaN: Keras's two-tap where on ‖g‖² > 0)
//   global_norm(gs)           = sqrt(Σ_i ‖g_i‖₂²)       (undefined entries skipped)
//   clip_by_global_norm(gs,c) = g_i · c · min(1 / global_norm, 1 / c) + (global_norm − global_norm)
//                               (the last term makes every entry NaN when the norm is inf/NaN, as Keras)
//   clip_by_value(g, lo, hi)  = min(max(g, lo), hi)
// Results are new tensors on the input's device, in its dtype; undefined inputs stay undefined.
// Sums of squares accumulate in float64 (Keras: in the gradient's dtype), so the clip factor does
// not depend on how a sum is split; every replica computes the same bits from the same input.
// Errors: clip_norm <= 0 or not finite, lo > hi → InvalidArgumentError; float dtypes only (ops/).
// Thread-safety: pure functions; GradientTape records them like any op (call them outside a tape
// or under StopRecording to avoid that).
#pragma once

#include <vector>

#include <chorus/core/tensor.h>

namespace chorus::optimizers {

Tensor clip_by_norm(const Tensor& gradient, double clip_norm);
// A float64 scalar on the first defined tensor's device; 0 when there is none.
Tensor global_norm(const std::vector<Tensor>& gradients);
std::vector<Tensor> clip_by_global_norm(const std::vector<Tensor>& gradients, double clip_norm);
Tensor clip_by_value(const Tensor& gradient, double clip_value_min, double clip_value_max);

// For gradients split over replicas (ZeRO stage 2, docs/sharding.md): the norms are computed
// from partial sums of squares combined across the replicas, then applied to each piece.
// Σ g² over all elements of `gradient`, a float64 scalar on its device (0 for no elements).
Tensor sum_of_squares(const Tensor& gradient);
// clip_by_norm / clip_by_global_norm with the norm given (a float64 scalar: ‖g‖, resp. the
// global norm): the same formulas, on any piece of the gradients.
Tensor clip_by_norm(const Tensor& gradient, double clip_norm, const Tensor& norm);
std::vector<Tensor> clip_by_global_norm(const std::vector<Tensor>& gradients, double clip_norm, const Tensor& norm);

}  // namespace chorus::optimizers
