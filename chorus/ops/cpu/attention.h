// chorus's fused attention kernels on the CPU (ops/cpu/attention.cc), behind
// ops::scaled_dot_product_attention (ops/attention.h). FlashAttention-2's algorithm: the keys are
// visited in tiles of 64 with an online (running max and sum) softmax, so no [Tq, Tk] matrix is
// ever in memory — per thread a 64 x 64 tile of logits and the tiles of q, k, v it works on.
//
// Layouts, the meaning of lse and of every (query, key) decision: ops/attention_geometry.h.
// Pointers are host memory; no aliasing between inputs and outputs. The op layer validates shapes
// and dtypes; these run synchronously on the calling thread, split over its OpenMP threads
// (omp_get_max_threads(), which the op layer sets per logical device): the forward and the dq pass
// over (batch x heads x query tiles of 64), the dk/dv pass over (batch x heads x key tiles of 64).
// Each output element is written by one thread in a fixed order, so results do not depend on the
// thread count.
//
// dtypes: float32 and bfloat16/float16 compute in float32 (16-bit inputs widened, each output
// rounded once), float64 in float64; lse and the scratch are float32 resp. float64. Anything else →
// InvalidArgumentError.
//
// Causal tiles: a tile of keys that no query of a query tile may attend to is skipped — unless the
// tensor it would multiply by zero holds Inf or NaN in that head, in which case it is visited so
// that 0 * Inf = NaN reaches the result exactly as in the composed ops (matmul of weights with a
// masked zero). Every other masked pair is computed with weight 0, never skipped, for the same reason.
#pragma once

#include <cstdint>

#include <chorus/core/dtype.h>
#include <chorus/ops/attention_geometry.h>

namespace chorus::ops::cpu {

// out [B, H, Tq, Dv] and lse [B, H, Tq] from q, k, v. Tk must be > 0 (the op layer returns zeros
// for Tk == 0 without calling this).
void attention_forward(DType dtype, const AttentionGeometry& g, const void* q, const void* k, const void* v, void* out,
                       void* lse);

// dq, dk, dv (shapes of q, k, v) from the forward's inputs, out and lse and the gradient dout of
// out: FlashAttention-2's backward, the weights recomputed from lse and the dropout mask from the
// geometry's Philox key and counter (nothing of size Tq x Tk is stored between the passes).
void attention_backward(DType dtype, const AttentionGeometry& g, const void* q, const void* k, const void* v,
                        const void* out, const void* lse, const void* dout, void* dq, void* dk, void* dv);

}  // namespace chorus::ops::cpu
