// Internal to data/io/: the line splitter of text_line_dataset (text_line.h), on bytes.
// Not installed; tests/data/io and tests/fuzz use it directly.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/data/io/text_file_internal.h>

namespace chorus::data::internal {

// TensorFlow's line rules (io::BufferedInputStream::ReadLine, checked against TF 2.21): a line
// ends at '\n'; every '\r' is dropped wherever it is (so "\r\n" ends a line as "\n" does, and a
// lone '\r' ends nothing: "a\rb" is the line "ab"); the bytes after the last '\n' are a line only
// when something is left of them once the '\r's are dropped. Empty lines between '\n's are lines.
// NUL and every other byte are kept.
class LineReader {
 public:
  // `max_line_bytes`: the longest line accepted (counted after dropping '\r').
  LineReader(BufferedInput& input, std::uint64_t max_line_bytes) : in_(input), max_(max_line_bytes) {}
  // The next line into *line; false at the end. A line past the ceiling → ResourceExhaustedError
  // naming the input, the line's byte offset and the ceiling, once at most max_line_bytes of it
  // were kept; the input's errors pass through.
  bool next(std::string* line);

 private:
  void append(std::string* line, std::string_view piece, std::uint64_t start);
  BufferedInput& in_;
  std::uint64_t max_;
};

// Every line of `bytes` (LineReader over a StringSource read `buffer_size` bytes at a time).
std::vector<std::string> split_lines(std::string_view bytes, std::uint64_t max_line_bytes,
                                     std::size_t buffer_size = 1 << 16);

}  // namespace chorus::data::internal
