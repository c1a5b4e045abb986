#include <chorus/launch/run_command_line.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/core/test_util.h"
#include <chorus/core/error.h>

namespace chorus::launch {
namespace {

using Args = std::vector<std::string>;
using ::testing::HasSubstr;

// The message of the InvalidArgumentError the parser throws (a test failure if none).
std::string error_of(const Args& args) {
  return chorus::testing::message_of<InvalidArgumentError>([&] { parse_run_command_line(args); });
}

TEST(RunCommandLine, ProgramAfterDoubleDash) {
  const auto cl = parse_run_command_line({"-np", "4", "-H", "a:2,b:2", "--dry-run", "--", "./x", "--flag", "a b"});
  EXPECT_EQ(cl.num_processes, 4);
  EXPECT_EQ(cl.hosts, "a:2,b:2");
  EXPECT_TRUE(cl.dry_run);
  EXPECT_FALSE(cl.check_build);
  EXPECT_EQ(cl.bind_to, "none");
  EXPECT_EQ(cl.program, (Args{"./x", "--flag", "a b"}));
}

TEST(RunCommandLine, ProgramAtFirstNonOptionAsWithMpirun) {
  const auto cl = parse_run_command_line({"-n", "2", "prog", "-np", "9", "--", "x"});
  EXPECT_EQ(cl.num_processes, 2);
  EXPECT_EQ(cl.program, (Args{"prog", "-np", "9", "--", "x"}));
}

TEST(RunCommandLine, LongOptionsTakeEqualsForm) {
  const auto cl = parse_run_command_line(
      {"--np=3", "--host=a:3", "--bind-to=socket", "-x", "A=1", "-x", "B", "--oversubscribe", "--", "p"});
  EXPECT_EQ(cl.num_processes, 3);
  EXPECT_EQ(cl.hosts, "a:3");
  EXPECT_EQ(cl.bind_to, "socket");
  EXPECT_EQ(cl.extra_environment, (Args{"A=1", "B"}));
  EXPECT_TRUE(cl.oversubscribe);
}

TEST(RunCommandLine, HostsAloneAreEnough) {
  const auto cl = parse_run_command_line({"-H", "a:2", "--", "p"});
  EXPECT_FALSE(cl.num_processes.has_value());
  EXPECT_EQ(cl.hosts, "a:2");
}

TEST(RunCommandLine, HelpAndCheckBuildNeedNoProgram) {
  EXPECT_TRUE(parse_run_command_line({"--help"}).help);
  EXPECT_TRUE(parse_run_command_line({"-h"}).help);
  EXPECT_TRUE(parse_run_command_line({"--check-build"}).check_build);
  EXPECT_TRUE(parse_run_command_line({"--version"}).version);
  // After the program's name, --version is the program's.
  EXPECT_FALSE(parse_run_command_line({"-np", "2", "prog", "--version"}).version);
}

TEST(RunCommandLine, Errors) {
  EXPECT_THAT(error_of({"-np", "2"}), HasSubstr("no program to run"));
  EXPECT_THAT(error_of({"-np", "2", "--"}), HasSubstr("no program to run"));
  EXPECT_THAT(error_of({"--", "p"}), HasSubstr("-np is missing"));
  EXPECT_THAT(error_of({"-np"}), HasSubstr("option -np needs a value"));
  EXPECT_THAT(error_of({"-np", "two", "p"}), HasSubstr("-np expects a whole number of processes, got 'two'"));
  EXPECT_THAT(error_of({"-np", "2x", "p"}), HasSubstr("got '2x'"));
  EXPECT_THAT(error_of({"--frobnicate", "p"}), HasSubstr("unknown option '--frobnicate'"));
  EXPECT_THAT(error_of({"--dry-run=yes", "p"}), HasSubstr("--dry-run takes no value"));
}

TEST(RunCommandLine, RecoveryTimeoutAndStatusDirectory) {
  const auto cl = parse_run_command_line(
      {"-np", "2", "--enable-recovery", "--collective-timeout", "7.5", "--status-dir=/shared/s", "--", "./x"});
  EXPECT_TRUE(cl.enable_recovery);
  EXPECT_EQ(cl.collective_timeout, "7.5");
  EXPECT_EQ(cl.status_dir, "/shared/s");
  EXPECT_FALSE(cl.record_exit_status);
  EXPECT_THAT(error_of({"-np", "2", "--collective-timeout", "0", "p"}),
              HasSubstr("--collective-timeout='0' is not a valid timeout"));
  EXPECT_THAT(error_of({"-np", "2", "--collective-timeout", "ten", "p"}), HasSubstr("not a number of seconds"));
  EXPECT_THAT(error_of({"-np", "2", "--status-dir", "", "p"}), HasSubstr("--status-dir is empty"));
  EXPECT_THAT(error_of({"-np", "2", "--enable-recovery=1", "p"}), HasSubstr("--enable-recovery takes no value"));
}

TEST(RunCommandLine, TheRankWrapperNeedsOnlyItsDirectoryAndAProgram) {
  const auto cl = parse_run_command_line({"--record-exit-status", "/tmp/d", "--", "prog", "-np", "3"});
  EXPECT_EQ(cl.record_exit_status, "/tmp/d");
  EXPECT_EQ(cl.program, (Args{"prog", "-np", "3"}));
  EXPECT_THAT(error_of({"--record-exit-status", "/tmp/d"}), HasSubstr("needs a program"));
}

TEST(RunCommandLine, UsageMentionsEveryOption) {
  const std::string usage = run_usage();
  for (const char* flag : {"-np",
                           "-H",
                           "--bind-to",
                           "--oversubscribe",
                           "-x",
                           "--dry-run",
                           "--check-build",
                           "--version",
                           "--help",
                           "--collective-timeout",
                           "--enable-recovery",
                           "--status-dir",
                           "openmpi-bin",
                           "--nnodes",
                           "--nproc-per-node",
                           "--node-rank",
                           "--rdzv-endpoint",
                           "--rdzv-timeout",
                           "MASTER_ADDR",
                           "TORCHELASTIC_RESTART_COUNT"})
    EXPECT_THAT(usage, HasSubstr(flag));
}

TEST(RunCommandLine, HostfileRemoteShellInterfacesAndMca) {
  const auto cl = parse_run_command_line({"--hostfile", "hf", "--rsh-agent", "ssh -p 2222", "--network-interface=eth1",
                                          "--mca", "btl", "tcp,self", "--mca", "x_y", "1", "--no-host-check", "./x"});
  EXPECT_EQ(cl.hostfile, "hf");
  EXPECT_FALSE(cl.num_processes);  // the hostfile's slots decide
  EXPECT_EQ(cl.rsh_agent, "ssh -p 2222");
  EXPECT_EQ(cl.network_interfaces, "eth1");
  EXPECT_EQ(cl.mca, (std::vector<std::pair<std::string, std::string>>{{"btl", "tcp,self"}, {"x_y", "1"}}));
  EXPECT_FALSE(cl.check_hosts);
  EXPECT_TRUE(parse_run_command_line({"-np", "1", "./x"}).check_hosts);
  EXPECT_THAT(error_of({"-H", "a", "--hostfile", "hf", "./x"}), HasSubstr("-H and --hostfile both name the hosts"));
  EXPECT_THAT(error_of({"--mca", "btl"}), HasSubstr("--mca needs a name and a value"));
  EXPECT_THAT(error_of({"--mca=btl", "tcp", "./x"}), HasSubstr("--mca needs a name and a value"));
  EXPECT_THAT(error_of({"--hostfile", "", "./x"}), HasSubstr("--hostfile is empty"));
  EXPECT_THAT(error_of({"--rsh-agent=", "-np", "1", "./x"}), HasSubstr("--rsh-agent is empty"));
  EXPECT_THAT(error_of({"--no-host-check=1", "./x"}), HasSubstr("takes no value"));
}

TEST(RunCommandLine, RestartsMinimumHostsAndFailureGrace) {
  const auto cl =
      parse_run_command_line({"-H", "a,b,c", "--max-restarts", "3", "--min-hosts=2", "--failure-grace", "45", "./x"});
  EXPECT_EQ(cl.max_restarts, 3);
  EXPECT_EQ(cl.min_hosts, 2);
  EXPECT_EQ(cl.failure_grace_seconds, 45);
  const auto defaults = parse_run_command_line({"-np", "1", "./x"});
  EXPECT_EQ(defaults.max_restarts, 0);
  EXPECT_FALSE(defaults.min_hosts);
  EXPECT_EQ(defaults.failure_grace_seconds, 30);
  EXPECT_THAT(error_of({"-np", "1", "--max-restarts", "-1", "./x"}), HasSubstr("from 0 to 100, got '-1'"));
  EXPECT_THAT(error_of({"-np", "1", "--max-restarts", "101", "./x"}), HasSubstr("from 0 to 100"));
  EXPECT_THAT(error_of({"-np", "1", "--failure-grace", "0", "./x"}), HasSubstr("--failure-grace expects"));
  EXPECT_THAT(error_of({"-np", "2", "--min-hosts", "1", "./x"}), HasSubstr("--min-hosts needs the hosts"));
  EXPECT_THAT(error_of({"-H", "a", "--min-hosts", "0", "./x"}), HasSubstr("from 1 to"));
}

TEST(RunCommandLine, WithoutMpiTorchrunFlags) {
  const auto cl =
      parse_run_command_line({"--nnodes", "2", "--nproc-per-node=4", "--node-rank", "1", "--rdzv-endpoint", "h0:29500",
                              "--rdzv-timeout", "60", "--max-restarts", "2", "-x", "A=1", "--", "./train", "-np", "3"});
  EXPECT_TRUE(cl.without_mpi());
  EXPECT_EQ(cl.nnodes, 2);
  EXPECT_EQ(cl.nproc_per_node, 4);
  EXPECT_EQ(cl.node_rank, 1);
  EXPECT_EQ(cl.rdzv_endpoint, "h0:29500");
  EXPECT_EQ(cl.rdzv_timeout_seconds, 60);
  EXPECT_EQ(cl.max_restarts, 2);
  EXPECT_EQ(cl.program, (Args{"./train", "-np", "3"}));  // the program's own -np
  // torchrun's underscore spellings; one flag is enough to select the mode (no -np needed).
  const auto us = parse_run_command_line({"--nproc_per_node", "2", "--node_rank=0", "--rdzv_endpoint=a:1", "./x"});
  EXPECT_EQ(us.nproc_per_node, 2);
  EXPECT_EQ(us.node_rank, 0);
  EXPECT_EQ(us.rdzv_endpoint, "a:1");
  EXPECT_TRUE(parse_run_command_line({"--nproc-per-node", "1", "./x"}).without_mpi());
  // Elastic: torchrun's --nnodes MIN:MAX, or --min-hosts (mpirun's name for the same policy).
  const auto elastic = parse_run_command_line(
      {"--nnodes", "2:3", "--node-rank", "2", "--rdzv-endpoint", "h0:1", "--rdzv-last-call", "5", "./x"});
  EXPECT_EQ(elastic.nnodes, 3);
  EXPECT_EQ(elastic.min_hosts, 2);
  EXPECT_EQ(elastic.rdzv_last_call_seconds, 5);
  const auto min_hosts =
      parse_run_command_line({"--nnodes", "3", "--min-hosts", "2", "--rdzv-endpoint", "h0:1", "./x"});
  EXPECT_EQ(min_hosts.nnodes, 3);
  EXPECT_EQ(min_hosts.min_hosts, 2);
  EXPECT_FALSE(parse_run_command_line({"-np", "1", "./x"}).without_mpi());
}

TEST(RunCommandLine, WithoutMpiDoesNotMixWithMpirunFlags) {
  EXPECT_THAT(error_of({"--nproc-per-node", "2", "-np", "2", "./x"}),
              HasSubstr("--nproc-per-node (chorus-run without MPI) and -np (mpirun's) cannot be mixed"));
  EXPECT_THAT(error_of({"-H", "a:2", "--nnodes", "1", "./x"}),
              HasSubstr("--nnodes (chorus-run without MPI) and -H (mpirun's) cannot be mixed"));
  EXPECT_THAT(error_of({"--hostfile", "hf", "--nproc_per_node", "1", "./x"}),
              HasSubstr("--nproc_per_node (chorus-run without MPI) and --hostfile (mpirun's)"));
  for (const char* flag : {"--oversubscribe", "--enable-recovery", "--no-host-check"})
    EXPECT_THAT(error_of({"--nproc-per-node", "2", flag, "./x"}), HasSubstr(std::string(flag) + " (mpirun's)"));
  EXPECT_THAT(error_of({"--nproc-per-node", "2", "--status-dir", "/s", "./x"}), HasSubstr("--status-dir (mpirun's)"));
  EXPECT_THAT(error_of({"--nproc-per-node", "2", "--min-hosts", "2", "./x"}),
              HasSubstr("--min-hosts 2 is above --nnodes 1"));
  EXPECT_THAT(error_of({"--nnodes", "3:2", "./x"}), HasSubstr("--nnodes '3:2': MIN 3 is above MAX 2"));
  EXPECT_THAT(error_of({"--nnodes", "0:2", "./x"}), HasSubstr("--nnodes expects a whole number from 1"));
  EXPECT_THAT(error_of({"--nnodes", "1:", "./x"}), HasSubstr("--nnodes expects a whole number from 1"));
  EXPECT_THAT(error_of({"-np", "2", "--rdzv-last-call", "3", "./x"}),
              HasSubstr("--rdzv-last-call (chorus-run without MPI) and -np (mpirun's) cannot be mixed"));
  EXPECT_THAT(error_of({"--nnodes", "0", "./x"}), HasSubstr("--nnodes expects a whole number from 1 to 4096"));
  EXPECT_THAT(error_of({"--nproc-per-node", "x", "./x"}), HasSubstr("--nproc-per-node expects a whole number"));
  EXPECT_THAT(error_of({"--node-rank", "-1", "./x"}), HasSubstr("--node-rank expects a whole number from 0"));
  EXPECT_THAT(error_of({"--rdzv-endpoint", "h0", "./x"}), HasSubstr("'h0' has no port"));
  EXPECT_THAT(error_of({"--rdzv-timeout", "0", "./x"}), HasSubstr("--rdzv-timeout expects"));
  EXPECT_THAT(error_of({"--nproc-per-node", "2"}), HasSubstr("no program to run"));
}

}  // namespace
}  // namespace chorus::launch
