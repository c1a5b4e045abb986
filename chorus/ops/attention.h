// Fused scaled-dot-product attention (the core of tf.keras.layers.MultiHeadAttention, PyTorch's
// F.scaled_dot_product_attention), with its gradient:
//
//   out = dropout(softmax(where(mask, scale * q @ k^T, masked))) @ v
//
//   // q [B, H, Tq, D], k [B, H, Tk, D], v [B, H, Tk, Dv] → out [B, H, Tq, Dv]
//   Tensor out = ops::scaled_dot_product_attention(q, k, v);
//   Tensor padding = ...;                                  // bool [B, 1, 1, Tk], true = attend
//   Tensor y = ops::scaled_dot_product_attention(q, k, v, padding, {.causal = true});
//   auto g = ops::Generator::from_seed(1);
//   Tensor z = ops::scaled_dot_product_attention(q, k, v, {}, {.dropout_rate = 0.1, .generator = &g});
//
// Layout [batch, heads, seq, head_dim] (PyTorch's SDPA layout; Keras's MultiHeadAttention
// transposes its [B, T, H, D] projections into it).
//
// Semantics (Keras's MultiHeadAttention._compute_attention and Softmax(mask) where they differ
// from PyTorch's):
//   - scale: options.scale, or 1 / sqrt(D) when 0. logits = (q . k) * scale.
//   - mask: an optional bool tensor broadcastable (NumPy rules, right-aligned, rank <= 4) to
//     [B, H, Tq, Tk]; true = attend (Keras's attention_mask; PyTorch's bool attn_mask alike).
//     Masked keys get weight exactly 0 (Keras adds -1e9 to their logits: the same weights unless
//     every attended logit of a row is below about -1e9, or -inf).
//   - causal: Keras's use_causal_mask — query i attends to key j only when j <= i, aligned at the
//     top-left (row 0 sees key 0). With Tq > Tk the rows i >= Tk see every key; with Tq < Tk the
//     keys j >= Tq are seen by no row. (PyTorch's is_causal is the same top-left rule;
//     FlashAttention >= 2.1 aligns at the bottom-right instead.) Combined with the mask by AND.
//   - a row in which every key is masked gets uniform weights 1 / Tk over all Tk keys (its output
//     is the mean of v), and its logits get no gradient. That is what Keras's large-negative
//     masking gives (softmax of equal logits); PyTorch returns NaN there.
//   - dropout_rate in [0, 1): each weight is kept with probability 1 - rate and scaled by
//     1 / (1 - rate) (tf.nn.dropout on the weights, as Keras's MultiHeadAttention does in
//     training). The mask is drawn with Philox (ops/philox.h) and never stored: the gradient
//     regenerates it from the key and counter the forward used, as FlashAttention does.
//       * generator set: the op takes one block of it — exactly as generator->split(1) — and draws
//         from the child: ops::dropout(weights, rate, generator->split(1)[0]) gives the same mask
//         from the same generator state. Advances the generator by one block.
//       * seed set (and no generator): stateless, the mask of ops::dropout(weights, rate, *seed).
//       * neither: the global generator (ops::set_seed makes it reproducible), like ops::dropout.
//     Element (b, h, i, j) of the weights is the flat index ((b*H + h)*Tq + i)*Tk + j of that
//     draw (float32 uniforms, float64 for float64 data; bfloat16/float16 data compare the float32
//     uniform with the rate, where ops::dropout on a 16-bit tensor would round the uniform first).
//   - NaN and Inf propagate as in the composed ops (matmul, where, softmax, matmul): a NaN in q
//     makes its row NaN, in k the rows that attend to that key, in v the columns of every row
//     (0 * NaN is NaN, so masked keys pass it on too — as matmul does with a zero weight).
//   - Tk == 0: zeros (the sum over no keys), and zero gradients.
//
// dtypes: float32, float64, bfloat16, float16; q, k, v of one dtype; the result in that dtype.
// 16-bit data is computed in float32 and each result rounded once (on the CPU as everywhere).
//
// Kernels: CPU — chorus's fused kernel (ops/cpu/attention.h: FlashAttention-2 tiles, online
// softmax, no [Tq, Tk] matrix in memory). GPU — chorus's fused CUDA kernel (ops/cuda/attention.h).
// The backward of both recomputes the weights from the forward's log-sum-exp (kept with the
// tape, [B, H, Tq]) and needs no other saved state but q, k, v, out.
//
// Gradient: with respect to q, k, v (the mask has none). Not differentiable twice (the gradient
// op raises UnimplementedError under an outer tape).
//
// Errors (InvalidArgumentError naming "ScaledDotProductAttention" and the shapes): q, k, v not
// rank 4; batch or heads that differ; q and k with different head_dim; k and v with different Tk;
// dtypes that differ or are not floating; a mask that is not bool or does not broadcast to
// [B, H, Tq, Tk]; scale not finite; dropout_rate outside [0, 1); inputs on different devices.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include <chorus/core/tensor.h>
#include <chorus/ops/random.h>

namespace chorus::ops {

struct AttentionOptions {
  double scale = 0;  // 0: 1 / sqrt(head_dim)
  bool causal = false;
  double dropout_rate = 0;
  // Dropout's randomness (only read when dropout_rate > 0): see above. The generator must outlive
  // the call only (the gradient keeps the key and counter it drew, not the generator).
  Generator* generator = nullptr;
  std::optional<std::array<std::int64_t, 2>> seed;
};

// mask: an undefined Tensor (the default) for none.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask = Tensor(),
                                    const AttentionOptions& options = {});

}  // namespace chorus::ops
