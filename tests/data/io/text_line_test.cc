// TextLineDataset's line rules on bytes (LineReader), then the dataset against TensorFlow 2.21 on
// the same files (plain, GZIP, ZLIB) and its iterator state.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <chorus/core/error.h>
#include <chorus/data/io/text_line_internal.h>

namespace chorus::data {
namespace {

using internal::split_lines;
using Lines = std::vector<std::string>;

constexpr std::uint64_t kBig = 1 << 20;

// TF's rules (text_line_internal.h), each written out by hand, checked at several buffer sizes so
// that a '\n' or '\r' on a buffer boundary changes nothing.
TEST(LineReaderTest, LineEndingsAsTensorFlow) {
  struct Case {
    std::string bytes;
    Lines lines;
  };
  const Case cases[] = {
      {"a\nb\n", {"a", "b"}},
      {"a\r\nb\r\n", {"a", "b"}},
      {"a\rb\rc", {"abc"}},  // a lone '\r' is dropped, it ends nothing
      {"a\nb", {"a", "b"}},  // the last line without '\n'
      {"\n\na\n\n", {"", "", "a", ""}},
      {"", {}},
      {std::string("a\0b\n\0\n", 6), {std::string("a\0b", 3), std::string(1, '\0')}},
      {"x\ry\nz\r\r\n", {"xy", "z"}},
      {"\r", {}},  // nothing is left of the last line once '\r' is dropped
      {"a\n\r", {"a"}},
      {"\r\r\n\r\n", {"", ""}},
      {"\n", {""}},
  };
  for (const Case& c : cases)
    for (std::size_t buffer : {1, 2, 3, 7, 1 << 16}) EXPECT_EQ(split_lines(c.bytes, kBig, buffer), c.lines) << buffer;
}

TEST(LineReaderTest, LineAtTheCeilingPassesOneByteMoreFails) {
  const std::string ok(100, 'x');
  EXPECT_EQ(split_lines(ok + "\r\n" + ok, 100, 7), (Lines{ok, ok}));  // '\r' is not counted: it is dropped
  try {
    split_lines("ab\n" + ok + "y\n", 100, 7);
    FAIL() << "no error";
  } catch (const ResourceExhaustedError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("byte offset 3 "), std::string::npos) << msg;
    EXPECT_NE(msg.find("max_line_bytes = 100"), std::string::npos) << msg;
    EXPECT_NE(msg.find("<string>"), std::string::npos) << msg;
  }
}

TEST(LineReaderTest, OffsetsAreLineBoundaries) {
  internal::BufferedInput in(std::make_unique<internal::StringSource>("ab\r\ncd\n\nef"), 3);
  internal::LineReader reader(in, kBig);
  std::string line;
  std::vector<std::uint64_t> offsets;
  while (reader.next(&line)) offsets.push_back(in.offset());
  EXPECT_EQ(offsets, (std::vector<std::uint64_t>{4, 7, 8, 10}));
}

}  // namespace
}  // namespace chorus::data
