// core/profile.h: the timers' wall, CPU and run-queue accounting, and account_run_delay.
#include <chorus/core/profile.h>

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <chrono>
#include <thread>

namespace chorus::profile {
namespace {

using namespace std::chrono_literals;

// Spins until the calling thread has used `cpu` of CPU time.
void burn(std::chrono::nanoseconds cpu) {
  const std::int64_t until = internal::thread_cpu_ns() + cpu.count();
  while (internal::thread_cpu_ns() < until) {
  }
}

// Pins the calling thread to `cpu`; false where that is refused.
bool pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

// The first CPU this process may run on.
int first_allowed_cpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) return c;
  return -1;
}

class ProfileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (internal::thread_run_delay_ns() < 0) GTEST_SKIP() << "no /proc/thread-self/schedstat on this kernel";
    enable_profiling(false);
    read_and_reset();
  }
  void TearDown() override {
    enable_profiling(false);
    read_and_reset();
  }
};

TEST_F(ProfileTest, DisabledTimersRecordNothing) {
  {
    ScopedTimer step(TimeCategory::kReplicaStep);
    burn(2ms);
  }
  account_run_delay();
  account_run_delay();
  const ProfileCounters c = read_and_reset();
  EXPECT_EQ(c.replica_step_ns, 0);
  EXPECT_EQ(c.replica_step_cpu_ns, 0);
  EXPECT_EQ(c.run_queue_ns, 0);
}

TEST_F(ProfileTest, TimersRecordWallAndCpuAndNoRunQueueWhenAlone) {
  enable_profiling(true);
  {
    ScopedTimer step(TimeCategory::kReplicaStep);
    burn(5ms);
    std::this_thread::sleep_for(5ms);  // wall, not CPU
  }
  const ProfileCounters c = read_and_reset();
  EXPECT_GE(c.replica_step_cpu_ns, 5'000'000);
  EXPECT_GE(c.replica_step_ns, c.replica_step_cpu_ns + 4'000'000);
  EXPECT_EQ(c.library_kernel_ns, 0);
  EXPECT_EQ(c.collective_ns, 0);
}

// Two threads pinned to one CPU, each burning 30 ms of CPU inside a timer: each waits in the run
// queue while the other runs, and the timers (and account_run_delay, round by round) see it.
TEST_F(ProfileTest, ThreadsSharingACoreRecordTheirRunQueueTime) {
  const int cpu = first_allowed_cpu();
  ASSERT_GE(cpu, 0);
  enable_profiling(true);
  auto contender = [&](TimeCategory category) {
    if (!pin_to(cpu)) return;
    account_run_delay();  // the starting point
    {
      ScopedTimer timer(category);
      burn(30ms);
    }
    account_run_delay();
  };
  std::thread a(contender, TimeCategory::kReplicaStep), b(contender, TimeCategory::kCollective);
  a.join();
  b.join();
  const ProfileCounters c = read_and_reset();
  // Together they needed 60 ms of one core: at least ~30 ms of it one of them waited.
  EXPECT_GE(c.replica_step_run_queue_ns + c.collective_run_queue_ns, 15'000'000);
  EXPECT_GE(c.run_queue_ns, c.replica_step_run_queue_ns + c.collective_run_queue_ns - 2'000'000);
  // A timer's run-queue time lies inside its wall time, outside its CPU time.
  EXPECT_LE(c.replica_step_run_queue_ns, c.replica_step_ns - c.replica_step_cpu_ns + 1'000'000);
  EXPECT_LE(c.collective_run_queue_ns, c.collective_ns - c.collective_cpu_ns + 1'000'000);
}

TEST_F(ProfileTest, KernelTimersDoNotReadTheRunQueue) {
  const int cpu = first_allowed_cpu();
  ASSERT_GE(cpu, 0);
  enable_profiling(true);
  auto contender = [&] {
    if (!pin_to(cpu)) return;
    ScopedTimer timer(TimeCategory::kLibraryKernel);
    burn(20ms);
  };
  std::thread a(contender), b(contender);
  a.join();
  b.join();
  const ProfileCounters c = read_and_reset();
  EXPECT_GE(c.library_kernel_ns - c.library_kernel_cpu_ns, 10'000'000);  // descheduled inside kernels
  EXPECT_EQ(c.replica_step_run_queue_ns + c.collective_run_queue_ns + c.run_queue_ns, 0);
}

// After profiling was off, the first account_run_delay only sets the starting point: a wait from
// before profiling was turned on is not counted.
TEST_F(ProfileTest, AccountRunDelayStartsAfreshAfterProfilingWasOff) {
  const int cpu = first_allowed_cpu();
  ASSERT_GE(cpu, 0);
  std::thread a([&] {
    if (!pin_to(cpu)) return;
    std::thread b([&] {
      pin_to(cpu);
      burn(20ms);
    });
    burn(20ms);  // queues behind b, profiling off
    b.join();
    enable_profiling(true);
    account_run_delay();  // starting point only
    account_run_delay();  // nothing happened in between
  });
  a.join();
  EXPECT_LT(read_and_reset().run_queue_ns, 1'000'000);
}

}  // namespace
}  // namespace chorus::profile
