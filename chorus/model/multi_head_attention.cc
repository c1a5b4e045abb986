#include <chorus/model/multi_head_attention.h>

#include <algorithm>
#include <map>
#include <random>

#include <chorus/core/distribution.h>
#include <chorus/core/error.h>
#include <chorus/model/serialization.h>
#include <chorus/ops/ops.h>

namespace chorus::layers {

using chorus::internal::str_cat;

EinsumDenseLayer::EinsumDenseLayer(Kind kind, std::int64_t heads, std::int64_t per_head, std::int64_t out,
                                   bool use_bias, initializers::Initializer kernel_init,
                                   initializers::Initializer bias_init, std::string name)
    : Layer(std::move(name)),
      kind_(kind),
      heads_(heads),
      per_head_(per_head),
      out_(out),
      use_bias_(use_bias),
      kernel_init_(std::move(kernel_init)),
      bias_init_(std::move(bias_init)) {}

Shape EinsumDenseLayer::compute_output_shape(const Shape& in) const {
  std::vector<std::int64_t> d = in.dims();
  if (kind_ == Kind::kSplitHeads) {
    d.back() = heads_;
    d.push_back(per_head_);
  } else {
    d.resize(d.size() - 1);
    d.back() = out_;
  }
  return Shape(d);
}

void EinsumDenseLayer::build_weights(const Shape& in) {
  if (kind_ == Kind::kSplitHeads) {
    CHORUS_REQUIRE(in.rank() >= 3, InvalidArgumentError, "layer '", name(), "' (EinsumDense) takes [batch, ..., ",
                   "features] of rank 3 or more, got ", in.to_string());
    kernel_ = add_weight("kernel", Shape{in.dim(-1), heads_, per_head_}, kernel_init_);
    if (use_bias_) bias_ = add_weight("bias", Shape{heads_, per_head_}, bias_init_);
  } else {
    CHORUS_REQUIRE(in.rank() >= 4 && in.dim(-2) == heads_ && in.dim(-1) == per_head_, InvalidArgumentError, "layer '",
                   name(), "' (EinsumDense) takes [batch, ..., ", heads_, ", ", per_head_, "], got ", in.to_string());
    kernel_ = add_weight("kernel", Shape{heads_, per_head_, out_}, kernel_init_);
    if (use_bias_) bias_ = add_weight("bias", Shape{out_}, bias_init_);
  }
}

Tensor EinsumDenseLayer::call(const Tensor& x, bool training) {
  (void)training;
  const bool split = kind_ == Kind::kSplitHeads;
  std::vector<std::int64_t> lead = x.shape().dims();  // every axis but the contracted ones
  lead.resize(lead.size() - (split ? 1 : 2));
  std::int64_t rows = 1;
  for (std::int64_t d : lead) rows *= d;
  const std::int64_t in = split ? x.shape().dim(-1) : heads_ * per_head_;
  const std::int64_t out = split ? heads_ * per_head_ : out_;
  Tensor y = ops::matmul(ops::reshape(x, {rows, in}), ops::reshape(read_weight(kernel_), {in, out}));
  if (use_bias_) y = y + ops::reshape(read_weight(bias_), {out});
  if (split) {
    lead.push_back(heads_);
    lead.push_back(per_head_);
  } else {
    lead.push_back(out_);
  }
  return ops::reshape(y, lead);
}

MultiHeadAttentionLayer::MultiHeadAttentionLayer(MultiHeadAttentionOptions options)
    : Layer(options.name), options_(std::move(options)) {
  CHORUS_REQUIRE(options_.num_heads >= 1 && options_.key_dim >= 1, InvalidArgumentError,
                 "MultiHeadAttention: num_heads and key_dim must be >= 1, got ", options_.num_heads, " and ",
                 options_.key_dim);
  CHORUS_REQUIRE(options_.value_dim >= 0 && options_.output_dim >= 0, InvalidArgumentError,
                 "MultiHeadAttention: value_dim and output_dim must be >= 0 (0: the default), got ", options_.value_dim,
                 " and ", options_.output_dim);
  CHORUS_REQUIRE(options_.dropout >= 0 && options_.dropout < 1, InvalidArgumentError,
                 "MultiHeadAttention: dropout must be in [0, 1), got ", options_.dropout);
  if (options_.value_dim == 0) options_.value_dim = options_.key_dim;
  generator_.emplace(ops::Generator::from_seed(options_.seed ? *options_.seed : std::random_device{}()));
}

void MultiHeadAttentionLayer::build_weights(const std::vector<Shape>& shapes) {
  CHORUS_REQUIRE(shapes.size() <= 4, InvalidArgumentError, "layer '", name(),
                 "' (MultiHeadAttention) takes x or {query, value[, key[, attention_mask]]}, got ", shapes.size(),
                 " inputs");
  for (std::size_t i = 0; i < std::min<std::size_t>(shapes.size(), 3); ++i)
    CHORUS_REQUIRE(shapes[i].rank() >= 3 && shapes[i].rank() == shapes[0].rank(), InvalidArgumentError, "layer '",
                   name(), "' (MultiHeadAttention): query, value and key must be [batch, ..., features] of one rank, ",
                   "3 or more, got ", shapes[i].to_string(), " with a query of ", shapes[0].to_string());
  const Shape& q = shapes[0];
  const Shape& v = shapes.size() >= 2 ? shapes[1] : shapes[0];  // one input: self-attention
  const Shape& k = shapes.size() >= 3 ? shapes[2] : v;
  const std::vector<std::int64_t> axes = axes_for(q.rank());  // validates attention_axes
  for (std::int64_t a = 0; a + 1 < q.rank(); ++a) {           // the axes that act as batch axes must agree
    if (a > 0 && std::find(axes.begin(), axes.end(), a) != axes.end()) continue;
    CHORUS_REQUIRE(k.dim(a) == q.dim(a) && v.dim(a) == q.dim(a), InvalidArgumentError, "layer '", name(),
                   "' (MultiHeadAttention): query ", q.to_string(), ", key ", k.to_string(), " and value ",
                   v.to_string(), " differ on axis ", a, ", which is not an attention axis");
  }
  CHORUS_REQUIRE(!options_.use_causal_mask || q.rank() == 3, InvalidArgumentError, "layer '", name(),
                 "' (MultiHeadAttention): use_causal_mask needs [batch, seq, features] inputs, got ", q.to_string());
  const std::int64_t out = options_.output_dim > 0 ? options_.output_dim : q.dim(-1);
  const auto& o = options_;
  // The projections compute in this layer's dtype policy (Keras passes dtype=self.dtype_policy).
  auto make = [&](EinsumDenseLayer::Kind kind, std::int64_t per_head, std::int64_t out_dim, const char* name) {
    auto l = std::make_shared<EinsumDenseLayer>(kind, o.num_heads, per_head, out_dim, o.use_bias, o.kernel_initializer,
                                                o.bias_initializer, name);
    l->set_dtype_policy(dtype_policy());
    return l;
  };
  using K = EinsumDenseLayer::Kind;
  query_ = std::static_pointer_cast<EinsumDenseLayer>(
      track_layer(make(K::kSplitHeads, o.key_dim, 0, "query"), "_query_dense"));
  key_ =
      std::static_pointer_cast<EinsumDenseLayer>(track_layer(make(K::kSplitHeads, o.key_dim, 0, "key"), "_key_dense"));
  value_ = std::static_pointer_cast<EinsumDenseLayer>(
      track_layer(make(K::kSplitHeads, o.value_dim, 0, "value"), "_value_dense"));
  output_ = std::static_pointer_cast<EinsumDenseLayer>(
      track_layer(make(K::kMergeHeads, o.value_dim, out, "attention_output"), "_output_dense"));
  query_->build(q);
  key_->build(k);
  value_->build(v);
  std::vector<std::int64_t> merged = q.dims();
  merged.back() = o.num_heads;
  merged.push_back(o.value_dim);
  output_->build(Shape(merged));
}

std::vector<std::int64_t> MultiHeadAttentionLayer::axes_for(std::int64_t rank) const {
  std::vector<std::int64_t> axes;
  if (!options_.attention_axes) {
    for (std::int64_t a = 1; a + 1 < rank; ++a) axes.push_back(a);
    return axes;
  }
  for (std::int64_t a : *options_.attention_axes) {
    const std::int64_t p = a < 0 ? a + rank : a;
    CHORUS_REQUIRE(p >= 1 && p + 1 < rank, InvalidArgumentError, "layer '", name(),
                   "' (MultiHeadAttention): attention axis ", a, " is not a middle axis of rank-", rank,
                   " inputs [batch, ..., features] (1 .. ", rank - 2, ", or -", rank - 1, " .. -2)");
    CHORUS_REQUIRE(std::find(axes.begin(), axes.end(), p) == axes.end(), InvalidArgumentError, "layer '", name(),
                   "' (MultiHeadAttention): attention axis ", a, " is listed twice");
    axes.push_back(p);
  }
  CHORUS_REQUIRE(!axes.empty(), InvalidArgumentError, "layer '", name(),
                 "' (MultiHeadAttention): attention_axes is empty; leave it unset for every middle axis");
  std::sort(axes.begin(), axes.end());
  return axes;
}

ops::AttentionOptions MultiHeadAttentionLayer::attention_options(bool training) {
  ops::AttentionOptions a{.scale = 0, .causal = options_.use_causal_mask};
  if (!training || options_.dropout == 0) return a;
  a.dropout_rate = options_.dropout;
  // As layers::Dropout: one replica draws from the layer's generator; under a strategy each
  // replica takes stateless seeds (layer key, replica, call count), independent of thread order.
  ReplicaContext* ctx = get_replica_context();
  if (ctx == nullptr || ctx->num_replicas_in_sync() == 1) {
    a.generator = &*generator_;
    return a;
  }
  thread_local std::map<const MultiHeadAttentionLayer*, std::int64_t> calls;
  const std::int64_t n = calls[this]++;
  a.seed = std::array<std::int64_t, 2>{static_cast<std::int64_t>(generator_->state().key),
                                       (static_cast<std::int64_t>(ctx->replica_id_in_sync_group()) << 40) + n};
  return a;
}

Tensor MultiHeadAttentionLayer::attend(const Tensor& query, const Tensor& value, const Tensor& key,
                                       const Tensor& attention_mask, bool training) {
  const Tensor& k_in = key.defined() ? key : value;
  const std::int64_t rank = query.shape().rank();
  const std::vector<std::int64_t> axes = axes_for(rank);
  // Projected inputs are [B, d1 .. dn, H, D] (rank + 1 axes, the heads at rank - 1). The fused op
  // takes [B', H, T, D]: the batch and the middle axes that are not attention axes (O) folded into
  // B', the attention axes (A) into T — Keras's einsum order, [B, O..., H, A..., D].
  std::vector<int> perm{0};
  std::vector<std::int64_t> others;
  for (std::int64_t a = 1; a + 1 < rank; ++a)
    if (std::find(axes.begin(), axes.end(), a) == axes.end()) others.push_back(a);
  for (std::int64_t a : others) perm.push_back(static_cast<int>(a));
  perm.push_back(static_cast<int>(rank - 1));
  for (std::int64_t a : axes) perm.push_back(static_cast<int>(a));
  perm.push_back(static_cast<int>(rank));
  std::int64_t folded = query.shape().dim(0);
  for (std::int64_t a : others) folded *= query.shape().dim(a);
  auto positions = [&](const Tensor& t) {  // the product of t's attention axes
    std::int64_t n = 1;
    for (std::int64_t a : axes) n *= t.shape().dim(a);
    return n;
  };
  auto to_heads = [&](const Tensor& projected, std::int64_t t) {
    Tensor p = ops::transpose(projected, perm);
    return ops::reshape(p, {folded, options_.num_heads, t, projected.shape().dim(-1)});
  };
  const std::int64_t t = positions(query), s = positions(value);
  const Tensor q = to_heads((*query_)(query, training), t);
  const Tensor k = to_heads((*key_)(k_in, training), s);
  const Tensor v = to_heads((*value_)(value, training), s);
  Tensor mask;
  if (attention_mask.defined()) {
    CHORUS_REQUIRE(attention_mask.dtype() == DType::kBool, InvalidArgumentError, "layer '", name(),
                   "' (MultiHeadAttention): attention_mask must be bool (true = attend), got ",
                   dtype_name(attention_mask.dtype()));
    // Keras's layout: [B, O..., query's attention axes..., key's attention axes...].
    std::vector<std::int64_t> want{query.shape().dim(0)};
    for (std::int64_t a : others) want.push_back(query.shape().dim(a));
    for (std::int64_t a : axes) want.push_back(query.shape().dim(a));
    for (std::int64_t a : axes) want.push_back(value.shape().dim(a));
    const auto& m = attention_mask.shape().dims();
    const std::int64_t batch = query.shape().dim(0);
    const bool padding = rank == 3 && m.size() == 2 && m[0] == batch && m[1] == s;
    const bool full = m == want;
    CHORUS_REQUIRE(padding || full, InvalidArgumentError, "layer '", name(), "' (MultiHeadAttention): attention_mask ",
                   "must be ", Shape(want).to_string(),
                   rank == 3 ? str_cat(" or a key padding mask [batch, ", s, "]") : std::string(), ", got ",
                   attention_mask.shape().to_string());
    mask = padding ? ops::reshape(attention_mask, {batch, 1, 1, s}) : ops::reshape(attention_mask, {folded, 1, t, s});
  }
  std::unique_lock<std::mutex> lock(mu_);
  const ops::AttentionOptions a = attention_options(training);
  lock.unlock();
  const Tensor o = ops::scaled_dot_product_attention(q, k, v, mask, a);  // [B', H, T, Dv]
  // Back to [B, O..., H, A..., Dv], then to the input's axis order [B, d1 .. dn, H, Dv].
  std::vector<std::int64_t> unfolded{query.shape().dim(0)};
  for (std::int64_t ax : others) unfolded.push_back(query.shape().dim(ax));
  unfolded.push_back(options_.num_heads);
  for (std::int64_t ax : axes) unfolded.push_back(query.shape().dim(ax));
  unfolded.push_back(o.shape().dim(-1));
  std::vector<int> inverse(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) inverse[static_cast<std::size_t>(perm[i])] = static_cast<int>(i);
  return (*output_)(ops::transpose(ops::reshape(o, unfolded), inverse), training);
}

std::vector<Tensor> MultiHeadAttentionLayer::call_list(const std::vector<Tensor>& xs, bool training) {
  if (xs.size() == 1) return {attend(xs[0], xs[0], Tensor(), Tensor(), training)};  // self-attention
  return {attend(xs[0], xs[1], xs.size() >= 3 ? xs[2] : Tensor(), xs.size() >= 4 ? xs[3] : Tensor(), training)};
}

LayerPtr MultiHeadAttention(MultiHeadAttentionOptions options) {
  return std::make_shared<MultiHeadAttentionLayer>(std::move(options));
}

// ---- Keras config (model/serialization.h) ----

void MultiHeadAttentionLayer::get_config(LayerConfig& c) const {
  const auto& o = options_;
  c.set("num_heads", o.num_heads);
  c.set("key_dim", o.key_dim);
  c.set("value_dim", o.value_dim);
  c.set("dropout", o.dropout);
  c.set("use_bias", o.use_bias);
  if (o.output_dim > 0)
    c.set("output_shape", o.output_dim);
  else
    c.set_null("output_shape");
  // Keras writes the axes it built with (None before a build).
  const auto& built_shapes = build_input_shapes();
  if (options_.attention_axes)
    c.set("attention_axes", *options_.attention_axes);
  else if (!built_shapes.empty())
    c.set("attention_axes", axes_for(static_cast<std::int64_t>(built_shapes[0].size()) + 1));  // + the batch axis
  else
    c.set_null("attention_axes");
  c.set_initializer("kernel_initializer", o.kernel_initializer);
  c.set_initializer("bias_initializer", o.bias_initializer);
  c.set_nulls(
      {"kernel_regularizer", "bias_regularizer", "activity_regularizer", "kernel_constraint", "bias_constraint"});
  const auto& shapes = build_input_shapes();
  if (shapes.size() >= 2) {
    c.set_batch_shape("query_shape", shapes[0]);
    c.set_batch_shape("key_shape", shapes.size() >= 3 ? shapes[2] : shapes[1]);
    c.set_batch_shape("value_shape", shapes[1]);
  }
  c.set("softmax_robust_masking", false);
}

void MultiHeadAttentionLayer::get_call_config(LayerConfig& kwargs) const {
  if (options_.use_causal_mask) kwargs.set("use_causal_mask", true);
}

void MultiHeadAttentionLayer::set_call_config(const LayerConfig& kwargs) {
  for (const char* mask : {"query_mask", "value_mask", "key_mask"})
    if (!kwargs.is_null(mask)) kwargs.fail(mask, "is not supported: pass an attention_mask input instead");
  if (kwargs.get_bool("return_attention_scores", false))
    kwargs.fail("return_attention_scores", "is not supported by chorus's MultiHeadAttention");
  for (const std::string& k : kwargs.keys())
    if (k != "use_causal_mask" && k != "training" && k != "return_attention_scores" && k != "query_mask" &&
        k != "value_mask" && k != "key_mask")
      kwargs.fail(k, "is a call keyword argument MultiHeadAttention does not take");
  const bool causal = kwargs.get_bool("use_causal_mask", false);
  CHORUS_REQUIRE(!built() || causal == options_.use_causal_mask, InvalidArgumentError, "layer '", name(),
                 "' (MultiHeadAttention): its calls disagree on use_causal_mask (chorus makes it the layer's option)");
  options_.use_causal_mask = causal;
}

CHORUS_REGISTER_LAYER_CLASS(MultiHeadAttention, [](const LayerConfig& c) {
  c.require_nulls(
      {"kernel_regularizer", "bias_regularizer", "activity_regularizer", "kernel_constraint", "bias_constraint"});
  std::optional<std::vector<std::int64_t>> attention_axes;  // checked against the inputs' rank at build
  if (!c.is_null("attention_axes"))
    attention_axes = c.is_int("attention_axes") ? std::vector<std::int64_t>{c.get_int("attention_axes")}
                                                : c.get_int_list("attention_axes");
  if (c.has("softmax_robust_masking")) c.require("softmax_robust_masking", false);
  std::int64_t output_dim = 0;
  if (!c.is_null("output_shape")) {
    const std::vector<std::int64_t> out = c.is_int("output_shape")
                                              ? std::vector<std::int64_t>{c.get_int("output_shape")}
                                              : c.get_int_list("output_shape");
    if (out.size() != 1)
      c.fail("output_shape", "must be one dimension (chorus projects to [batch, seq, output_shape])");
    output_dim = out[0];
  }
  MultiHeadAttentionOptions o{
      .num_heads = c.get_int("num_heads"),
      .key_dim = c.get_int("key_dim"),
      .value_dim = c.is_null("value_dim") ? 0 : c.get_int("value_dim"),
      .dropout = c.get_double("dropout", 0.0),
      .use_bias = c.get_bool("use_bias", true),
      .output_dim = output_dim,
      .attention_axes = attention_axes,
      .kernel_initializer = c.get_initializer("kernel_initializer", initializers::glorot_uniform()),
      .bias_initializer = c.get_initializer("bias_initializer", initializers::zeros())};
  return MultiHeadAttention(std::move(o));
});

namespace registration {
void link_multi_head_attention() {}
}  // namespace registration

}  // namespace chorus::layers
