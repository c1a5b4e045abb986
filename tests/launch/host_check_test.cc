// launch/host_check.h: the pre-launch check that every other host answers through the remote
// shell, with a stand-in agent (a shell script) in place of ssh.
#include <chorus/launch/host_check.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>

#include <chorus/core/error.h>

namespace chorus::launch {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

// `AGENT HOST true` runs `sh -c SCRIPT HOST true`: $0 is the host.
const std::vector<std::string> kAgent = {
    "/bin/sh", "-c",
    "case $0 in ok*) [ \"$1\" = true ] && exit 0; exit 9 ;; slow) sleep 30 ;; *) echo \"no route to $0\" >&2; exit 7 ;; "
    "esac"};

TEST(HostCheck, AnswersInOrderWithWhatTheAgentSaid) {
  const auto answers = check_hosts(kAgent, {"ok1", "bad", "ok2"});
  ASSERT_EQ(answers.size(), 3u);
  EXPECT_TRUE(answers[0].answered);
  EXPECT_EQ(answers[0].host, "ok1");
  EXPECT_EQ(answers[0].detail, "");
  EXPECT_FALSE(answers[1].answered);
  EXPECT_EQ(answers[1].detail, "exit 7: no route to bad");
  EXPECT_TRUE(answers[2].answered);
}

TEST(HostCheck, ASilentHostIsKilledAtTheDeadline) {
  const auto start = Clock::now();
  const auto answers = check_hosts(kAgent, {"slow", "ok"}, std::chrono::milliseconds(300));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));  // not the 30 s sleep
  EXPECT_FALSE(answers[0].answered);
  EXPECT_THAT(answers[0].detail, HasSubstr("no answer within 0.3 s"));
  EXPECT_TRUE(answers[1].answered);
}

TEST(HostCheck, AnAgentThatCannotRunIsSaidSo) {
  const auto answers = check_hosts({"/nonexistent/ssh"}, {"a"});
  EXPECT_FALSE(answers[0].answered);
  EXPECT_THAT(answers[0].detail, HasSubstr("cannot run /nonexistent/ssh: No such file or directory"));
  EXPECT_THROW(check_hosts({}, {"a"}), InvalidArgumentError);
  EXPECT_TRUE(check_hosts(kAgent, {}).empty());
}

TEST(HostCheck, ManyHostsAreCheckedInBatches) {
  std::vector<std::string> hosts;
  for (std::size_t i = 0; i < kMaxParallelChecks + 3; ++i) hosts.push_back("ok" + std::to_string(i));
  hosts.push_back("bad");
  const auto answers = check_hosts(kAgent, hosts);
  for (std::size_t i = 0; i + 1 < answers.size(); ++i) EXPECT_TRUE(answers[i].answered) << answers[i].host;
  EXPECT_FALSE(answers.back().answered);
}

// Issue 40: ssh stops reading options at "--", so no host can become one (-F/path/evil.cfg).
TEST(HostCheck, SshGetsDashDashBeforeTheHostAndOptionLikeHostsRunNothing) {
  using Argv = std::vector<std::string>;
  EXPECT_EQ(host_check_argv({"ssh", "-o", "BatchMode=yes"}, "node1"),
            (Argv{"ssh", "-o", "BatchMode=yes", "--", "node1", "true"}));
  EXPECT_EQ(host_check_argv({"/usr/bin/ssh", "-p", "2222"}, "n"),
            (Argv{"/usr/bin/ssh", "-p", "2222", "--", "n", "true"}));
  // Other agents may not take "--" (rsh, wrapper scripts): the host-name rule protects them.
  EXPECT_EQ(host_check_argv({"/bin/sh", "-c", "x"}, "n"), (Argv{"/bin/sh", "-c", "x", "n", "true"}));
  EXPECT_EQ(host_check_argv({"sshpass"}, "n"), (Argv{"sshpass", "n", "true"}));
  const std::string marker = ::testing::TempDir() + "/chorus_host_check_ran_" + std::to_string(getpid());
  try {
    check_hosts({"/bin/sh", "-c", "touch " + marker}, {"ok", "-F/tmp/evil.cfg"});
    ADD_FAILURE() << "a host name starting with '-' was accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.message(), HasSubstr("host name '-F/tmp/evil.cfg' starts with '-'"));
  }
  EXPECT_NE(access(marker.c_str(), F_OK), 0) << "the agent ran";
}

TEST(HostCheck, ThisMachineAndAgentWords) {
  char name[256] = {};
  ASSERT_EQ(gethostname(name, sizeof name - 1), 0);
  EXPECT_TRUE(is_this_machine(name));
  EXPECT_TRUE(is_this_machine("localhost"));
  EXPECT_TRUE(is_this_machine("127.0.0.1"));
  EXPECT_FALSE(is_this_machine("surely-not-this-machine-0"));
  EXPECT_EQ(split_command("  ssh -p\t2222 "), (std::vector<std::string>{"ssh", "-p", "2222"}));
  EXPECT_TRUE(split_command("   ").empty());
}

}  // namespace
}  // namespace chorus::launch
