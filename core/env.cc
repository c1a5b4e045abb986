#include "core/env.h"

#include <cctype>
#include <cstdlib>

#include "core/error.h"

namespace chorus::env {

std::optional<std::string> get(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

std::optional<bool> get_bool(const char* name) {
  auto v = get(name);
  if (!v) return std::nullopt;
  std::string t;
  for (char c : *v) t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "1" || t == "true" || t == "yes" || t == "on") return true;
  if (t == "0" || t == "false" || t == "no" || t == "off") return false;
  throw InvalidArgumentError(internal::str_cat("environment variable ", name, "='", *v,
                                               "' is not a boolean: use true/false, 1/0, yes/no, on/off"));
}

}  // namespace chorus::env
