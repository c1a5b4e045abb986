// DepthwiseConv2D and Conv1D (see model/conv_layers.h).
#include <chorus/model/conv_layers.h>
#include <chorus/model/serialization.h>

#include <chorus/core/error.h>
#include <chorus/model/layers.h>
#include <chorus/ops/geometry.h>
#include <chorus/ops/ops.h>

namespace chorus::layers {

namespace {

// The output length of one axis, or InvalidArgumentError naming the layer and the input.
std::int64_t output_length(const char* cls, const std::string& name, const Shape& in, std::int64_t length,
                           std::int64_t k, std::int64_t stride, std::int64_t dilation, ops::Padding padding) {
  ops::Conv2dGeometry g{1, 1, length, 1, 1, k, 1, 1, stride, 1, dilation};
  CHORUS_REQUIRE(ops::compute_output_size(g, padding), InvalidArgumentError, cls, " '", name, "': the kernel ", k,
                 " (dilation ", dilation, ") does not fit the input ", in.to_string(), " with padding \"valid\"");
  return g.out_w;
}

ops::Padding conv1d_padding(const std::string& p) {
  if (p == "causal") return ops::Padding::kValid;  // after the causal zeros
  CHORUS_REQUIRE(p == "valid" || p == "same" || p == "VALID" || p == "SAME", InvalidArgumentError, "Conv1D: padding '",
                 p, "': use \"valid\", \"same\" or \"causal\"");
  return parse_padding(p);
}

}  // namespace

// ---- DepthwiseConv2D ----

DepthwiseConv2DLayer::DepthwiseConv2DLayer(std::array<std::int64_t, 2> kernel, std::array<std::int64_t, 2> strides,
                                           ops::Padding padding, std::int64_t depth_multiplier, std::string activation,
                                           bool use_bias, std::array<std::int64_t, 2> dilation,
                                           initializers::Initializer depthwise_init,
                                           initializers::Initializer bias_init, std::string name)
    : Layer(std::move(name)),
      kernel_size_(kernel),
      strides_(strides),
      dilation_(dilation),
      padding_(padding),
      depth_multiplier_(depth_multiplier),
      activation_(std::move(activation)),
      use_bias_(use_bias),
      kernel_init_(std::move(depthwise_init)),
      bias_init_(std::move(bias_init)) {
  CHORUS_REQUIRE(kernel[0] > 0 && kernel[1] > 0 && strides[0] > 0 && strides[1] > 0 && dilation[0] > 0 &&
                     dilation[1] > 0 && depth_multiplier > 0,
                 InvalidArgumentError,
                 "DepthwiseConv2D: kernel_size, strides, dilation_rate and depth_multiplier must be > 0, got "
                 "kernel_size (",
                 kernel[0], ", ", kernel[1], "), strides (", strides[0], ", ", strides[1], "), dilation_rate (",
                 dilation[0], ", ", dilation[1], "), depth_multiplier ", depth_multiplier);
  check_activation(activation_);
}

Shape DepthwiseConv2DLayer::compute_output_shape(const Shape& in) const {
  CHORUS_REQUIRE(in.rank() == 4, InvalidArgumentError, "DepthwiseConv2D '", name(),
                 "': input must be [batch, height, width, channels], got ", in.to_string());
  const auto& d = in.dims();
  return Shape{d[0],
               output_length("DepthwiseConv2D", name(), in, d[1], kernel_size_[0], strides_[0], dilation_[0], padding_),
               output_length("DepthwiseConv2D", name(), in, d[2], kernel_size_[1], strides_[1], dilation_[1], padding_),
               d[3] * depth_multiplier_};
}

void DepthwiseConv2DLayer::build_weights(const Shape& in) {
  compute_output_shape(in);  // validates the rank and the geometry now
  const std::int64_t c = in.dims()[3];
  kernel_ = add_weight("depthwise_kernel", Shape{kernel_size_[0], kernel_size_[1], c, depth_multiplier_}, kernel_init_);
  if (use_bias_) bias_ = add_weight("bias", Shape{c * depth_multiplier_}, bias_init_);
}

Tensor DepthwiseConv2DLayer::call(const Tensor& x, bool) {
  Tensor y = ops::depthwise_conv2d(x, read_weight(kernel_), {strides_, padding_, dilation_});
  if (use_bias_) y = ops::add(y, read_weight(bias_));
  return activate(activation_, y);
}

LayerPtr DepthwiseConv2D(std::int64_t kernel_size, std::int64_t strides, std::string padding,
                         std::int64_t depth_multiplier, std::string activation, bool use_bias,
                         std::int64_t dilation_rate, initializers::Initializer depthwise_initializer,
                         initializers::Initializer bias_initializer, std::string name) {
  return DepthwiseConv2D({kernel_size, kernel_size}, {strides, strides}, std::move(padding), depth_multiplier,
                         std::move(activation), use_bias, {dilation_rate, dilation_rate},
                         std::move(depthwise_initializer), std::move(bias_initializer), std::move(name));
}

LayerPtr DepthwiseConv2D(std::array<std::int64_t, 2> kernel_size, std::array<std::int64_t, 2> strides,
                         std::string padding, std::int64_t depth_multiplier, std::string activation, bool use_bias,
                         std::array<std::int64_t, 2> dilation_rate, initializers::Initializer depthwise_initializer,
                         initializers::Initializer bias_initializer, std::string name) {
  return std::make_shared<DepthwiseConv2DLayer>(
      kernel_size, strides, parse_padding(padding), depth_multiplier, std::move(activation), use_bias, dilation_rate,
      std::move(depthwise_initializer), std::move(bias_initializer), std::move(name));
}

// ---- Conv1D ----

Conv1DLayer::Conv1DLayer(std::int64_t filters, std::int64_t kernel_size, std::int64_t strides, std::string padding,
                         std::string activation, bool use_bias, std::int64_t dilation, std::int64_t groups,
                         initializers::Initializer kernel_init, initializers::Initializer bias_init, std::string name)
    : Layer(std::move(name)),
      filters_(filters),
      kernel_size_(kernel_size),
      strides_(strides),
      dilation_(dilation),
      groups_(groups),
      causal_(padding == "causal"),
      padding_(conv1d_padding(padding)),
      activation_(std::move(activation)),
      use_bias_(use_bias),
      kernel_init_(std::move(kernel_init)),
      bias_init_(std::move(bias_init)) {
  CHORUS_REQUIRE(filters > 0 && kernel_size > 0 && strides > 0 && dilation > 0 && groups > 0, InvalidArgumentError,
                 "Conv1D: filters, kernel_size, strides, dilation_rate and groups must be > 0, got filters ", filters,
                 ", kernel_size ", kernel_size, ", strides ", strides, ", dilation_rate ", dilation, ", groups ",
                 groups);
  CHORUS_REQUIRE(filters % groups == 0, InvalidArgumentError,
                 "Conv1D: the number of filters must be a multiple of groups, got filters=", filters,
                 ", groups=", groups);
  check_activation(activation_);
}

Shape Conv1DLayer::compute_output_shape(const Shape& in) const {
  CHORUS_REQUIRE(in.rank() == 3, InvalidArgumentError, "Conv1D '", name(),
                 "': input must be [batch, steps, channels], got ", in.to_string());
  const std::int64_t steps = in.dims()[1] + (causal_ ? causal_pad() : 0);
  return Shape{in.dims()[0], output_length("Conv1D", name(), in, steps, kernel_size_, strides_, dilation_, padding_),
               filters_};
}

void Conv1DLayer::build_weights(const Shape& in) {
  compute_output_shape(in);  // validates the rank and the geometry now
  const std::int64_t c = in.dims()[2];
  CHORUS_REQUIRE(c % groups_ == 0, InvalidArgumentError, "Conv1D '", name(),
                 "': the input's channels must be a multiple of groups, got ", c, " channels (input ", in.to_string(),
                 "), groups=", groups_);
  kernel_ = add_weight("kernel", Shape{kernel_size_, c / groups_, filters_}, kernel_init_);
  if (use_bias_) bias_ = add_weight("bias", Shape{filters_}, bias_init_);
}

Tensor Conv1DLayer::call(const Tensor& x, bool) {
  const Tensor in = causal_ ? ops::pad(x, {{0, 0}, {causal_pad(), 0}, {0, 0}}) : x;
  Tensor y = ops::conv1d(in, read_weight(kernel_), strides_, padding_, dilation_);
  if (use_bias_) y = ops::add(y, read_weight(bias_));
  return activate(activation_, y);
}

LayerPtr Conv1D(std::int64_t filters, std::int64_t kernel_size, std::int64_t strides, std::string padding,
                std::string activation, bool use_bias, std::int64_t dilation_rate, std::int64_t groups,
                initializers::Initializer kernel_initializer, initializers::Initializer bias_initializer,
                std::string name) {
  return std::make_shared<Conv1DLayer>(filters, kernel_size, strides, std::move(padding), std::move(activation),
                                       use_bias, dilation_rate, groups, std::move(kernel_initializer),
                                       std::move(bias_initializer), std::move(name));
}

// ---- Keras config (model/serialization.h) ----

namespace {
std::array<std::int64_t, 2> two(const LayerConfig& c, const std::string& key, std::int64_t fallback) {
  if (!c.has(key) && fallback > 0) return {fallback, fallback};
  const auto v = c.get_int_list(key, 2);
  return {v[0], v[1]};
}
std::int64_t one(const LayerConfig& c, const std::string& key, std::int64_t fallback) {
  if (!c.has(key) && fallback > 0) return fallback;
  return c.get_int_list(key, 1)[0];
}
}  // namespace

void DepthwiseConv2DLayer::get_config(LayerConfig& c) const {
  c.set("kernel_size", std::vector<std::int64_t>{kernel_size_[0], kernel_size_[1]});
  c.set("strides", std::vector<std::int64_t>{strides_[0], strides_[1]});
  c.set("padding", padding_ == ops::Padding::kSame ? "same" : "valid");
  c.set("data_format", "channels_last");
  c.set("dilation_rate", std::vector<std::int64_t>{dilation_[0], dilation_[1]});
  c.set("groups", 1);
  c.set_activation("activation", activation_);
  c.set("use_bias", use_bias_);
  c.set_initializer("bias_initializer", bias_init_);
  c.set_nulls({"bias_regularizer", "activity_regularizer", "bias_constraint"});
  c.set("depth_multiplier", depth_multiplier_);
  c.set_initializer("depthwise_initializer", kernel_init_);
  c.set_nulls({"depthwise_regularizer", "depthwise_constraint"});
}
CHORUS_REGISTER_LAYER_CLASS(DepthwiseConv2D, [](const LayerConfig& c) {
  c.require_nulls(
      {"bias_regularizer", "activity_regularizer", "bias_constraint", "depthwise_regularizer", "depthwise_constraint"});
  c.require("data_format", "channels_last");
  if (c.get_int("groups", 1) != 1) c.fail("groups", "must be 1 for DepthwiseConv2D");
  return DepthwiseConv2D(two(c, "kernel_size", 0), two(c, "strides", 1),
                         c.get_string_in("padding", "valid", {"valid", "same"}), c.get_int("depth_multiplier", 1),
                         c.get_activation("activation"), c.get_bool("use_bias", true), two(c, "dilation_rate", 1),
                         c.get_initializer("depthwise_initializer", initializers::glorot_uniform()),
                         c.get_initializer("bias_initializer", initializers::zeros()));
});

void Conv1DLayer::get_config(LayerConfig& c) const {
  c.set("filters", filters_);
  c.set("kernel_size", std::vector<std::int64_t>{kernel_size_});
  c.set("strides", std::vector<std::int64_t>{strides_});
  c.set("padding", causal_ ? "causal" : padding_ == ops::Padding::kSame ? "same" : "valid");
  c.set("data_format", "channels_last");
  c.set("dilation_rate", std::vector<std::int64_t>{dilation_});
  c.set("groups", groups_);
  c.set_activation("activation", activation_);
  c.set("use_bias", use_bias_);
  c.set_initializer("kernel_initializer", kernel_init_);
  c.set_initializer("bias_initializer", bias_init_);
  c.set_nulls(
      {"kernel_regularizer", "bias_regularizer", "activity_regularizer", "kernel_constraint", "bias_constraint"});
}
CHORUS_REGISTER_LAYER_CLASS(Conv1D, [](const LayerConfig& c) {
  c.require_nulls(
      {"kernel_regularizer", "bias_regularizer", "activity_regularizer", "kernel_constraint", "bias_constraint"});
  c.require("data_format", "channels_last");
  return Conv1D(c.get_int("filters"), one(c, "kernel_size", 0), one(c, "strides", 1),
                c.get_string_in("padding", "valid", {"valid", "same", "causal"}), c.get_activation("activation"),
                c.get_bool("use_bias", true), one(c, "dilation_rate", 1), c.get_int("groups", 1),
                c.get_initializer("kernel_initializer", initializers::glorot_uniform()),
                c.get_initializer("bias_initializer", initializers::zeros()));
});

namespace registration {
void link_conv_layers() {}
}  // namespace registration

}  // namespace chorus::layers
