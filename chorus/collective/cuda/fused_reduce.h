// Launchers of the virtual-GPU backend's kernels (collective/cuda/fused_reduce.cu). Host code
// includes this header; it never includes kernel code (docs/style.md habit 7).
#pragma once

#include <cstddef>

#include <chorus/core/dtype.h>
#include <chorus/core/gpu.h>

namespace chorus::collective::cuda {

// Most participants one fused launch takes (pointer arrays travel as kernel parameters).
inline constexpr int kMaxFused = 16;

// On `stream` of GPU `ordinal`, for i in [0, n):
//     r = op(inputs[0][i], ..., inputs[num_inputs-1][i])   (MEAN: sum / divisor)
//     outputs[o][i] = r   for every o < num_outputs
// One kernel reads every input once and writes every output once; an output may alias an input
// (each element is read from all inputs before it is written, by the same thread). 16-bit floats
// accumulate in float32 and round once. All pointers are device memory of that one GPU.
// `op` is static_cast<int>(ReduceOp) (this header stays free of C++20 headers: nvcc compiles it
// as C++17).
void fused_reduce_async(int ordinal, gpu::StreamHandle stream, DType dtype, int op, const void* const* inputs,
                        int num_inputs, void* const* outputs, int num_outputs, std::size_t n, int divisor);

}  // namespace chorus::collective::cuda
