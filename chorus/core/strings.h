// Joining a list into the text of a message or a log line, one way for the whole library:
// device lists ("'/cpu:0', '/cpu:1'"), rank lists ("0, 2 and 3"), names one per line.
//
//   join(devices)                                   "CPU:0, CPU:1"
//   join(devices, {.quote = "'"})                   "'CPU:0', 'CPU:1'"
//   join(ranks, {.last_separator = " and "})        "0, 2 and 3"
//   join(keys, {.separator = "\n  ", .max_items = 2})  "a\n  b\n  ... and 3 more"
//
// Items are anything `operator<<` writes (strings, numbers). Pure functions: thread-safe, no state.
// Nothing throws but std::bad_alloc.
//
// split_whitespace(text): the words of a line (a hostfile's, a command's).
// printable(bytes): untrusted bytes (a token of a hand-written or hostile file) made safe to put in
// a message for a terminal or a log: printable ASCII stays, every other byte becomes \xHH (no
// terminal escape sequence, no line break survives), and past `max_bytes` input bytes "..." ends it.
#pragma once

#include <cstddef>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::internal {

struct JoinOptions {
  std::string_view separator = ", ";  // between two items
  // Between the last two items, where it differs from `separator` ("0, 2 and 3"); empty: `separator`.
  std::string_view last_separator = {};
  std::string_view quote = {};  // written before and after each item ("'a', 'b'")
  // At most this many items; the rest become `separator` + "... and <n> more".
  std::size_t max_items = std::numeric_limits<std::size_t>::max();
};

// The items of `range` (anything with begin/end and size()) as one string; see the top of the file.
// An empty range gives "".
template <typename Range>
std::string join(const Range& range, const JoinOptions& options = {}) {
  const std::size_t n = static_cast<std::size_t>(std::size(range));
  const std::size_t shown = n < options.max_items ? n : options.max_items;
  const std::string_view last = options.last_separator.empty() ? options.separator : options.last_separator;
  std::ostringstream os;
  std::size_t i = 0;
  for (const auto& item : range) {
    if (i == shown) break;
    if (i > 0) os << (i + 1 == n ? last : options.separator);
    os << options.quote << item << options.quote;
    ++i;
  }
  if (shown < n) os << options.separator << "... and " << n - shown << " more";
  return os.str();
}

// The words of `text`: runs of bytes other than ' ', '\t', '\n', '\r', '\v', '\f' (views into
// `text`; no quoting).
inline std::vector<std::string_view> split_whitespace(std::string_view text) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
  std::vector<std::string_view> words;
  for (std::size_t i = 0; i < text.size();) {
    while (i < text.size() && space(text[i])) ++i;
    std::size_t j = i;
    while (j < text.size() && !space(text[j])) ++j;
    if (j > i) words.push_back(text.substr(i, j - i));
    i = j;
  }
  return words;
}

inline std::string printable(std::string_view bytes, std::size_t max_bytes = 80) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (std::size_t i = 0; i < bytes.size() && i < max_bytes; ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (bytes.size() > max_bytes) out += "...";
  return out;
}

}  // namespace chorus::internal
