// Shared by the BFC allocator's tests (bfc_allocator_test.cc, bfc_allocator_pool_test.cc): a
// counting fake SubAllocator, so tests see every region the allocator asks for, and an arena on it
// that frees whatever a test left allocated.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <chorus/core/allocator.h>
#include <chorus/core/error.h>

namespace chorus::bfc_testing {

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = 1024 * 1024;
const char* const kLogical = "/job:localhost/replica:0/task:0/device:GPU:1";
const char* const kPhysical = "/physical_device:GPU:0";

// What the fake saw; shared with the test so it survives the allocator.
struct SubStats {
  int allocs = 0;
  int frees = 0;
  int failures = 0;
  std::size_t outstanding = 0;  // bytes handed out and not yet freed
  std::size_t max_outstanding = 0;
  std::vector<std::size_t> sizes;  // of successful allocs, in order
  bool fail_all = false;
  std::size_t fail_above = std::numeric_limits<std::size_t>::max();
};

class CountingSubAllocator final : public SubAllocator {
 public:
  explicit CountingSubAllocator(std::shared_ptr<SubStats> stats) : stats_(std::move(stats)) {}
  void* alloc(std::size_t bytes) override {
    if (stats_->fail_all || bytes > stats_->fail_above) {
      ++stats_->failures;
      return nullptr;
    }
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (p == nullptr) return nullptr;
    ++stats_->allocs;
    stats_->outstanding += bytes;
    stats_->max_outstanding = std::max(stats_->max_outstanding, stats_->outstanding);
    stats_->sizes.push_back(bytes);
    return p;
  }
  void free(void* ptr, std::size_t bytes) override {
    ++stats_->frees;
    stats_->outstanding -= bytes;
    std::free(ptr);
  }
  std::string describe() const override { return "counting fake host memory"; }

 private:
  std::shared_ptr<SubStats> stats_;
};

// An allocator on a fresh fake. Whatever a test leaves allocated is freed at the end, so that
// only the test that wants the destructor's warning about live allocations sees one.
struct Arena {
  Arena() = default;
  Arena(Arena&&) = default;
  ~Arena() {
    if (allocator == nullptr) return;
    for (const LiveAllocation& live : allocator->largest_live_allocations(std::numeric_limits<std::size_t>::max())) {
      allocator->deallocate(live.ptr);
    }
  }
  Allocator* operator->() { return allocator.get(); }

  std::shared_ptr<SubStats> stats;
  std::unique_ptr<Allocator> allocator;
};

inline Arena make_arena(std::size_t limit, bool allow_growth) {
  Arena arena;
  arena.stats = std::make_shared<SubStats>();
  BFCOptions options;
  options.logical_device = kLogical;
  options.physical_device = kPhysical;
  options.memory_limit = limit;
  options.allow_growth = allow_growth;
  arena.allocator = make_bfc_allocator(std::make_unique<CountingSubAllocator>(arena.stats), options);
  return arena;
}

inline char* at(void* p) { return static_cast<char*>(p); }
inline bool aligned_256(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 256 == 0; }

template <typename Fn>
std::string resource_exhausted_message(Fn&& fn) {
  try {
    fn();
  } catch (const ResourceExhaustedError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    return e.message();
  }
  ADD_FAILURE() << "expected ResourceExhaustedError";
  return "";
}

}  // namespace chorus::bfc_testing
