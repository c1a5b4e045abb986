#include <chorus/core/logging.h>

#include <gtest/gtest.h>

#include <stdlib.h>

#include <regex>
#include <thread>

#include "test_util.h"
#include <chorus/core/env.h>
#include <chorus/core/error.h>

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

// torchrun's variables (chorus-run --nproc-per-node sets them): the same rank, read the same way.
TEST(LoggingTest, RankComesFromTorchrunsVariablesWithoutMpirun) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        unsetenv("OMPI_COMM_WORLD_SIZE");
        unsetenv("PMI_SIZE");
        setenv("WORLD_SIZE", "3", 1);
        setenv("RANK", "1", 1);
        std::exit(env::launcher_rank() == 1 && log_context_prefix() == "[rank 1] " ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        unsetenv("OMPI_COMM_WORLD_SIZE");
        unsetenv("PMI_SIZE");
        setenv("WORLD_SIZE", "1", 1);  // one process: no rank
        setenv("RANK", "0", 1);
        std::exit(!env::launcher_rank() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// Workers no launcher numbered (TF_CONFIG): the rank a multi-worker strategy registers
// (env::set_process_rank) names the lines, and wins over the launcher's; nullopt goes back to it.
TEST(LoggingTest, RankRegisteredByTheStrategyWhenNoLauncherNumberedTheWorkers) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE"}) unsetenv(v);
        bool ok = !env::process_rank() && log_context_prefix().empty();
        env::set_process_rank(2);
        ok = ok && env::process_rank() == 2 && log_context_prefix() == "[rank 2] ";
        env::set_process_rank(std::nullopt);
        ok = ok && !env::process_rank() && log_context_prefix().empty();
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// TensorFlow's variables, without CHORUS_LOG_LEVEL: TF_CPP_MIN_LOG_LEVEL hides the n lowest
// severities, TF_CPP_MAX_VLOG_LEVEL >= 1 shows DEBUG lines (INFO-severity VLOGs in TF, so a
// min level >= 1 hides them too); CHORUS_LOG_LEVEL wins over both; bad values are ignored.
TEST(LoggingTest, TensorFlowsLogLevelVariablesAreHonoured) {
  struct Case {
    const char *min, *vlog, *chorus;
    LogLevel want;
  };
  const Case cases[] = {
      {nullptr, nullptr, nullptr, LogLevel::kInfo}, {"0", nullptr, nullptr, LogLevel::kInfo},
      {"1", nullptr, nullptr, LogLevel::kWarning},  {"2", nullptr, nullptr, LogLevel::kError},
      {"3", nullptr, nullptr, LogLevel::kNone},     {nullptr, "1", nullptr, LogLevel::kDebug},
      {"0", "2", nullptr, LogLevel::kDebug},        {"1", "1", nullptr, LogLevel::kWarning},
      {nullptr, "0", nullptr, LogLevel::kInfo},     {"2", nullptr, "DEBUG", LogLevel::kDebug},
      {"7", nullptr, nullptr, LogLevel::kInfo},     {"abc", "x", nullptr, LogLevel::kInfo},
      {"", nullptr, nullptr, LogLevel::kInfo},
  };
  auto put = [](const char* name, const char* value) {
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  };
  for (const Case& c : cases) {
    put("TF_CPP_MIN_LOG_LEVEL", c.min);
    put("TF_CPP_MAX_VLOG_LEVEL", c.vlog);
    put("CHORUS_LOG_LEVEL", c.chorus);
    EXPECT_EQ(log_level_from_environment(), c.want) << "TF_CPP_MIN_LOG_LEVEL=" << (c.min ? c.min : "(unset)")
                                                    << " TF_CPP_MAX_VLOG_LEVEL=" << (c.vlog ? c.vlog : "(unset)")
                                                    << " CHORUS_LOG_LEVEL=" << (c.chorus ? c.chorus : "(unset)");
  }
  unsetenv("TF_CPP_MIN_LOG_LEVEL");
  unsetenv("TF_CPP_MAX_VLOG_LEVEL");
  unsetenv("CHORUS_LOG_LEVEL");
}

// TF_CPP_MIN_LOG_LEVEL=3 silences even errors (TF's meaning), in a fresh process: the level is
// read once, at the first log line.
TEST(LoggingTest, MinLogLevelThreeSilencesEverything) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("TF_CPP_MIN_LOG_LEVEL", "3", 1);
        unsetenv("CHORUS_LOG_LEVEL");
        CHORUS_LOG(ERROR) << "must not appear";
        std::exit(log_level() == LogLevel::kNone ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "^$");
  EXPECT_EXIT(
      {
        setenv("TF_CPP_MIN_LOG_LEVEL", "1", 1);
        unsetenv("CHORUS_LOG_LEVEL");
        CHORUS_LOG(INFO) << "hidden info";
        CHORUS_LOG(WARNING) << "shown warning";
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "shown warning");
}

}  // namespace
}  // namespace chorus
