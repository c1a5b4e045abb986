// Neural-network ops (tf.nn): convolution, pooling, batch normalization, softmax, the fused
// cross-entropy losses, dropout. Layout NHWC, filters HWIO, as TF's defaults.
//
//   Tensor y = ops::conv2d(x, w, {1, 1}, Padding::kSame);          // x [n,h,w,c], w [kh,kw,c,f]
//   Tensor p = ops::max_pool2d(y, {2, 2}, {2, 2}, Padding::kValid);
//   Tensor loss = ops::sparse_softmax_cross_entropy_with_logits(labels, logits);   // [n]
//
// Kernels: CPU float32 → oneDNN, float64 → reference loops; GPU → cuDNN (see ops/cpu/dnn.h and
// ops/cuda/libraries.h); grouped and depthwise convolutions too (oneDNN's grouped weights, cuDNN's
// group count). Bad shapes → InvalidArgumentError naming the op and the shapes.
//
// dtypes (non-floating → InvalidArgumentError):
//   conv2d (+ backprops), max_pool2d, avg_pool2d: float32, float64, bfloat16, float16; the operands
//     of one call share the dtype. CPU bfloat16: oneDNN's bf16 kernels on AVX-512 CPUs, else float32
//     compute on the bfloat16 inputs rounded once (ops::cpu::bf16_path() says which). CPU float16:
//     only where oneDNN has float16 kernels (not with oneDNN 2.6) — else UnimplementedError naming
//     the op and dtype and recommending mixed_bfloat16. GPU: passed to the cuDNN layer as is.
//   softmax, log_softmax: float32, float64; bfloat16/float16 logits are computed in float32 and the
//     result rounded once to their dtype (Keras runs these in float32 under mixed precision anyway),
//     on both devices; the gradient comes back in the logits' dtype.
//   batch_norm: float32, float64 with parameters of x's dtype; bfloat16/float16 x with float32
//     gamma/beta/mean/variance (TF's FusedBatchNormV3 with U = float), normalized in float32, y in
//     x's dtype, batch_mean/batch_variance float32; other parameter dtypes → InvalidArgumentError.
//   the cross-entropy losses: any floating logits (16-bit ones computed in double on the CPU),
//     loss and gradient in the logits' dtype.
#pragma once

#include <array>
#include <cstdint>

#include <chorus/core/tensor.h>
#include <chorus/ops/kinds.h>

namespace chorus::ops {

// Grouped convolution (tf.nn.conv2d with input depth = groups × the filters' input depth): the
// input's channels split into `groups` equal blocks, block i convolved with output channels
// [i·F/groups, (i+1)·F/groups) of the filters [kh, kw, C/groups, F] only. groups 0 (the default)
// infers it as TF does, C / the filters' input depth; a value > 0 must agree with the shapes. The
// output depth F must be a multiple of it. Errors: InvalidArgumentError naming the op, both depths
// and the groups ("input depth 6 must be a multiple of the filters' input depth 4", "output depth
// 5 must be a multiple of the number of groups 2").
struct Conv2dOptions {
  std::array<std::int64_t, 2> strides{1, 1};
  Padding padding = Padding::kValid;
  std::array<std::int64_t, 2> dilations{1, 1};
  std::int64_t groups = 0;  // 0: inferred from the shapes (TF); else must equal C / filters' input depth
};
Tensor conv2d(const Tensor& x, const Tensor& filters, const Conv2dOptions& options = {});
inline Tensor conv2d(const Tensor& x, const Tensor& filters, std::array<std::int64_t, 2> strides, Padding padding) {
  return conv2d(x, filters, Conv2dOptions{strides, padding, {1, 1}});
}

// tf.nn.depthwise_conv2d: x [n,h,w,C], filter [kh,kw,C,M] → [n,oh,ow,C·M], output channel c·M + m
// = channel c convolved with filter[:, :, c, m]. It is conv2d with groups = C on the filter
// reshaped to [kh,kw,1,C·M] (the same memory), so it has conv2d's kernels, dtypes and gradients.
// options.groups must be 0 or C. Unlike TF's DepthwiseConv2dNative, unequal strides and strides
// combined with dilation are accepted. Errors: InvalidArgumentError ("DepthwiseConv2dNative: input
// depth 3 does not match the filter's in-channels 4"), and conv2d's.
Tensor depthwise_conv2d(const Tensor& x, const Tensor& filter, const Conv2dOptions& options = {});

// tf.nn.conv1d (data_format NWC): x [n,w,C], filters [k,C/groups,F] → [n,ow,F], run as conv2d on
// [n,1,w,C] and [1,k,C/groups,F]; groups inferred as in conv2d. stride, dilation > 0.
Tensor conv1d(const Tensor& x, const Tensor& filters, std::int64_t stride = 1, Padding padding = Padding::kValid,
              std::int64_t dilation = 1);

// y = act(conv2d(x, filters) + bias) as one op (TensorFlow's _FusedConv2D with BiasAdd and, for
// kRelu, Relu — what Keras's Conv2D(activation="relu") computes). bias: [filters' out channels],
// same dtype and device as x. On the CPU with oneDNN the bias and the ReLU run inside the
// convolution (one pass over y); on a GPU in cuDNN's fused convolution + bias + activation
// (cudnnConvolutionBiasActivationForward) where cuDNN has a kernel for the case; elsewhere (float64
// on the CPU, a case cuDNN refuses) it is conv2d, add and relu in sequence, which is also what the
// fused result equals up to float32 rounding of the intermediate sum. Grouped (options.groups, as
// conv2d) on every path. The
// gradient computes the activation's and the bias's gradients in one pass, then the convolution's
// (skipping the input's when the tape does not want it: the images of a first layer).
enum class FusedActivation { kNone, kRelu };
Tensor fused_conv2d(const Tensor& x, const Tensor& filters, const Tensor& bias, FusedActivation activation,
                    const Conv2dOptions& options = {});

Tensor max_pool2d(const Tensor& x, std::array<std::int64_t, 2> ksize, std::array<std::int64_t, 2> strides,
                  Padding padding = Padding::kValid);
// Average over the in-bounds elements of each window (TF: padding is not counted under SAME).
Tensor avg_pool2d(const Tensor& x, std::array<std::int64_t, 2> ksize, std::array<std::int64_t, 2> strides,
                  Padding padding = Padding::kValid);

// Softmax / log-softmax along `axis` (default last).
Tensor softmax(const Tensor& logits, int axis = -1);
Tensor log_softmax(const Tensor& logits, int axis = -1);

// Per-example losses [batch] for logits [batch, classes] (numerically stable, fused forward and
// backward: the gradient is computed with the loss and used by the tape).
// labels: int32/int64 class ids [batch]. An id outside [0, classes) → InvalidArgumentError on the
// CPU (at the next read), NaN loss on the GPU (as TF).
Tensor sparse_softmax_cross_entropy_with_logits(const Tensor& labels, const Tensor& logits);
// labels: a probability distribution per row, same shape and dtype as logits. The gradient flows
// to the logits only (labels are constants here, as in TF's v2 op when labels are not watched).
Tensor softmax_cross_entropy_with_logits(const Tensor& labels, const Tensor& logits);

// Fused batch normalization over the last (channel) axis of x [..., C] (TF's FusedBatchNormV3 with
// NHWC). training: normalizes with the batch's mean and biased variance and returns them;
// inference: uses `mean` and `variance`. gamma/beta/mean/variance have shape [C].
struct BatchNormResult {
  Tensor y, batch_mean, batch_variance;  // batch_* only in training
};
BatchNormResult batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& mean,
                           const Tensor& variance, double epsilon, bool training);

// Gradients of conv2d (also usable directly, TF's conv2d_backprop_input/filter).
Tensor conv2d_backprop_input(const Shape& input_shape, const Tensor& filters, const Tensor& dy,
                             const Conv2dOptions& options);
Tensor conv2d_backprop_filter(const Tensor& x, const Shape& filter_shape, const Tensor& dy,
                              const Conv2dOptions& options);

}  // namespace chorus::ops
