// Launchers of core/'s own device kernels beyond gpu.h's fill (kernels in core/cuda/fill.cu).
// Host code includes this header; it never includes kernel code (docs/style.md habit 7).
#pragma once

#include <cstddef>

#include <chorus/core/dtype.h>
#include <chorus/core/gpu.h>

namespace chorus::gpu {

// dst[i] += src[i] for `count` elements of `dtype` on `stream` of GPU `ordinal`. 16-bit floats
// are added in float32 and rounded once. bool → InvalidArgumentError.
void add_inplace_async(int ordinal, StreamHandle stream, DType dtype, void* dst, const void* src, std::size_t count);

}  // namespace chorus::gpu
