// Launchers of the CUDA resize kernels (ops/cuda/image.cu). The contract is the CPU kernels'
// (ops/cpu/image.h): the same layouts, dtypes and index/weight rules (ops/image_geometry.h), and
// the same float operations in the same order per element (the file is compiled with
// --fmad=false), so the GPU's results equal the CPU's bit for bit. The backward kernels gather
// (one thread per input-gradient element, summing the outputs that read it in increasing order):
// no atomics, deterministic, unlike TF's atomicAdd kernels.
//
// Enqueued on `stream` of GPU `ordinal`, returning without waiting; pointers are device memory of
// that GPU. Zero-element calls launch nothing. Launch errors → chorus errors (CHORUS_CUDA_CHECK);
// an unsupported dtype → InvalidArgumentError.
#pragma once

#include <cstddef>
#include <cstdint>

#include <chorus/core/dtype.h>
#include <chorus/core/gpu.h>
#include <chorus/ops/image_geometry.h>

namespace chorus::ops::cuda {

void resize_bilinear(int ordinal, gpu::StreamHandle stream, DType dtype, const void* x, float* y,
                     const ResizeGeometry& g);
void resize_bilinear_grad(int ordinal, gpu::StreamHandle stream, DType dtype, const float* dy, void* dx,
                          const ResizeGeometry& g);
void resize_nearest(int ordinal, gpu::StreamHandle stream, std::size_t elem_bytes, const void* x, void* y,
                    const ResizeGeometry& g);
void resize_nearest_grad(int ordinal, gpu::StreamHandle stream, DType dtype, const void* dy, void* dx,
                         const ResizeGeometry& g);

}  // namespace chorus::ops::cuda
