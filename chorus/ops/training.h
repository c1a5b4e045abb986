// Fused optimizer updates (TF's training ops, tf.raw_ops.ResourceApplyAdam): one kernel that reads
// the gradient and writes the variable and its slots in place, instead of a dozen elementwise ops
// with their temporaries. Used by optimizer/adam.cc.
#pragma once

#include <chorus/core/tensor.h>

namespace chorus::ops {

// Adam's update, in place, elementwise, in this order and in the tensors' dtype (each step
// rounded as the equivalent sequence of ops::add/sub/mul/div/sqrt rounds it, so the result is
// bitwise that of optimizer/adam.cc's op sequence):
//   m <- m + (g - m) * (1 - beta_1)
//   v <- v + (g * g - v) * (1 - beta_2)
//   w <- w - (m * alpha) / (sqrt(v) + epsilon)
// where the scalars are first converted to the dtype (as ops::scalar_like does).
//
// Returns false and changes nothing when there is no fused kernel for the arguments: w, m, v, g
// not all defined, not all of one dtype (float32 or float64) and one shape, or not all on one CPU
// device. The caller then runs the op sequence. Runs in the device's stream order on the calling
// thread (ops/internal.h run_cpu), after any write hold on w, m or v ended (core/tensor.h: an
// async checkpoint still copying them); not recorded on gradient tapes (the update is not
// differentiable, as in TF).
bool apply_adam(Tensor& w, Tensor& m, Tensor& v, const Tensor& g, double alpha, double beta_1, double beta_2,
                double epsilon);

}  // namespace chorus::ops
