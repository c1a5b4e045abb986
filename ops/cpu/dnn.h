// CPU kernels backed by oneDNN (float32) with plain reference loops (float64, and float32 when
// chorus is built without oneDNN). Raw pointers to host memory, row-major, no aliasing between
// inputs and outputs unless stated. The op layer (ops/*.cc) validates shapes and dtypes and calls
// these on the device's stream worker; they run synchronously on the calling thread.
//
// Threads: oneDNN runs on OpenMP; each call uses omp_get_max_threads() of the calling thread,
// which the op layer sets per logical CPU device through use_threads() so that several replicas on
// few cores do not oversubscribe them.
//
// oneDNN primitives are created once per (kind, shapes, attributes) and cached (thread-safe LRU,
// capacity 256 per kind); cache_stats() reports hits/misses for tests and benchmarks.
//
// dtype: kFloat32 or kFloat64 everywhere; anything else → InvalidArgumentError (the op layer
// checks first, so this is a backstop).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "ops/geometry.h"
#include "ops/kinds.h"

namespace chorus::ops::cpu {

// Sets the calling thread's OpenMP thread count (omp_set_num_threads) when it differs from `n`.
void use_threads(int n);
// True when this build uses oneDNN (false: reference loops for float32 too).
bool have_onednn();

// Batched matrix product: for b in [0, batch): C[b] = op(A[b]) · op(B[b]), op = transpose if set.
// A[b] is m×k (stored k×m when trans_a), B[b] is k×n (n×k when trans_b), C[b] is m×n.
// a_batch_stride/b_batch_stride are element offsets between consecutive matrices; 0 broadcasts
// one matrix over the batch. C is dense [batch, m, n]. k == 0 gives zeros.
void matmul(DType dtype, const void* a, std::int64_t a_batch_stride, const void* b, std::int64_t b_batch_stride,
            void* c, std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a, bool trans_b);

// NHWC input, HWIO filter, NHWC output; geometry from ops/geometry.h.
void conv2d_forward(DType dtype, const Conv2dGeometry& g, const void* x, const void* w, void* y);
void conv2d_backward_data(DType dtype, const Conv2dGeometry& g, const void* dy, const void* w, void* dx);
void conv2d_backward_filter(DType dtype, const Conv2dGeometry& g, const void* x, const void* dy, void* dw);

// Pooling over k_h×k_w windows (g.out_c == g.in_c). Average pooling divides by the number of
// in-bounds elements of each window (TF's behaviour under SAME). Max pooling's gradient goes to
// the first maximum of each window.
void pool2d_forward(PoolKind kind, DType dtype, const Conv2dGeometry& g, const void* x, void* y);
void pool2d_backward(PoolKind kind, DType dtype, const Conv2dGeometry& g, const void* x, const void* dy, void* dx);

// Softmax (or log-softmax) over the last axis of a [rows, cols] matrix; backward from y = output.
void softmax_forward(DType dtype, bool log, const void* x, void* y, std::int64_t rows, std::int64_t cols);
void softmax_backward(DType dtype, bool log, const void* y, const void* dy, void* dx, std::int64_t rows,
                      std::int64_t cols);

// Batch normalization over [rows, channels] (NHWC flattened: rows = N·H·W).
// Training: mean/variance of the batch (variance biased, divided by rows) are written to
// batch_mean/batch_var, y = gamma · (x - mean) / sqrt(var + eps) + beta.
void batch_norm_training(DType dtype, const void* x, const void* gamma, const void* beta, void* y, void* batch_mean,
                         void* batch_var, std::int64_t rows, std::int64_t channels, double epsilon);
// Inference: the given mean/variance.
void batch_norm_inference(DType dtype, const void* x, const void* gamma, const void* beta, const void* mean,
                          const void* var, void* y, std::int64_t rows, std::int64_t channels, double epsilon);
// Backward of batch_norm_training (mean/var are the batch statistics it produced): dx, dgamma, dbeta.
void batch_norm_backward(DType dtype, const void* x, const void* dy, const void* gamma, const void* mean,
                         const void* var, void* dx, void* dgamma, void* dbeta, std::int64_t rows, std::int64_t channels,
                         double epsilon);

// Elementwise activation y = f(x) over n contiguous float32 elements with oneDNN's eltwise
// primitive for kRelu, kSigmoid, kTanh, kGelu (erf), kExp, kLog, kSqrt, kSquare, kAbs. Returns
// false (doing nothing) for any other kind or dtype, or without oneDNN: the caller uses its loop.
bool eltwise_forward(UnaryOp op, DType dtype, const void* x, void* y, std::int64_t n);

struct CacheStats {
  std::int64_t hits = 0, misses = 0, entries = 0;
};
CacheStats cache_stats();

}  // namespace chorus::ops::cpu
