// The data readers given what is not a data file (issue 22): a FIFO, a directory or a device is
// refused with InvalidArgumentError naming it — before, a FIFO as a TFRecord file blocked forever
// and /dev/zero as an IDX file was read forever — and an IDX header never makes the reader
// allocate more than the file holds; compressed TFRecords: a device is refused too, and a file of
// deflated zeros that never ends a record is a DataLossError within seconds, not a hang or an
// allocation of the length its header claims. Label: hostile.
#include <gtest/gtest.h>
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
