// TextLineDataset's line rules on bytes (LineReader), then the dataset against TensorFlow 2.21 on
// the same files (plain, GZIP, ZLIB) and its iterator state.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/core/interop_python.h"
#include "tests/core/test_util.h"
#include "tests/data/io/text_line_test_util.h"
#include <chorus/core/error.h>
#include <chorus/data/io/text_line.h>
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

// TensorFlow 2.21 wrote the files (csv_interop.py) and read them with tf.data.TextLineDataset;
// chorus's lines are the same, byte for byte, for every case, plain, GZIP and ZLIB.
class TextLineInterop : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string python;
    const auto found = chorus::testing::find_interop_python("tensorflow");
    if (found.path.empty()) return;
    dir_ = new chorus::testing::TempDir();
    const std::string cmd =
        "'" + found.path + "' '" CHORUS_SOURCE_ROOT "/tests/data/io/csv_interop.py' " + dir_->path();
    if (chorus::testing::run_interop_command(cmd, "tf") == 0)
      cases_ = testing::read_interop_output(dir_->file("tf_text.txt"));
  }
  static void TearDownTestSuite() { delete dir_; }
  void SetUp() override {
    std::string python;
    CHORUS_REQUIRE_INTEROP_PYTHON(python, "tensorflow");
    ASSERT_FALSE(cases_.empty()) << "csv_interop.py failed";
  }
  static std::string file(const std::string& name) { return dir_->file(name); }
  static inline chorus::testing::TempDir* dir_ = nullptr;
  static inline std::vector<testing::InteropCase> cases_;
};

internal::TextCompression compression_of(const std::string& word) {
  return word == "-" ? internal::TextCompression::kNone : internal::parse_text_compression(word, "test");
}

TEST_F(TextLineInterop, LinesEqualTensorFlowsOnTheSameFiles) {
  std::size_t lines = 0;
  for (const auto& c : cases_) {
    SCOPED_TRACE(c.words[1] + " " + c.words[3]);
    std::vector<std::string> got;
    for (const std::string& line : testing::read_file_lines(file(c.words[2]), compression_of(c.words[3])))
      got.push_back("L " + testing::to_hex(line));
    EXPECT_EQ(got, c.tokens);
    lines += got.size();
    std::vector<std::string> from_dataset;
    const auto ds = text_line_dataset({file(c.words[2])}, {.compression_type = c.words[3] == "-" ? "" : c.words[3]});
    for (auto it = ds.make_iterator(); auto e = it.next();)
      from_dataset.push_back("L " + testing::to_hex((*e)[0].item<std::string>()));
    EXPECT_EQ(from_dataset, c.tokens) << "text_line_dataset";
  }
  EXPECT_GT(lines, 10000u);  // the random cases were there
}

}  // namespace
}  // namespace chorus::data
