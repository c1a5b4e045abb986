// MultiHeadAttention (tf.keras.layers.MultiHeadAttention): projections of query, key and value into
// num_heads heads, scaled-dot-product attention per head (fused: ops::scaled_dot_product_attention,
// ops/attention.h), and an output projection.
//
//   auto x = layers::Input({64, 128});                                   // [batch, seq, features]
//   auto mha = layers::MultiHeadAttention({.num_heads = 4, .key_dim = 32, .use_causal_mask = true});
//   layers::KerasTensor y = (*mha)({x, x});                             // self-attention, (None, 64, 128)
//
// Inputs (call_list): {query, value}, {query, value, key}, or {query, value, key, attention_mask}
// — Keras's call(query, value, key=None, attention_mask=None); call(x) is self-attention {x, x}.
// query [B, T, Dq], value [B, S, Dv], key [B, S, Dk] (key = value when not given). attention_mask
// is bool, true = attend: [B, T, S] as Keras's, or [B, S] (a key padding mask, applied to every
// query). use_causal_mask (Keras passes it at call time; in chorus it is the layer's option):
// query i attends to key j only when j <= i. The output is [B, T, output_dim] (output_dim 0: Dq).
// Dropout (rate `dropout`) applies to the attention weights when training, drawn with Philox from
// the layer's generator (`seed`), per replica as layers::Dropout does.
//
// Weights as Keras's, so checkpoints are interchangeable with tf_keras: four owned EinsumDense
// layers, tracked as "_query_dense", "_key_dense", "_value_dense", "_output_dense" and named
// "query", "key", "value", "attention_output"; kernels [Dq, H, key_dim], [Dk, H, key_dim],
// [Dv, H, value_dim], [H, value_dim, output_dim]; biases [H, key_dim] ... and [output_dim].
// attention_axes (Keras's): inputs of rank r >= 3 are [batch, d1 .. d(r-2), features]; attention runs
// over the axes listed (jointly, their positions flattened in order), and the middle axes not listed
// act as more batch axes, which query, key and value must share. Unset (Keras's None): every middle
// axis — [1] for [batch, seq, features]. Negative axes count from the end as Keras's (-2 is the last
// middle axis). The attention_mask is then [batch, other axes..., query's attention axes..., key's
// attention axes...] (Keras's); the [batch, S] key padding mask and use_causal_mask need rank 3
// inputs. A rank below 3, inputs of different ranks, other axes that differ, a bad axis or a mask
// of another shape or dtype → InvalidArgumentError naming the layer.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <chorus/model/layer.h>
#include <chorus/ops/attention.h>
#include <chorus/ops/random.h>

namespace chorus::layers {

// One of MultiHeadAttention's projections (Keras's EinsumDense "abc,cde->abde" for the inputs,
// "abcd,cde->abe" for the output): kernel [in, heads, per_head] → y [B, T, heads, per_head], or
// kernel [heads, per_head, out] on x [B, T, heads, per_head] → y [B, T, out]; bias of y's trailing
// shape. Computed as one matmul of the flattened shapes.
class EinsumDenseLayer final : public Layer {
 public:
  enum class Kind { kSplitHeads, kMergeHeads };
  EinsumDenseLayer(Kind kind, std::int64_t heads, std::int64_t per_head, std::int64_t out, bool use_bias,
                   initializers::Initializer kernel_init, initializers::Initializer bias_init, std::string name);
  std::string class_name() const override { return "EinsumDense"; }
  const initializers::Initializer& kernel_initializer() const { return kernel_init_; }
  Shape compute_output_shape(const Shape& in) const override;

 protected:
  void build_weights(const Shape& in) override;
  Tensor call(const Tensor& x, bool training) override;

 private:
  Kind kind_;
  std::int64_t heads_, per_head_, out_;
  bool use_bias_;
  initializers::Initializer kernel_init_, bias_init_;
  Variable kernel_, bias_;
};

struct MultiHeadAttentionOptions {
  std::int64_t num_heads = 1;
  std::int64_t key_dim = 0;
  std::int64_t value_dim = 0;  // 0: key_dim
  double dropout = 0;
  bool use_bias = true;
  std::int64_t output_dim = 0;  // 0: the query's feature dimension (Keras's output_shape=None)
  bool use_causal_mask = false;
  std::optional<std::vector<std::int64_t>> attention_axes;  // unset: every middle axis (Keras's None)
  initializers::Initializer kernel_initializer = initializers::glorot_uniform();
  initializers::Initializer bias_initializer = initializers::zeros();
  std::optional<std::uint64_t> seed;  // dropout's generator
  std::string name;
};

class MultiHeadAttentionLayer final : public Layer {
 public:
  explicit MultiHeadAttentionLayer(MultiHeadAttentionOptions options);
  std::string class_name() const override { return "MultiHeadAttention"; }
  const MultiHeadAttentionOptions& options() const { return options_; }
  void get_config(LayerConfig& config) const override;
  // Keras passes value, key and attention_mask as keywords, and use_causal_mask beside them.
  std::vector<std::string> keyword_inputs() const override { return {"value", "key", "attention_mask"}; }
  void get_call_config(LayerConfig& kwargs) const override;
  void set_call_config(const LayerConfig& kwargs) override;
  // Keras's call with every argument: key and attention_mask may be undefined.
  Tensor attend(const Tensor& query, const Tensor& value, const Tensor& key, const Tensor& attention_mask,
                bool training);

 protected:
  void build_weights(const std::vector<Shape>& shapes) override;
  std::size_t shape_checked_inputs() const override { return 3; }  // the mask is optional, of two forms
  std::vector<Tensor> call_list(const std::vector<Tensor>& xs, bool training) override;

 private:
  ops::AttentionOptions attention_options(bool training);
  // The attention axes for inputs of `rank`, as positive axes in increasing order (validated).
  std::vector<std::int64_t> axes_for(std::int64_t rank) const;
  MultiHeadAttentionOptions options_;
  std::shared_ptr<EinsumDenseLayer> query_, key_, value_, output_;
  std::optional<ops::Generator> generator_;
  std::mutex mu_;
};
LayerPtr MultiHeadAttention(MultiHeadAttentionOptions options);

}  // namespace chorus::layers
