// The command-line targets' input format: the fuzz bytes are argv[1..], split on NUL bytes ("a\0b"
// is {"a", "b"}; "a\0" is {"a", ""}; the empty input is no argument at all). Seeds are written so.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace chorus::fuzz {

inline std::vector<std::string> split_argv(std::string_view bytes) {
  std::vector<std::string> args;
  if (bytes.empty()) return args;
  std::size_t start = 0;
  for (;;) {
    const std::size_t nul = bytes.find('\0', start);
    args.emplace_back(bytes.substr(start, nul == std::string_view::npos ? std::string_view::npos : nul - start));
    if (nul == std::string_view::npos) return args;
    start = nul + 1;
  }
}

}  // namespace chorus::fuzz
