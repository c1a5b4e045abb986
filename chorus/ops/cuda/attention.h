// Launchers of chorus's fused attention kernels on the GPU (ops/cuda/attention.cu), behind
// ops::scaled_dot_product_attention (ops/attention.h). Host code includes this header; it never
// includes kernel code. C++17.
//
// Same contract as ops/cpu/attention.h, element for element: layouts, lse, the per-pair rules and
// the dropout draw come from ops/attention_geometry.h, which both sides include, so the GPU
// decides masks and dropout bit for bit as the CPU does (results agree to rounding: the sums run
// in another order). Pointers are device memory of GPU `ordinal`; the geometry's mask pointer too.
// Enqueued on `stream`; returns without waiting. Launch errors → chorus errors (CHORUS_CUDA_CHECK).
//
// The kernels: one warp per query row (forward, dq) or per key row (dk, dv), the 32 lanes
// splitting head_dim; keys (queries) are visited one at a time with an online softmax, so nothing
// of size Tq x Tk is stored. Straightforward rather than fast: every pair is computed (masked ones
// with weight 0, which also carries 0 * Inf = NaN as the composed ops do), no tensor cores.
// Deterministic: fixed visiting order, fixed warp-reduction tree, no atomics.
//
// dtypes: float32, float64, float16, bfloat16 (computed in float32, rounded once); lse float32
// (float64 for float64). head_dim and value dim up to 512 (else UnimplementedError naming the op
// and the dims).
#pragma once

#include <cstdint>

#include <chorus/core/dtype.h>
#include <chorus/core/gpu.h>
#include <chorus/ops/attention_geometry.h>

namespace chorus::ops::cuda {

// out [B, H, Tq, Dv], lse [B, H, Tq]. Tk > 0.
void attention_forward(int ordinal, gpu::StreamHandle stream, DType dtype, const AttentionGeometry& g, const void* q,
                       const void* k, const void* v, void* out, void* lse);

// dq, dk, dv. delta: scratch of B * H * Tq elements of lse's dtype (dout . out per row).
void attention_backward(int ordinal, gpu::StreamHandle stream, DType dtype, const AttentionGeometry& g, const void* q,
                        const void* k, const void* v, const void* out, const void* lse, const void* dout, void* delta,
                        void* dq, void* dk, void* dv);

}  // namespace chorus::ops::cuda
