// float32 max pooling over NHWC, for training: the forward records where each window's maximum is
// (one byte per output element: the tap k_h_index * k_w + k_w_index inside the window, the first
// maximum in row-major tap order, as TensorFlow and reference::pool2d_forward pick it), and the
// backward routes each dy there — no second pass over x. Plain loops the compiler vectorizes over
// channels, split over images (forward: image rows) across the calling thread's OpenMP threads.
//
// Why not oneDNN's: oneDNN 2.6's NHWC max pooling (jit:avx512_core) took 2.1 ms forward and 2.2 ms
// backward for the seed CNN's first pooling (128×26×26×32, 2×2 stride 2) on a 2-vCPU Xeon, these
// loops 0.45 and 1.0 ms — pooling was a quarter of the training step's kernel time (docs/ops.md).
//
// Contract (dnn.h's pool2d_* call these for float32 max pooling when fits(g)): g is a pooling
// geometry (out_c == in_c, dilation 1); x holds g.input_elements() floats, y and the workspace
// g.output_elements() each; dx is written whole (elements no window covers get 0). Where windows
// overlap, dx sums its windows' gradients in float32 in (image row, column) order.
#pragma once

#include <cstddef>
#include <cstdint>

#include <chorus/ops/geometry.h>

namespace chorus::ops::cpu::max_pool {

// Windows of at most 255 taps: a tap index fits in the workspace's byte.
bool fits(const Conv2dGeometry& g);
std::size_t workspace_bytes(const Conv2dGeometry& g);
void forward_training(const Conv2dGeometry& g, const float* x, float* y, std::uint8_t* workspace);
// The same maxima without the workspace (inference).
void forward(const Conv2dGeometry& g, const float* x, float* y);
void backward(const Conv2dGeometry& g, const float* dy, const std::uint8_t* workspace, float* dx);

}  // namespace chorus::ops::cpu::max_pool
