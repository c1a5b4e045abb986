// The data readers given what is not a data file (issue 22): a FIFO, a directory or a device is
// refused with InvalidArgumentError naming it — before, a FIFO as a TFRecord file blocked forever
// and /dev/zero as an IDX file was read forever — and an IDX header never makes the reader
// allocate more than the file holds; compressed TFRecords: a device is refused too, and a file of
// deflated zeros that never ends a record is a DataLossError within seconds, not a hang or an
// allocation of the length its header claims. Label: hostile.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <future>

#include "tests/data/data_test_util.h"
#include <chorus/core/crc32c.h>
#include <chorus/core/error.h>
#include <chorus/data/mnist.h>
#include <chorus/data/tfrecord.h>

namespace chorus::data {
namespace {

using chorus::testing::TempDir;

// Runs f on another thread and fails (instead of hanging the suite) if it takes over 10 s.
template <typename F>
std::string error_within_10s(F f) {
  auto fut = std::async(std::launch::async, [f]() -> std::string {
    try {
      f();
    } catch (const InvalidArgumentError& e) {
      return e.what();
    } catch (const std::exception& e) {
      return std::string("wrong error class: ") + e.what();
    }
    return "no error";
  });
  if (fut.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "blocked for 10 s";
    std::_Exit(1);  // the reader thread cannot be cancelled; end the process rather than hang
  }
  return fut.get();
}

TEST(ReadersHostile, AFifoIsRefusedNotWaitedOn) {
  TempDir dir;
  const std::string fifo = dir.file("records");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  std::string msg = error_within_10s([&] { TFRecordReader r(fifo); });
  EXPECT_NE(msg.find("FIFO"), std::string::npos) << msg;
  msg = error_within_10s([&] { read_idx(fifo); });
  EXPECT_NE(msg.find("FIFO"), std::string::npos) << msg;
}

TEST(ReadersHostile, DevicesAndDirectoriesAreRefused) {
  TempDir dir;
  // Compressed readers open files the same way: /dev/zero as a GZIP TFRecord would inflate nothing
  // forever; it is refused before the first byte.
  std::string gz =
      error_within_10s([&] { TFRecordReader r("/dev/zero", {.compression = TFRecordCompression::kGzip}); });
  EXPECT_NE(gz.find("'/dev/zero' is a character device"), std::string::npos) << gz;
  std::string msg = error_within_10s([&] { read_idx("/dev/zero"); });
  EXPECT_NE(msg.find("'/dev/zero' is a character device"), std::string::npos) << msg;
  msg = error_within_10s([&] { TFRecordReader r(dir.path()); });
  EXPECT_NE(msg.find("is a directory"), std::string::npos) << msg;
}

TEST(ReadersHostile, AnIdxHeaderCannotPromiseMoreThanTheFile) {
  TempDir dir;
  const std::string img = dir.file("img");
  // rank 1, 2^31 elements promised, 8 bytes present.
  std::string bytes("\0\0\x08\x01\x80\0\0\0", 8);
  std::ofstream(img, std::ios::binary) << bytes;
  try {
    read_idx(img);
    ADD_FAILURE() << "accepted";
  } catch (const DataLossError& e) {
    EXPECT_NE(std::string(e.what()).find("promises more elements than the file's 8 bytes hold"), std::string::npos)
        << e.what();
  }
}

// Issue 40, item 7: a decompression bomb. A 4 MB GZIP file holding one record whose length field
// said 4 GiB (with a valid length CRC) reached 4.36 GB of RSS before its DataLossError; the only
// bound was "length <= 1032 x the compressed bytes left". Records now have a ceiling,
// TFRecordOptions::max_record_bytes (256 MiB by default), checked before anything is allocated,
// and a record grows only as its bytes arrive.

// Peak resident memory of this process so far, and its resident memory now, in bytes. (CTest runs
// each TEST in its own process, so the peak starts small.)
std::uint64_t peak_rss() {
  struct rusage u {};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<std::uint64_t>(u.ru_maxrss) * 1024;
}
std::uint64_t current_rss() {
  long pages = 0, resident = 0;
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f != nullptr) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<std::uint64_t>(resident) * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

// Runs f and fails if the process's peak resident memory rose more than 64 MiB above what it
// held when f started (a record of the claimed size, or half of it, was allocated and touched).
template <typename F>
void expect_no_memory_growth(F f) {
  const std::uint64_t before = std::max(peak_rss(), current_rss() + (std::uint64_t{64} << 20));
  f();
  const std::uint64_t after = peak_rss();
  EXPECT_LE(after, before) << "peak RSS rose to " << (after >> 20) << " MiB (allowed: " << (before >> 20) << " MiB)";
}

std::string le_bytes(std::uint64_t v, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
  return s;
}

// A TFRecord header for `length` with a correct length CRC.
std::string record_header(std::uint64_t length) {
  const std::string len = le_bytes(length, 8);
  return len + le_bytes(masked_crc32c(len.data(), 8), 4);
}

// Writes a GZIP file holding `header`, then `body` bytes of zeros (deflated one MiB at a time, so
// the test itself never holds them), then `footer`, without ever holding the body in memory.
// With `incompressible`, the body is pseudo-random bytes instead (the compressed file is then as
// large as the body).
void write_gzip_stream(const std::string& path, const std::string& header, std::uint64_t body,
                       const std::string& footer, bool incompressible = false) {
  z_stream z{};
  ASSERT_EQ(deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, 31, 9, Z_DEFAULT_STRATEGY), Z_OK);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::vector<unsigned char> out(1 << 20);
  const auto feed = [&](const void* data, std::size_t n, int flush) {
    z.next_in = static_cast<Bytef*>(const_cast<void*>(data));
    z.avail_in = static_cast<uInt>(n);
    do {
      z.next_out = out.data();
      z.avail_out = static_cast<uInt>(out.size());
      deflate(&z, flush);
      std::fwrite(out.data(), 1, out.size() - z.avail_out, f);
    } while (z.avail_out == 0);
  };
  feed(header.data(), header.size(), Z_NO_FLUSH);
  std::vector<unsigned char> chunk(1 << 20, 0);
  std::uint64_t x = 88172645463325252ull;
  for (std::uint64_t done = 0; done < body; done += chunk.size()) {
    if (incompressible)
      for (auto& c : chunk) c = static_cast<unsigned char>((x ^= x << 13, x ^= x >> 7, x ^= x << 17) >> 32);
    feed(chunk.data(), static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), body - done)), Z_NO_FLUSH);
  }
  feed(footer.data(), footer.size(), Z_FINISH);
  deflateEnd(&z);
  std::fclose(f);
}

// The masked CRC-32C of `n` zero bytes, as a record's footer.
std::string zeros_footer(std::uint64_t n) {
  std::vector<char> zeros(1 << 20, 0);
  std::uint32_t crc = 0;
  for (std::uint64_t done = 0; done < n; done += zeros.size())
    crc = crc32c(zeros.data(), static_cast<std::size_t>(std::min<std::uint64_t>(zeros.size(), n - done)), crc);
  return le_bytes(mask_crc32c(crc), 4);
}

template <typename Exc, typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Exc& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong error class: ") + e.what();
  }
  return "no error";
}

void expect_has(const std::string& msg, const std::vector<std::string>& parts) {
  for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

// A valid GZIP TFRecord of one 300 MiB record of zeros (~300 KB on disk): over the default
// ceiling. Before, chorus allocated and returned it (peak RSS + 300 MiB).
TEST(ReadersHostile, AGzipRecordOverTheDefaultCeilingIsRefusedBeforeAllocation) {
  TempDir dir;
  const std::string path = dir.file("bomb.gz");
  const std::uint64_t length = std::uint64_t{300} << 20;
  write_gzip_stream(path, record_header(length), length, zeros_footer(length));
  const TFRecordOptions gzip{.compression = TFRecordCompression::kGzip};
  std::string msg;
  expect_no_memory_growth([&] { msg = error_of<ResourceExhaustedError>([&] { read_tfrecord_file(path, gzip); }); });
  expect_has(msg, {"RESOURCE_EXHAUSTED", "offset 0", path, "314572800 bytes",
                   "TFRecordOptions::max_record_bytes = 268435456 (256 MiB)", ".max_record_bytes = 314572800"});
  // A reader stays at the record: reading again refuses again, without allocating either.
  TFRecordReader reader(path, gzip);
  expect_no_memory_growth([&] {
    EXPECT_THROW(reader.read(), ResourceExhaustedError);
    EXPECT_THROW(reader.read(), ResourceExhaustedError);
  });
  EXPECT_EQ(reader.offset(), 0u);
}

// The ceiling lowered: a 200 MiB claim, well within what the compressed bytes could hold.
TEST(ReadersHostile, ALoweredCeilingRefusesTheRecordAndNamesItself) {
  TempDir dir;
  const std::string path = dir.file("claims.gz");
  const std::uint64_t length = std::uint64_t{200} << 20;
  write_gzip_stream(path, record_header(length), length, zeros_footer(length));
  std::string msg;
  expect_no_memory_growth([&] {
    msg = error_of<ResourceExhaustedError>(
        [&] { read_tfrecord_file(path, {.compression = TFRecordCompression::kGzip, .max_record_bytes = 100000}); });
  });
  expect_has(msg, {"209715200 bytes", "TFRecordOptions::max_record_bytes = 100000;"});
}

// Under the ceiling, a record claiming 200 MiB whose stream ends after 2 MiB of (incompressible)
// data: a DataLossError, the record having grown only with the 2 MiB that arrived.
TEST(ReadersHostile, AClaimUnderTheCeilingGrowsOnlyWithTheBytesThatArrive) {
  TempDir dir;
  const std::string path = dir.file("short.gz");
  write_gzip_stream(path, record_header(std::uint64_t{200} << 20), std::uint64_t{2} << 20, "", true);
  std::string msg;
  expect_no_memory_growth([&] {
    msg = error_of<DataLossError>([&] { read_tfrecord_file(path, {.compression = TFRecordCompression::kGzip}); });
  });
  expect_has(msg, {"truncated record at offset 0"});
}

// Uncompressed, the same ceiling: a sparse file of one 300 MiB record of zeros (no disk used).
// Before, chorus allocated the 300 MiB up front and returned the record.
TEST(ReadersHostile, AnUncompressedRecordOverTheCeilingIsRefusedBeforeAllocation) {
  TempDir dir;
  const std::string path = dir.file("sparse");
  const std::uint64_t length = std::uint64_t{300} << 20;
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    const std::string header = record_header(length), footer = zeros_footer(length);
    std::fwrite(header.data(), 1, header.size(), f);
    ASSERT_EQ(std::fseek(f, static_cast<long>(length), SEEK_CUR), 0);
    std::fwrite(footer.data(), 1, footer.size(), f);
    std::fclose(f);
  }
  const std::string small = dir.file("small");
  write_tfrecord_file(small, {"after"});
  std::string msg;
  expect_no_memory_growth([&] { msg = error_of<ResourceExhaustedError>([&] { read_tfrecord_file(path); }); });
  expect_has(msg, {"offset 0", path, "314572800 bytes", "max_record_bytes = 268435456"});
  // In a dataset the error comes once; the iterator goes on with the next file, then ends.
  auto it = tfrecord_dataset({path, small}).make_iterator();
  expect_no_memory_growth([&] { EXPECT_THROW(it.next(), ResourceExhaustedError); });
  auto e = it.next();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)[0].item<std::string>(), "after");
  EXPECT_FALSE(it.next().has_value());
  EXPECT_FALSE(it.next().has_value());
}

// Issue 40: an IDX header of 300x0x0 was said to "promise more elements" than its 16-byte file
// held. A dimension of 0 is legal (numpy reads such a buffer as shape (300, 0, 0)): the file is 300
// empty images; what is truly more than the file holds still gets that message, with true values.
TEST(ReadersHostile, AnIdxDimensionOfZeroIsAnEmptySetNotAFalsePromise) {
  TempDir dir;
  const std::string img = dir.file("img");
  std::ofstream(img, std::ios::binary) << std::string("\0\0\x08\x03\0\0\x01\x2c\0\0\0\0\0\0\0\0", 16);
  const Tensor t = read_idx(img);
  EXPECT_EQ(t.shape(), (Shape{300, 0, 0}));
  EXPECT_EQ(t.num_elements(), 0);
  // 0x0x300 too: the zero comes first.
  std::ofstream(img, std::ios::binary) << std::string("\0\0\x08\x03\0\0\0\0\0\0\0\0\0\0\x01\x2c", 16);
  EXPECT_EQ(read_idx(img).shape(), (Shape{0, 0, 300}));
  // 300x0x0 with a data byte after it: trailing bytes, named as such.
  std::ofstream(img, std::ios::binary) << std::string("\0\0\x08\x03\0\0\x01\x2c\0\0\0\0\0\0\0\0x", 17);
  const std::string msg = error_of<DataLossError>([&] { read_idx(img); });
  expect_has(msg, {"has 17 bytes but its header says 16", "trailing bytes"});
}

// A GZIP "TFRecord" whose header (with a correct CRC) claims 100 bytes more than the 64 MiB of
// deflated zeros after it (~64 KB on disk): within what the compressed bytes could hold, so the
// read starts; the stream then ends inside the record and the read is a DataLossError, the record
// having grown only with the bytes that arrived. (Claims beyond the bound: tfrecord_compression_test.)
TEST(ReadersHostile, ACompressedRecordLongerThanItsStreamEndsAsDataLoss) {
  TempDir dir;
  std::string raw(12, '\0');
  const std::uint64_t length = (std::uint64_t{64} << 20) + 100;
  for (int i = 0; i < 8; ++i) raw[static_cast<std::size_t>(i)] = static_cast<char>(length >> (8 * i));
  const std::uint32_t crc = masked_crc32c(raw.data(), 8);
  for (int i = 0; i < 4; ++i) raw[8 + static_cast<std::size_t>(i)] = static_cast<char>(crc >> (8 * i));
  raw.resize(12 + (std::size_t{64} << 20), '\0');
  const std::string path = dir.file("claims");
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    gzFile gz = gzdopen(::dup(fileno(f)), "wb");
    ASSERT_NE(gz, nullptr);
    ASSERT_EQ(gzwrite(gz, raw.data(), static_cast<unsigned>(raw.size())), static_cast<int>(raw.size()));
    ASSERT_EQ(gzclose(gz), Z_OK);
    std::fclose(f);
  }
  auto fut = std::async(std::launch::async, [&]() -> std::string {
    try {
      read_tfrecord_file(path, {.compression = TFRecordCompression::kGzip});
    } catch (const DataLossError& e) {
      return e.what();
    } catch (const std::exception& e) {
      return std::string("wrong error class: ") + e.what();
    }
    return "no error";
  });
  ASSERT_EQ(fut.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "hung";
  const std::string msg = fut.get();
  EXPECT_NE(msg.find("truncated record at offset 0"), std::string::npos) << msg;
}

}  // namespace
}  // namespace chorus::data
