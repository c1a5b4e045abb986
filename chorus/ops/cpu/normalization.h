// CPU kernels of ops/normalization.h: layer normalization and RMS normalization over the rows of
// x [rows, cols], forward and backward, fused (one pass per row), running synchronously on the
// calling thread's OpenMP threads (the op layer calls them on the device's stream worker).
//
// Types: x, y, dy, dx have `dtype` (float32, float64, bfloat16, float16); gamma, beta, dgamma,
// dbeta, mean and rstd have the parameter type P = float64 for float64 x, else float32, which is
// also the type every row sum accumulates in (16-bit elements are widened on load, rounded once
// on store). Row sums run over 16 interleaved partial sums combined in a fixed tree, and the
// backward's column sums over fixed blocks of rows combined in order: the results do not depend
// on the thread count.
#pragma once

#include <cstdint>

#include <chorus/core/dtype.h>
#include <chorus/ops/kinds.h>

namespace chorus::ops::cpu {

// gamma, beta: [cols] or nullptr (ones / zeros; kRms ignores beta). mean (kLayer only; may be
// nullptr) and rstd (may be nullptr): [rows], saved for norm_backward.
void norm_forward(NormKind kind, DType dtype, const void* x, const void* gamma, const void* beta, void* y, void* mean,
                  void* rstd, std::int64_t rows, std::int64_t cols, double epsilon);

// dx [rows, cols] (nullptr: not computed), dgamma / dbeta [cols] (nullptr: not computed; both
// overwritten, not accumulated). mean (kLayer) and rstd are norm_forward's; gamma as there.
void norm_backward(NormKind kind, DType dtype, const void* x, const void* dy, const void* gamma, const void* mean,
                   const void* rstd, void* dx, void* dgamma, void* dbeta, std::int64_t rows, std::int64_t cols);

}  // namespace chorus::ops::cpu
