// The data readers given what is not a data file (issue 22): a FIFO, a directory or a device is
// refused with InvalidArgumentError naming it — before, a FIFO as a TFRecord file blocked forever
// and /dev/zero as an IDX file was read forever — and an IDX header never makes the reader
// allocate more than the file holds. Label: hostile.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <future>

#include "core/error.h"
#include "data/mnist.h"
#include "data/tfrecord.h"
#include "tests/data/data_test_util.h"

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

}  // namespace
}  // namespace chorus::data
