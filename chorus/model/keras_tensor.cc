#include <chorus/model/keras_tensor.h>

#include <chorus/core/error.h>
#include <chorus/model/layer.h>

namespace chorus::layers {

using chorus::internal::str_cat;

const Tensor& KerasTensor::example() const {
  CHORUS_REQUIRE(node_ != nullptr, InvalidArgumentError, "an undefined KerasTensor has no value");
  return node_->examples.at(static_cast<std::size_t>(index_));
}

std::vector<std::int64_t> KerasTensor::shape() const {
  const auto& d = example().shape().dims();
  return {d.begin() + 1, d.end()};
}

DType KerasTensor::dtype() const { return example().dtype(); }

std::string KerasTensor::shape_string() const {
  std::string s = "(None";
  for (auto v : shape()) s += str_cat(", ", v);
  return s + ")";
}

std::string KerasTensor::producer() const {
  if (node_ == nullptr || node_->layer == nullptr) return "'?'";
  return str_cat("'", node_->layer->name(), "' (", node_->layer->class_name(), ")");
}

}  // namespace chorus::layers
