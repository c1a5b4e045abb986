// Plain C++ CPU kernels for the ops oneDNN does not cover: elementwise (with broadcasting),
// where, cast, strided copies, reductions, arg-max, the fused cross-entropy losses, gather,
// scatter-add, one-hot. Function for function the CPU twin of ops/cuda/kernels.h (same contract,
// same layouts), running synchronously on the calling thread (the op layer calls them on the
// device's stream worker). Contiguous loops are written so the compiler vectorizes them; large
// ones are split across the calling thread's OpenMP threads.
//
// Errors the data decides (integer division by zero, negative integer exponent, an index or
// label out of range) throw InvalidArgumentError with TF's wording; the stream reports them at
// the next read of the result.
#pragma once

#include <cstddef>
#include <cstdint>

#include <chorus/core/dtype.h>
#include <chorus/ops/kinds.h>
#include <chorus/ops/strided.h>

namespace chorus::ops::cpu {

// alpha: the slope of kLeakyRelu / kLeakyReluGrad, used as the compute type's value (the op layer
// rounds it to the dtype first, as TF does); every other kind ignores it.
void unary(UnaryOp op, DType dtype, const void* x, void* y, std::int64_t n, double alpha = 0.0);
void binary(BinaryOp op, DType dtype, const StridedLayout& layout, const void* a, const void* b, void* out,
            double alpha = 0.0);
void where(DType dtype, const StridedLayout& layout, const void* cond, const void* x, const void* y, void* out);
void cast(DType from, DType to, const void* x, void* y, std::int64_t n);
void copy_strided(std::size_t elem_bytes, const CopyLayout& layout, const void* src, void* dst);

// Floats accumulate in double, integers in int64: the result does not depend on thread count.
void reduce(ReduceKind kind, DType dtype, const void* x, void* y, std::int64_t outer, std::int64_t r,
            std::int64_t inner);
void argmax(bool min, DType dtype, const void* x, std::int64_t* y, std::int64_t outer, std::int64_t r,
            std::int64_t inner);

// Labels out of [0, cols) → InvalidArgumentError ("Received a label value of 12 which is outside
// the valid range of [0, 10)", TF's CPU message). grad may be nullptr.
void sparse_softmax_xent(DType dtype, const void* logits, DType label_dtype, const void* labels, void* loss, void* grad,
                         std::int64_t rows, std::int64_t cols);
void softmax_xent(DType dtype, const void* logits, const void* labels, void* loss, void* grad, std::int64_t rows,
                  std::int64_t cols);

// Indices out of [0, rows) → InvalidArgumentError ("indices[3] = 12 is not in [0, 10)").
void gather(DType dtype, const void* params, std::int64_t rows, std::int64_t inner, DType index_dtype,
            const void* indices, std::int64_t num_indices, void* out);
void scatter_add(DType dtype, const void* updates, std::int64_t inner, DType index_dtype, const void* indices,
                 std::int64_t num_indices, void* out, std::int64_t rows);
void one_hot(DType dtype, DType index_dtype, const void* indices, std::int64_t num_indices, std::int64_t depth,
             double on, double off, void* out);

}  // namespace chorus::ops::cpu
