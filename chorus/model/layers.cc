// Dense, Flatten, Activation, Dropout, Embedding, Conv2D, pooling (see model/layers.h).
#include <chorus/model/layers.h>

#include <map>
#include <random>

#include <chorus/core/distribution.h>
#include <chorus/core/error.h>
#include <chorus/model/serialization.h>
#include <chorus/ops/geometry.h>
#include <chorus/ops/ops.h>

namespace chorus::layers {

using chorus::internal::str_cat;

void check_activation(const std::string& a) {
  CHORUS_REQUIRE(
      a.empty() || a == "linear" || a == "relu" || a == "sigmoid" || a == "tanh" || a == "gelu" || a == "softmax" ||
          a == "silu" || a == "swish" || a == "leaky_relu" || a == "elu" || a == "softplus",
      InvalidArgumentError, "unknown activation '", a,
      "'; use one of: linear (or \"\"), relu, sigmoid, tanh, gelu, softmax, silu (or swish), leaky_relu, elu, "
      "softplus");
}

Tensor activate(const std::string& a, const Tensor& x) {
  if (a.empty() || a == "linear") return x;
  if (a == "relu") return ops::relu(x);
  if (a == "sigmoid") return ops::sigmoid(x);
  if (a == "tanh") return ops::tanh(x);
  if (a == "gelu") return ops::gelu(x);
  if (a == "silu" || a == "swish") return ops::silu(x);
  if (a == "leaky_relu") return ops::leaky_relu(x);  // tf.nn.leaky_relu's alpha 0.2, as Keras's string
  if (a == "elu") return ops::elu(x);
  if (a == "softplus") return ops::softplus(x);
  // Keras keeps softmax in float32 under a mixed policy (16-bit exp/normalization loses the
  // small probabilities); its output is float32.
  if (a == "softmax")
    return ops::softmax(x.dtype() == DType::kFloat16 || x.dtype() == DType::kBFloat16 ? ops::cast(x, DType::kFloat32)
                                                                                      : x);
  check_activation(a);
  return x;
}

ops::Padding parse_padding(const std::string& p) {
  if (p == "valid" || p == "VALID") return ops::Padding::kValid;
  if (p == "same" || p == "SAME") return ops::Padding::kSame;
  throw InvalidArgumentError(str_cat("padding '", p, "': use \"valid\" or \"same\""));
}

// ---- Dense ----

DenseLayer::DenseLayer(std::int64_t units, std::string activation, bool use_bias, initializers::Initializer kernel_init,
                       initializers::Initializer bias_init, std::string name)
    : Layer(std::move(name)),
      units_(units),
      activation_(std::move(activation)),
      use_bias_(use_bias),
      kernel_init_(std::move(kernel_init)),
      bias_init_(std::move(bias_init)) {
  CHORUS_REQUIRE(units_ > 0, InvalidArgumentError, "Dense: units must be > 0, got ", units_);
  check_activation(activation_);
}

Shape DenseLayer::compute_output_shape(const Shape& in) const {
  CHORUS_REQUIRE(in.rank() >= 2, InvalidArgumentError, "Dense '", name(),
                 "': input must be [batch, ..., features], got ", in.to_string());
  std::vector<std::int64_t> d = in.dims();
  d.back() = units_;
  return Shape(d);
}

void DenseLayer::build_weights(const Shape& in) {
  CHORUS_REQUIRE(in.rank() >= 2, InvalidArgumentError, "Dense '", name(),
                 "': input must be [batch, ..., features], got ", in.to_string());
  kernel_ = add_weight("kernel", Shape{in.dims().back(), units_}, kernel_init_);
  if (use_bias_) bias_ = add_weight("bias", Shape{units_}, bias_init_);
}

Tensor DenseLayer::call(const Tensor& x, bool) {
  const std::int64_t in = x.shape().dims().back();
  Tensor flat = x.shape().rank() == 2 ? x : ops::reshape(x, {x.num_elements() / std::max<std::int64_t>(in, 1), in});
  Tensor y = ops::matmul(flat, read_weight(kernel_));
  if (use_bias_) y = ops::add(y, read_weight(bias_));
  if (x.shape().rank() != 2) y = ops::reshape(y, compute_output_shape(x.shape()).dims());
  return activate(activation_, y);
}

LayerPtr Dense(std::int64_t units, std::string activation, bool use_bias, initializers::Initializer kernel_initializer,
               initializers::Initializer bias_initializer, std::string name) {
  return std::make_shared<DenseLayer>(units, std::move(activation), use_bias, std::move(kernel_initializer),
                                      std::move(bias_initializer), std::move(name));
}

// ---- Conv2D ----

Conv2DLayer::Conv2DLayer(std::int64_t filters, std::array<std::int64_t, 2> kernel, std::array<std::int64_t, 2> strides,
                         ops::Padding padding, std::string activation, bool use_bias,
                         std::array<std::int64_t, 2> dilation, initializers::Initializer kernel_init,
                         initializers::Initializer bias_init, std::string name, std::int64_t groups)
    : Layer(std::move(name)),
      filters_(filters),
      groups_(groups),
      kernel_size_(kernel),
      strides_(strides),
      dilation_(dilation),
      padding_(padding),
      activation_(std::move(activation)),
      use_bias_(use_bias),
      kernel_init_(std::move(kernel_init)),
      bias_init_(std::move(bias_init)) {
  CHORUS_REQUIRE(filters_ > 0 && kernel[0] > 0 && kernel[1] > 0 && strides[0] > 0 && strides[1] > 0 &&
                     dilation[0] > 0 && dilation[1] > 0,
                 InvalidArgumentError, "Conv2D: filters, kernel_size, strides and dilation must be > 0");
  CHORUS_REQUIRE(groups_ > 0 && filters_ % groups_ == 0, InvalidArgumentError,
                 "Conv2D: the number of filters must be a positive multiple of groups, got filters=", filters_,
                 ", groups=", groups_);
  check_activation(activation_);
}

Shape Conv2DLayer::compute_output_shape(const Shape& in) const {
  CHORUS_REQUIRE(in.rank() == 4, InvalidArgumentError, "Conv2D '", name(), "': input must be NHWC, got ",
                 in.to_string());
  ops::Conv2dGeometry g{in.dims()[0], in.dims()[1], in.dims()[2], in.dims()[3], kernel_size_[0], kernel_size_[1],
                        filters_,     strides_[0],  strides_[1],  dilation_[0], dilation_[1]};
  CHORUS_REQUIRE(ops::compute_output_size(g, padding_), InvalidArgumentError, "Conv2D '", name(), "': kernel ",
                 kernel_size_[0], "x", kernel_size_[1], " does not fit input ", in.to_string());
  return Shape{in.dims()[0], g.out_h, g.out_w, filters_};
}

void Conv2DLayer::build_weights(const Shape& in) {
  CHORUS_REQUIRE(in.rank() == 4, InvalidArgumentError, "Conv2D '", name(), "': input must be NHWC, got ",
                 in.to_string());
  compute_output_shape(in);  // validates the geometry now
  CHORUS_REQUIRE(in.dims()[3] % groups_ == 0, InvalidArgumentError, "Conv2D '", name(),
                 "': the input's channels must be a multiple of groups, got ", in.dims()[3], " channels (input ",
                 in.to_string(), "), groups=", groups_);
  kernel_ =
      add_weight("kernel", Shape{kernel_size_[0], kernel_size_[1], in.dims()[3] / groups_, filters_}, kernel_init_);
  if (use_bias_) bias_ = add_weight("bias", Shape{filters_}, bias_init_);
}

Tensor Conv2DLayer::call(const Tensor& x, bool) {
  const ops::Conv2dOptions options{strides_, padding_, dilation_, groups_};
  // Bias and ReLU (or no activation) go into the convolution, as TensorFlow's grappler remaps
  // Conv2D + BiasAdd + Relu into _FusedConv2D.
  if (use_bias_ && (activation_ == "relu" || activation_.empty() || activation_ == "linear")) {
    return ops::fused_conv2d(x, read_weight(kernel_), read_weight(bias_),
                             activation_ == "relu" ? ops::FusedActivation::kRelu : ops::FusedActivation::kNone,
                             options);
  }
  Tensor y = ops::conv2d(x, read_weight(kernel_), options);
  if (use_bias_) y = ops::add(y, read_weight(bias_));
  return activate(activation_, y);
}

LayerPtr Conv2D(std::int64_t filters, std::int64_t kernel_size, std::string activation, std::int64_t strides,
                std::string padding, bool use_bias, initializers::Initializer kernel_initializer,
                initializers::Initializer bias_initializer, std::string name) {
  return std::make_shared<Conv2DLayer>(filters, std::array<std::int64_t, 2>{kernel_size, kernel_size},
                                       std::array<std::int64_t, 2>{strides, strides}, parse_padding(padding),
                                       std::move(activation), use_bias, std::array<std::int64_t, 2>{1, 1},
                                       std::move(kernel_initializer), std::move(bias_initializer), std::move(name));
}

LayerPtr Conv2D(std::int64_t filters, std::array<std::int64_t, 2> kernel_size, std::array<std::int64_t, 2> strides,
                std::string padding, std::string activation, std::array<std::int64_t, 2> dilation, bool use_bias,
                initializers::Initializer kernel_initializer, initializers::Initializer bias_initializer,
                std::string name, std::int64_t groups) {
  return std::make_shared<Conv2DLayer>(filters, kernel_size, strides, parse_padding(padding), std::move(activation),
                                       use_bias, dilation, std::move(kernel_initializer), std::move(bias_initializer),
                                       std::move(name), groups);
}

// ---- pooling ----

Pooling2DLayer::Pooling2DLayer(ops::PoolKind kind, std::array<std::int64_t, 2> pool,
                               std::array<std::int64_t, 2> strides, ops::Padding padding, std::string name)
    : Layer(std::move(name)), kind_(kind), pool_(pool), strides_(strides), padding_(padding) {
  CHORUS_REQUIRE(pool[0] > 0 && pool[1] > 0 && strides[0] > 0 && strides[1] > 0, InvalidArgumentError, class_name(),
                 ": pool_size and strides must be > 0");
}

Shape Pooling2DLayer::compute_output_shape(const Shape& in) const {
  CHORUS_REQUIRE(in.rank() == 4, InvalidArgumentError, class_name(), " '", name(), "': input must be NHWC, got ",
                 in.to_string());
  ops::Conv2dGeometry g{in.dims()[0], in.dims()[1], in.dims()[2], in.dims()[3], pool_[0],
                        pool_[1],     in.dims()[3], strides_[0],  strides_[1]};
  CHORUS_REQUIRE(ops::compute_output_size(g, padding_), InvalidArgumentError, class_name(), " '", name(),
                 "': the window does not fit input ", in.to_string());
  return Shape{in.dims()[0], g.out_h, g.out_w, in.dims()[3]};
}

Tensor Pooling2DLayer::call(const Tensor& x, bool) {
  if (x.shape().dims()[0] == 0) return Tensor::zeros(compute_output_shape(x.shape()), x.dtype(), x.device_name());
  return kind_ == ops::PoolKind::kMax ? ops::max_pool2d(x, pool_, strides_, padding_)
                                      : ops::avg_pool2d(x, pool_, strides_, padding_);
}

LayerPtr MaxPooling2D(std::int64_t pool_size, std::int64_t strides, std::string padding, std::string name) {
  const std::int64_t s = strides > 0 ? strides : pool_size;
  return std::make_shared<Pooling2DLayer>(ops::PoolKind::kMax, std::array<std::int64_t, 2>{pool_size, pool_size},
                                          std::array<std::int64_t, 2>{s, s}, parse_padding(padding), std::move(name));
}

LayerPtr AveragePooling2D(std::int64_t pool_size, std::int64_t strides, std::string padding, std::string name) {
  const std::int64_t s = strides > 0 ? strides : pool_size;
  return std::make_shared<Pooling2DLayer>(ops::PoolKind::kAvg, std::array<std::int64_t, 2>{pool_size, pool_size},
                                          std::array<std::int64_t, 2>{s, s}, parse_padding(padding), std::move(name));
}

// ---- Flatten, Activation ----

Shape FlattenLayer::compute_output_shape(const Shape& in) const {
  std::int64_t rest = 1;
  for (int i = 1; i < in.rank(); ++i) rest *= in.dims()[static_cast<std::size_t>(i)];
  return Shape{in.dims()[0], rest};
}

Tensor FlattenLayer::call(const Tensor& x, bool) { return ops::reshape(x, compute_output_shape(x.shape()).dims()); }

LayerPtr Flatten(std::string name) { return std::make_shared<FlattenLayer>(std::move(name)); }

ActivationLayer::ActivationLayer(std::string activation, std::string name)
    : Layer(std::move(name)), activation_(std::move(activation)) {
  check_activation(activation_);
}

Tensor ActivationLayer::call(const Tensor& x, bool) { return activate(activation_, x); }

LayerPtr Activation(std::string activation, std::string name) {
  return std::make_shared<ActivationLayer>(std::move(activation), std::move(name));
}

// ---- Dropout ----

DropoutLayer::DropoutLayer(double rate, std::optional<std::uint64_t> seed, std::string name)
    : Layer(std::move(name)), rate_(rate), seed_(seed) {
  CHORUS_REQUIRE(rate >= 0 && rate < 1, InvalidArgumentError, "Dropout: rate must be in [0, 1), got ", rate);
  generator_.emplace(ops::Generator::from_seed(seed ? *seed : std::random_device{}()));
}

Tensor DropoutLayer::call(const Tensor& x, bool training) {
  if (!training || rate_ == 0.0 || x.num_elements() == 0) return x;
  // Under a strategy, each replica draws from its own split of the layer's generator, so masks
  // do not depend on which replica thread ran first.
  ReplicaContext* ctx = get_replica_context();
  const int replicas = ctx ? ctx->num_replicas_in_sync() : 1;
  std::unique_lock<std::mutex> lock(mu_);
  if (replicas == 1) return ops::dropout(x, rate_, *generator_);
  // Counter-based: a per-step base drawn once per step would need a collective; instead each
  // replica uses stateless seeds (layer key, replica, call count). The count is a random draw of
  // its own: recompute_grad (ops/recompute.h) replays it, so a recomputation draws the same mask.
  thread_local std::map<const DropoutLayer*, std::int64_t> calls;
  const auto next_count = [&] {
    ops::GeneratorState count;
    count.counter_low = static_cast<std::uint64_t>(calls[this]++);
    return count;
  };
  const auto n =
      static_cast<std::int64_t>(ops::internal::replayable_draw(this, "Dropout layer", 1, next_count).counter_low);
  const auto key = static_cast<std::int64_t>(generator_->state().key);
  lock.unlock();
  return ops::dropout(
      x, rate_,
      std::array<std::int64_t, 2>{key, (static_cast<std::int64_t>(ctx->replica_id_in_sync_group()) << 40) + n});
}

LayerPtr Dropout(double rate, std::optional<std::uint64_t> seed, std::string name) {
  return std::make_shared<DropoutLayer>(rate, seed, std::move(name));
}

// ---- Embedding ----

EmbeddingLayer::EmbeddingLayer(std::int64_t input_dim, std::int64_t output_dim, initializers::Initializer init,
                               std::string name)
    : Layer(std::move(name)), input_dim_(input_dim), output_dim_(output_dim), init_(std::move(init)) {
  CHORUS_REQUIRE(input_dim > 0 && output_dim > 0, InvalidArgumentError,
                 "Embedding: input_dim and output_dim must be > 0");
}

Shape EmbeddingLayer::compute_output_shape(const Shape& in) const {
  std::vector<std::int64_t> d = in.dims();
  d.push_back(output_dim_);
  return Shape(d);
}

void EmbeddingLayer::build_weights(const Shape&) {
  table_ = add_weight("embeddings", Shape{input_dim_, output_dim_}, init_);
}

// Gathers from the variable, then casts the rows (as Keras does): casting the whole table every
// call would cost O(input_dim) instead of O(rows looked up).
Tensor EmbeddingLayer::call(const Tensor& ids, bool) {
  Tensor rows = ops::gather(table_.value(), ids, 0);
  return rows.dtype() == compute_dtype() ? rows : ops::cast(rows, compute_dtype());
}

LayerPtr Embedding(std::int64_t input_dim, std::int64_t output_dim, initializers::Initializer init, std::string name) {
  return std::make_shared<EmbeddingLayer>(input_dim, output_dim, std::move(init), std::move(name));
}

// ---- Keras config (model/serialization.h): get_config writes what tf_keras 2.21 writes, the
// factories read it back ----

namespace {

std::vector<std::int64_t> pair_of(const std::array<std::int64_t, 2>& a) { return {a[0], a[1]}; }
std::array<std::int64_t, 2> pair_from(const LayerConfig& c, const std::string& key, std::int64_t fallback) {
  if (!c.has(key) && fallback > 0) return {fallback, fallback};
  const auto v = c.get_int_list(key, 2);
  return {v[0], v[1]};
}
const char* padding_name(ops::Padding p) { return p == ops::Padding::kSame ? "same" : "valid"; }
constexpr std::initializer_list<const char*> kKernelNulls = {
    "kernel_regularizer", "bias_regularizer", "activity_regularizer", "kernel_constraint", "bias_constraint"};

}  // namespace

void DenseLayer::get_config(LayerConfig& c) const {
  c.set("units", units_);
  c.set_activation("activation", activation_);
  c.set("use_bias", use_bias_);
  c.set_initializer("kernel_initializer", kernel_init_);
  c.set_initializer("bias_initializer", bias_init_);
  c.set_nulls(kKernelNulls);
}
CHORUS_REGISTER_LAYER_CLASS(Dense, [](const LayerConfig& c) {
  c.require_nulls(kKernelNulls);
  return Dense(c.get_int("units"), c.get_activation("activation"), c.get_bool("use_bias", true),
               c.get_initializer("kernel_initializer", initializers::glorot_uniform()),
               c.get_initializer("bias_initializer", initializers::zeros()));
});

void Conv2DLayer::get_config(LayerConfig& c) const {
  c.set("filters", filters_);
  c.set("kernel_size", pair_of(kernel_size_));
  c.set("strides", pair_of(strides_));
  c.set("padding", padding_name(padding_));
  c.set("data_format", "channels_last");
  c.set("dilation_rate", pair_of(dilation_));
  c.set("groups", groups_);
  c.set_activation("activation", activation_);
  c.set("use_bias", use_bias_);
  c.set_initializer("kernel_initializer", kernel_init_);
  c.set_initializer("bias_initializer", bias_init_);
  c.set_nulls(kKernelNulls);
}
CHORUS_REGISTER_LAYER_CLASS(Conv2D, [](const LayerConfig& c) {
  c.require_nulls(kKernelNulls);
  c.require("data_format", "channels_last");
  return LayerPtr(std::make_shared<Conv2DLayer>(
      c.get_int("filters"), pair_from(c, "kernel_size", 0), pair_from(c, "strides", 1),
      parse_padding(c.get_string_in("padding", "valid", {"valid", "same"})), c.get_activation("activation"),
      c.get_bool("use_bias", true), pair_from(c, "dilation_rate", 1),
      c.get_initializer("kernel_initializer", initializers::glorot_uniform()),
      c.get_initializer("bias_initializer", initializers::zeros()), "", c.get_int("groups", 1)));
});

void Pooling2DLayer::get_config(LayerConfig& c) const {
  c.set("pool_size", pair_of(pool_));
  c.set("padding", padding_name(padding_));
  c.set("strides", pair_of(strides_));
  c.set("data_format", "channels_last");
}
namespace {
LayerPtr pooling_from_config(ops::PoolKind kind, const LayerConfig& c) {
  c.require("data_format", "channels_last");
  const auto pool = pair_from(c, "pool_size", 2);
  const auto strides = c.is_null("strides") ? pool : pair_from(c, "strides", 0);
  return std::make_shared<Pooling2DLayer>(kind, pool, strides,
                                          parse_padding(c.get_string_in("padding", "valid", {"valid", "same"})), "");
}
}  // namespace
CHORUS_REGISTER_LAYER_CLASS(MaxPooling2D,
                            [](const LayerConfig& c) { return pooling_from_config(ops::PoolKind::kMax, c); });
CHORUS_REGISTER_LAYER_CLASS(AveragePooling2D,
                            [](const LayerConfig& c) { return pooling_from_config(ops::PoolKind::kAvg, c); });

void FlattenLayer::get_config(LayerConfig& c) const { c.set("data_format", "channels_last"); }
CHORUS_REGISTER_LAYER_CLASS(Flatten, [](const LayerConfig& c) {
  c.require("data_format", "channels_last");
  return Flatten();
});

void ActivationLayer::get_config(LayerConfig& c) const { c.set_activation("activation", activation_); }
CHORUS_REGISTER_LAYER_CLASS(Activation,
                            [](const LayerConfig& c) { return Activation(c.get_activation("activation")); });

void DropoutLayer::get_config(LayerConfig& c) const {
  c.set("rate", rate_);
  c.set_null("noise_shape");
  if (seed_) {
    c.set("seed", static_cast<std::int64_t>(*seed_));
  } else {
    c.set_null("seed");
  }
}
CHORUS_REGISTER_LAYER_CLASS(Dropout, [](const LayerConfig& c) {
  c.require_null("noise_shape");
  std::optional<std::uint64_t> seed;
  if (!c.is_null("seed")) {
    const std::int64_t s = c.get_int("seed");
    if (s < 0) c.fail("seed", "must be >= 0");
    seed = static_cast<std::uint64_t>(s);
  }
  return Dropout(c.get_double("rate"), seed);
});

void EmbeddingLayer::get_config(LayerConfig& c) const {
  c.set_batch_shape("batch_input_shape", {-1});  // Keras's (None, input_length)
  c.set("input_dim", input_dim_);
  c.set("output_dim", output_dim_);
  c.set_initializer("embeddings_initializer", init_);
  c.set_nulls({"embeddings_regularizer", "activity_regularizer", "embeddings_constraint"});
  c.set("mask_zero", false);
  c.set_null("input_length");
}
CHORUS_REGISTER_LAYER_CLASS(Embedding, [](const LayerConfig& c) {
  c.require_nulls({"embeddings_regularizer", "activity_regularizer", "embeddings_constraint"});
  c.require("mask_zero", false);
  c.require("sparse", false);
  return Embedding(c.get_int("input_dim"), c.get_int("output_dim"),
                   c.get_initializer("embeddings_initializer", initializers::random_uniform()));
});

namespace registration {
void link_layers() {}
}  // namespace registration

}  // namespace chorus::layers
