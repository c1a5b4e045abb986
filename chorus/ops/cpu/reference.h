// Plain reference loops for every kernel of ops/cpu/dnn.h: the float64 implementation, the
// float32 one when chorus is built without oneDNN, and the yardstick the tests hold oneDNN to.
//
// Same contract, layouts and argument order as the dtype-dispatched functions in dnn.h, typed
// instead of void*; no validation (dnn_dispatch.cc validates once). They accumulate in double for
// both element types, so float32 results are the float64 ones rounded once per output. Loops over
// independent outputs are split across the calling thread's OpenMP threads; every output is
// computed by one thread in a fixed order, so results do not depend on the thread count.
//
// Instantiated for T = float and T = double only.
#pragma once

#include <cstdint>

#include <chorus/ops/geometry.h>
#include <chorus/ops/kinds.h>

namespace chorus::ops::cpu::reference {

template <typename T>
void matmul(const T* a, std::int64_t a_batch_stride, const T* b, std::int64_t b_batch_stride, T* c, std::int64_t batch,
            std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a, bool trans_b);

// Windows may reach into the padding; taps there read zeros (convolution) or are skipped (pooling).
// Convolutions are grouped when g.groups > 1 (ops/geometry.h: filter [k_h, k_w, in_c / groups, out_c]).
template <typename T>
void conv2d_forward(const Conv2dGeometry& g, const T* x, const T* w, T* y);
template <typename T>
void conv2d_backward_data(const Conv2dGeometry& g, const T* dy, const T* w, T* dx);
template <typename T>
void conv2d_backward_filter(const Conv2dGeometry& g, const T* x, const T* dy, T* dw);

// Max: the first maximum of each window in row-major window order receives the gradient.
// Avg: divides by the number of in-bounds taps. A window with no in-bounds tap gives 0.
template <typename T>
void pool2d_forward(PoolKind kind, const Conv2dGeometry& g, const T* x, T* y);
template <typename T>
void pool2d_backward(PoolKind kind, const Conv2dGeometry& g, const T* x, const T* dy, T* dx);

template <typename T>
void softmax_forward(bool log, const T* x, T* y, std::int64_t rows, std::int64_t cols);
template <typename T>
void softmax_backward(bool log, const T* y, const T* dy, T* dx, std::int64_t rows, std::int64_t cols);

template <typename T>
void batch_norm_training(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* var, std::int64_t rows,
                         std::int64_t channels, double epsilon);
template <typename T>
void batch_norm_inference(const T* x, const T* gamma, const T* beta, const T* mean, const T* var, T* y,
                          std::int64_t rows, std::int64_t channels, double epsilon);
template <typename T>
void batch_norm_backward(const T* x, const T* dy, const T* gamma, const T* mean, const T* var, T* dx, T* dgamma,
                         T* dbeta, std::int64_t rows, std::int64_t channels, double epsilon);

}  // namespace chorus::ops::cpu::reference
