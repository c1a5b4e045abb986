// Small kernels the cuDNN wrappers (ops/cuda/cudnn*.cc) need around the library calls; private to
// ops/cuda (kernels in ops/cuda/dnn_kernels.cu). C++17. Same conventions as ops/cuda/kernels.h:
// enqueue on `stream` of GPU `ordinal`, return without waiting, zero elements launch nothing,
// dtype kFloat32 or kFloat64 (anything else → InvalidArgumentError).
#pragma once

#include <cstdint>

#include <chorus/core/dtype.h>
#include <chorus/core/gpu.h>
#include <chorus/ops/geometry.h>

namespace chorus::ops::cuda {

// Average pooling over NHWC with any (also asymmetric) padding, dividing by the number of
// in-bounds elements of each window (TF's SAME rule). cuDNN pooling pads symmetrically, so
// these run when pad_top != pad_bottom or pad_left != pad_right. Deterministic: the backward
// kernel gives each input element one thread that sums its windows in a fixed order.
void avg_pool_forward(int ordinal, gpu::StreamHandle stream, DType dtype, const Conv2dGeometry& g, const void* x,
                      void* y);
void avg_pool_backward(int ordinal, gpu::StreamHandle stream, DType dtype, const Conv2dGeometry& g, const void* dy,
                       void* dx);

// inv_std[c] = 1 / sqrt(var[c] + epsilon), for cuDNN's batch-norm backward (savedInvVariance).
void batch_norm_inv_std(int ordinal, gpu::StreamHandle stream, DType dtype, const void* var, double epsilon,
                        void* inv_std, std::int64_t channels);

}  // namespace chorus::ops::cuda
