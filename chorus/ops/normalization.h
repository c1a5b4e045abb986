// Per-example normalization over trailing axes: layer normalization (tf_keras LayerNormalization)
// and RMS normalization (Keras 3 RMSNormalization, keras.ops.rms_normalization).
//
//   Tensor y = ops::layer_norm(x, gamma, beta, 1e-3);          // x [batch, time, d], gamma/beta [d]
//   Tensor z = ops::layer_norm(x, gamma, beta, 1e-3, 1);       // over (time, d): gamma/beta [time, d]
//   Tensor r = ops::rms_norm(x, scale, 1e-6);                  // x * rsqrt(mean(x²) + eps) * scale
//
// x is viewed as [rows, cols], cols = the product of x's dims from begin_axis on. Per row:
//   layer_norm: mean = Σx / cols, var = Σ(x − mean)² / cols (the biased variance, as Keras),
//               y = (x − mean) · rsqrt(var + epsilon) · gamma + beta
//   rms_norm:   y = x · rsqrt(Σx² / cols + epsilon) · gamma
// gamma and beta have the shape x.shape[begin_axis:]; either may be an
// undefined Tensor, meaning ones / zeros (Keras's scale=False / center=False), and then gets no
// gradient. A row holding NaN or ±inf comes out NaN everywhere (its mean or variance is NaN), as
// in TF.
//
// Kernels: one fused pass per row forward (CPU: OpenMP over rows; CUDA: one warp per row up to
// 1024 columns, else one 256-thread block per row), and one fused backward that reuses the mean
// and 1/std saved by the forward: dx per row, dgamma/dbeta as column sums in a fixed order (the
// same bits for any thread count and on every run). Both are recorded on the tape; their
// gradients are not differentiable again (UnimplementedError on a second derivative).
//
// dtypes: float32 (float32 accumulation), float64 (float64 accumulation); bfloat16/float16 x is
// normalized in float32 and y rounded once to x's dtype, with float32 gamma/beta (as batch_norm,
// TF's FusedBatchNormV3 with U = float) — 16-bit gamma/beta are cast to float32 first (the cast
// carries their gradient back). dx has x's dtype, dgamma/dbeta gamma's.
//
// Errors (InvalidArgumentError, naming the op and the shapes): x not floating or of rank 0;
// begin_axis outside [-rank, rank); gamma/beta of another shape, dtype or device; epsilon < 0 or NaN.
// An empty x gives an empty y.
#pragma once

#include <chorus/core/tensor.h>

namespace chorus::ops {

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double epsilon = 1e-3, int begin_axis = -1);

Tensor rms_norm(const Tensor& x, const Tensor& gamma, double epsilon = 1e-6, int begin_axis = -1);

}  // namespace chorus::ops
