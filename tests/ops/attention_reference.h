// The composed reference of ops::scaled_dot_product_attention for its tests (attention_test.cc,
// attention_gpu_test.cc): Keras's MultiHeadAttention computation out of recorded ops —
//   logits  = matmul(q, k^T) * scale
//   logits  = where(mask AND causal, logits, -1e9)      (Keras: + (1 - mask) * -1e9)
//   weights = dropout(softmax(logits), rate, generator) (ops::dropout, the same Philox draw)
//   out     = matmul(weights, v)
// so its gradients come from the tape through every piece.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include <chorus/core/tensor.h>
#include <chorus/ops/attention.h>
#include <chorus/ops/ops.h>

namespace chorus::testing {

// Bool [Tq, Tk]: key j <= query i (Keras's use_causal_mask, top-left aligned).
inline Tensor causal_mask(std::int64_t tq, std::int64_t tk, const std::string& device) {
  std::vector<bool> m(static_cast<std::size_t>(tq * tk));
  for (std::int64_t i = 0; i < tq; ++i)
    for (std::int64_t j = 0; j < tk; ++j) m[static_cast<std::size_t>(i * tk + j)] = j <= i;
  return Tensor::from_vector(m, Shape{tq, tk}, device);
}

// `dropout_source`: the generator the fused op would have been given (the reference takes its
// one-block split child, as the op does), or nullptr with `seed` for the stateless draw.
inline Tensor reference_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                  const ops::AttentionOptions& o) {
  const std::int64_t d = q.shape().dims()[3];
  const double scale = o.scale != 0 ? o.scale : 1.0 / std::sqrt(static_cast<double>(d));
  Tensor logits = ops::mul(ops::matmul(q, k, false, true), ops::scalar_like(q, scale));
  Tensor allowed = mask;
  if (o.causal) {
    Tensor c = causal_mask(q.shape().dims()[2], k.shape().dims()[2], q.device_name());
    allowed = allowed.defined() ? ops::logical_and(allowed, c) : c;
  }
  if (allowed.defined()) logits = ops::where(allowed, logits, ops::scalar_like(logits, -1e9));
  Tensor w = ops::softmax(logits);
  if (o.dropout_rate > 0) {
    if (o.generator != nullptr) {
      std::vector<ops::Generator> child = o.generator->split(1);
      w = ops::dropout(w, o.dropout_rate, child[0]);
    } else {
      w = ops::dropout(w, o.dropout_rate, *o.seed);
    }
  }
  return ops::matmul(w, v);
}

}  // namespace chorus::testing
