// BusyPoller (collective/busy_poll.h): it spins only while a Scope lives and for its linger after,
// sleeps otherwise, takes no CPU while asleep, and its destructor returns promptly.
#include <chorus/collective/busy_poll.h>

#include <gtest/gtest.h>
#include <time.h>

#include <chrono>
#include <thread>

namespace chorus::collective {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Waits up to 10 s for the poller's count of spin periods to reach `n`.
bool reaches(const BusyPoller& p, long n) {
  const auto end = Clock::now() + 10s;
  while (p.spin_periods() < n && Clock::now() < end) std::this_thread::sleep_for(1ms);
  return p.spin_periods() >= n;
}

// CPU seconds of the whole process (the spinner's included).
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

TEST(BusyPollerTest, SpinsForAScopeThenSleepsAfterTheLinger) {
  BusyPoller p(1ms);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(p.spin_periods(), 0) << "spun with no Scope";
  {
    BusyPoller::Scope s(&p);
    ASSERT_TRUE(reaches(p, 1));
  }
  std::this_thread::sleep_for(100ms);  // far past the linger: asleep again
  {
    BusyPoller::Scope s(&p);
    ASSERT_TRUE(reaches(p, 2)) << "a Scope after the linger did not start a new spin period";
  }
}

TEST(BusyPollerTest, ScopesWithinTheLingerKeepOneSpinPeriod) {
  BusyPoller p(10s);
  {
    BusyPoller::Scope s(&p);
    ASSERT_TRUE(reaches(p, 1));
  }
  for (int i = 0; i < 20; ++i) {
    BusyPoller::Scope s(&p);
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(p.spin_periods(), 1) << "the spinner slept between back-to-back calls";
  // The destructor ends a lingering spinner at once (not after 10 s).
}

TEST(BusyPollerTest, NestedScopesFromTwoThreads) {
  BusyPoller p(1ms);
  BusyPoller::Scope outer(&p);
  ASSERT_TRUE(reaches(p, 1));
  std::thread t([&] { BusyPoller::Scope inner(&p); });
  t.join();
  std::this_thread::sleep_for(20ms);
  // The inner Scope's end did not stop the spinner: the outer one still holds it. (Counted in rounds,
  // not CPU time: on a loaded machine a spinner that yields gets little of it.)
  const long before = p.spin_rounds();
  const auto end = Clock::now() + 10s;
  while (p.spin_rounds() == before && Clock::now() < end) std::this_thread::sleep_for(10ms);
  EXPECT_GT(p.spin_rounds(), before) << "not spinning while a Scope is alive";
}

TEST(BusyPollerTest, AsleepItTakesNoCpu) {
  BusyPoller p(1ms);
  {
    BusyPoller::Scope s(&p);
    ASSERT_TRUE(reaches(p, 1));
  }
  // Past the linger (on a loaded machine the spinner may need a while to get the CPU and notice).
  const auto end = Clock::now() + 10s;
  for (long r = -1; r != p.spin_rounds() && Clock::now() < end;) {
    r = p.spin_rounds();
    std::this_thread::sleep_for(50ms);
  }
  const long rounds = p.spin_rounds();
  const double before = process_cpu_seconds();
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(p.spin_rounds(), rounds) << "the spinner kept running with no Scope";
  EXPECT_LT(process_cpu_seconds() - before, 0.02) << "the process took CPU time with the spinner asleep";
}

TEST(BusyPollerTest, DestructorReturnsWhileStarted) {
  const auto t0 = Clock::now();
  {
    BusyPoller p(10s);
    p.start();  // never stopped: the destructor must still end the thread
    ASSERT_TRUE(reaches(p, 1));
  }
  EXPECT_LT(Clock::now() - t0, 5s);
}

}  // namespace
}  // namespace chorus::collective
