#include "core/logging.h"

#include <gtest/gtest.h>

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
  std::regex first(R"(^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6} I logging_test\.cc:\d+\] hello 42$)");
  EXPECT_TRUE(std::regex_match(lines[0], first)) << lines[0];
  EXPECT_NE(lines[1].find(" W [rank 1 replica 0] logging_test.cc"), std::string::npos) << lines[1];
  EXPECT_EQ(lines[2].find("[rank"), std::string::npos) << lines[2];
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
  EXPECT_EQ(log_context_prefix(), "[replica 3] ");
  std::string other;
  std::thread t([&] { other = log_context_prefix(); });
  t.join();
  EXPECT_EQ(other, "");
}

}  // namespace
}  // namespace chorus
