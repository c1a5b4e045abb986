// What the fused attention kernels (ops/cpu/attention.cc, ops/cuda/attention.cu) are handed, and
// the per-element rules they share: which keys a query may attend to, and the dropout draw. One
// header for host and device (nvcc includes it, C++17), so the CPU and the GPU decide every
// (query, key) pair with the same code and draw the same dropout mask bit for bit.
//
// Layouts (contiguous, row-major): q [B, H, Tq, D], k [B, H, Tk, D], v [B, H, Tk, Dv],
// out / dout [B, H, Tq, Dv], lse [B, H, Tq] (float32, float64 for float64 data).
//
// lse[row] is the log-sum-exp of the row's scaled logits over the keys it attends to (the forward's
// by-product that the backward recomputes probabilities from), with two special values:
//   -inf  the row attends to no key (every key masked): its weights are uniform, 1 / Tk each,
//         and its logits get no gradient (Keras's large-negative masking; see ops/attention.h);
//   NaN   the row's result is NaN (a NaN logit, or every attended logit -inf or +inf), so is its
//         gradient.
#pragma once

#include <cstdint>

#include <chorus/ops/philox.h>

namespace chorus::ops {

struct AttentionGeometry {
  std::int64_t batch = 0, heads = 0, tq = 0, tk = 0, head_dim = 0, value_dim = 0;
  double scale = 1;     // logits = scale * q . k
  bool causal = false;  // key j is attended by query i only when j <= i (top-left aligned)

  // Optional boolean mask (1 byte per element, nonzero = attend), broadcast to [B, H, Tq, Tk]:
  // element (b, h, i, j) at mask[b * s[0] + h * s[1] + i * s[2] + j * s[3]] (stride 0 on
  // broadcast dims). nullptr: no mask.
  const std::uint8_t* mask = nullptr;
  std::int64_t mask_strides[4] = {0, 0, 0, 0};

  // Dropout on the attention weights: rate 0 (none) or in (0, 1). Element (b, h, i, j) of the
  // [B, H, Tq, Tk] weights is kept when the uniform of flat index ((b*H + h)*Tq + i)*Tk + j,
  // drawn from (dropout_key, dropout_counter) as ops/philox.h's uniform draw of a float32 tensor
  // (float64 for float64 data), is >= rate; kept weights are scaled by 1 / (1 - rate). That is
  // exactly the mask ops::dropout draws for a tensor of that shape from the same key and counter.
  double dropout_rate = 0;
  PhiloxKey dropout_key = {{0, 0}};
  PhiloxCounter dropout_counter = {{0, 0, 0, 0}};

  std::int64_t heads_total() const { return batch * heads; }
};

// The mask row of query i of head bh = b * H + h (index it with j * mask_strides[3]), or nullptr
// without a mask: lets a loop over keys pay the broadcast arithmetic once per row.
CHORUS_PHILOX_HD inline const std::uint8_t* attention_mask_row(const AttentionGeometry& g, std::int64_t bh,
                                                               std::int64_t i) {
  if (g.mask == nullptr) return nullptr;
  const std::int64_t b = bh / g.heads, h = bh % g.heads;
  return g.mask + b * g.mask_strides[0] + h * g.mask_strides[1] + i * g.mask_strides[2];
}

// Whether query i attends to key j, given its mask row (causal rule and mask).
CHORUS_PHILOX_HD inline bool attention_allowed(const AttentionGeometry& g, const std::uint8_t* mask_row, std::int64_t i,
                                               std::int64_t j) {
  if (g.causal && j > i) return false;
  return mask_row == nullptr || mask_row[j * g.mask_strides[3]] != 0;
}

// Fills keep[0..n) with the dropout multipliers (0 or 1 / (1 - rate)) of the n consecutive weights
// starting at flat index `first` (see AttentionGeometry). C is float (float32, float16, bfloat16
// data: the float32 uniform compared with rate rounded to float32) or double (float64 data).
template <typename C>
CHORUS_PHILOX_HD inline void attention_dropout_row(const AttentionGeometry& g, std::uint64_t first, std::int64_t n,
                                                   C* keep) {
  constexpr int kPerBlock = sizeof(C) == 8 ? 2 : 4;
  const C rate = static_cast<C>(g.dropout_rate);
  const C kept = static_cast<C>(1.0 / (1.0 - g.dropout_rate));
  std::int64_t e = 0;
  while (e < n) {
    const std::uint64_t idx = first + static_cast<std::uint64_t>(e);
    const PhiloxCounter w = philox4x32_10(philox_skip(g.dropout_counter, idx / kPerBlock), g.dropout_key);
    for (int lane = static_cast<int>(idx % kPerBlock); lane < kPerBlock && e < n; ++lane, ++e) {
      C u;
      if constexpr (sizeof(C) == 8) {
        u = uint64_to_double(w.v[2 * lane], w.v[2 * lane + 1]);
      } else {
        u = uint32_to_float(w.v[lane]);
      }
      keep[e] = u >= rate ? kept : C(0);
    }
  }
}

}  // namespace chorus::ops
