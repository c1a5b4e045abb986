#include <chorus/distribute/replica_pool.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include <chorus/collective/shared_memory.h>
#include <chorus/core/config.h>
#include <chorus/core/error.h>
#include <chorus/core/logging.h>
#include <chorus/core/runtime.h>
#include <chorus/core/tensor.h>

namespace chorus::distribute {
namespace {

class ReplicaPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    internal::reset_runtime_for_testing();
    config::set_visible_devices({}, "GPU");
    std::vector<LogicalDeviceConfiguration> cfgs(4, LogicalDeviceConfiguration{.memory_limit_mb = 64});
    config::set_logical_device_configuration(config::list_physical_devices("CPU")[0], cfgs);
  }
  std::vector<std::string> devices() { return {"/cpu:0", "/cpu:1", "/cpu:2", "/cpu:3"}; }
};

TEST_F(ReplicaPoolTest, EachReplicaRunsOnItsDeviceOnAPersistentThread) {
  ReplicaPool pool(devices(), /*rank=*/-1);
  std::vector<std::thread::id> first(4), second(4);
  std::vector<std::string> placed(4);
  std::vector<int> replica_in_log(4);
  pool.run([&](int r) {
    first[r] = std::this_thread::get_id();
    placed[r] = Tensor::zeros({1}).device_name();
    replica_in_log[r] = log_context().replica;
  });
  pool.run([&](int r) { second[r] = std::this_thread::get_id(); });
  std::set<std::thread::id> distinct(first.begin(), first.end());
  EXPECT_EQ(distinct.size(), 4u);
  EXPECT_EQ(distinct.count(std::this_thread::get_id()), 0u);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(first[r], second[r]) << "replica " << r << " got a new thread";
    EXPECT_EQ(placed[r], "/job:localhost/replica:0/task:0/device:CPU:" + std::to_string(r));
    EXPECT_EQ(replica_in_log[r], r);
  }
}

TEST_F(ReplicaPoolTest, AFailingReplicaReleasesTheOthersAndItsErrorIsRethrown) {
  ReplicaPool pool(devices());
  auto comms = collective::make_shared_memory_group(4);
  const auto start = std::chrono::steady_clock::now();
  std::atomic<int> aborted_by{-1};
  try {
    pool.run(
        [&](int r) {
          if (r == 2) throw InvalidArgumentError("replica 2 saw labels out of range");
          Tensor t = Tensor::ones({16}, DType::kFloat32, "/cpu:" + std::to_string(r));
          comms[r]->all_reduce(t, t, {.timeout = std::chrono::seconds(60)});  // waits for replica 2
        },
        [&](int r, const std::string& why) {
          aborted_by = r;
          for (auto& c : comms) c->abort(why);
        });
    FAIL() << "run did not rethrow";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("labels out of range"), std::string::npos);  // the cause, not AbortedError
  }
  EXPECT_EQ(aborted_by, 2);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  // The pool itself stays usable.
  std::atomic<int> ran{0};
  pool.run([&](int) { ++ran; });
  EXPECT_EQ(ran, 4);
}

TEST_F(ReplicaPoolTest, RunFromInsideAReplicaIsRefused) {
  ReplicaPool pool(devices());
  std::atomic<int> refused{0};
  pool.run([&](int) {
    try {
      pool.run([](int) {});
    } catch (const FailedPreconditionError&) {
      ++refused;
    }
  });
  EXPECT_EQ(refused, 4);
}

// The hand-off is two futex-waited atomics: many short runs back to back lose no wake-up and run
// every replica exactly once each.
TEST_F(ReplicaPoolTest, ManyShortRunsRunEveryReplicaOnceEach) {
  ReplicaPool pool(devices());
  std::vector<std::atomic<int>> count(4);
  constexpr int kRuns = 2000;
  for (int i = 0; i < kRuns; ++i) pool.run([&](int r) { count[static_cast<std::size_t>(r)].fetch_add(1); });
  for (auto& c : count) EXPECT_EQ(c.load(), kRuns);
}

TEST_F(ReplicaPoolTest, ASecondRunWhileOneIsInProgressIsRefused) {
  ReplicaPool pool(devices());
  std::atomic<bool> started{false}, release{false};
  std::thread first([&] {
    pool.run([&](int r) {
      if (r == 0) started = true;
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  });
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_THROW(pool.run([](int) {}), FailedPreconditionError);
  release = true;
  first.join();
  std::atomic<int> ran{0};
  pool.run([&](int) { ++ran; });  // usable afterwards
  EXPECT_EQ(ran, 4);
}

TEST_F(ReplicaPoolTest, BadArgumentsAreRejected) {
  EXPECT_THROW(ReplicaPool({}), InvalidArgumentError);
  EXPECT_THROW(ReplicaPool({"/cpu:0", "/cpu:x"}), InvalidArgumentError);
  ReplicaPool pool({"/cpu:0"});
  EXPECT_THROW(pool.run(nullptr), InvalidArgumentError);
}

}  // namespace
}  // namespace chorus::distribute
