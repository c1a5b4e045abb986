#include <chorus/model/multi_head_attention.h>

#include <map>
#include <random>

#include <chorus/core/distribution.h>
#include <chorus/core/error.h>
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
    CHORUS_REQUIRE(in.rank() == 3, InvalidArgumentError, "layer '", name(), "' (EinsumDense) takes [batch, seq, ",
                   "features], got ", in.to_string());
    kernel_ = add_weight("kernel", Shape{in.dim(-1), heads_, per_head_}, kernel_init_);
    if (use_bias_) bias_ = add_weight("bias", Shape{heads_, per_head_}, bias_init_);
  } else {
    CHORUS_REQUIRE(in.rank() == 4 && in.dim(2) == heads_ && in.dim(3) == per_head_, InvalidArgumentError, "layer '",
                   name(), "' (EinsumDense) takes [batch, seq, ", heads_, ", ", per_head_, "], got ", in.to_string());
    kernel_ = add_weight("kernel", Shape{heads_, per_head_, out_}, kernel_init_);
    if (use_bias_) bias_ = add_weight("bias", Shape{out_}, bias_init_);
  }
}

Tensor EinsumDenseLayer::call(const Tensor& x, bool training) {
  (void)training;
  const auto& d = x.shape().dims();
  const std::int64_t rows = d[0] * d[1];
  const std::int64_t in = kind_ == Kind::kSplitHeads ? d[2] : heads_ * per_head_;
  const std::int64_t out = kind_ == Kind::kSplitHeads ? heads_ * per_head_ : out_;
  Tensor y = ops::matmul(ops::reshape(x, {rows, in}), ops::reshape(read_weight(kernel_), {in, out}));
  if (use_bias_) y = y + ops::reshape(read_weight(bias_), {out});
  if (kind_ == Kind::kSplitHeads) return ops::reshape(y, {d[0], d[1], heads_, per_head_});
  return ops::reshape(y, {d[0], d[1], out_});
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
    CHORUS_REQUIRE(shapes[i].rank() == 3, InvalidArgumentError, "layer '", name(),
                   "' (MultiHeadAttention): query, value and key must be [batch, seq, features], got ",
                   shapes[i].to_string());
  const Shape& q = shapes[0];
  const Shape& v = shapes.size() >= 2 ? shapes[1] : shapes[0];  // one input: self-attention
  const Shape& k = shapes.size() >= 3 ? shapes[2] : v;
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
  query_ = std::static_pointer_cast<EinsumDenseLayer>(track_layer(make(K::kSplitHeads, o.key_dim, 0, "query"), "_query_dense"));
  key_ = std::static_pointer_cast<EinsumDenseLayer>(track_layer(make(K::kSplitHeads, o.key_dim, 0, "key"), "_key_dense"));
  value_ = std::static_pointer_cast<EinsumDenseLayer>(track_layer(make(K::kSplitHeads, o.value_dim, 0, "value"), "_value_dense"));
  output_ = std::static_pointer_cast<EinsumDenseLayer>(
      track_layer(make(K::kMergeHeads, o.value_dim, out, "attention_output"), "_output_dense"));
  query_->build(q);
  key_->build(k);
  value_->build(v);
  output_->build(Shape{q.dim(0), q.dim(1), o.num_heads, o.value_dim});
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
  // [B, T, H, D] → [B, H, T, D], the fused op's layout.
  auto heads = [](const Tensor& t) { return ops::transpose(t, {0, 2, 1, 3}); };
  const Tensor q = heads((*query_)(query, training));
  const Tensor k = heads((*key_)(k_in, training));
  const Tensor v = heads((*value_)(value, training));
  Tensor mask;
  if (attention_mask.defined()) {
    CHORUS_REQUIRE(attention_mask.dtype() == DType::kBool, InvalidArgumentError, "layer '", name(),
                   "' (MultiHeadAttention): attention_mask must be bool (true = attend), got ",
                   dtype_name(attention_mask.dtype()));
    const auto& m = attention_mask.shape().dims();
    const std::int64_t batch = query.shape().dim(0), t = query.shape().dim(1), s = value.shape().dim(1);
    const bool padding = m.size() == 2 && m[0] == batch && m[1] == s;
    const bool full = m.size() == 3 && m[0] == batch && m[1] == t && m[2] == s;
    CHORUS_REQUIRE(padding || full, InvalidArgumentError, "layer '", name(), "' (MultiHeadAttention): attention_mask ",
                   "must be [batch, ", t, ", ", s, "] or a key padding mask [batch, ", s, "], got ",
                   attention_mask.shape().to_string());
    mask = padding ? ops::reshape(attention_mask, {batch, 1, 1, s}) : ops::expand_dims(attention_mask, 1);
  }
  std::unique_lock<std::mutex> lock(mu_);
  const ops::AttentionOptions a = attention_options(training);
  lock.unlock();
  const Tensor o = ops::scaled_dot_product_attention(q, k, v, mask, a);  // [B, H, T, Dv]
  return (*output_)(ops::transpose(o, {0, 2, 1, 3}), training);
}

std::vector<Tensor> MultiHeadAttentionLayer::call_list(const std::vector<Tensor>& xs, bool training) {
  if (xs.size() == 1) return {attend(xs[0], xs[0], Tensor(), Tensor(), training)};  // self-attention
  return {attend(xs[0], xs[1], xs.size() >= 3 ? xs[2] : Tensor(), xs.size() >= 4 ? xs[3] : Tensor(), training)};
}

LayerPtr MultiHeadAttention(MultiHeadAttentionOptions options) {
  return std::make_shared<MultiHeadAttentionLayer>(std::move(options));
}

}  // namespace chorus::layers
