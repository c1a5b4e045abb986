#include <chorus/model/merge_layers.h>
#include <chorus/model/serialization.h>

#include <chorus/core/error.h>
#include <chorus/ops/elementwise.h>
#include <chorus/ops/shape_ops.h>

namespace chorus::layers {

using chorus::internal::str_cat;

namespace {

std::string shapes_string(const std::vector<Shape>& shapes) {
  std::string s;
  for (const Shape& shape : shapes) s += str_cat(s.empty() ? "" : ", ", shape.to_string());
  return s;
}

}  // namespace

MergeLayer::MergeLayer(Kind kind, std::string name) : Layer(std::move(name)), kind_(kind) {}

void MergeLayer::build_weights(const std::vector<Shape>& shapes) {
  CHORUS_REQUIRE(shapes.size() >= 2, InvalidArgumentError, "layer '", name(), "' (", class_name(),
                 ") needs at least 2 inputs, got ", shapes.size());
  for (const Shape& s : shapes)
    CHORUS_REQUIRE(
        std::equal(s.dims().begin() + 1, s.dims().end(), shapes[0].dims().begin() + 1, shapes[0].dims().end()),
        InvalidArgumentError, "layer '", name(), "' (", class_name(),
        ") needs inputs of one shape (the batch dimension aside), got ", shapes_string(shapes));
}

std::vector<Tensor> MergeLayer::call_list(const std::vector<Tensor>& xs, bool training) {
  (void)training;
  Tensor y = xs[0];
  for (std::size_t i = 1; i < xs.size(); ++i) y = kind_ == Kind::kAdd ? ops::add(y, xs[i]) : ops::mul(y, xs[i]);
  return {y};
}

LayerPtr Add(std::string name) { return std::make_shared<MergeLayer>(MergeLayer::Kind::kAdd, std::move(name)); }
LayerPtr Multiply(std::string name) {
  return std::make_shared<MergeLayer>(MergeLayer::Kind::kMultiply, std::move(name));
}

ConcatenateLayer::ConcatenateLayer(int axis, std::string name) : Layer(std::move(name)), axis_(axis) {}

void ConcatenateLayer::build_weights(const std::vector<Shape>& shapes) {
  CHORUS_REQUIRE(shapes.size() >= 2, InvalidArgumentError, "layer '", name(),
                 "' (Concatenate) needs at least 2 inputs, got ", shapes.size());
  const int rank = shapes[0].rank();
  const int axis = axis_ < 0 ? axis_ + rank : axis_;
  CHORUS_REQUIRE(axis >= 1 && axis < rank, InvalidArgumentError, "layer '", name(), "' (Concatenate): axis ", axis_,
                 " is out of range for inputs of rank ", rank, " (the batch axis 0 cannot be joined)");
  for (const Shape& s : shapes) {
    bool fits = s.rank() == rank;
    for (int d = 1; fits && d < rank; ++d) fits = d == axis || s.dims()[d] == shapes[0].dims()[d];
    CHORUS_REQUIRE(fits, InvalidArgumentError, "layer '", name(),
                   "' (Concatenate) needs inputs whose shapes match except along axis ", axis_, ", got ",
                   shapes_string(shapes));
  }
}

std::vector<Tensor> ConcatenateLayer::call_list(const std::vector<Tensor>& xs, bool training) {
  (void)training;
  const int rank = xs[0].shape().rank();
  return {ops::concat(xs, axis_ < 0 ? axis_ + rank : axis_)};
}

LayerPtr Concatenate(int axis, std::string name) { return std::make_shared<ConcatenateLayer>(axis, std::move(name)); }

// ---- Keras config (model/serialization.h) ----

void MergeLayer::get_config(LayerConfig& c) const { (void)c; }  // name, trainable, dtype only
CHORUS_REGISTER_LAYER_CLASS(Add, [](const LayerConfig&) { return Add(); });
CHORUS_REGISTER_LAYER_CLASS(Multiply, [](const LayerConfig&) { return Multiply(); });

void ConcatenateLayer::get_config(LayerConfig& c) const { c.set("axis", axis_); }
CHORUS_REGISTER_LAYER_CLASS(Concatenate, [](const LayerConfig& c) {
  const std::int64_t axis = c.get_int("axis", -1);
  if (axis < -64 || axis > 64) c.fail("axis", "is out of range");
  return Concatenate(static_cast<int>(axis));
});

namespace registration {
void link_merge_layers() {}
}  // namespace registration

}  // namespace chorus::layers
