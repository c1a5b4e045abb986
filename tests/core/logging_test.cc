#include "core/logging.h"

#include <gtest/gtest.h>

#include <stdlib.h>

#include <regex>
#include <thread>

#include "core/error.h"
#include "test_util.h"

namespace chorus {
namespace {

TEST(LoggingTest, ParsesLevels) {
  EXPECT_EQ(parse_log_level("debug"), LogLevel::kDebug);
  EXPECT_EQ(parse_log_level("INFO"), LogLevel::kInfo);
  EXPECT_EQ(parse_log_level("Warn"), LogLevel::kWarning);
  EXPECT_EQ(parse_log_level("3"), LogLevel::kError);
  EXPECT_THROW(parse_log_level("LOUD"), InvalidArgumentError);
}

TEST(LoggingTest, LineHasTimestampLevelFileAndContext) {
  testing::LogCapture capture;
  set_log_level(LogLevel::kInfo);
  CHORUS_LOG(INFO) << "hello " << 42;
  {
    ScopedLogContext ctx(/*rank=*/1, /*replica=*/0);
    CHORUS_LOG(WARNING) << "inside";
  }
  CHORUS_LOG(INFO) << "after";
  auto lines = capture.lines();
  ASSERT_EQ(lines.size(), 3u);
  std::regex first(R"(^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6} I (\[rank \d+\] )?logging_test\.cc:\d+\] hello 42$)");
  EXPECT_TRUE(std::regex_match(lines[0], first)) << lines[0];
  EXPECT_NE(lines[1].find(" W [rank 1 replica 0] logging_test.cc"), std::string::npos) << lines[1];
  EXPECT_EQ(lines[2].find("replica"), std::string::npos) << lines[2];  // context restored
}

TEST(LoggingTest, LevelFiltersAndSkipsFormatting) {
  testing::LogCapture capture;
  set_log_level(LogLevel::kWarning);
  int evaluated = 0;
  CHORUS_LOG(INFO) << "hidden " << ++evaluated;
  CHORUS_LOG(ERROR) << "shown";
  EXPECT_EQ(evaluated, 0);
  ASSERT_EQ(capture.lines().size(), 1u);
  set_log_level(LogLevel::kInfo);
}

TEST(LoggingTest, ContextIsPerThread) {
  ScopedLogContext ctx(-1, 3);
  EXPECT_EQ(log_context().replica, 3);
  EXPECT_NE(log_context_prefix().find("replica 3] "), std::string::npos);
  int other = 0;
  std::thread t([&] { other = log_context().replica; });
  t.join();
  EXPECT_EQ(other, -1);
}

TEST(LoggingTest, RankComesFromMpirunWhenNotSetByAStrategy) {
  // launcher_rank() is read once per process, so the check runs in a freshly started copy of this
  // binary (the "threadsafe" death-test style re-executes it).
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
        setenv("OMPI_COMM_WORLD_RANK", "2", 1);
        bool ok = log_context_prefix() == "[rank 2] ";
        ScopedLogContext ctx(-1, 1);
        ok = ok && log_context_prefix() == "[rank 2 replica 1] ";
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace chorus
