// Tests for core/bfc_allocator.cc and core/host_sub_allocator.cc.
//
// The arena sits on a counting fake SubAllocator, so tests see every region the allocator asks
// for. Expected addresses and sizes follow from the algorithm (best fit, split at the low end,
// 256-byte rounding), never from a previous run's output.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <chorus/core/allocator.h>
#include <chorus/core/error.h>
#include <chorus/core/logging.h>

#include "tests/core/bfc_test_util.h"

namespace chorus {
namespace {

using namespace bfc_testing;  // NOLINT: the shared fake and arena

template <typename Fn>
std::string invalid_argument_message(Fn&& fn) {
  try {
    fn();
  } catch (const InvalidArgumentError& e) {
    return e.message();
  }
  ADD_FAILURE() << "expected InvalidArgumentError";
  return "";
}

void expect_same_info(const MemoryInfo& a, const MemoryInfo& b) {
  EXPECT_EQ(a.current, b.current);
  EXPECT_EQ(a.peak, b.peak);
  EXPECT_EQ(a.reserved, b.reserved);
  EXPECT_EQ(a.largest_free_block, b.largest_free_block);
  EXPECT_EQ(a.num_allocs, b.num_allocs);
  EXPECT_EQ(a.num_live, b.num_live);
}

TEST(BFCAllocatorTest, HostSubAllocatorAlignsAndDescribesItself) {
  auto sub = make_host_sub_allocator();
  EXPECT_EQ(sub->describe(), "host memory");
  for (std::size_t bytes :
       {std::size_t{1}, std::size_t{255}, std::size_t{256}, std::size_t{1000}, std::size_t{3 * kMiB + 7}}) {
    void* p = sub->alloc(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_TRUE(aligned_256(p)) << bytes;
    std::memset(p, 0xab, bytes);  // the whole requested size is usable (ASan checks it)
    sub->free(p, bytes);
  }
  // A size that cannot be rounded to the alignment is "no memory", not a crash.
  EXPECT_EQ(sub->alloc(std::numeric_limits<std::size_t>::max()), nullptr);
}

TEST(BFCAllocatorTest, RejectsInvalidOptions) {
  BFCOptions options;
  options.logical_device = kLogical;
  options.memory_limit = kMiB;
  EXPECT_THROW(make_bfc_allocator(nullptr, options), InvalidArgumentError);
  options.memory_limit = 0;
  EXPECT_THROW(make_bfc_allocator(make_host_sub_allocator(), options), InvalidArgumentError);
  // A limit that is not a multiple of 256 is floored to one: 1000 → 768.
  options.memory_limit = 1000;
  EXPECT_EQ(make_bfc_allocator(make_host_sub_allocator(), options)->memory_info().limit, 768u);
}

TEST(BFCAllocatorTest, NameIsTheLogicalDevice) {
  Arena arena = make_arena(kMiB, false);
  EXPECT_EQ(arena->name(), kLogical);
}

TEST(BFCAllocatorTest, ReturnsPointersAlignedTo256) {
  for (bool growth : {false, true}) {
    Arena arena = make_arena(16 * kMiB, growth);
    std::vector<void*> ptrs;
    for (std::size_t bytes : {std::size_t{1}, std::size_t{255}, std::size_t{257}, std::size_t{1000}, std::size_t{4097},
                              kMiB + 3, std::size_t{0}}) {
      void* p = arena->allocate(bytes);
      EXPECT_TRUE(aligned_256(p)) << bytes << " growth=" << growth;
      if (bytes > 0) std::memset(p, 0x5a, bytes);
      ptrs.push_back(p);
    }
    for (void* p : ptrs) arena->deallocate(p);
  }
}

TEST(BFCAllocatorTest, RoundsSizesUpTo256) {
  Arena arena = make_arena(kMiB, false);
  const std::pair<std::size_t, std::size_t> cases[] = {{1, 256},     {256, 256},   {257, 512},
                                                       {1000, 1024}, {1024, 1024}, {1025, 1280}};
  std::size_t expected = 0;
  for (auto [bytes, rounded] : cases) {
    arena->allocate(bytes);
    expected += rounded;
    EXPECT_EQ(arena->memory_info().current, expected) << "after allocating " << bytes;
  }
}

TEST(BFCAllocatorTest, ReusesFreedMemory) {
  Arena arena = make_arena(16 * kMiB, true);
  void* p = arena->allocate(1024);
  const std::size_t reserved = arena->memory_info().reserved;
  arena->deallocate(p);
  void* q = arena->allocate(1024);
  EXPECT_EQ(q, p);  // the freed chunk merged back at the region start, best fit at lowest address
  EXPECT_EQ(arena->memory_info().reserved, reserved);
  EXPECT_EQ(arena.stats->allocs, 1);
}

TEST(BFCAllocatorTest, SplitsTheRemainderOff) {
  Arena arena = make_arena(kMiB, false);
  void* p = arena->allocate(1000);  // 1024 after rounding
  EXPECT_EQ(arena->memory_info().largest_free_block, kMiB - 1024);
  void* q = arena->allocate(1);  // the remainder starts right after p
  EXPECT_EQ(at(q), at(p) + 1024);
  EXPECT_EQ(arena->memory_info().current, 1024u + 256u);
  EXPECT_EQ(arena->memory_info().largest_free_block, kMiB - 1024 - 256);
}

TEST(BFCAllocatorTest, CoalescesFreeNeighbours) {
  for (bool growth : {false, true}) {
    SCOPED_TRACE(growth ? "growth" : "no growth");
    Arena arena = make_arena(growth ? 16 * kMiB : kMiB, growth);
    void* a = arena->allocate(4 * kKiB);
    void* b = arena->allocate(8 * kKiB);
    void* c = arena->allocate(16 * kKiB);
    ASSERT_EQ(at(b), at(a) + 4 * kKiB);
    ASSERT_EQ(at(c), at(b) + 8 * kKiB);
    const std::size_t reserved = arena->memory_info().reserved;
    arena->deallocate(a);
    arena->deallocate(b);
    // Only the merged 12 KiB hole at `a` fits exactly; the tail after c is larger.
    void* d = arena->allocate(12 * kKiB);
    EXPECT_EQ(d, a);
    EXPECT_EQ(arena->memory_info().reserved, reserved);
    EXPECT_EQ(arena.stats->allocs, 1);
    // Freeing the middle chunk last merges with both neighbours and the tail: one block again.
    arena->deallocate(c);
    arena->deallocate(d);
    const MemoryInfo info = arena->memory_info();
    EXPECT_EQ(info.current, 0u);
    EXPECT_EQ(info.largest_free_block, growth ? 14 * kMiB : kMiB);  // growth: 16 - 2 unreserved
    EXPECT_EQ(arena->allocate(reserved), a);                        // the whole first region in one piece
  }
}

TEST(BFCAllocatorTest, PicksTheSmallestHoleThatFits) {
  Arena arena = make_arena(kMiB, false);
  void* h1 = arena->allocate(8 * kKiB);
  arena->allocate(256);  // separators keep the holes from merging
  void* h2 = arena->allocate(4 * kKiB);
  arena->allocate(256);
  arena->deallocate(h1);
  arena->deallocate(h2);
  // Holes: 8 KiB at h1, 4 KiB at h2, and the large tail. 3 KiB fits best in the 4 KiB hole.
  void* x = arena->allocate(3 * kKiB);
  EXPECT_EQ(x, h2);
  // Its 1 KiB remainder is now the best fit for 1 KiB, ahead of the 8 KiB hole and the tail.
  void* y = arena->allocate(kKiB);
  EXPECT_EQ(at(y), at(h2) + 3 * kKiB);
  void* z = arena->allocate(8 * kKiB);
  EXPECT_EQ(z, h1);
}

TEST(BFCAllocatorTest, OomMessageIsActionableAndArenaRecovers) {
  Arena arena = make_arena(kMiB, false);
  arena->allocate(768 * kKiB, "Tensor float32[196608]");
  arena->allocate(1000, "Tensor int32[250]");  // 1 KiB after rounding
  const MemoryInfo before = arena->memory_info();
  ASSERT_EQ(before.current, 769 * kKiB);

  std::string message;
  {
    ScopedLogContext context(0, 1);
    // 300000 bytes round to 300032; only 1 MiB - 769 KiB = 255 KiB is free.
    message = resource_exhausted_message([&] { arena->allocate(300000, "Tensor float32[75000]"); });
  }
  for (const char* part : {"OOM when allocating", "300000 bytes", "300032", "Tensor float32[75000]", kLogical,
                           kPhysical, "[rank 0 replica 1]", "limit 1.00 MiB", "in use 769.00 KiB", "peak 769.00 KiB",
                           "reserved 1.00 MiB", "largest free block 255.00 KiB", "768.00 KiB (Tensor float32[196608])",
                           "1.00 KiB (Tensor int32[250])", "memory_limit_mb"}) {
    EXPECT_NE(message.find(part), std::string::npos) << "missing '" << part << "' in: " << message;
  }
  // Biggest live allocation first; not fragmented, since free memory is below the request.
  EXPECT_LT(message.find("Tensor float32[196608]"), message.find("Tensor int32[250]"));
  EXPECT_EQ(message.find("fragmented"), std::string::npos) << message;

  // Outside a replica thread there is no context in the message.
  message = resource_exhausted_message([&] { arena->allocate(300000); });
  EXPECT_EQ(message.find("[rank"), std::string::npos) << message;

  // The failures changed nothing, and a smaller request succeeds.
  expect_same_info(arena->memory_info(), before);
  void* p = arena->allocate(200 * kKiB);
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(arena->memory_info().current, 969 * kKiB);
}

TEST(BFCAllocatorTest, RequestLargerThanTheLimitIsOomWithoutOverflow) {
  Arena arena = make_arena(kMiB, true);
  std::string message = resource_exhausted_message([&] { arena->allocate(kMiB + 1); });
  EXPECT_NE(message.find("larger than the limit"), std::string::npos) << message;
  EXPECT_NE(message.find("1048577 bytes"), std::string::npos) << message;
  message = resource_exhausted_message([&] { arena->allocate(std::numeric_limits<std::size_t>::max()); });
  EXPECT_NE(message.find("larger than the limit"), std::string::npos) << message;
  EXPECT_EQ(arena.stats->allocs, 0);  // no region was reserved for a request that cannot fit
  EXPECT_NE(arena->allocate(kMiB), nullptr);
}

TEST(BFCAllocatorTest, FragmentationIsOomAndSaidSo) {
  Arena arena = make_arena(kMiB, false);
  void* a = arena->allocate(256 * kKiB);
  arena->allocate(256 * kKiB);
  void* c = arena->allocate(256 * kKiB);
  arena->allocate(256 * kKiB);  // the arena is full
  arena->deallocate(a);
  arena->deallocate(c);
  // 512 KiB free, but as two 256 KiB blocks that are not neighbours.
  const std::string message = resource_exhausted_message([&] { arena->allocate(384 * kKiB); });
  for (const char* part : {"largest free block 256.00 KiB", "fragmented: 512.00 KiB free in 2 blocks",
                           "in use 512.00 KiB", "256.00 KiB (untagged) x2"}) {
    EXPECT_NE(message.find(part), std::string::npos) << "missing '" << part << "' in: " << message;
  }
  EXPECT_EQ(arena->allocate(256 * kKiB), a);  // equal sizes: the lower address first
}

TEST(BFCAllocatorTest, GrowthReservesIncrementallyAndNeverPastTheLimit) {
  Arena arena = make_arena(10 * kMiB, true);
  EXPECT_EQ(arena->memory_info().reserved, 0u);
  EXPECT_EQ(arena->memory_info().largest_free_block, 10 * kMiB);

  arena->allocate(kKiB);  // first region: max(request, 2 MiB)
  EXPECT_EQ(arena->memory_info().reserved, 2 * kMiB);
  arena->allocate(2 * kMiB);  // 2 MiB - 1 KiB free: a new region of double the last, 4 MiB
  EXPECT_EQ(arena->memory_info().reserved, 6 * kMiB);
  arena->allocate(3 * kMiB);  // no hole of 3 MiB: double would be 8 MiB, clamped to the 4 left
  EXPECT_EQ(arena->memory_info().reserved, 10 * kMiB);
  EXPECT_EQ(arena.stats->sizes, (std::vector<std::size_t>{2 * kMiB, 4 * kMiB, 4 * kMiB}));

  // Free: 2 MiB - 1 KiB, 2 MiB and 1 MiB in three regions; nothing left to reserve.
  MemoryInfo info = arena->memory_info();
  EXPECT_EQ(info.largest_free_block, 2 * kMiB);
  const std::string message = resource_exhausted_message([&] { arena->allocate(3 * kMiB); });
  EXPECT_NE(message.find("fragmented"), std::string::npos) << message;
  EXPECT_NE(message.find("reserved 10.00 MiB"), std::string::npos) << message;
  EXPECT_EQ(arena->memory_info().reserved, 10 * kMiB);
  EXPECT_EQ(arena.stats->allocs, 3);

  arena->allocate(2 * kMiB);  // fits the second region's hole exactly, no new region
  EXPECT_EQ(arena.stats->allocs, 3);
  EXPECT_LE(arena.stats->max_outstanding, 10 * kMiB);

  auto stats = arena.stats;
  { Arena gone = std::move(arena); }  // frees what is live, then destroys the allocator
  EXPECT_EQ(stats->frees, 3);
  EXPECT_EQ(stats->outstanding, 0u);
}

TEST(BFCAllocatorTest, GrowthOomWhenTheRemainderIsTooSmall) {
  Arena arena = make_arena(3 * kMiB, true);
  arena->allocate(2 * kMiB);                                 // first region exactly 2 MiB, full
  EXPECT_EQ(arena->memory_info().largest_free_block, kMiB);  // what is left to reserve
  const std::string message = resource_exhausted_message([&] { arena->allocate(kMiB + kMiB / 2); });
  EXPECT_NE(message.find("1.00 MiB not yet reserved"), std::string::npos) << message;
  EXPECT_EQ(arena.stats->allocs, 1);
  arena->allocate(kMiB);  // the last region, clamped to the 1 MiB the limit leaves
  EXPECT_EQ(arena->memory_info().reserved, 3 * kMiB);
  EXPECT_EQ(arena.stats->sizes, (std::vector<std::size_t>{2 * kMiB, kMiB}));
  EXPECT_EQ(arena->memory_info().largest_free_block, 0u);
}

TEST(BFCAllocatorTest, WithoutGrowthTheLimitIsReservedOnce) {
  Arena arena = make_arena(4 * kMiB, false);
  EXPECT_EQ(arena.stats->allocs, 0);  // nothing before the first allocation
  EXPECT_EQ(arena->memory_info().largest_free_block, 4 * kMiB);
  std::vector<void*> ptrs;
  for (int i = 0; i < 100; ++i) ptrs.push_back(arena->allocate(static_cast<std::size_t>(i) * 100));
  for (void* p : ptrs) arena->deallocate(p);
  EXPECT_EQ(arena.stats->sizes, std::vector<std::size_t>{4 * kMiB});
  EXPECT_EQ(arena->memory_info().reserved, 4 * kMiB);
  EXPECT_EQ(arena->memory_info().largest_free_block, 4 * kMiB);
}

TEST(BFCAllocatorTest, SubAllocatorWithoutMemoryIsResourceExhausted) {
  {  // No growth: the whole limit cannot be reserved.
    Arena arena = make_arena(4 * kMiB, false);
    arena.stats->fail_all = true;
    const std::string message = resource_exhausted_message([&] { arena->allocate(kKiB); });
    for (const char* part : {"could not get its configured limit", "4.00 MiB", kLogical, "counting fake host memory",
                             "set_memory_growth"}) {
      EXPECT_NE(message.find(part), std::string::npos) << "missing '" << part << "' in: " << message;
    }
    EXPECT_EQ(arena->memory_info().reserved, 0u);
    EXPECT_EQ(arena->memory_info().num_allocs, 0);
    arena.stats->fail_all = false;  // the next allocation tries again
    EXPECT_NE(arena->allocate(kKiB), nullptr);
    EXPECT_EQ(arena->memory_info().reserved, 4 * kMiB);
  }
  {  // Growth: the 2 MiB region is refused, the request-sized one is not.
    Arena arena = make_arena(16 * kMiB, true);
    arena.stats->fail_above = kMiB;
    EXPECT_NE(arena->allocate(512 * kKiB), nullptr);
    EXPECT_EQ(arena.stats->failures, 1);
    EXPECT_EQ(arena->memory_info().reserved, 512 * kKiB);
  }
  {  // Growth: nothing at all.
    Arena arena = make_arena(16 * kMiB, true);
    arena.stats->fail_all = true;
    const std::string message = resource_exhausted_message([&] { arena->allocate(kKiB); });
    EXPECT_NE(message.find("counting fake host memory could not provide a region of 1.00 KiB"), std::string::npos)
        << message;
    EXPECT_EQ(arena->memory_info().reserved, 0u);
    arena.stats->fail_all = false;
    EXPECT_NE(arena->allocate(kKiB), nullptr);
  }
}

TEST(BFCAllocatorTest, BadPointersAreInvalidArgumentAndChangeNothing) {
  Arena arena = make_arena(kMiB, false);
  Arena other = make_arena(kMiB, false);
  void* q = arena->allocate(1024);
  void* p = arena->allocate(1024);
  const MemoryInfo before = arena->memory_info();

  int local = 0;
  std::string message = invalid_argument_message([&] { arena->deallocate(&local); });
  EXPECT_NE(message.find(std::string("was not allocated by the allocator of ") + kLogical), std::string::npos)
      << message;
  EXPECT_NE(message.find("pointer 0x"), std::string::npos) << message;
  void* foreign = other->allocate(256);
  EXPECT_THROW(arena->deallocate(foreign), InvalidArgumentError);
  expect_same_info(arena->memory_info(), before);

  message = invalid_argument_message([&] { arena->deallocate(at(q) + 256); });
  EXPECT_NE(message.find("256 bytes into the allocation"), std::string::npos) << message;
  expect_same_info(arena->memory_info(), before);

  arena->deallocate(p);
  const MemoryInfo after_free = arena->memory_info();
  message = invalid_argument_message([&] { arena->deallocate(p); });
  EXPECT_NE(message.find("double free of pointer 0x"), std::string::npos) << message;
  EXPECT_NE(message.find(kLogical), std::string::npos) << message;
  expect_same_info(arena->memory_info(), after_free);

  // Still consistent: everything frees and merges back into the full limit.
  arena->deallocate(q);
  EXPECT_EQ(arena->memory_info().current, 0u);
  EXPECT_EQ(arena->allocate(kMiB), q);
  other->deallocate(foreign);
}

TEST(BFCAllocatorTest, DoubleFreeOfAChunkMergedIntoItsNeighbourIsCaught) {
  Arena arena = make_arena(kMiB, false);
  void* a = arena->allocate(kKiB);
  void* b = arena->allocate(kKiB);
  arena->deallocate(a);
  arena->deallocate(b);  // b merges into a's free block, so b is no chunk's start any more
  const MemoryInfo before = arena->memory_info();
  const std::string message = invalid_argument_message([&] { arena->deallocate(b); });
  EXPECT_NE(message.find("is not allocated: it lies 1024 bytes into a free block"), std::string::npos) << message;
  expect_same_info(arena->memory_info(), before);
  EXPECT_EQ(arena->allocate(kMiB), a);
}

TEST(BFCAllocatorTest, DeallocateNullptrIsANoOp) {
  Arena arena = make_arena(kMiB, false);
  arena->allocate(256);
  const MemoryInfo before = arena->memory_info();
  EXPECT_NO_THROW(arena->deallocate(nullptr));
  expect_same_info(arena->memory_info(), before);
}

TEST(BFCAllocatorTest, MemoryInfoTracksCurrentPeakAndCounts) {
  Arena arena = make_arena(kMiB, false);
  MemoryInfo info = arena->memory_info();
  EXPECT_EQ(info.limit, kMiB);
  EXPECT_EQ(info.current, 0u);
  EXPECT_EQ(info.num_allocs, 0);

  void* a = arena->allocate(kKiB);
  void* b = arena->allocate(2 * kKiB);
  info = arena->memory_info();
  EXPECT_EQ(info.current, 3 * kKiB);
  EXPECT_EQ(info.peak, 3 * kKiB);
  EXPECT_EQ(info.num_allocs, 2);
  EXPECT_EQ(info.num_live, 2);
  EXPECT_EQ(info.reserved, kMiB);

  arena->deallocate(b);
  info = arena->memory_info();
  EXPECT_EQ(info.current, kKiB);
  EXPECT_EQ(info.peak, 3 * kKiB);
  EXPECT_EQ(info.num_allocs, 2);
  EXPECT_EQ(info.num_live, 1);

  arena->reset_peak();
  EXPECT_EQ(arena->memory_info().peak, kKiB);
  EXPECT_THROW(arena->allocate(2 * kMiB), ResourceExhaustedError);
  EXPECT_EQ(arena->memory_info().num_allocs, 2);  // failures are not counted
  arena->deallocate(a);
  info = arena->memory_info();
  EXPECT_EQ(info.current, 0u);
  EXPECT_EQ(info.peak, kKiB);
  EXPECT_EQ(info.num_live, 0);
}

TEST(BFCAllocatorTest, LargestLiveAllocationsBiggestFirst) {
  Arena arena = make_arena(kMiB, false);
  void* a = arena->allocate(kKiB, "a");
  void* b = arena->allocate(4 * kKiB, "b");
  void* c1 = arena->allocate(2 * kKiB, "c1");
  void* d = arena->allocate(8 * kKiB, "d");
  void* c2 = arena->allocate(2 * kKiB);
  arena->deallocate(arena->allocate(16 * kKiB, "freed"));

  std::vector<LiveAllocation> top = arena->largest_live_allocations(4);
  ASSERT_EQ(top.size(), 4u);
  EXPECT_EQ(top[0].ptr, d);
  EXPECT_EQ(top[0].bytes, 8 * kKiB);
  EXPECT_EQ(top[0].tag, "d");
  EXPECT_EQ(top[1].ptr, b);
  EXPECT_EQ(top[1].tag, "b");
  EXPECT_EQ(top[2].ptr, c1);  // equal sizes: the lower address first
  EXPECT_EQ(top[2].bytes, 2 * kKiB);
  EXPECT_EQ(top[3].ptr, c2);
  EXPECT_EQ(top[3].tag, "");

  std::vector<LiveAllocation> all = arena->largest_live_allocations(100);
  ASSERT_EQ(all.size(), 5u);
  EXPECT_EQ(all[4].ptr, a);
  EXPECT_TRUE(arena->largest_live_allocations(0).empty());
}

TEST(BFCAllocatorTest, AllocateZeroGivesUniquePointers) {
  Arena arena = make_arena(kMiB, false);
  std::set<void*> ptrs;
  for (int i = 0; i < 100; ++i) {
    void* p = arena->allocate(0);
    ASSERT_NE(p, nullptr);
    ptrs.insert(p);
  }
  EXPECT_EQ(ptrs.size(), 100u);
  EXPECT_EQ(arena->memory_info().current, 100u * 256u);
  for (void* p : ptrs) arena->deallocate(p);
  EXPECT_EQ(arena->memory_info().current, 0u);
}

void capture_line(LogLevel level, const std::string& line, void* user) {
  if (level == LogLevel::kWarning) static_cast<std::vector<std::string>*>(user)->push_back(line);
}

TEST(BFCAllocatorTest, DestructionWithLiveAllocationsWarnsAndReturnsRegions) {
  std::vector<std::string> lines;
  const LogLevel saved_level = log_level();
  set_log_level(LogLevel::kInfo);
  set_log_sink(&capture_line, &lines);
  Arena arena = make_arena(16 * kMiB, true);
  arena->allocate(kKiB);
  arena->allocate(3 * kMiB);  // a second region
  auto stats = arena.stats;
  arena.allocator.reset();
  set_log_sink(nullptr, nullptr);
  set_log_level(saved_level);

  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("2 live allocation"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(std::to_string(kKiB + 3 * kMiB) + " bytes"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(kLogical), std::string::npos) << lines[0];
  EXPECT_EQ(stats->allocs, 2);
  EXPECT_EQ(stats->frees, 2);
  EXPECT_EQ(stats->outstanding, 0u);
}

// Random allocate/free from several threads. Each allocation is stamped at both ends with its
// owner and checked before it is freed, so two live allocations that overlapped would show.
void stress(Allocator& allocator, int thread_id, int ops, bool tolerate_oom, std::atomic<std::int64_t>& successes) {
  std::mt19937 rng(1234u + static_cast<unsigned>(thread_id));
  std::uniform_int_distribution<std::size_t> size_dist(1, 64 * kKiB);
  struct Live {
    unsigned char* ptr;
    std::size_t bytes;
    unsigned char stamp;
  };
  std::vector<Live> live;
  auto free_one = [&](std::size_t index) {
    Live l = live[index];
    EXPECT_EQ(l.ptr[0], l.stamp);
    EXPECT_EQ(l.ptr[l.bytes - 1], l.stamp);
    allocator.deallocate(l.ptr);
    live[index] = live.back();
    live.pop_back();
  };
  for (int i = 0; i < ops; ++i) {
    if (live.size() < 32 && (live.empty() || rng() % 2 == 0)) {
      const std::size_t bytes = size_dist(rng);
      void* p = nullptr;
      try {
        p = allocator.allocate(bytes, "stress");
      } catch (const ResourceExhaustedError&) {
        if (!tolerate_oom) throw;
        continue;
      }
      const auto stamp = static_cast<unsigned char>(thread_id * 64 + i % 64);
      auto* bytes_ptr = static_cast<unsigned char*>(p);
      bytes_ptr[0] = stamp;
      bytes_ptr[bytes - 1] = stamp;
      live.push_back({bytes_ptr, bytes, stamp});
      successes.fetch_add(1, std::memory_order_relaxed);
    } else {
      free_one(rng() % live.size());
    }
  }
  while (!live.empty()) free_one(live.size() - 1);
}

TEST(BFCAllocatorTest, ThreadedStressCoalescesFully) {
  constexpr std::size_t kLimit = 64 * kMiB;  // 4 threads x 32 x 64 KiB = 8 MiB live at most
  Arena arena = make_arena(kLimit, false);
  std::atomic<std::int64_t> successes{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] { stress(*arena.allocator, t, 4000, false, successes); });
  }
  for (auto& thread : threads) thread.join();

  const MemoryInfo info = arena->memory_info();
  EXPECT_EQ(info.current, 0u);
  EXPECT_EQ(info.num_live, 0);
  EXPECT_EQ(info.num_allocs, successes.load());
  EXPECT_EQ(info.largest_free_block, kLimit);
  void* all = arena->allocate(kLimit);  // only possible if every chunk merged back into one
  EXPECT_NE(all, nullptr);
  arena->deallocate(all);
  EXPECT_EQ(arena.stats->allocs, 1);
}

TEST(BFCAllocatorTest, ThreadedStressWithGrowthStaysUnderTheLimit) {
  constexpr std::size_t kLimit = 32 * kMiB;
  Arena arena = make_arena(kLimit, true);
  std::atomic<std::int64_t> successes{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] { stress(*arena.allocator, t, 4000, true, successes); });
  }
  for (auto& thread : threads) thread.join();

  const MemoryInfo info = arena->memory_info();
  EXPECT_EQ(info.current, 0u);
  EXPECT_EQ(info.num_live, 0);
  EXPECT_EQ(info.num_allocs, successes.load());
  EXPECT_LE(info.reserved, kLimit);
  EXPECT_LE(arena.stats->max_outstanding, kLimit);
  EXPECT_EQ(arena.stats->outstanding, info.reserved);
}

}  // namespace
}  // namespace chorus
