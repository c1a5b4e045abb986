// data/file_cache.cc: cache(filename) writes on the first complete pass, reads afterwards, leaves
// nothing behind when a pass is cut short, and resumes mid-pass when reading and when writing.
// (Damaged and hostile files: file_cache_hostile_test.cc.)
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>

#include "tests/data/data_test_util.h"
#include <chorus/data/dataset.h>

namespace chorus::data {
namespace {

using testing::describe_all;
using testing::describe_rest;
using testing::expect_resumes_anywhere;
using testing::iota;
using testing::TempDir;
using testing::values;
using V = std::vector<std::int64_t>;

// range(n) mapped through a counter of input reads; element i is (i, [i, i]) so shapes vary.
Dataset counted(std::int64_t n, std::shared_ptr<std::atomic<int>> reads) {
  return Dataset::range(n).map([reads](const Element& e) {
    ++*reads;
    const std::int64_t v = e[0].item<std::int64_t>();
    return Element{e[0], Tensor::full(Shape{v % 3, 2}, static_cast<double>(v), DType::kInt32)};
  });
}

TEST(FileCache, TheFirstFullPassWritesLaterPassesRead) {
  TempDir dir;
  auto reads = std::make_shared<std::atomic<int>>(0);
  auto ds = counted(10, reads).cache(dir / "cache");
  const auto first = describe_all(ds);
  EXPECT_EQ(first.size(), 10u);
  EXPECT_EQ(reads->load(), 10);
  EXPECT_EQ(dir.list(), (std::vector<std::string>{"cache"})) << "a temporary file was left";
  EXPECT_EQ(describe_all(ds), first);
  EXPECT_EQ(reads->load(), 10) << "the second pass read the input";
  // Another dataset (another process, in effect) with the same file reads it too.
  auto other_reads = std::make_shared<std::atomic<int>>(0);
  EXPECT_EQ(describe_all(counted(10, other_reads).cache(dir / "cache")), first);
  EXPECT_EQ(other_reads->load(), 0);
  EXPECT_EQ(ds.cardinality(), 10);
}

TEST(FileCache, RepeatWritesOnceThenReads) {
  TempDir dir;
  auto reads = std::make_shared<std::atomic<int>>(0);
  V expected;
  for (int r = 0; r < 3; ++r)
    for (std::int64_t i = 0; i < 6; ++i) expected.push_back(i);
  EXPECT_EQ(values(counted(6, reads).cache(dir / "c").repeat(3)), expected);
  EXPECT_EQ(reads->load(), 6);
}

TEST(FileCache, APassCutShortLeavesNoCache) {
  TempDir dir;
  auto reads = std::make_shared<std::atomic<int>>(0);
  auto ds = counted(10, reads).cache(dir / "cache");
  {
    auto it = ds.make_iterator();
    for (int i = 0; i < 4; ++i) it.next();
  }
  EXPECT_TRUE(dir.list().empty()) << "an abandoned pass left " << dir.list().size() << " files";
  EXPECT_EQ(describe_all(ds).size(), 10u);
  EXPECT_EQ(reads->load(), 14) << "the second pass must read the input again";
  EXPECT_EQ(dir.list(), (std::vector<std::string>{"cache"}));
}

TEST(FileCache, AnInputErrorAbandonsTheFile) {
  TempDir dir;
  auto ds = Dataset::range(5)
                .map([](const Element& e) {
                  if (e[0].item<std::int64_t>() == 2) throw DataLossError("bad input 2");
                  return e;
                })
                .cache(dir / "cache");
  auto it = ds.make_iterator();
  it.next();
  it.next();
  EXPECT_THROW_WITH(it.next(), DataLossError, "bad input 2");
  EXPECT_EQ(testing::first_components(it), (V{3, 4}));
  EXPECT_TRUE(dir.list().empty()) << "a cache missing element 2 was written";
}

TEST(FileCache, EmptyFilenameCachesInMemory) {
  auto reads = std::make_shared<std::atomic<int>>(0);
  auto ds = counted(4, reads).cache("");
  EXPECT_EQ(values(ds), iota(0, 4));
  EXPECT_EQ(values(ds), iota(0, 4));
  EXPECT_EQ(reads->load(), 4);
}

TEST(FileCache, ReadingPassResumesAnywhere) {
  TempDir dir;
  auto build = [&] { return counted(9, std::make_shared<std::atomic<int>>(0)).cache(dir / "cache"); };
  describe_all(build());  // writes the file
  expect_resumes_anywhere(build);
}

TEST(FileCache, WritingPassResumesAnywhereAndTheCacheIsComplete) {
  const std::size_t n = 7;
  for (std::size_t k = 0; k <= n; ++k) {
    TempDir dir;
    auto reads = std::make_shared<std::atomic<int>>(0);
    auto ds = counted(static_cast<std::int64_t>(n), reads).cache(dir / "cache");
    std::vector<std::string> head;
    IteratorState state;
    {
      auto it = ds.make_iterator();
      for (std::size_t i = 0; i < k; ++i) head.push_back(testing::describe(*it.next()));
      state = it.save();
    }  // the saved iterator ends early: its temporary file stays for the state
    EXPECT_FALSE(std::filesystem::exists(dir / "cache"));
    auto resumed = ds.make_iterator();
    resumed.restore(state);
    auto rest = describe_rest(resumed);
    head.insert(head.end(), rest.begin(), rest.end());
    EXPECT_EQ(head.size(), n) << "after " << k;
    EXPECT_EQ(dir.list(), (std::vector<std::string>{"cache"})) << "after " << k;
    const int before = reads->load();
    EXPECT_EQ(describe_all(ds), head) << "the cache written across the restore differs, after " << k;
    EXPECT_EQ(reads->load(), before);
  }
}

TEST(FileCache, ARestoredWriterWhoseFileIsGoneWritesNothing) {
  TempDir dir;
  auto reads = std::make_shared<std::atomic<int>>(0);
  auto ds = counted(6, reads).cache(dir / "cache");
  IteratorState state;
  {
    auto it = ds.make_iterator();
    it.next();
    state = it.save();
  }
  for (const auto& f : dir.list()) std::filesystem::remove(dir / f);  // a cleaned scratch disk
  auto resumed = ds.make_iterator();
  resumed.restore(state);
  EXPECT_EQ(testing::first_components(resumed), (V{1, 2, 3, 4, 5}));
  EXPECT_TRUE(dir.list().empty());
  EXPECT_EQ(values(ds), iota(0, 6));  // a complete pass writes it
  EXPECT_EQ(dir.list(), (std::vector<std::string>{"cache"}));
}

TEST(FileCache, SavingAndGoingOnWhileARestoredCopyAlsoWrites) {
  TempDir dir;
  auto ds = counted(8, std::make_shared<std::atomic<int>>(0)).cache(dir / "cache");
  auto it = ds.make_iterator();
  for (int i = 0; i < 3; ++i) it.next();
  IteratorState state = it.save();
  auto copy = ds.make_iterator();
  copy.restore(state);
  // Interleaved: each writes its own temporary file.
  while (true) {
    auto a = it.next();
    auto b = copy.next();
    ASSERT_EQ(a.has_value(), b.has_value());
    if (!a) break;
    EXPECT_EQ(testing::describe(*a), testing::describe(*b));
  }
  EXPECT_EQ(dir.list(), (std::vector<std::string>{"cache"}));
  EXPECT_EQ(values(ds), iota(0, 8));
}

}  // namespace
}  // namespace chorus::data
