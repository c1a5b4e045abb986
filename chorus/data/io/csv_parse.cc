// Number parsing as TensorFlow 2.21's CSV kernel does it: safe_strto32/64 and safe_strtof/d, which
// are absl::SimpleAtoi / SimpleAtof / SimpleAtod. The grammar is checked here byte by byte; the
// value of a decimal or hexadecimal float is then glibc's strtof/strtod in the "C" locale
// (correctly rounded, ±inf past the range, subnormals below it, as absl's from_chars).
#include <chorus/data/io/csv_internal.h>

#include <locale.h>
#include <stdlib.h>

#include <cmath>
#include <limits>

namespace chorus::data::internal {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }
bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != b[i]) return false;
  return true;
}

std::string_view strip(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// absl::SimpleAtoi in base 10: whitespace around, one sign, then only digits.
template <typename T>
std::optional<T> parse_int(std::string_view s) {
  s = strip(s);
  bool negative = false;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.empty()) return std::nullopt;
  using U = std::make_unsigned_t<T>;
  const U limit = negative ? static_cast<U>(std::numeric_limits<T>::max()) + 1 : std::numeric_limits<T>::max();
  U value = 0;
  for (char c : s) {
    if (!is_digit(c)) return std::nullopt;
    const U d = static_cast<U>(c - '0');
    if (value > (limit - d) / 10) return std::nullopt;
    value = value * 10 + d;
  }
  return negative ? static_cast<T>(U{0} - value) : static_cast<T>(value);
}

// `s` (at i) continues with digits of `hex` or decimal; returns how many.
std::size_t run(std::string_view s, std::size_t i, bool hex) {
  std::size_t n = 0;
  while (i + n < s.size() && (hex ? is_hex(s[i + n]) : is_digit(s[i + n]))) ++n;
  return n;
}

// A mantissa (digits [. digits] with at least one digit) and an optional exponent ('e' or, hex,
// 'p', an optional sign, at least one digit) that together make up all of `s`.
bool is_number_body(std::string_view s, bool hex) {
  std::size_t i = run(s, 0, hex), digits = i;
  if (i < s.size() && s[i] == '.') {
    const std::size_t f = run(s, i + 1, hex);
    digits += f;
    i += 1 + f;
  }
  if (digits == 0) return false;
  if (i == s.size()) return true;
  if (lower(s[i]) != (hex ? 'p' : 'e')) return false;
  ++i;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  const std::size_t e = run(s, i, false);
  return e > 0 && i + e == s.size();
}

bool is_nan_text(std::string_view s) {
  if (iequals(s, "nan")) return true;
  if (s.size() < 5 || !iequals(s.substr(0, 4), "nan(") || s.back() != ')') return false;
  for (char c : s.substr(4, s.size() - 5))
    if (!(is_digit(c) || (lower(c) >= 'a' && lower(c) <= 'z') || c == '_')) return false;
  return true;
}

locale_t c_locale() {
  static const locale_t loc = newlocale(LC_ALL_MASK, "C", static_cast<locale_t>(nullptr));
  return loc;
}

template <typename T>
std::optional<T> parse_real(std::string_view s) {
  s = strip(s);
  // SimpleAtof skips one '+' (but not "+-"); from_chars then takes one '-'.
  if (!s.empty() && s[0] == '+') {
    s.remove_prefix(1);
    if (!s.empty() && s[0] == '-') return std::nullopt;
  }
  const bool negative = !s.empty() && s[0] == '-';
  std::string_view body = negative ? s.substr(1) : s;
  if (iequals(body, "inf") || iequals(body, "infinity"))
    return negative ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
  if (is_nan_text(body)) return negative ? -std::numeric_limits<T>::quiet_NaN() : std::numeric_limits<T>::quiet_NaN();
  const bool hex = body.size() > 2 && body[0] == '0' && lower(body[1]) == 'x';
  if (!is_number_body(hex ? body.substr(2) : body, hex)) return std::nullopt;
  // Validated: digits, one '.', an exponent, a sign, "0x". strto* sees nothing else.
  const std::string text(s);
  char* end = nullptr;
  T value;
  if constexpr (std::is_same_v<T, float>)
    value = strtof_l(text.c_str(), &end, c_locale());
  else
    value = strtod_l(text.c_str(), &end, c_locale());
  if (end != text.c_str() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

std::optional<std::int32_t> parse_int32(std::string_view text) { return parse_int<std::int32_t>(text); }
std::optional<std::int64_t> parse_int64(std::string_view text) { return parse_int<std::int64_t>(text); }
std::optional<float> parse_float(std::string_view text) { return parse_real<float>(text); }
std::optional<double> parse_double(std::string_view text) { return parse_real<double>(text); }

}  // namespace chorus::data::internal
