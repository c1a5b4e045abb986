// cuBLAS and cuDNN behind the op layer (ops/cuda/cublas.cc, ops/cuda/cudnn.cc). Host C++.
//
// Each function enqueues on dev.stream() (the logical device's CUDA stream) and returns without
// waiting. Handles are created once per logical device (cublasCreate/cudnnCreate on its GPU) and
// bound to its stream; calls on one device are serialized by a per-handle mutex, so any thread
// may call. Workspace comes from dev.allocator() (its memory limit applies: ResourceExhaustedError)
// and is kept until the stream has passed the call.
//
// Semantics are those of ops/cpu/dnn.h, function for function: same layouts (NHWC, HWIO),
// same geometry, same results up to rounding. dtypes: kFloat32, kFloat64, kFloat16, kBFloat16;
// 16-bit data accumulates in float32 (gemm: CUBLAS_COMPUTE_32F with tensor cores; convolution:
// float compute type, CUDNN_TENSOR_OP_MATH tried first; pooling and softmax: cuDNN's float
// arithmetic); batch norm takes float32/float64 only (16-bit data is normalized in float32 by the
// caller). Errors: cuBLAS/cuDNN statuses → InternalError naming the call and
// the status string; CUDNN_STATUS_ALLOC_FAILED / CUBLAS_STATUS_ALLOC_FAILED → ResourceExhaustedError;
// a build without cuDNN → UnimplementedError naming the op.
//
// Determinism: with op determinism enabled (ops/determinism.h) convolutions choose among the
// algorithms cuDNN reports as CUDNN_DETERMINISTIC only; otherwise the fastest from cudnnFind*.
// Algorithm choices are cached per (geometry, dtype, determinism).
#pragma once

#include <cstdint>

#include <chorus/core/dtype.h>
#include <chorus/core/runtime.h>
#include <chorus/ops/geometry.h>
#include <chorus/ops/kinds.h>

namespace chorus::ops::cuda {

// As cpu::matmul (row-major; batch strides in elements, 0 broadcasts).
void gemm(DeviceContext& dev, DType dtype, const void* a, std::int64_t a_batch_stride, const void* b,
          std::int64_t b_batch_stride, void* c, std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k,
          bool trans_a, bool trans_b);

void conv2d_forward(DeviceContext& dev, DType dtype, const Conv2dGeometry& g, const void* x, const void* w, void* y);
// y = act(conv2d(x, w) + bias), act relu or identity, bias [out_c], in one cuDNN call
// (cudnnConvolutionBiasActivationForward). Returns false where cuDNN has no fused kernel for the
// case (or chorus was built without cuDNN); y's contents are then unspecified: compose the three
// ops into it instead.
bool conv2d_bias_activation_forward(DeviceContext& dev, DType dtype, const Conv2dGeometry& g, const void* x,
                                    const void* w, const void* bias, bool relu, void* y);
void conv2d_backward_data(DeviceContext& dev, DType dtype, const Conv2dGeometry& g, const void* dy, const void* w,
                          void* dx);
void conv2d_backward_filter(DeviceContext& dev, DType dtype, const Conv2dGeometry& g, const void* x, const void* dy,
                            void* dw);

// cuDNN pooling needs the forward output for the backward pass: y is pool2d_forward's result.
void pool2d_forward(DeviceContext& dev, PoolKind kind, DType dtype, const Conv2dGeometry& g, const void* x, void* y);
void pool2d_backward(DeviceContext& dev, PoolKind kind, DType dtype, const Conv2dGeometry& g, const void* x,
                     const void* y, const void* dy, void* dx);

void softmax_forward(DeviceContext& dev, DType dtype, bool log, const void* x, void* y, std::int64_t rows,
                     std::int64_t cols);
void softmax_backward(DeviceContext& dev, DType dtype, bool log, const void* y, const void* dy, void* dx,
                      std::int64_t rows, std::int64_t cols);

void batch_norm_training(DeviceContext& dev, DType dtype, const void* x, const void* gamma, const void* beta, void* y,
                         void* batch_mean, void* batch_var, std::int64_t rows, std::int64_t channels, double epsilon);
void batch_norm_inference(DeviceContext& dev, DType dtype, const void* x, const void* gamma, const void* beta,
                          const void* mean, const void* var, void* y, std::int64_t rows, std::int64_t channels,
                          double epsilon);
void batch_norm_backward(DeviceContext& dev, DType dtype, const void* x, const void* dy, const void* gamma,
                         const void* mean, const void* var, void* dx, void* dgamma, void* dbeta, std::int64_t rows,
                         std::int64_t channels, double epsilon);

// cuDNN activation forward (relu, sigmoid, tanh) on n contiguous elements; false for other kinds
// or dtypes (the caller launches its own kernel).
bool activation_forward(DeviceContext& dev, UnaryOp op, DType dtype, const void* x, void* y, std::int64_t n);

}  // namespace chorus::ops::cuda
