// Compressed TFRecord files (data/tfrecord.h, data/zlib_stream.h): ZLIB and GZIP round trips, the
// options' TF spellings, what an uncompressed read of a compressed file says, every truncation and
// single-byte corruption a DataLossError or the right records (never wrong data, never a crash), a
// length no compressed bytes could back refused before allocation, flush, concatenated gzip
// members, seek and the dataset's iterator state, and TensorFlow reading and writing both formats.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

#include "tests/core/interop_python.h"
#include "tests/data/data_test_util.h"
#include <chorus/core/crc32c.h>
#include <chorus/data/tfrecord.h>

namespace chorus::data {
namespace {

using testing::TempDir;

using testing::slurp;
using testing::spit;

std::vector<std::string> sample_records() {
  std::string big(100000, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i / 100) * 7 + 3);
  return {"hello", "", std::string("\0\x01\xff", 3), big, "last"};
}

const TFRecordOptions kZlib{.compression = TFRecordCompression::kZlib};
const TFRecordOptions kGzip{.compression = TFRecordCompression::kGzip};

struct Format {
  const char* name;
  TFRecordOptions options;
};
const Format kFormats[] = {{"ZLIB", kZlib}, {"GZIP", kGzip}};

// Deflates `raw` as one stream (zlib's own deflate: an independent writer).
std::string deflate_with_zlib(const std::string& raw, bool gzip) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, gzip ? 31 : 15, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, static_cast<uLong>(raw.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  z.avail_in = static_cast<uInt>(raw.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

TEST(TFRecordCompression, RoundTripsAndIsTheSameFramingDeflated) {
  TempDir dir;
  for (const Format& f : kFormats) {
    SCOPED_TRACE(f.name);
    const std::string path = dir.file(f.name);
    write_tfrecord_file(path, sample_records(), f.options);
    EXPECT_EQ(read_tfrecord_file(path, f.options), sample_records());
    // The uncompressed framing, deflated: inflating the file gives exactly the plain file's bytes.
    write_tfrecord_file(dir.file("plain"), sample_records());
    const std::string plain = slurp(dir.file("plain")), z = slurp(path);
    EXPECT_LT(z.size(), plain.size() / 4);
    if (f.options.compression == TFRecordCompression::kGzip) {
      EXPECT_EQ(static_cast<unsigned char>(z[0]), 0x1f);
      EXPECT_EQ(static_cast<unsigned char>(z[1]), 0x8b);
    } else {
      EXPECT_EQ(static_cast<unsigned char>(z[0]) & 0x0f, 8);
      EXPECT_EQ((static_cast<unsigned char>(z[0]) * 256 + static_cast<unsigned char>(z[1])) % 31, 0);
    }
    // And a stream deflated by zlib itself from the plain bytes reads back the same records.
    spit(dir.file("by_zlib"), deflate_with_zlib(plain, f.options.compression == TFRecordCompression::kGzip));
    EXPECT_EQ(read_tfrecord_file(dir.file("by_zlib"), f.options), sample_records());
    // Every level, and an empty file (a stream with no records).
    for (int level : {0, 1, 9}) {
      TFRecordOptions o = f.options;
      o.compression_level = level;
      write_tfrecord_file(path, {"x", "yy"}, o);
      EXPECT_EQ(read_tfrecord_file(path, f.options), (std::vector<std::string>{"x", "yy"}));
    }
    write_tfrecord_file(path, {}, f.options);
    EXPECT_GT(slurp(path).size(), 0u);
    EXPECT_TRUE(read_tfrecord_file(path, f.options).empty());
  }
}

TEST(TFRecordCompression, OptionsSpellTensorFlowsCompressionTypes) {
  EXPECT_EQ(TFRecordOptions::from_compression_type("").compression, TFRecordCompression::kNone);
  EXPECT_EQ(TFRecordOptions::from_compression_type("NONE").compression, TFRecordCompression::kNone);
  EXPECT_EQ(TFRecordOptions::from_compression_type("ZLIB").compression, TFRecordCompression::kZlib);
  EXPECT_EQ(TFRecordOptions::from_compression_type("GZIP").compression, TFRecordCompression::kGzip);
  EXPECT_THROW_WITH(TFRecordOptions::from_compression_type("gzip2"), InvalidArgumentError, "'gzip2'", "\"ZLIB\"",
                    "\"GZIP\"");
  TempDir dir;
  EXPECT_THROW_WITH(TFRecordWriter(dir.file("x"), {.compression = TFRecordCompression::kGzip, .compression_level = 10}),
                    InvalidArgumentError, "compression_level 10");
}

TEST(TFRecordCompression, AnUncompressedReadOfACompressedFileSaysWhichTypeToPass) {
  TempDir dir;
  write_tfrecord_file(dir.file("g"), sample_records(), kGzip);
  EXPECT_THROW_WITH(read_tfrecord_file(dir.file("g")), DataLossError, "length CRC mismatch", "GZIP magic",
                    "compression_type=\"GZIP\"");
  write_tfrecord_file(dir.file("z"), sample_records(), kZlib);
  EXPECT_THROW_WITH(read_tfrecord_file(dir.file("z")), DataLossError, "length CRC mismatch", "zlib stream",
                    "compression_type=\"ZLIB\"");
  // The other way round: a plain file read as compressed is a corrupt stream.
  write_tfrecord_file(dir.file("p"), sample_records());
  EXPECT_THROW_WITH(read_tfrecord_file(dir.file("p"), kGzip), DataLossError, "corrupt GZIP stream", dir.file("p"));
  EXPECT_THROW_WITH(read_tfrecord_file(dir.file("p"), kZlib), DataLossError, "corrupt ZLIB stream", dir.file("p"));
}

TEST(TFRecordCompression, EveryTruncationAndCorruptionIsDataLossOrTheRightRecords) {
  TempDir dir;
  const std::vector<std::string> records = {"first record", "second", std::string(300, 'q')};
  for (const Format& f : kFormats) {
    SCOPED_TRACE(f.name);
    const std::string path = dir.file(f.name);
    write_tfrecord_file(path, records, f.options);
    const std::string good = slurp(path);
    for (std::size_t len = 0; len < good.size(); ++len) {
      spit(path, good.substr(0, len));
      SCOPED_TRACE("cut at " + std::to_string(len));
      EXPECT_THROW(read_tfrecord_file(path, f.options), DataLossError);
    }
    // A flipped byte: a corrupt stream, a failed checksum (deflate's or a record's), or — in the
    // gzip header's unchecked fields (4 bytes of mtime, extra flags, OS) and in the padding bits
    // after the last deflate block (one byte) — the same records. Never other records.
    int same = 0;
    for (std::size_t at = 0; at < good.size(); ++at) {
      std::string bad = good;
      bad[at] = static_cast<char>(bad[at] ^ 0x20);
      spit(path, bad);
      SCOPED_TRACE("byte " + std::to_string(at));
      try {
        EXPECT_EQ(read_tfrecord_file(path, f.options), records);
        ++same;
      } catch (const DataLossError&) {
      }
    }
    EXPECT_LE(same, f.options.compression == TFRecordCompression::kGzip ? 7 : 1);
    // Bytes after a ZLIB stream, or a second gzip member that is not one.
    spit(path, good + "junk");
    EXPECT_THROW(read_tfrecord_file(path, f.options), DataLossError);
  }
}

TEST(TFRecordCompression, ALengthNoCompressedBytesCouldHoldIsRefusedBeforeAllocation) {
  // A header claiming 2^40 bytes with a correct CRC, and nothing after it, deflated: ~30 bytes of
  // file can never inflate to a terabyte.
  std::string header(12, '\0');
  const std::uint64_t length = std::uint64_t{1} << 40;
  for (int i = 0; i < 8; ++i) header[static_cast<std::size_t>(i)] = static_cast<char>(length >> (8 * i));
  const std::uint32_t crc = masked_crc32c(header.data(), 8);
  for (int i = 0; i < 4; ++i) header[8 + static_cast<std::size_t>(i)] = static_cast<char>(crc >> (8 * i));
  TempDir dir;
  for (const Format& f : kFormats) {
    spit(dir.file("bomb"), deflate_with_zlib(header, f.options.compression == TFRecordCompression::kGzip));
    EXPECT_THROW_WITH(read_tfrecord_file(dir.file("bomb"), f.options), DataLossError, "1099511627776",
                      "more than the compressed bytes left could hold");
  }
  // A real 10 MiB record of zeros deflates to ~10 KB and still reads: the bound is not too tight.
  const std::string zeros(10 << 20, '\0');
  write_tfrecord_file(dir.file("zeros"), {zeros}, kGzip);
  EXPECT_LT(slurp(dir.file("zeros")).size(), std::size_t{64} << 10);
  EXPECT_EQ(read_tfrecord_file(dir.file("zeros"), kGzip), std::vector<std::string>{zeros});
}

TEST(TFRecordCompression, FlushMakesRecordsReadableBeforeClose) {
  TempDir dir;
  const std::string path = dir.file("open");
  TFRecordWriter w(path, kGzip);
  w.write("a");
  w.write("bb");
  w.flush();
  TFRecordReader r(path, kGzip);
  EXPECT_EQ(r.read(), "a");
  EXPECT_EQ(r.read(), "bb");
  // The stream has not ended: a reader cannot tell a writer still at work from a file cut short.
  EXPECT_THROW_WITH(r.read(), DataLossError, "does not end cleanly");
  w.write("ccc");
  w.close();
  EXPECT_EQ(read_tfrecord_file(path, kGzip), (std::vector<std::string>{"a", "bb", "ccc"}));
  EXPECT_THROW(w.write("d"), FailedPreconditionError);
}

TEST(TFRecordCompression, ConcatenatedGzipMembersReadAsOneFile) {
  TempDir dir;
  write_tfrecord_file(dir.file("a"), {"one", "two"}, kGzip);
  write_tfrecord_file(dir.file("b"), {"three"}, kGzip);
  spit(dir.file("ab"), slurp(dir.file("a")) + slurp(dir.file("b")));  // cat a.gz b.gz
  EXPECT_EQ(read_tfrecord_file(dir.file("ab"), kGzip), (std::vector<std::string>{"one", "two", "three"}));
  // ZLIB has no members: the second stream is trailing data.
  write_tfrecord_file(dir.file("c"), {"one"}, kZlib);
  spit(dir.file("cc"), slurp(dir.file("c")) + slurp(dir.file("c")));
  EXPECT_THROW(read_tfrecord_file(dir.file("cc"), kZlib), DataLossError);
}

TEST(TFRecordCompression, SeekAndRereadAfterAnErrorCountUncompressedBytes) {
  TempDir dir;
  const std::string path = dir.file("s");
  write_tfrecord_file(path, {"abc", "defgh", "ij"}, kZlib);
  TFRecordReader r(path, kZlib);
  EXPECT_EQ(r.read(), "abc");
  EXPECT_EQ(r.offset(), 12u + 3 + 4);
  EXPECT_EQ(r.read(), "defgh");
  r.seek(19);
  EXPECT_EQ(r.read(), "defgh");
  r.seek(0);
  EXPECT_EQ(r.read(), "abc");
  EXPECT_THROW_WITH(r.seek(1000), InvalidArgumentError, "past the end", "uncompressed bytes");
  EXPECT_EQ(r.read(), "abc") << "a failed seek leaves the reader at the start";
  // A corrupt last record: the reader stays at it, and reading again fails again.
  std::string plain;
  write_tfrecord_file(dir.file("plain"), {"abc", "defgh", "ij"});
  plain = slurp(dir.file("plain"));
  plain[plain.size() - 1] ^= 1;  // the last record's data CRC
  spit(path, deflate_with_zlib(plain, false));
  TFRecordReader bad(path, kZlib);
  EXPECT_EQ(bad.read(), "abc");
  EXPECT_EQ(bad.read(), "defgh");
  const std::uint64_t at = bad.offset();
  EXPECT_THROW_WITH(bad.read(), DataLossError, "data CRC mismatch", "offset " + std::to_string(at));
  EXPECT_THROW_WITH(bad.read(), DataLossError, "data CRC mismatch", "offset " + std::to_string(at));
  EXPECT_EQ(bad.offset(), at);
}

TEST(TFRecordCompression, DatasetReadsCompressedFilesAndResumesFromItsState) {
  TempDir dir;
  write_tfrecord_file(dir.file("0"), {"a", "bb"}, kGzip);
  write_tfrecord_file(dir.file("1"), {"ccc", "dddd"}, kGzip);
  auto build = [&] { return tfrecord_dataset({dir.file("0"), dir.file("1")}, kGzip); };
  testing::expect_resumes_after_every_element(build, 4);
  // Without the option the same files fail with the hint.
  auto plain = tfrecord_dataset({dir.file("0")}).make_iterator();
  EXPECT_THROW_WITH(plain.next(), DataLossError, "GZIP");
}

// TensorFlow writes both formats and chorus reads them; chorus writes both and TensorFlow's
// TFRecordDataset(compression_type=...) reads them.
TEST(TFRecordCompression, TensorFlowReadsAndWritesTheSameFiles) {
  std::string python;
  CHORUS_REQUIRE_INTEROP_PYTHON(python, "tensorflow");
  TempDir dir;
  for (const Format& f : kFormats)
    write_tfrecord_file(dir.file(std::string("chorus.") + f.name), sample_records(), f.options);
  write_tfrecord_file(dir.file("expected"), sample_records());
  spit(dir.file("check.py"), R"(import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf
d = sys.argv[1]
expected = list(tf.data.TFRecordDataset(os.path.join(d, "expected")).as_numpy_iterator())
for kind in ("ZLIB", "GZIP"):
    got = list(tf.data.TFRecordDataset(os.path.join(d, "chorus." + kind), compression_type=kind).as_numpy_iterator())
    assert got == expected, (kind, len(got), len(expected))
    with tf.io.TFRecordWriter(os.path.join(d, "tf." + kind), options=tf.io.TFRecordOptions(compression_type=kind)) as w:
        for r in expected:
            w.write(r)
print("ok")
)");
  const std::string cmd = "'" + python + "' " + dir.file("check.py") + " " + dir.path();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  for (const Format& f : kFormats) {
    SCOPED_TRACE(f.name);
    EXPECT_EQ(read_tfrecord_file(dir.file(std::string("tf.") + f.name), f.options), sample_records());
  }
}

}  // namespace
}  // namespace chorus::data
