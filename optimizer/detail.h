// Formatting helpers shared by optimizer/*.cc (not part of the public API).
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace chorus::optimizers::detail {

// The shortest text that reads back as `v` ("0.001", "1e-07"), as Python's repr prints floats.
inline std::string format_number(double v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, res.ptr);
  // Python prints integral floats with ".0"; keep the config readable as Keras's.
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}
inline std::string format_number(std::optional<double> v) { return v ? format_number(*v) : "null"; }
inline std::string format_bool(bool b) { return b ? "true" : "false"; }
inline std::string format_int_list(const std::vector<std::int64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}
inline std::string format_list(const std::vector<double>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + format_number(v[i]);
  return s + "]";
}

}  // namespace chorus::optimizers::detail
