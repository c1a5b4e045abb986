// launch/process.h's run_child: the watchdog that ends a child (SIGTERM, then SIGKILL), and the
// stop requests sent to this process while it waits (what chorus-run's restarts must not undo).
#include <chorus/launch/process.h>

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>

namespace chorus::launch {
namespace {

using Clock = std::chrono::steady_clock;

TEST(RunChild, TheWatchdogEndsAChildWithSigterm) {
  int asked = 0;
  const auto start = Clock::now();
  const ChildExit e = run_child({"/bin/sleep", "30"},
                                {.watchdog = [&]() -> std::string { return ++asked >= 2 ? "the test says so" : ""; }});
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  EXPECT_TRUE(e.ended_by_watchdog);
  EXPECT_TRUE(e.signaled);
  EXPECT_EQ(e.code, SIGTERM);
  EXPECT_EQ(e.stop_signal, 0);
}

TEST(RunChild, AChildThatIgnoresSigtermGetsSigkillFiveSecondsLater) {
  const auto start = Clock::now();
  int asked = 0;  // the second ask, ~1 s in: the shell has set its trap by then
  const ChildExit e = run_child({"/bin/sh", "-c", "trap '' TERM; sleep 30"},
                                {.watchdog = [&] { return std::string(++asked >= 2 ? "now" : ""); }});
  const auto took = Clock::now() - start;
  EXPECT_TRUE(e.ended_by_watchdog);
  EXPECT_TRUE(e.signaled);
  EXPECT_EQ(e.code, SIGKILL);
  EXPECT_GE(took, std::chrono::seconds(5));
  EXPECT_LT(took, std::chrono::seconds(15));
}

TEST(RunChild, ASigtermToThisProcessIsForwardedAndRemembered) {
  // The child asks its parent (this test) to stop; run_child forwards it back to the child.
  const ChildExit e = run_child({"/bin/sh", "-c", "kill -TERM $PPID; sleep 30"});
  EXPECT_TRUE(e.signaled);
  EXPECT_EQ(e.code, SIGTERM);
  EXPECT_EQ(e.stop_signal, SIGTERM);
  EXPECT_FALSE(e.ended_by_watchdog);
  const ChildExit plain = run_child({"/bin/sh", "-c", "exit 3"});
  EXPECT_EQ(plain.status(), 3);
  EXPECT_EQ(plain.stop_signal, 0);
}

}  // namespace
}  // namespace chorus::launch
