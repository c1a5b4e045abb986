// The async save's writer thread (checkpoint/async_writer.h): it runs at nice CHORUS_ASYNC_SAVE_NICE
// (19 by default) so that training keeps the cores, and a bad value is the caller's error.
#include <chorus/checkpoint/async_writer.h>

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>
#include <string>

#include "tests/core/test_util.h"
#include <chorus/core/error.h>

namespace chorus::train::internal {
namespace {

// The nice value the writer thread ran its job at.
int writer_nice() {
  AsyncWriter writer;
  int seen = -100;
  writer.start([&] {
    errno = 0;
    seen = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()));
    if (errno != 0) throw std::runtime_error("getpriority failed");
  });
  writer.wait();
  return seen;
}

int caller_nice() { return ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid())); }

TEST(AsyncWriterTest, TheWriteRunsAtNice19ByDefault) {
  ::unsetenv("CHORUS_ASYNC_SAVE_NICE");
  EXPECT_EQ(writer_nice(), 19);
  EXPECT_EQ(caller_nice(), caller_nice());  // the caller's own priority is untouched
}

TEST(AsyncWriterTest, ZeroKeepsTheCallersPriority) {
  const int mine = caller_nice();
  ::setenv("CHORUS_ASYNC_SAVE_NICE", "0", 1);
  EXPECT_EQ(writer_nice(), mine);
  ::setenv("CHORUS_ASYNC_SAVE_NICE", "19", 1);
  EXPECT_EQ(writer_nice(), 19);
}

TEST(AsyncWriterTest, ABadValueIsTheCallersInvalidArgumentError) {
  for (const char* bad : {"20", "-1", "abc", "", "5 ", "1e1"}) {
    ::setenv("CHORUS_ASYNC_SAVE_NICE", bad, 1);
    AsyncWriter writer;
    bool ran = false;
    EXPECT_THROW_WITH(writer.start([&] { ran = true; }), InvalidArgumentError, "CHORUS_ASYNC_SAVE_NICE");
    EXPECT_FALSE(writer.in_flight()) << bad;
    EXPECT_FALSE(ran) << bad;
  }
  ::unsetenv("CHORUS_ASYNC_SAVE_NICE");
}

}  // namespace
}  // namespace chorus::train::internal
