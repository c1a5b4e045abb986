// Formatting helpers shared by optimizer/*.cc (not part of the public API).
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <chorus/core/json_internal.h>

namespace chorus::optimizers::detail {

using chorus::internal::Json;

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

// A number or null (Keras's None).
inline Json json_or_null(std::optional<double> v) { return v ? Json(*v) : Json(nullptr); }

// Keras's get_config() text, written from a nlohmann-json value: Python's json.dumps of the config
// dict (", " and ": " between items, floats as Python's repr prints them), so that the text is the
// one Keras shows. Keys keep their insertion order.
inline std::string keras_json(const Json& j) {
  std::string s;
  switch (j.type()) {
    case Json::value_t::object:
      for (const auto& [key, value] : j.items())
        s += (s.empty() ? "" : ", ") + Json(key).dump() + ": " + keras_json(value);
      return "{" + s + "}";
    case Json::value_t::array:
      for (const Json& value : j) s += (s.empty() ? "" : ", ") + keras_json(value);
      return "[" + s + "]";
    case Json::value_t::number_float: return format_number(j.get<double>());
    default: return j.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
}

// An object's items without its braces: what Optimizer::config_fields() returns.
inline std::string keras_fields(const Json& object) {
  const std::string s = keras_json(object);
  return s.size() >= 2 ? s.substr(1, s.size() - 2) : std::string();
}

}  // namespace chorus::optimizers::detail
