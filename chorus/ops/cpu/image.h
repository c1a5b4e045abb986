// CPU kernels of ops/image.h's resize (ops/image_geometry.h has the index and weight rules, shared
// with the CUDA twins in ops/cuda/image.h). NHWC, contiguous; run synchronously on the calling
// thread's OpenMP threads (the op layer calls them on the device's stream worker). Every output
// element is computed by one thread in a fixed order: the results do not depend on the thread
// count, and equal the GPU's bit for bit.
#pragma once

#include <cstdint>

#include <chorus/core/dtype.h>
#include <chorus/ops/image_geometry.h>

namespace chorus::ops::cpu {

// x [batch, in_h, in_w, channels] of `dtype` (float32/64, float16, bfloat16, int32, int64,
// uint8), y [batch, out_h, out_w, channels] float32: TF's ResizeBilinear (each source value cast
// to float32, then top = tl + (tr - tl) * xlerp, bottom = bl + (br - bl) * xlerp,
// y = top + (bottom - top) * ylerp in float32).
void resize_bilinear(DType dtype, const void* x, float* y, const ResizeGeometry& g);

// dy [batch, out_h, out_w, channels] float32, dx [batch, in_h, in_w, channels] of `dtype`
// (floating): TF's ResizeBilinearGrad, gathered: dx[i] = Σ over the (output, tap) pairs that read
// i of (dy * wy) * wx, in increasing output order, accumulated in float32 (float64 for float64
// dx) and rounded once.
void resize_bilinear_grad(DType dtype, const float* dy, void* dx, const ResizeGeometry& g);

// x and y of any dtype of `elem_bytes` bytes: y[o] = x[nearest source of o] (a copy).
void resize_nearest(std::size_t elem_bytes, const void* x, void* y, const ResizeGeometry& g);

// dy [batch, out_h, out_w, channels], dx [batch, in_h, in_w, channels], both `dtype` (floating):
// dx[i] = Σ dy[o] over the outputs whose nearest source is i, row-major order, accumulated in
// float32 (float64 for float64) and rounded once.
void resize_nearest_grad(DType dtype, const void* dy, void* dx, const ResizeGeometry& g);

}  // namespace chorus::ops::cpu
