// data/tfrecord.cc: framing bytes against docs/formats.md's vectors, write → read round trips, every
// single-byte corruption and every truncation detected as DataLossError (never a crash), missing
// files, TFRecordDataset across files and its iterator state, and a file written by TensorFlow.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "tests/data/data_test_util.h"
#include <chorus/core/crc32c.h>
#include <chorus/data/tfrecord.h>

namespace chorus::data {
namespace {

using testing::TempDir;

using testing::slurp;
using testing::spit;
std::uint32_t le32(const std::string& s, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | static_cast<std::uint8_t>(s[at + static_cast<std::size_t>(i)]);
  return v;
}

std::vector<std::string> sample_records() {
  std::string big(100000, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + 3);
  return {"hello", "", std::string("\0\x01\xff", 3), big, "last"};
}

TEST(TFRecord, FramingMatchesTheFormat) {
  TempDir dir;
  // docs/formats.md A2: a 24-byte record's length header is 18 00 .. 00 followed by masked CRC a3 7f 4b 22;
  // masked_crc32c("\x1a\x11CRC test, one two") = 0x5794D08A (from a real TFRecord).
  const std::string payload(
      "\x1a\x11"
      "CRC test, one two",
      19);
  write_tfrecord_file(dir.file("a"), {std::string(24, 'x'), payload});
  const std::string bytes = slurp(dir.file("a"));
  ASSERT_EQ(bytes.size(), (12 + 24 + 4) + (12 + payload.size() + 4));
  EXPECT_EQ(bytes.substr(0, 12), std::string("\x18\0\0\0\0\0\0\0\xa3\x7f\x4b\x22", 12));
  EXPECT_EQ(bytes.substr(12, 24), std::string(24, 'x'));
  EXPECT_EQ(le32(bytes, 36), masked_crc32c(std::string(24, 'x').data(), 24));
  EXPECT_EQ(le32(bytes, bytes.size() - 4), 0x5794D08Au);
}

TEST(TFRecord, WriteReadRoundTrip) {
  TempDir dir;
  const auto records = sample_records();
  {
    TFRecordWriter w(dir.file("r.tfrecord"));
    for (const auto& r : records) w.write(r);
    w.flush();
  }  // the destructor closes
  EXPECT_EQ(read_tfrecord_file(dir.file("r.tfrecord")), records);

  TFRecordReader reader(dir.file("r.tfrecord"));
  std::uint64_t expected_offset = 0;
  for (const auto& r : records) {
    EXPECT_EQ(reader.offset(), expected_offset);
    EXPECT_EQ(reader.read(), r);
    expected_offset += 12 + r.size() + 4;
  }
  EXPECT_EQ(reader.read(), std::nullopt);
  EXPECT_EQ(reader.file_size(), expected_offset);
  reader.seek(12 + 5 + 4);  // back to the second record
  EXPECT_EQ(reader.read(), std::string());
  EXPECT_THROW_WITH(reader.seek(expected_offset + 1), InvalidArgumentError, "past the end");

  TFRecordWriter closed(dir.file("c"));
  closed.close();
  closed.close();  // idempotent
  EXPECT_THROW_WITH(closed.write("x"), FailedPreconditionError, "closed");
  write_tfrecord_file(dir.file("empty"), {});
  EXPECT_TRUE(read_tfrecord_file(dir.file("empty")).empty());
}

TEST(TFRecord, EverySingleByteCorruptionIsDataLoss) {
  TempDir dir;
  const std::string path = dir.file("f");
  write_tfrecord_file(path, {"first record", "second"});
  const std::string good = slurp(path);
  const std::size_t second = 12 + 12 + 4;  // offset of the second record
  for (std::size_t at = 0; at < good.size(); ++at) {
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x20);
    spit(path, bad);
    const std::string offset = "at offset " + std::to_string(at < second ? 0 : second) + " in " + path;
    SCOPED_TRACE("byte " + std::to_string(at));
    EXPECT_THROW_WITH(read_tfrecord_file(path), DataLossError, offset);
  }
  // The message says which CRC failed and both values.
  std::string bad = good;
  bad[0] = 'z';
  spit(path, bad);
  EXPECT_THROW_WITH(read_tfrecord_file(path), DataLossError, "corrupted record", "length CRC mismatch", "stored 0x",
                    "computed 0x");
  bad = good;
  bad[14] ^= 1;
  spit(path, bad);
  EXPECT_THROW_WITH(read_tfrecord_file(path), DataLossError, "data CRC mismatch over 12 bytes");
  // The reader stays at the bad record: reading again fails again.
  TFRecordReader reader(path);
  EXPECT_THROW(reader.read(), DataLossError);
  EXPECT_THROW(reader.read(), DataLossError);
  EXPECT_EQ(reader.offset(), 0u);
}

TEST(TFRecord, EveryTruncationIsDataLossUnlessAtABoundary) {
  TempDir dir;
  const std::string path = dir.file("t");
  write_tfrecord_file(path, {"abcdefgh", "ij"});
  const std::string good = slurp(path);
  const std::size_t second = 12 + 8 + 4;
  for (std::size_t len = 0; len < good.size(); ++len) {
    spit(path, good.substr(0, len));
    SCOPED_TRACE("cut at " + std::to_string(len));
    if (len == 0) {
      EXPECT_TRUE(read_tfrecord_file(path).empty());
    } else if (len == second) {
      EXPECT_EQ(read_tfrecord_file(path), std::vector<std::string>{"abcdefgh"});
    } else {
      TFRecordReader reader(path);
      if (len > second) {
        EXPECT_EQ(reader.read(), "abcdefgh");
      }
      EXPECT_THROW_WITH(reader.read(), DataLossError,
                        "truncated record at offset " + std::to_string(len > second ? second : 0));
    }
  }
  // A length whose CRC is right but which points past the end: truncated, nothing allocated.
  std::string huge(12, '\0');
  for (int i = 0; i < 8; ++i) huge[static_cast<std::size_t>(i)] = static_cast<char>(0xff);
  huge[7] = 0x7f;
  const std::uint32_t crc = masked_crc32c(huge.data(), 8);
  for (int i = 0; i < 4; ++i) huge[8 + static_cast<std::size_t>(i)] = static_cast<char>(crc >> (8 * i));
  spit(path, huge + "tail");
  EXPECT_THROW_WITH(read_tfrecord_file(path), DataLossError, "truncated record at offset 0", "9223372036854775807");
}

TEST(TFRecord, MissingFilesAreNotFound) {
  TempDir dir;
  EXPECT_THROW_WITH(TFRecordReader(dir.file("nope")), NotFoundError, dir.file("nope"));
  EXPECT_THROW_WITH(TFRecordWriter(dir.file("no/such/dir/x")), NotFoundError, dir.file("no/such/dir/x"));
  auto it = tfrecord_dataset({dir.file("nope")}).make_iterator();
  EXPECT_THROW_WITH(it.next(), NotFoundError, dir.file("nope"));
}

TEST(TFRecordDataset, ReadsFilesInOrder) {
  TempDir dir;
  write_tfrecord_file(dir.file("0"), {"a", "bb"});
  write_tfrecord_file(dir.file("1"), {});
  write_tfrecord_file(dir.file("2"), {"ccc"});
  auto ds = tfrecord_dataset({dir.file("0"), dir.file("1"), dir.file("2")});
  EXPECT_EQ(ds.cardinality(), kUnknownCardinality);
  EXPECT_EQ(tfrecord_dataset({}).cardinality(), 0);
  std::vector<std::string> got;
  auto it = ds.make_iterator();
  while (auto e = it.next()) {
    EXPECT_EQ((*e)[0].dtype(), DType::kString);  // a scalar string tensor, as TF's
    EXPECT_EQ((*e)[0].shape().rank(), 0);
    got.push_back((*e)[0].item<std::string>());
  }
  EXPECT_EQ(got, (std::vector<std::string>{"a", "bb", "ccc"}));
}

TEST(TFRecordDataset, ADataLossSkipsToTheNextFile) {
  TempDir dir;
  write_tfrecord_file(dir.file("0"), {"a", "b", "c"});
  write_tfrecord_file(dir.file("1"), {"d"});
  std::string bytes = slurp(dir.file("0"));
  bytes[12 + 1 + 4 + 12] ^= 1;  // the data of "b"
  spit(dir.file("0"), bytes);
  auto it = tfrecord_dataset({dir.file("0"), dir.file("1")}).make_iterator();
  EXPECT_EQ((*it.next())[0].item<std::string>(), "a");
  EXPECT_THROW_WITH(it.next(), DataLossError, "offset 17 in " + dir.file("0"));
  EXPECT_EQ((*it.next())[0].item<std::string>(), "d");
  EXPECT_FALSE(it.next().has_value());
}

TEST(TFRecordDataset, IteratorStateIsFileAndOffset) {
  TempDir dir;
  write_tfrecord_file(dir.file("0"), {"a", "bb"});
  write_tfrecord_file(dir.file("1"), {"ccc", "dddd"});
  auto build = [&] { return tfrecord_dataset({dir.file("0"), dir.file("1")}).prefetch(2); };
  testing::expect_resumes_after_every_element(build, 4);
}

// Files written by TensorFlow 2 (see /work/shared/testdata/tensorflow/README.md).
const std::string kTFData = "/work/shared/testdata/tensorflow/";

TEST(TFRecord, ReadsAnEventFileWrittenByTensorFlow) {
  const std::string path = kTFData + "events.out.tfevents.validation.v2";
  if (!std::ifstream(path)) GTEST_SKIP() << path << " is not available on this machine";
  const auto records = read_tfrecord_file(path);
  // 21 records: the file_version event and 20 scalar summaries (counted by an independent Python
  // walk over the framing); every CRC checked by read().
  EXPECT_EQ(records.size(), 21u);
  std::size_t framed = 0;
  for (const auto& r : records) framed += 12 + r.size() + 4;
  EXPECT_EQ(framed, slurp(path).size());  // nothing left over
  EXPECT_EQ(records[0].size(), 24u);      // Event{wall_time, file_version}
  EXPECT_NE(records[0].find("brain.Event:2"), std::string::npos);

  const auto header = read_tfrecord_file(kTFData + "events.out.tfevents.header-only.v2");
  ASSERT_EQ(header.size(), 1u);
  EXPECT_EQ(header[0].size(), 24u);
  EXPECT_NE(header[0].find("brain.Event:2"), std::string::npos);

  std::int64_t n = 0;
  auto it = tfrecord_dataset({path}).make_iterator();
  while (it.next()) ++n;
  EXPECT_EQ(n, 21);
}

}  // namespace
}  // namespace chorus::data
