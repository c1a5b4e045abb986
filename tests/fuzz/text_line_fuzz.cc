// libFuzzer target: the lines of text_line_dataset (data/io/text_line_internal.h's LineReader over
// data/io/text_file_internal.h's inputs), TensorFlow's rules: '\n' ends a line, every '\r' is
// dropped, a last line is kept when something is left of it.
//
// The first byte picks the mode, the rest is the file:
//   0: bytes in memory (StringSource), max_line_bytes = 64, read with a 1-byte and a 4 KiB buffer;
//   1: a plain file (scratch file), max_line_bytes = 64 KiB;
//   2 / 3: a GZIP / ZLIB file, max_line_bytes = 64 KiB, max_inflated_bytes = 4 MiB.
// Contract: in memory only ResourceExhaustedError (a line past the ceiling); files also
// DataLossError (a corrupt, cut-short or trailing compressed stream). Oracles:
//   - both buffer sizes give the same lines and the same failure;
//   - the lines joined by '\n' are the input with its '\r's dropped (plus a final '\n' when it
//     ends with one); after a failure they are a prefix of it, and a failure for a long line
//     means a line of the input is longer than the ceiling;
//   - compressed: the same holds of zlib's own inflate of the file (an independent decoder,
//     capped at 4 MiB + 1), prefix when the read failed.
#include <zlib.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/zlib_oracle.h"
#include <chorus/data/io/text_line_internal.h>

using chorus::fuzz::check;
namespace internal = chorus::data::internal;

namespace {

constexpr std::size_t kInflateCap = 4 << 20;

struct Outcome {
  std::vector<std::string> lines;
  std::optional<std::string> error;  // the class, when it failed
};

Outcome read_all(std::unique_ptr<internal::ByteSource> source, std::size_t buffer, std::uint64_t max_line) {
  Outcome out;
  internal::BufferedInput in(std::move(source), buffer);
  internal::LineReader reader(in, max_line);
  try {
    for (std::string line; reader.next(&line);) out.lines.push_back(line);
  } catch (const chorus::ResourceExhaustedError&) {
    out.error = "ResourceExhausted";
  } catch (const chorus::DataLossError&) {
    out.error = "DataLoss";
  } catch (const chorus::Error& e) {
    chorus::fuzz::expect_error<chorus::ResourceExhaustedError, chorus::DataLossError>(e);
  }
  return out;
}

std::string without_cr(std::string_view s) {
  std::string out;
  for (char c : s)
    if (c != '\r') out += c;
  return out;
}

void check_against(const Outcome& o, std::string_view original, std::uint64_t max_line, bool complete) {
  const std::string text = without_cr(original);
  std::string joined;
  for (std::size_t i = 0; i < o.lines.size(); ++i) {
    check(o.lines[i].size() <= max_line, "no line is longer than max_line_bytes");
    joined += o.lines[i];
    if (i + 1 < o.lines.size() || (!text.empty() && text.back() == '\n') || o.error) joined += '\n';
  }
  if (!o.error && complete) {
    check(joined == text, "the lines joined by newlines are the text without carriage returns");
    return;
  }
  check(text.compare(0, joined.size(), joined) == 0, "the lines read before a failure are a prefix of the text");
  if (o.error && *o.error == "ResourceExhausted" && complete) {
    const std::size_t end = text.find('\n', joined.size());
    const std::size_t len = (end == std::string::npos ? text.size() : end) - joined.size();
    check(len > max_line, "a line reported past the ceiling is past it");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const int mode = data[0] % 4;
  const std::string_view bytes = chorus::fuzz::as_view(data + 1, size - 1);
  if (mode == 0) {
    const Outcome a = read_all(std::make_unique<internal::StringSource>(std::string(bytes)), 1, 64);
    const Outcome b = read_all(std::make_unique<internal::StringSource>(std::string(bytes)), 4096, 64);
    check(a.lines == b.lines && a.error == b.error, "the buffer size changes nothing");
    check(!a.error || *a.error == "ResourceExhausted", "in memory, only a long line fails");
    check_against(a, bytes, 64, true);
    return 0;
  }
  const std::string& path = chorus::fuzz::scratch_file().hold(bytes);
  const auto c = mode == 1   ? internal::TextCompression::kNone
                 : mode == 2 ? internal::TextCompression::kGzip
                             : internal::TextCompression::kZlib;
  Outcome o;
  try {
    o = read_all(std::make_unique<internal::TextFileSource>(path, c, kInflateCap), 4096, 1 << 16);
  } catch (const chorus::Error& e) {
    chorus::fuzz::expect_error<chorus::DataLossError>(e);  // never from opening the scratch file
    return 0;
  }
  if (mode == 1) {
    check(!o.error || *o.error == "ResourceExhausted", "a plain file fails only for a long line");
    check_against(o, bytes, 1 << 16, true);
    return 0;
  }
  bool complete = false;
  const std::string inflated = chorus::fuzz::inflate_independently(bytes, mode == 2, kInflateCap, &complete);
  if (!o.error) check(complete, "a read that succeeded read a stream zlib calls complete");
  check_against(o, inflated, 1 << 16, complete && inflated.size() <= kInflateCap);
  return 0;
}
