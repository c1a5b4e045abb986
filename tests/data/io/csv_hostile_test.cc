// CSV from hostile files (issue 44, item 8): truncated and corrupted GZIP, a GZIP bomb, a record or
// quoted field past the ceiling, /dev/zero, a FIFO, a directory, a missing file. Each ends in the
// documented error naming the file (and the offset), within seconds and with memory bounded.
// Label: hostile.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "tests/core/test_util.h"
#include "tests/data/io/text_line_test_util.h"
#include <chorus/data/io/csv_internal.h>

namespace chorus::data {
namespace {

using chorus::testing::TempDir;
using internal::CsvKind;
using internal::CsvSpec;
using internal::TextCompression;
using testing::deflate_bytes;
using testing::error_within;
using testing::kRssBoundScale;
using testing::max_rss_kib;
using testing::write_bytes;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

CsvSpec int_pair(std::uint64_t max_record_bytes = 1 << 20) {
  CsvSpec s;
  s.kinds = {CsvKind::kInt32, CsvKind::kString};
  s.defaults = {std::nullopt, std::nullopt};
  s.max_record_bytes = max_record_bytes;
  return s;
}

// Reads every record of the file, past bad records as the dataset does (a corrupted stream may
// inflate to garbage before its CRC is checked); `rows` gets the first column of each good record.
void read_csv_file(const std::string& path, TextCompression c, const CsvSpec& spec, std::vector<std::int32_t>* rows,
                   std::uint64_t max_inflated_bytes = std::uint64_t{1} << 32) {
  internal::BufferedInput in(std::make_unique<internal::TextFileSource>(path, c, max_inflated_bytes), 1 << 16);
  internal::CsvRecordReader reader(in, spec);
  for (;;) {
    try {
      auto r = reader.next();
      if (!r) return;
      rows->push_back(std::get<std::int32_t>((*r)[0]));
    } catch (const InvalidArgumentError&) {
      rows->push_back(-1);
    }
  }
}

std::string numbered_rows(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += std::to_string(i) + ",\"row " + std::to_string(i) + "\"\n";
  return s;
}

TEST(CsvHostileTest, TruncatedAndCorruptedGzip) {
  TempDir dir;
  const std::string gz = deflate_bytes(numbered_rows(20000), true);
  const std::string path = dir.file("x.csv.gz");
  for (double frac : {0.0, 0.3, 0.9}) {
    const std::size_t cut = std::max<std::size_t>(1, static_cast<std::size_t>(gz.size() * frac));
    write_bytes(path, gz.substr(0, cut));
    std::vector<std::int32_t> rows;
    const std::string err = error_within(10, [&] { read_csv_file(path, TextCompression::kGzip, int_pair(), &rows); });
    EXPECT_TRUE(has(err, "DataLossError: ") && has(err, path) && has(err, "(" + std::to_string(cut) + " bytes)"))
        << err;
    for (std::size_t i = 0; i < rows.size(); ++i) ASSERT_EQ(rows[i], static_cast<std::int32_t>(i));
  }
  // Changed bytes: garbage records (InvalidArgumentError, skipped) until the gzip CRC fails.
  std::string flipped = gz;
  for (std::size_t i = gz.size() / 2; i < gz.size() / 2 + 32; ++i) flipped[i] = static_cast<char>(~flipped[i]);
  write_bytes(path, flipped);
  std::vector<std::int32_t> rows;
  const std::string err = error_within(10, [&] { read_csv_file(path, TextCompression::kGzip, int_pair(), &rows); });
  EXPECT_TRUE(has(err, "DataLossError: ") && has(err, path)) << err;
}

// A quote opened and never closed, in 1 GiB of deflated zeros: the record ceiling stops it, holding
// at most the ceiling.
TEST(CsvHostileTest, GzipBombInsideAQuotedFieldStopsAtMaxRecordBytes) {
  TempDir dir;
  const std::string member = deflate_bytes(std::string(1 << 20, '\0'), true, 9);
  std::string bomb = deflate_bytes("1,a\n2,\"", true);
  for (int i = 0; i < 1024; ++i) bomb += member;
  const std::string path = dir.file("bomb.csv.gz");
  write_bytes(path, bomb);
  const std::int64_t before = max_rss_kib();
  std::vector<std::int32_t> rows;
  const std::string err =
      error_within(30, [&] { read_csv_file(path, TextCompression::kGzip, int_pair(16 << 20), &rows, 1ull << 40); });
  EXPECT_TRUE(has(err, "ResourceExhaustedError: ") && has(err, "record 1 at byte offset 4 of " + path) &&
              has(err, "max_record_bytes = 16777216 (16 MiB)"))
      << err;
  EXPECT_EQ(rows, std::vector<std::int32_t>{1});
  EXPECT_LT(max_rss_kib() - before, kRssBoundScale * (48 << 10)) << "KiB more at peak";
}

// Line breaks only: records are tiny, max_inflated_bytes bounds the whole stream.
TEST(CsvHostileTest, GzipBombOfEmptyRecordsStopsAtMaxInflatedBytes) {
  TempDir dir;
  const std::string member = deflate_bytes(std::string(1 << 20, '\n'), true, 9);
  std::string bomb;
  for (int i = 0; i < 1024; ++i) bomb += member;
  const std::string path = dir.file("lines.csv.gz");
  write_bytes(path, bomb);
  CsvSpec spec = int_pair();
  spec.kinds = {CsvKind::kInt32};
  spec.defaults = {CsvValue(std::int32_t{7})};
  std::vector<std::int32_t> rows;
  const std::string err = error_within(60, [&] { read_csv_file(path, TextCompression::kGzip, spec, &rows, 8 << 20); });
  EXPECT_TRUE(has(err, "ResourceExhaustedError: ") && has(err, "max_inflated_bytes = 8388608 (8 MiB)")) << err;
  EXPECT_EQ(rows.size(), std::size_t{8} << 20);  // every record before the ceiling was read
}

TEST(CsvHostileTest, PlainRecordPastTheCeiling) {
  TempDir dir;
  const std::string path = dir.file("wide.csv");
  std::string wide = "1,x\n2,";
  for (int i = 0; i < 3000; ++i) wide += "y,";  // many short fields: the record counts, not the field
  write_bytes(path, wide + "\n3,z\n");
  std::vector<std::int32_t> rows;
  const std::string err = error_within(10, [&] { read_csv_file(path, TextCompression::kNone, int_pair(4096), &rows); });
  EXPECT_TRUE(has(err, "ResourceExhaustedError: ") && has(err, "record 1 at byte offset 4 of " + path)) << err;
  EXPECT_EQ(rows, std::vector<std::int32_t>{1});
}

TEST(CsvHostileTest, DevicesFifosDirectoriesAndMissingFiles) {
  TempDir dir;
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  std::vector<std::int32_t> rows;
  for (auto c : {TextCompression::kNone, TextCompression::kZlib}) {
    for (const std::string& path : {std::string("/dev/zero"), fifo, dir.path()}) {
      const std::string err = error_within(10, [&] { read_csv_file(path, c, int_pair(), &rows); });
      EXPECT_TRUE(has(err, "InvalidArgumentError: ") && has(err, path)) << err;
    }
    const std::string err = error_within(10, [&] { read_csv_file(dir.file("missing.csv"), c, int_pair(), &rows); });
    EXPECT_TRUE(has(err, "NotFoundError: ") && has(err, "missing.csv")) << err;
  }
}

}  // namespace
}  // namespace chorus::data
