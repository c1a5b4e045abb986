// Tests for the graph pools of core/bfc_allocator.cc (core/allocator.h, "Graph pools"), on the
// counting fake SubAllocator of bfc_test_util.h.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/core/bfc_test_util.h"
#include <chorus/core/allocator.h>
#include <chorus/core/error.h>

namespace chorus {
namespace {

using namespace bfc_testing;  // NOLINT: the shared fake and arena

// What a captured step does, twice: allocate, free some inside, keep an output. The second "capture"
// into the same pool gets the same addresses, and the arena never hands out pool memory meanwhile.
TEST(BFCAllocatorPoolTest, ASecondCaptureIntoThePoolGetsTheSameAddresses) {
  Arena arena = make_arena(64 * kMiB, false);
  void* before = arena->allocate(4 * kKiB, "input");  // allocated before the capture
  const Allocator::PoolId pool = arena->create_pool();
  auto capture = [&] {
    PoolUse use(*arena.allocator, pool);
    void* a = arena->allocate(10 * kKiB, "activation");
    void* b = arena->allocate(3 * kKiB, "activation");
    arena->deallocate(a);
    void* c = arena->allocate(8 * kKiB, "gradient");  // reuses a's memory, as stream order allows
    arena->deallocate(b);
    arena->deallocate(c);
    return std::make_pair(arena->allocate(1 * kKiB, "loss"), std::vector<void*>{a, b, c});
  };
  auto [out1, inside1] = capture();
  // Outside the pool: nothing of the pool's, even once the escaped output is freed.
  arena->deallocate(out1);
  std::vector<void*> outside;
  for (int i = 0; i < 8; ++i) outside.push_back(arena->allocate(10 * kKiB));
  for (void* p : outside) {
    for (void* q : inside1) EXPECT_NE(p, q);
    EXPECT_NE(p, out1);
  }
  auto [out2, inside2] = capture();
  EXPECT_EQ(inside2, inside1);
  EXPECT_EQ(out2, out1);
  for (void* p : outside) arena->deallocate(p);
  arena->deallocate(out2);
  arena->deallocate(before);
  arena->release_pool(pool);
}

// A chunk allocated before the capture and freed inside it belongs to the pool from then on: the
// graph's replays read it. Freed from another thread after the capture, a pool chunk still goes
// back to the pool.
TEST(BFCAllocatorPoolTest, MemoryFreedInsideACaptureOrLaterStaysWithThePool) {
  Arena arena = make_arena(64 * kMiB, true);
  void* before = arena->allocate(64 * kKiB, "input");
  const Allocator::PoolId pool = arena->create_pool();
  void* out = nullptr;
  {
    PoolUse use(*arena.allocator, pool);
    out = arena->allocate(16 * kKiB, "output");
    arena->deallocate(before);
  }
  EXPECT_EQ(arena->memory_info().pooled_free, 64 * kKiB);
  std::thread([&] { arena->deallocate(out); }).join();
  EXPECT_EQ(arena->memory_info().pooled_free, 80 * kKiB);
  // The arena's own allocations of that size land elsewhere.
  void* other = arena->allocate(64 * kKiB);
  EXPECT_NE(other, before);
  arena->deallocate(other);
  {
    PoolUse use(*arena.allocator, pool);  // the pool's users get it back first
    void* again = arena->allocate(64 * kKiB);
    EXPECT_EQ(again, before);
    arena->deallocate(again);
  }
  arena->release_pool(pool);
  EXPECT_EQ(arena->memory_info().pooled_free, 0u);
}

// Releasing a pool merges its free memory back: the whole single region is one block again.
TEST(BFCAllocatorPoolTest, ReleaseReturnsFreeMemoryAndLiveChunksOnTheirFree) {
  constexpr std::size_t kLimit = 4 * kMiB;
  Arena arena = make_arena(kLimit, false);
  const Allocator::PoolId pool = arena->create_pool();
  void* live = nullptr;
  {
    PoolUse use(*arena.allocator, pool);
    std::vector<void*> ps;
    for (int i = 0; i < 6; ++i) ps.push_back(arena->allocate((i + 1) * 100 * kKiB, "captured"));
    live = ps[2];
    for (int i : {0, 4, 1, 5, 3}) arena->deallocate(ps[static_cast<std::size_t>(i)]);
  }
  MemoryInfo info = arena->memory_info();
  EXPECT_GT(info.pooled_free, 0u);
  EXPECT_LT(info.largest_free_block, kLimit - 300 * kKiB);  // the pool's free memory is not the arena's
  arena->release_pool(pool);
  info = arena->memory_info();
  EXPECT_EQ(info.pooled_free, 0u);
  arena->deallocate(live);  // its pool is gone: back to the arena
  info = arena->memory_info();
  EXPECT_EQ(info.largest_free_block, kLimit);
  void* all = arena->allocate(kLimit);
  arena->deallocate(all);
}

TEST(BFCAllocatorPoolTest, MisuseIsAnErrorThatChangesNothing) {
  Arena arena = make_arena(4 * kMiB, true);
  const Allocator::PoolId a = arena->create_pool(), b = arena->create_pool();
  EXPECT_NE(a, b);
  EXPECT_THROW(arena->begin_pool_use(a + b + 100), NotFoundError);
  {
    PoolUse use(*arena.allocator, a);
    EXPECT_THROW(arena->begin_pool_use(b), FailedPreconditionError);
    EXPECT_THROW(arena->release_pool(a), FailedPreconditionError);
    void* p = arena->allocate(kKiB);  // still a's
    arena->deallocate(p);
  }
  EXPECT_GT(arena->memory_info().pooled_free, 0u);
  arena->end_pool_use();  // no use: a no-op
  arena->release_pool(a);
  EXPECT_THROW(arena->release_pool(a), NotFoundError);
  EXPECT_THROW(arena->begin_pool_use(a), NotFoundError);
  arena->release_pool(b);
  EXPECT_EQ(arena->memory_info().pooled_free, 0u);
}

// Out of memory with free memory held by a pool says so.
TEST(BFCAllocatorPoolTest, OutOfMemoryNamesWhatPoolsHold) {
  Arena arena = make_arena(kMiB, false);
  const Allocator::PoolId pool = arena->create_pool();
  {
    PoolUse use(*arena.allocator, pool);
    arena->deallocate(arena->allocate(768 * kKiB, "captured"));
  }
  const std::string m = resource_exhausted_message([&] { (void)arena->allocate(512 * kKiB, "big"); });
  EXPECT_NE(m.find("768.00 KiB more is free but kept for 1 captured CUDA graph(s)"), std::string::npos) << m;
  arena->release_pool(pool);
  void* p = arena->allocate(512 * kKiB, "big");
  arena->deallocate(p);
}

// Pools under threads: one thread captures into its pool while others allocate from the arena.
// Once memory is the pool's, no other thread gets it, however often they allocate.
TEST(BFCAllocatorPoolTest, OtherThreadsNeverGetPoolMemory) {
  Arena arena = make_arena(32 * kMiB, true);
  const Allocator::PoolId pool = arena->create_pool();
  auto capture = [&] {
    PoolUse use(*arena.allocator, pool);
    std::vector<void*> held;
    for (int i = 0; i < 200; ++i) {
      held.push_back(arena->allocate(static_cast<std::size_t>(1 + i % 7) * kKiB));
      if (i % 3 == 2) {
        arena->deallocate(held.front());
        held.erase(held.begin());
      }
    }
    for (void* p : held) arena->deallocate(p);
  };
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<void*> seen;
  auto others_while = [&](const std::function<void()>& fn) {
    stop = false;
    std::vector<std::thread> others;
    for (int t = 0; t < 2; ++t) {
      others.emplace_back([&] {
        while (!stop.load()) {
          void* p = arena->allocate(2 * kKiB);
          {
            std::lock_guard<std::mutex> lock(mu);
            seen.push_back(p);
          }
          arena->deallocate(p);
        }
      });
    }
    std::thread(fn).join();
    stop = true;
    for (auto& t : others) t.join();
  };
  others_while(capture);
  // The pool's memory now, in granules: every address it holds.
  std::set<void*> pooled;
  {
    PoolUse use(*arena.allocator, pool);
    const std::size_t n = arena->memory_info().pooled_free / 256;
    ASSERT_GT(n, 0u);
    std::vector<void*> all;
    for (std::size_t i = 0; i < n; ++i) all.push_back(arena->allocate(1));
    EXPECT_EQ(arena->memory_info().pooled_free, 0u);
    pooled.insert(all.begin(), all.end());
    for (void* p : all) arena->deallocate(p);
  }
  seen.clear();
  others_while(capture);
  ASSERT_FALSE(seen.empty());
  int overlaps = 0;
  for (void* p : seen) overlaps += pooled.contains(p) ? 1 : 0;
  EXPECT_EQ(overlaps, 0);
  arena->release_pool(pool);
}
}  // namespace
}  // namespace chorus
