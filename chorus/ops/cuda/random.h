// Launcher of the random-number kernel (ops/cuda/random.cu). Host code includes this header; it
// never includes kernel code. C++17.
#pragma once

#include <cstdint>

#include <chorus/core/dtype.h>
#include <chorus/core/gpu.h>
#include <chorus/ops/philox.h>

namespace chorus::ops::cuda {

// Fills `n` elements of `dtype` at device pointer `out` (GPU `ordinal`) with draw `dist` from
// (key, counter), exactly as ops/philox.h specifies, so the result equals the CPU loop's
// (ops::cpu::fill_random): bitwise for uniform, up to the math library for normal/truncated.
// a/b: minval/maxval for kUniform, mean/stddev otherwise; already validated by ops/random.cc.
// Enqueued on `stream`; returns without waiting. n == 0 launches nothing. dtypes: float32,
// float64, float16, bfloat16 (computed in float32, rounded once), and int32/int64 for kUniform;
// anything else → InvalidArgumentError. Launch errors → chorus errors (CHORUS_CUDA_CHECK).
// One thread per Philox block (4 or 2 elements), grid-stride loop, 64-bit indices.
void fill_random(int ordinal, gpu::StreamHandle stream, Distribution dist, DType dtype, PhiloxKey key,
                 PhiloxCounter counter, double a, double b, void* out, std::int64_t n);

}  // namespace chorus::ops::cuda
