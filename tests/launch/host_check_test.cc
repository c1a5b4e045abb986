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
