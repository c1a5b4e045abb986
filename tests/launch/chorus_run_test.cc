// The chorus-run executable: the printed command, exit statuses and messages (no MPI job runs here;
// chorus_run_mpi_test.cc starts real ones).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/launch/tool_runner.h"
#include <chorus/launch/build_info.h>
#include <chorus/launch/process.h>

namespace chorus::launch {
namespace {

using ::testing::HasSubstr;
using testing::run_tool;

const std::string kTool = CHORUS_RUN_PATH;

// chorus-run's own absolute path, as it writes it into the rank wrapper.
std::string self_path() { return std::filesystem::canonical(kTool).string(); }

TEST(ChorusRun, DryRunPrintsOneQuotedLine) {
  // A controlled environment: exactly one variable chorus forwards besides PATH.
  const auto r = run_tool({kTool, "--dry-run", "-np", "2", "-H", "a:1,b:1", "--", "./x", "--flag", "a b"},
                          std::vector<std::string>{"PATH=/usr/bin:/bin", "CHORUS_LAUNCH_TEST=1", "HOME=/root"});
  const std::string root = ::geteuid() == 0 ? " --allow-run-as-root" : "";
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "mpirun -np 2 -H a:1,b:1 --bind-to none" + root + " -x CHORUS_LAUNCH_TEST -x PATH -- ./x --flag 'a b'\n");
  EXPECT_EQ(r.err, "");
}

TEST(ChorusRun, DryRunOnThisMachineShowsTheRankWrapperAndTheTimeout) {
  // Without -H every rank runs here: each is wrapped to record how it ended (launch/rank_status.h).
  const auto r =
      run_tool({kTool, "--dry-run", "-np", "2", "--enable-recovery", "--collective-timeout", "20", "--", "./x", "a b"},
               std::vector<std::string>{"PATH=/usr/bin:/bin", "TMPDIR=/scratch"});
  const std::string root = ::geteuid() == 0 ? " --allow-run-as-root" : "";
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "mpirun -np 2 --bind-to none" + root +
                       " --enable-recovery -x CHORUS_COLLECTIVE_TIMEOUT=20 -x PATH -- " + self_path() +
                       " --record-exit-status /scratch/chorus-run-XXXXXX -- ./x 'a b'\n");
  const auto shared = run_tool({kTool, "--dry-run", "-np", "2", "-H", "a,b", "--status-dir", "/nfs/s", "--", "./x"},
                               std::vector<std::string>{"PATH=/bin"});
  EXPECT_THAT(shared.out, HasSubstr(" -- " + self_path() + " --record-exit-status /nfs/s -- ./x\n"));
  const auto bad = run_tool({kTool, "--dry-run", "-np", "2", "--collective-timeout", "never", "--", "./x"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--collective-timeout='never' is not a valid timeout"));
}

TEST(ChorusRun, NpDefaultsToTheSlotsOfTheHosts) {
  const auto r =
      run_tool({kTool, "--dry-run", "-H", "a:3", "--bind-to", "socket", "prog"}, std::vector<std::string>{"PATH=/bin"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("mpirun -np 3 -H a:3 --bind-to socket"));
  EXPECT_THAT(r.out, HasSubstr(" -x PATH -- prog\n"));
}

TEST(ChorusRun, HelpExitsZero) {
  const auto r = run_tool({kTool, "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("usage: chorus-run"));
}

struct BadLine {
  std::vector<std::string> args;
  const char* message;
};

TEST(ChorusRun, BadCommandLinesExitTwoNamingTheProblem) {
  const BadLine cases[] = {
      {{"-np", "0", "--", "./x"}, "-np must be a positive number of processes, got 0"},
      {{"-np", "-2", "--", "./x"}, "-np must be a positive number of processes, got -2"},
      {{"-np", "4", "-H", "a,b", "--", "./x"}, "-np 4 does not match the 2 slots of -H"},
      {{"-np", "2", "-H", "a:0,b", "--", "./x"}, "slots must be >= 1, got 0"},
      {{"-np", "2", "-H", "a,,b", "--", "./x"}, "host entry 2 of -H 'a,,b' is empty"},
      {{"-np", "2"}, "no program to run"},
      {{"--", "./x"}, "-np is missing"},
      {{"--bogus", "./x"}, "unknown option '--bogus'"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv{kTool, "--dry-run"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    const auto r = run_tool(argv);
    EXPECT_EQ(r.exit_code, 2) << c.message;
    EXPECT_THAT(r.err, HasSubstr(c.message));
    EXPECT_THAT(r.err, HasSubstr("chorus-run --help"));
    EXPECT_EQ(r.out, "");
  }
}

TEST(ChorusRun, MissingMpirunNamesThePackage) {
  const auto r = run_tool({kTool, "-np", "1", "--", "/bin/true"}, std::vector<std::string>{"PATH=/nonexistent"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_THAT(r.err, HasSubstr("mpirun was not found on PATH (/nonexistent)"));
  EXPECT_THAT(r.err, HasSubstr("apt-get install openmpi-bin"));
}

TEST(ChorusRun, MissingLocalProgramIsNamed) {
  const char* path = std::getenv("PATH");
  if (!find_executable("mpirun", path ? path : "")) GTEST_SKIP() << "mpirun is not installed";
  const auto r = run_tool({kTool, "-np", "1", "--", "./no-such-program-here"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_THAT(r.err, HasSubstr("program ./no-such-program-here was not found"));
}

TEST(ChorusRun, CheckBuildPrintsOneLinePerComponent) {
  const auto r = run_tool({kTool, "--check-build"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::vector<std::string> got;
  for (std::string line; std::getline(lines, line);) got.push_back(line);
  const char* names[] = {"CUDA: ", "cuDNN: ", "cuBLAS: ", "NCCL: ", "MPI: ", "oneDNN: ", "GPUs visible: "};
  ASSERT_EQ(got.size(), std::size(names)) << r.out;
  const auto expected = query_build_info();  // the same queries, made in this process
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].rfind(names[i], 0), 0u) << got[i];
    EXPECT_EQ(got[i], format_component(expected[i]));
  }
}

TEST(ChorusRun, MaxRestartsStartsAFailedJobAgainWithItsCount) {
  const char* path = std::getenv("PATH");
  if (!find_executable("mpirun", path ? path : "")) GTEST_SKIP() << "mpirun is not installed";
  const std::string log = ::testing::TempDir() + "/chorus_run_restarts_" + std::to_string(::getpid());
  std::remove(log.c_str());
  // Fails on its first two starts, succeeds on the third.
  const std::string body = "echo start $CHORUS_RESTART_COUNT >> " + log + "; [ \"$CHORUS_RESTART_COUNT\" = 2 ]";
  const auto ok = run_tool({kTool, "-np", "1", "--max-restarts", "2", "--", "/bin/sh", "-c", body});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_THAT(ok.err, HasSubstr("the job failed (exit status 1); restart 1 of 2"));
  EXPECT_THAT(ok.err, HasSubstr("restart 2 of 2"));
  std::ifstream in(log);
  const std::string starts((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(starts, "start 0\nstart 1\nstart 2\n");
  std::remove(log.c_str());
  // Too few restarts: the last failure's status.
  const auto failed = run_tool({kTool, "-np", "1", "--max-restarts", "1", "--", "/bin/sh", "-c", "exit 4"});
  EXPECT_EQ(failed.exit_code, 4) << failed.err;
  EXPECT_THAT(failed.err, HasSubstr("restart 1 of 1"));
  EXPECT_THAT(failed.err, ::testing::Not(HasSubstr("restart 2")));
}

}  // namespace
}  // namespace chorus::launch
