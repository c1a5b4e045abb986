// Tensor::to_string: NumPy's layout as TensorFlow prints it, e.g.
//   tf.Tensor(
//   [[1. 2.]
//    [3. 4.]], shape=(2, 2), dtype=float32, device=/job:localhost/replica:0/task:0/device:CPU:0)
// Large tensors show the first and last 3 entries of each long axis around "...", like NumPy.
// String elements print as Python bytes literals, as TF does: b'abc', b"it's", b'\x00\xff\n'.
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string_view>

#include <chorus/core/tensor.h>

namespace chorus {
namespace {

constexpr std::int64_t kEdge = 3;

std::string format_element(const std::vector<std::uint8_t>& raw, DType dtype, std::int64_t index) {
  const double v = element_as_double(raw.data(), dtype, static_cast<std::size_t>(index));
  if (dtype == DType::kBool) return v != 0 ? "True" : "False";
  if (is_integer(dtype)) return std::to_string(static_cast<long long>(v));
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == std::floor(v) && std::fabs(v) < 1e16) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f.", v);
    return buf;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.8g", v);
  return buf;
}

// Python's repr() of bytes: single quotes unless the value holds a ' and no ", backslash escapes
// for \\, the quote, \t \n \r, and \xNN for every other byte outside printable ASCII.
std::string bytes_repr(std::string_view v) {
  const bool dq = v.find('\'') != std::string_view::npos && v.find('"') == std::string_view::npos;
  const char quote = dq ? '"' : '\'';
  std::string out = "b";
  out += quote;
  for (const char ch : v) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\' || c == static_cast<unsigned char>(quote)) {
      out += '\\';
      out += ch;
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c >= 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  out += quote;
  return out;
}

using Formatter = std::function<std::string(std::int64_t)>;

void print_axis(std::ostringstream& os, const Formatter& format, const std::vector<std::int64_t>& dims,
                const std::vector<std::int64_t>& strides, int axis, std::int64_t offset, bool elide, int indent) {
  const std::int64_t n = dims[axis];
  os << '[';
  const bool cut = elide && n > 2 * kEdge;
  for (std::int64_t i = 0; i < n; ++i) {
    if (cut && i == kEdge) {
      os << (axis + 1 == static_cast<int>(dims.size()) ? "... " : "...\n" + std::string(indent + 1, ' '));
      i = n - kEdge;
    }
    if (axis + 1 == static_cast<int>(dims.size())) {
      os << format(offset + i * strides[axis]);
      if (i + 1 < n) os << ' ';
    } else {
      print_axis(os, format, dims, strides, axis + 1, offset + i * strides[axis], elide, indent + 1);
      if (i + 1 < n) os << '\n' << std::string(indent + 1, ' ');
    }
  }
  os << ']';
}

}  // namespace

std::string Tensor::to_string(std::int64_t max_elements) const {
  if (!defined()) return "tf.Tensor(<undefined>)";
  std::vector<std::uint8_t> raw;
  std::span<const std::string> strs;
  if (dtype_ == DType::kString) {
    strs = strings();
  } else {
    raw.resize(nbytes());
    copy_to_host(raw.data());
  }
  const Formatter format = [&](std::int64_t i) {
    return dtype_ == DType::kString ? bytes_repr(strs[static_cast<std::size_t>(i)]) : format_element(raw, dtype_, i);
  };
  std::ostringstream os;
  os << "tf.Tensor(";
  const auto& dims = shape_.dims();
  if (dims.empty()) {
    os << format(0);
  } else if (num_elements() == 0) {
    os << "[]";
  } else {
    std::vector<std::int64_t> strides(dims.size(), 1);
    for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims[i + 1];
    if (dims.size() > 1) os << '\n';
    print_axis(os, format, dims, strides, 0, 0, num_elements() > max_elements, 0);
  }
  os << ", shape=" << shape_.to_string() << ", dtype=" << dtype_name(dtype_) << ", device=" << device_name() << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

}  // namespace chorus
