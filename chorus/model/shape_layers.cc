// ZeroPadding2D, GlobalAveragePooling2D, GlobalMaxPooling2D, Reshape, Permute (see model/shape_layers.h).
#include <chorus/model/serialization.h>
#include <chorus/model/shape_layers.h>

#include <algorithm>
#include <sstream>

#include <chorus/core/error.h>
#include <chorus/ops/ops.h>

namespace chorus::layers {

namespace {

template <typename T>
std::string tuple_string(const std::vector<T>& v) {
  std::ostringstream s;
  s << "(";
  for (std::size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
  s << (v.size() == 1 ? ",)" : ")");
  return s.str();
}

void require_rank4(const char* cls, const std::string& name, const Shape& in) {
  CHORUS_REQUIRE(in.rank() == 4, InvalidArgumentError, cls, " '", name,
                 "': input must be [batch, rows, cols, channels] (rank 4), got ", in.to_string());
}

}  // namespace

// ---- ZeroPadding2D ----

ZeroPadding2DLayer::ZeroPadding2DLayer(std::array<std::int64_t, 2> rows, std::array<std::int64_t, 2> cols,
                                       std::string name)
    : Layer(std::move(name)), rows_(rows), cols_(cols) {
  CHORUS_REQUIRE(rows[0] >= 0 && rows[1] >= 0 && cols[0] >= 0 && cols[1] >= 0, InvalidArgumentError,
                 "ZeroPadding2D: padding must be >= 0, got ((", rows[0], ", ", rows[1], "), (", cols[0], ", ", cols[1],
                 "))");
}

Shape ZeroPadding2DLayer::compute_output_shape(const Shape& in) const {
  require_rank4("ZeroPadding2D", name(), in);
  const auto& d = in.dims();
  return Shape{d[0], d[1] + rows_[0] + rows_[1], d[2] + cols_[0] + cols_[1], d[3]};
}

Tensor ZeroPadding2DLayer::call(const Tensor& x, bool) {
  require_rank4("ZeroPadding2D", name(), x.shape());
  return ops::pad(x, {{0, 0}, {rows_[0], rows_[1]}, {cols_[0], cols_[1]}, {0, 0}});
}

LayerPtr ZeroPadding2D(std::int64_t padding, LayerNameArg name) {
  return std::make_shared<ZeroPadding2DLayer>(std::array<std::int64_t, 2>{padding, padding},
                                              std::array<std::int64_t, 2>{padding, padding}, std::move(name.value));
}
LayerPtr ZeroPadding2D(std::array<std::int64_t, 2> padding, LayerNameArg name) {
  return std::make_shared<ZeroPadding2DLayer>(std::array<std::int64_t, 2>{padding[0], padding[0]},
                                              std::array<std::int64_t, 2>{padding[1], padding[1]},
                                              std::move(name.value));
}
LayerPtr ZeroPadding2D(std::pair<std::int64_t, std::int64_t> rows, std::pair<std::int64_t, std::int64_t> cols,
                       LayerNameArg name) {
  return std::make_shared<ZeroPadding2DLayer>(std::array<std::int64_t, 2>{rows.first, rows.second},
                                              std::array<std::int64_t, 2>{cols.first, cols.second},
                                              std::move(name.value));
}

// ---- GlobalAveragePooling2D, GlobalMaxPooling2D ----

GlobalPooling2DLayer::GlobalPooling2DLayer(bool max, bool keepdims, std::string name)
    : Layer(std::move(name)), max_(max), keepdims_(keepdims) {}

Shape GlobalPooling2DLayer::compute_output_shape(const Shape& in) const {
  require_rank4(max_ ? "GlobalMaxPooling2D" : "GlobalAveragePooling2D", name(), in);
  const auto& d = in.dims();
  return keepdims_ ? Shape{d[0], 1, 1, d[3]} : Shape{d[0], d[3]};
}

Tensor GlobalPooling2DLayer::call(const Tensor& x, bool) {
  compute_output_shape(x.shape());  // the rank check
  return max_ ? ops::reduce_max(x, {1, 2}, keepdims_) : ops::reduce_mean(x, {1, 2}, keepdims_);
}

LayerPtr GlobalAveragePooling2D(bool keepdims, std::string name) {
  return std::make_shared<GlobalPooling2DLayer>(false, keepdims, std::move(name));
}
LayerPtr GlobalMaxPooling2D(bool keepdims, std::string name) {
  return std::make_shared<GlobalPooling2DLayer>(true, keepdims, std::move(name));
}

// ---- Reshape ----

ReshapeLayer::ReshapeLayer(std::vector<std::int64_t> target_shape, std::string name)
    : Layer(std::move(name)), target_(std::move(target_shape)) {
  CHORUS_REQUIRE(std::count(target_.begin(), target_.end(), -1) <= 1, InvalidArgumentError,
                 "Reshape: target_shape may have at most one -1 (an unknown dimension), got ", tuple_string(target_));
  CHORUS_REQUIRE(std::all_of(target_.begin(), target_.end(), [](std::int64_t d) { return d >= -1; }),
                 InvalidArgumentError, "Reshape: target_shape entries must be >= 0 or -1, got ", tuple_string(target_));
}

Shape ReshapeLayer::compute_output_shape(const Shape& in) const {
  CHORUS_REQUIRE(in.rank() >= 1, InvalidArgumentError, "Reshape '", name(), "': input must have a batch dim, got ",
                 in.to_string());
  std::int64_t elements = 1;  // per example
  for (int i = 1; i < in.rank(); ++i) elements *= in.dims()[static_cast<std::size_t>(i)];
  std::int64_t known = 1;
  for (std::int64_t d : target_)
    if (d != -1) known *= d;
  std::vector<std::int64_t> out{in.dims()[0]};
  out.insert(out.end(), target_.begin(), target_.end());
  const auto unknown = std::find(out.begin() + 1, out.end(), -1);
  const bool fits = unknown == out.end() ? known == elements : known > 0 && elements % known == 0;
  CHORUS_REQUIRE(fits, InvalidArgumentError, "Reshape '", name(), "': the input shape ", in.to_string(), " has ",
                 elements, " elements per example, which cannot be reshaped to the target shape ",
                 tuple_string(target_), " (batch dim excluded)");
  if (unknown != out.end()) *unknown = elements / known;
  return Shape(out);
}

Tensor ReshapeLayer::call(const Tensor& x, bool) { return ops::reshape(x, compute_output_shape(x.shape()).dims()); }

LayerPtr Reshape(std::vector<std::int64_t> target_shape, std::string name) {
  return std::make_shared<ReshapeLayer>(std::move(target_shape), std::move(name));
}

// ---- Permute ----

PermuteLayer::PermuteLayer(std::vector<int> dims, std::string name) : Layer(std::move(name)), dims_(std::move(dims)) {
  std::vector<int> sorted = dims_;
  std::sort(sorted.begin(), sorted.end());
  bool consecutive = !sorted.empty();
  for (std::size_t i = 0; i < sorted.size(); ++i) consecutive = consecutive && sorted[i] == static_cast<int>(i) + 1;
  CHORUS_REQUIRE(consecutive, InvalidArgumentError,
                 "Permute: dims must be a permutation of 1..k (1-based, the batch axis excluded), got ",
                 tuple_string(dims_));
}

Shape PermuteLayer::compute_output_shape(const Shape& in) const {
  CHORUS_REQUIRE(in.rank() == static_cast<int>(dims_.size()) + 1, InvalidArgumentError, "Permute '", name(), "': dims ",
                 tuple_string(dims_), " permute ", dims_.size(), " axes, but the input ", in.to_string(), " has ",
                 in.rank() - 1, " besides the batch axis");
  std::vector<std::int64_t> out{in.dims()[0]};
  for (int d : dims_) out.push_back(in.dims()[static_cast<std::size_t>(d)]);
  return Shape(out);
}

Tensor PermuteLayer::call(const Tensor& x, bool) {
  compute_output_shape(x.shape());  // the rank check
  std::vector<int> perm{0};
  perm.insert(perm.end(), dims_.begin(), dims_.end());
  return ops::transpose(x, perm);
}

LayerPtr Permute(std::vector<int> dims, std::string name) {
  return std::make_shared<PermuteLayer>(std::move(dims), std::move(name));
}

// ---- Keras config (model/serialization.h) ----

void ZeroPadding2DLayer::get_config(LayerConfig& c) const {
  c.set("padding", std::vector<std::vector<std::int64_t>>{{rows_[0], rows_[1]}, {cols_[0], cols_[1]}});
  c.set("data_format", "channels_last");
}
CHORUS_REGISTER_LAYER_CLASS(ZeroPadding2D, [](const LayerConfig& c) {
  c.require("data_format", "channels_last");
  // An int, (rows, cols), or ((top, bottom), (left, right)), as Keras accepts.
  std::array<std::int64_t, 2> rows{1, 1}, cols{1, 1};
  if (c.is_int("padding")) {
    const std::int64_t p = c.get_int("padding");
    rows = {p, p};
    cols = {p, p};
  } else if (c.is_list_of_lists("padding")) {
    const auto p = c.get_int_lists("padding");
    if (p.size() != 2 || p[0].size() != 2 || p[1].size() != 2)
      c.fail("padding", "must be ((top, bottom), (left, right))");
    rows = {p[0][0], p[0][1]};
    cols = {p[1][0], p[1][1]};
  } else if (c.has("padding")) {
    const auto p = c.get_int_list("padding", 2);
    rows = {p[0], p[0]};
    cols = {p[1], p[1]};
  }
  return LayerPtr(std::make_shared<ZeroPadding2DLayer>(rows, cols, ""));
});

void GlobalPooling2DLayer::get_config(LayerConfig& c) const {
  c.set("data_format", "channels_last");
  c.set("keepdims", keepdims_);
}
CHORUS_REGISTER_LAYER_CLASS(GlobalAveragePooling2D, [](const LayerConfig& c) {
  c.require("data_format", "channels_last");
  return GlobalAveragePooling2D(c.get_bool("keepdims", false));
});
CHORUS_REGISTER_LAYER_CLASS(GlobalMaxPooling2D, [](const LayerConfig& c) {
  c.require("data_format", "channels_last");
  return GlobalMaxPooling2D(c.get_bool("keepdims", false));
});

void ReshapeLayer::get_config(LayerConfig& c) const { c.set("target_shape", target_); }
CHORUS_REGISTER_LAYER_CLASS(Reshape, [](const LayerConfig& c) { return Reshape(c.get_int_list("target_shape")); });

void PermuteLayer::get_config(LayerConfig& c) const {
  c.set("dims", std::vector<std::int64_t>(dims_.begin(), dims_.end()));
}
CHORUS_REGISTER_LAYER_CLASS(Permute, [](const LayerConfig& c) {
  std::vector<int> dims;
  for (std::int64_t d : c.get_int_list("dims")) {
    if (d < 1 || d > 64) c.fail("dims", "must list axes 1..k (k <= 64)");
    dims.push_back(static_cast<int>(d));
  }
  return Permute(dims);
});

namespace registration {
void link_shape_layers() {}
}  // namespace registration

}  // namespace chorus::layers
