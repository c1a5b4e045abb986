// Whether a tensor holds only finite numbers (tf.debugging.is_finite reduced with reduce_all), for
// the host-side decisions that need it: a LossScaleOptimizer skipping a step, ModelCheckpoint
// refusing NaN weights.
#pragma once

#include <vector>

#include <chorus/core/tensor.h>

namespace chorus::ops {

// True when no element of `x` is NaN or ±Inf (always for integer dtypes and for an empty tensor).
// One reduction on x's device (the sum of x − x: 0 for finite values, NaN otherwise) and one host
// read, which waits for x's device stream. An undefined tensor → InvalidArgumentError.
bool all_finite(const Tensor& x);
// The same over several tensors with one host read (the check TerminateOnNaN and the checkpoint
// manager make over all the gradients or variables of a step): each floating tensor's probe is
// reduced on its device, the probes summed in float64, and one value read. Undefined, integer and
// empty tensors count as finite. Tensors may live on different devices.
bool all_finite(const std::vector<Tensor>& xs);

}  // namespace chorus::ops
