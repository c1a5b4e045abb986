// Launchers of the CUDA kernels of ops/normalization.h (ops/cuda/normalization.cu): layer and RMS
// normalization over the rows of x [rows, cols], forward and backward. The contract is the CPU
// kernels' (ops/cpu/normalization.h): the same types (P = float64 for float64 x, else float32, for
// gamma, beta, dgamma, dbeta, mean, rstd and every sum), nullptr for what is absent or unwanted.
//
// Enqueued on `stream` of GPU `ordinal`, returning without waiting; pointers are device memory of
// that GPU. Forward: one warp per row up to 1024 columns, else one 256-thread block per row.
// Backward: dx the same way; dgamma/dbeta as column sums over splits of the rows into
// `workspace` (norm_backward_workspace_bytes), then summed over the splits in order. Every sum has
// a fixed order: the same bits on every run. Launch errors → chorus errors (CHORUS_CUDA_CHECK).
#pragma once

#include <cstddef>
#include <cstdint>

#include <chorus/core/dtype.h>
#include <chorus/core/gpu.h>
#include <chorus/ops/kinds.h>

namespace chorus::ops::cuda {

void norm_forward(int ordinal, gpu::StreamHandle stream, NormKind kind, DType dtype, const void* x, const void* gamma,
                  const void* beta, void* y, void* mean, void* rstd, std::int64_t rows, std::int64_t cols,
                  double epsilon);

// Bytes of device memory norm_backward needs at `workspace` (0 when it needs none).
std::size_t norm_backward_workspace_bytes(DType dtype, std::int64_t rows, std::int64_t cols);

void norm_backward(int ordinal, gpu::StreamHandle stream, NormKind kind, DType dtype, const void* x, const void* dy,
                   const void* gamma, const void* mean, const void* rstd, void* dx, void* dgamma, void* dbeta,
                   std::int64_t rows, std::int64_t cols, void* workspace);

}  // namespace chorus::ops::cuda
