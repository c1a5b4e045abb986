// Text lines from hostile files (issue 44, item 8): truncated and corrupted GZIP/ZLIB streams, a
// GZIP bomb, a line past the ceiling, /dev/zero, a FIFO, a directory, a missing file. Each ends in
// the documented error, naming the file (and the offset), within seconds and with memory bounded.
// Label: hostile.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "tests/core/test_util.h"
#include "tests/data/io/text_line_test_util.h"

namespace chorus::data {
namespace {

using chorus::testing::TempDir;
using internal::TextCompression;
using testing::deflate_bytes;
using testing::error_within;
using testing::kRssBoundScale;
using testing::max_rss_kib;
using testing::read_file_lines;
using testing::write_bytes;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string numbered_lines(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += "line " + std::to_string(i) + "\n";
  return s;
}

TEST(TextLineHostileTest, TruncatedGzipGivesTheCompleteLinesThenDataLoss) {
  TempDir dir;
  const std::string text = numbered_lines(20000);
  const std::string gz = deflate_bytes(text, true);
  for (double frac : {0.0, 0.1, 0.5, 0.99}) {
    const std::string path = dir.file("cut.gz");
    const std::size_t cut = std::max<std::size_t>(1, static_cast<std::size_t>(gz.size() * frac));
    write_bytes(path, gz.substr(0, cut));
    std::vector<std::string> got;
    const std::string err =
        error_within(10, [&] { read_file_lines(path, TextCompression::kGzip, 1 << 20, 1ull << 32, &got); });
    EXPECT_TRUE(has(err, "DataLossError: ")) << err;
    EXPECT_TRUE(has(err, path)) << err;
    EXPECT_TRUE(has(err, "(" + std::to_string(cut) + " bytes)")) << err;
    // What came before the cut is exactly the first lines of the text.
    for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], "line " + std::to_string(i));
    // and every line complete in the bytes that arrived is returned before the error.
    if (frac == 0.99) {
      EXPECT_GT(got.size(), 19000u);
    }
  }
}

TEST(TextLineHostileTest, CorruptedStreamsAreDataLossNamingFileAndOffset) {
  TempDir dir;
  const std::string text = numbered_lines(20000);
  for (bool gzip : {true, false}) {
    std::string z = deflate_bytes(text, gzip);
    const std::string path = dir.file(gzip ? "bad.gz" : "bad.z");
    std::string flipped = z;
    for (std::size_t i = z.size() / 2; i < z.size() / 2 + 64; ++i) flipped[i] = static_cast<char>(flipped[i] ^ 0x5a);
    write_bytes(path, flipped);
    const auto c = gzip ? TextCompression::kGzip : TextCompression::kZlib;
    std::string err = error_within(10, [&] { read_file_lines(path, c); });
    EXPECT_TRUE(has(err, "DataLossError: ")) << err;
    EXPECT_TRUE(has(err, path)) << err;
    EXPECT_TRUE(has(err, "compressed byte") || has(err, "uncompressed bytes")) << err;
    // The checksum catches a changed byte whatever the data around it.
    std::string trailer = z;
    trailer[trailer.size() - 2] = static_cast<char>(trailer[trailer.size() - 2] ^ 1);
    write_bytes(path, trailer);
    err = error_within(10, [&] { read_file_lines(path, c); });
    EXPECT_TRUE(has(err, "DataLossError: ")) << err;
    // Bytes after a complete stream.
    write_bytes(path, z + "trailing");
    err = error_within(10, [&] { read_file_lines(path, c); });
    EXPECT_TRUE(has(err, "DataLossError: ") && has(err, path)) << err;
    // Not compressed at all.
    write_bytes(path, text);
    err = error_within(10, [&] { read_file_lines(path, c); });
    EXPECT_TRUE(has(err, "DataLossError: ") && has(err, "compressed byte 0")) << err;
  }
}

// 1 GiB of '\n' in 1,024 gzip members of 1 MiB (about 1 MiB on disk): max_inflated_bytes stops it,
// and the memory in use stays a buffer, not what was inflated.
TEST(TextLineHostileTest, GzipBombStopsAtMaxInflatedBytes) {
  TempDir dir;
  const std::string member = deflate_bytes(std::string(1 << 20, '\n'), true, 9);
  std::string bomb;
  for (int i = 0; i < 1024; ++i) bomb += member;
  const std::string path = dir.file("bomb.gz");
  write_bytes(path, bomb);
  const std::int64_t before = max_rss_kib();
  const std::string err = error_within(60, [&] {
    internal::BufferedInput in(std::make_unique<internal::TextFileSource>(path, TextCompression::kGzip, 64 << 20),
                               1 << 16);
    internal::LineReader reader(in, 1 << 20);
    for (std::string line; reader.next(&line);) {
    }
  });
  EXPECT_TRUE(has(err, "ResourceExhaustedError: ") && has(err, path) &&
              has(err, "max_inflated_bytes = 67108864 (64 MiB)"))
      << err;
  EXPECT_LT(max_rss_kib() - before, kRssBoundScale * (32 << 10)) << "KiB more at peak";
}

// Zeros without a line break, deflated: the line ceiling stops it before more than it is held.
TEST(TextLineHostileTest, GzipOfOneEndlessLineStopsAtMaxLineBytes) {
  TempDir dir;
  const std::string member = deflate_bytes(std::string(1 << 20, '\0'), true, 9);
  std::string bomb = deflate_bytes("first\n", true);
  for (int i = 0; i < 256; ++i) bomb += member;
  const std::string path = dir.file("line.gz");
  write_bytes(path, bomb);
  const std::int64_t before = max_rss_kib();
  std::vector<std::string> got;
  const std::string err =
      error_within(30, [&] { read_file_lines(path, TextCompression::kGzip, 8 << 20, 1ull << 40, &got); });
  EXPECT_TRUE(has(err, "ResourceExhaustedError: ") && has(err, path) && has(err, "byte offset 6 ") &&
              has(err, "max_line_bytes = 8388608 (8 MiB)"))
      << err;
  EXPECT_EQ(got, std::vector<std::string>{"first"});
  EXPECT_LT(max_rss_kib() - before, kRssBoundScale * (40 << 10)) << "KiB more at peak";
}

TEST(TextLineHostileTest, PlainLinePastTheCeiling) {
  TempDir dir;
  const std::string path = dir.file("long.txt");
  write_bytes(path, "a\nbb\n" + std::string(5000, 'x') + "\nc\n");
  std::vector<std::string> got;
  const std::string err = error_within(10, [&] { read_file_lines(path, TextCompression::kNone, 4096, 0, &got); });
  EXPECT_TRUE(has(err, "ResourceExhaustedError: ") && has(err, "byte offset 5 in " + path)) << err;
  EXPECT_EQ(got, (std::vector<std::string>{"a", "bb"}));
}

TEST(TextLineHostileTest, DevicesFifosDirectoriesAndMissingFiles) {
  TempDir dir;
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  for (auto c : {TextCompression::kNone, TextCompression::kGzip}) {
    for (const std::string& path : {std::string("/dev/zero"), fifo, dir.path()}) {
      const std::string err = error_within(10, [&] { read_file_lines(path, c); });
      EXPECT_TRUE(has(err, "InvalidArgumentError: ") && has(err, path)) << err;
    }
    const std::string err = error_within(10, [&] { read_file_lines(dir.file("missing.txt"), c); });
    EXPECT_TRUE(has(err, "NotFoundError: ") && has(err, "missing.txt")) << err;
  }
}

}  // namespace
}  // namespace chorus::data
