// Shape: the dimensions of a tensor. A scalar has rank 0 and one element; any zero dimension
// gives zero elements. Dimensions are int64 and never negative (the constructor checks:
// InvalidArgumentError naming the bad dimension). Printed as TensorFlow does: "(2, 3)", "()".
#pragma once

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace chorus {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims);
  explicit Shape(std::vector<std::int64_t> dims);

  int rank() const { return static_cast<int>(dims_.size()); }
  // Dimension i; negative i counts from the end. Throws OutOfRangeError for a bad axis.
  std::int64_t dim(int i) const;
  const std::vector<std::int64_t>& dims() const { return dims_; }
  // Product of the dimensions (1 for a scalar). Throws InvalidArgumentError on int64 overflow.
  std::int64_t num_elements() const;
  std::string to_string() const;
  bool operator==(const Shape&) const = default;

 private:
  std::vector<std::int64_t> dims_;
};

std::ostream& operator<<(std::ostream& os, const Shape& shape);

}  // namespace chorus
