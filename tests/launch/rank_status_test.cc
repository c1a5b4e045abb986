// How chorus-run learns how each rank ended (launch/rank_status.h): the record format, the verdict
// over a job, and the wrapper itself run in a forked child (it ends the way its program ended).
#include <chorus/launch/rank_status.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include <chorus/launch/process.h>

namespace chorus::launch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

TEST(RankStatus, RecordsRoundTrip) {
  const RankExit three{"1", false, 3};
  EXPECT_EQ(format_exit_record(three), "exit 3\n");
  const RankExit killed{"0", true, 9};
  EXPECT_EQ(format_exit_record(killed), "signal 9\n");
  const auto back = parse_exit_record("0", "signal 9\n");
  ASSERT_TRUE(back);
  EXPECT_TRUE(back->signaled);
  EXPECT_EQ(back->code, 9);
  EXPECT_EQ(back->status(), 137);
  EXPECT_EQ(killed.describe(), "rank 0 was killed by signal 9 (SIGKILL)");
  EXPECT_EQ(three.describe(), "rank 1 exited with status 3");
  for (const char* bad : {"", "exit", "exit x", "exit 300", "signal -1", "quit 1", "exit 3 4"})
    EXPECT_FALSE(parse_exit_record("0", bad)) << bad;
}

TEST(RankStatus, AFailedRankFailsTheJobWhenMpirunSaysZero) {
  // mpirun --enable-recovery: it exits 0 although rank 1 was killed and rank 0 failed.
  const auto v = judge_job(0, {{"0", false, 1}, {"1", true, 9}}, 2, true);
  EXPECT_EQ(v.exit_status, 1) << "the first failed rank's status";
  EXPECT_THAT(v.lines, ElementsAre("chorus-run: rank 0 exited with status 1",
                                   "chorus-run: rank 1 was killed by signal 9 (SIGKILL)",
                                   HasSubstr("mpirun exited with status 0 although the job failed")));
  EXPECT_EQ(judge_job(0, {{"0", false, 0}, {"1", true, 9}}, 2, true).exit_status, 137);
}

TEST(RankStatus, MpirunsOwnFailureWins) {
  const auto v = judge_job(5, {{"0", false, 0}, {"1", false, 3}}, 2, true);
  EXPECT_EQ(v.exit_status, 5);
  EXPECT_THAT(v.lines, ElementsAre("chorus-run: rank 1 exited with status 3"));
}

TEST(RankStatus, AllGoodIsZeroAndSilent) {
  const auto v = judge_job(0, {{"1", false, 0}, {"0", false, 0}}, 2, true);
  EXPECT_EQ(v.exit_status, 0);
  EXPECT_TRUE(v.lines.empty());
}

TEST(RankStatus, AMissingRecordIsAFailureOnlyWhenEveryRankCouldWriteOne) {
  const auto trusted = judge_job(0, {{"0", false, 0}}, 3, true);
  EXPECT_EQ(trusted.exit_status, 1);
  EXPECT_THAT(trusted.lines[0], HasSubstr("ranks 1, 2 left no exit status"));
  const auto untrusted = judge_job(0, {{"0", false, 0}}, 3, false);
  EXPECT_EQ(untrusted.exit_status, 0);
  EXPECT_TRUE(untrusted.lines.empty());
}

class RankWrapper : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_directory("chorus-rank-status-test-"); }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs the wrapper in a child process (as mpirun would start it) with OMPI_COMM_WORLD_RANK=rank;
  // returns the child's wait status.
  int wrap(const std::string& rank, const std::vector<std::string>& program) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      setenv("OMPI_COMM_WORLD_RANK", rank.c_str(), 1);
      ::_exit(run_rank_and_record(dir_, program));
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return status;
  }
  std::string dir_;
};

TEST_F(RankWrapper, RecordsTheExitStatusAndExitsWithIt) {
  const int status = wrap("3", {"sh", "-c", "exit 7"});  // "sh" through PATH, as mpirun would find it
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);
  const auto records = read_exit_records(dir_);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].rank, "3");
  EXPECT_FALSE(records[0].signaled);
  EXPECT_EQ(records[0].code, 7);
}

TEST_F(RankWrapper, AKilledProgramIsRecordedAndTheWrapperDiesOfTheSameSignal) {
  const int status = wrap("1", {"/bin/sh", "-c", "kill -9 $$"});
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), 9);
  const auto records = read_exit_records(dir_);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_TRUE(records[0].signaled);
  EXPECT_EQ(records[0].code, 9);
}

TEST_F(RankWrapper, SignalsToTheWrapperReachTheProgram) {
  // mpirun ends a job with SIGTERM to each rank's process, which is the wrapper here.
  const std::string trapped = dir_ + "/trapped";
  const pid_t pid = ::fork();
  if (pid == 0) {
    setenv("OMPI_COMM_WORLD_RANK", "0", 1);
    ::_exit(run_rank_and_record(
        dir_, {"/bin/sh", "-c", "trap 'exit 42' TERM; : > \"$0\"; while :; do sleep 0.05; done", trapped}));
  }
  // The signal goes once the shell has set its trap (it then creates `trapped`), not after a fixed
  // sleep that a loaded machine can outlast: a SIGTERM before the trap ends the shell with 143.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!fs::exists(trapped)) {
    ASSERT_LT(std::chrono::steady_clock::now(), until) << "the shell did not set its trap within 30 s";
    ASSERT_EQ(::waitpid(pid, nullptr, WNOHANG), 0) << "the wrapper ended before its shell set the trap";
    ::usleep(5 * 1000);
  }
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 42);
  const auto records = read_exit_records(dir_);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].code, 42);
}

TEST_F(RankWrapper, AProgramThatCannotStartIs127) {
  const int status = wrap("0", {"./no-such-program-anywhere"});
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 127);
  EXPECT_EQ(read_exit_records(dir_).at(0).code, 127);
}

TEST_F(RankWrapper, RecordsAreOrderedByRankAndATornOneIsAFailure) {
  for (const char* r : {"10", "2", "0"}) std::ofstream(dir_ + "/rank-" + r) << "exit 0\n";
  std::ofstream(dir_ + "/rank-5") << "ex";
  std::ofstream(dir_ + "/.rank-6.123") << "exit 0\n";  // a temporary file: not a record
  std::vector<std::string> ranks;
  for (const auto& r : read_exit_records(dir_)) ranks.push_back(r.rank);
  EXPECT_THAT(ranks, ElementsAre("0", "2", "5", "10"));
  EXPECT_FALSE(read_exit_records(dir_)[2].ok());
}

}  // namespace
}  // namespace chorus::launch
