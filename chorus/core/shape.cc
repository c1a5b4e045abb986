#include <chorus/core/shape.h>

#include <limits>
#include <sstream>
#include <utility>

#include <chorus/core/error.h>

namespace chorus {
namespace {

// Printed without validating, so error messages can show the shape that was rejected.
std::string dims_to_string(const std::vector<std::int64_t>& dims) {
  std::ostringstream os;
  os << '(';
  for (std::size_t i = 0; i < dims.size(); ++i) os << (i ? ", " : "") << dims[i];
  // A one-element tuple needs the trailing comma, as Python and TensorFlow print it: "(5,)".
  if (dims.size() == 1) os << ',';
  os << ')';
  return os.str();
}

void check_dims(const std::vector<std::int64_t>& dims) {
  for (std::size_t i = 0; i < dims.size(); ++i) {
    CHORUS_REQUIRE(dims[i] >= 0, InvalidArgumentError, "shape ", dims_to_string(dims), ": dimension ", i, " is ",
                   dims[i], "; dimensions must be >= 0");
  }
}

}  // namespace

Shape::Shape(std::initializer_list<std::int64_t> dims) : dims_(dims) { check_dims(dims_); }

Shape::Shape(std::vector<std::int64_t> dims) : dims_(std::move(dims)) { check_dims(dims_); }

std::int64_t Shape::dim(int i) const {
  const int r = rank();
  CHORUS_REQUIRE(i >= -r && i < r, OutOfRangeError, "axis ", i, " is out of range for shape ", to_string(),
                 r == 0 ? std::string(" of rank 0, which has no axes")
                        : internal::str_cat(" of rank ", r, "; valid axes are ", -r, "..", r - 1));
  return dims_[static_cast<std::size_t>(i < 0 ? i + r : i)];
}

std::int64_t Shape::num_elements() const {
  // A zero dimension makes the product 0 whatever the others are, so (2^40, 2^40, 0) is a valid
  // empty shape rather than an overflow.
  for (std::int64_t d : dims_)
    if (d == 0) return 0;
  std::int64_t n = 1;
  for (std::int64_t d : dims_) {
    CHORUS_REQUIRE(!__builtin_mul_overflow(n, d, &n), InvalidArgumentError, "shape ", to_string(), " has more than ",
                   std::numeric_limits<std::int64_t>::max(), " elements (int64 overflow)");
  }
  return n;
}

std::string Shape::to_string() const { return dims_to_string(dims_); }

std::ostream& operator<<(std::ostream& os, const Shape& shape) { return os << shape.to_string(); }

}  // namespace chorus
