// TFRecord framing: the masked-CRC vectors of docs/formats.md A2, round trips, and files corrupted on
// purpose (every flipped byte and every truncation is caught, with the record's offset).
#include <chorus/summary/record.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/summary/summary_test_util.h"
#include <chorus/core/crc32c.h>
#include <chorus/core/error.h>

namespace chorus::summary {
namespace {

using testing::read_file;
using testing::TempDir;
using testing::write_file;

std::vector<std::string> read_all(const std::string& path) {
  RecordReader r(path);
  std::vector<std::string> out;
  std::string rec;
  while (r.read(rec)) out.push_back(rec);
  return out;
}

TEST(Record, FramingMatchesTheFormatsVectors) {
  // A 24-byte payload: length header 18 00 00 00 00 00 00 00, masked CRC bytes a3 7f 4b 22
  // (observed in a real TF2 file, docs/formats.md A2).
  const std::string framed = frame_record(std::string(24, 'x'));
  ASSERT_EQ(framed.size(), 24 + kRecordOverhead);
  EXPECT_EQ(framed.substr(0, 12), std::string("\x18\0\0\0\0\0\0\0\xa3\x7f\x4b\x22", 12));
  // The data CRC is the masked CRC-32C of the payload, little-endian.
  const std::uint32_t crc = masked_crc32c(framed.data() + 12, 24);
  EXPECT_EQ(framed.substr(36), std::string(reinterpret_cast<const char*>(&crc), 4));
  // docs/formats.md A2: masked_crc32c(b"\x1a\x11CRC test, one two") == 0x5794D08A.
  const std::string v =
      "\x1a\x11"
      "CRC test, one two";
  EXPECT_EQ(masked_crc32c(v.data(), v.size()), 0x5794D08Au);
}

TEST(Record, RoundTripsRecordsOfManySizes) {
  TempDir dir;
  std::vector<std::string> records{"", "a", std::string(1000, '\0'), std::string(70000, 'z')};
  std::string file;
  for (const auto& r : records) append_record(file, r);
  write_file(dir.str("f"), file);
  EXPECT_EQ(read_all(dir.str("f")), records);
  EXPECT_TRUE(read_all([&] {
                write_file(dir.str("empty"), "");
                return dir.str("empty");
              }())
                  .empty());
}

TEST(Record, EveryFlippedByteIsDetected) {
  TempDir dir;
  std::string file;
  append_record(file, "first record");
  append_record(file, "second record, a little longer");
  for (std::size_t i = 0; i < file.size(); ++i) {
    std::string bad = file;
    bad[i] = static_cast<char>(bad[i] ^ 0x20);
    write_file(dir.str("bad"), bad);
    try {
      const auto got = read_all(dir.str("bad"));
      ADD_FAILURE() << "flipping byte " << i << " went unnoticed";
    } catch (const DataLossError& e) {
      const std::string msg = e.what();
      const std::size_t first = 12 + 12 + 4;
      const std::string where = i < first ? "byte offset 0" : "byte offset " + std::to_string(first);
      EXPECT_NE(msg.find(where), std::string::npos) << "byte " << i << ": " << msg;
      EXPECT_NE(msg.find(dir.str("bad")), std::string::npos) << msg;
      const std::size_t in_record = i < first ? i : i - first;
      if (in_record < 12) {
        // A corrupted length is caught by its own CRC (or, if the CRC bytes are hit, the same).
        EXPECT_NE(msg.find("failed header crc32 check"), std::string::npos) << "byte " << i << ": " << msg;
      } else {
        EXPECT_NE(msg.find("failed event crc32 check"), std::string::npos) << "byte " << i << ": " << msg;
      }
    }
  }
}

TEST(Record, TruncationIsDataLossExceptAtARecordBoundary) {
  TempDir dir;
  std::string file;
  append_record(file, "first record");
  const std::size_t boundary = file.size();
  append_record(file, "second");
  for (std::size_t n = 0; n <= file.size(); ++n) {
    write_file(dir.str("cut"), file.substr(0, n));
    if (n == 0 || n == boundary || n == file.size()) {
      EXPECT_NO_THROW(read_all(dir.str("cut"))) << "cut at " << n;
      continue;
    }
    try {
      read_all(dir.str("cut"));
      ADD_FAILURE() << "truncation at " << n << " went unnoticed";
    } catch (const DataLossError& e) {
      EXPECT_NE(std::string(e.what()).find("truncated record"), std::string::npos) << n << ": " << e.what();
    }
  }
}

TEST(Record, AReaderCanResumeAtTheOffsetOfATruncatedRecord) {
  // How a tailing reader handles a record that is still being written: catch, retry later.
  TempDir dir;
  std::string file;
  append_record(file, "complete");
  const std::string partial = frame_record("being written");
  write_file(dir.str("f"), file + partial.substr(0, 10));
  RecordReader r(dir.str("f"));
  std::string rec;
  ASSERT_TRUE(r.read(rec));
  EXPECT_EQ(rec, "complete");
  EXPECT_THROW(r.read(rec), DataLossError);
  EXPECT_THROW(r.read(rec), DataLossError) << "the failure is sticky";
  const std::uint64_t resume = r.offset();
  EXPECT_EQ(resume, file.size());
  write_file(dir.str("f"), file + partial);  // the writer finished the record
  RecordReader again(dir.str("f"), resume);
  ASSERT_TRUE(again.read(rec));
  EXPECT_EQ(rec, "being written");
  EXPECT_FALSE(again.read(rec));
}

TEST(Record, MissingFileIsNotFoundNamingThePath) {
  TempDir dir;
  try {
    RecordReader r(dir.str("nope"));
    FAIL();
  } catch (const NotFoundError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.str("nope")), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace chorus::summary
