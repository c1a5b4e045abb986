// data/list_files.cc: glob matching, sorted without shuffle, a seeded permutation with it, errors,
// iterator state, and the usual pipeline list_files -> interleave(tfrecord_dataset).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "tests/data/data_test_util.h"
#include <chorus/data/dataset.h>
#include <chorus/data/tfrecord.h>

namespace chorus::data {
namespace {

using testing::expect_resumes_anywhere;
using testing::spit;
using testing::TempDir;

std::vector<std::string> names(const Dataset& ds) {
  std::vector<std::string> out;
  for (auto it = ds.make_iterator(); auto e = it.next();) {
    EXPECT_EQ((*e)[0].dtype(), DType::kString);
    EXPECT_EQ((*e)[0].shape().rank(), 0);  // a scalar string tensor, as TF's
    out.push_back((*e)[0].item<std::string>());
  }
  return out;
}

class ListFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* n : {"b.rec", "a.rec", "c.rec", "d.txt", "e.rec", "f.rec"}) spit(dir_ / n, n);
  }
  std::vector<std::string> recs() const {
    return {dir_ / "a.rec", dir_ / "b.rec", dir_ / "c.rec", dir_ / "e.rec", dir_ / "f.rec"};
  }
  TempDir dir_;
};

TEST_F(ListFiles, SortedWithoutShuffle) {
  auto ds = Dataset::list_files({dir_ / "*.rec"}, /*shuffle=*/false);
  EXPECT_EQ(names(ds), recs());
  EXPECT_EQ(ds.cardinality(), 5);
  // Several patterns: the union, sorted, each name once.
  EXPECT_EQ(names(Dataset::list_files({dir_ / "[ab].rec", dir_ / "?.rec", dir_ / "d.txt"}, false)),
            (std::vector<std::string>{dir_ / "a.rec", dir_ / "b.rec", dir_ / "c.rec", dir_ / "d.txt", dir_ / "e.rec",
                                      dir_ / "f.rec"}));
}

TEST_F(ListFiles, ShuffledDeterministicallyForASeed) {
  auto a = Dataset::list_files({dir_ / "*.rec"}, true, 42);
  auto b = Dataset::list_files({dir_ / "*.rec"}, true, 42);
  const auto first = names(a);
  EXPECT_EQ(first, names(b)) << "the same seed gave different orders";
  auto sorted = first;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, recs()) << "not a permutation";
  // A new order each pass (reshuffle_each_iteration, as TF); the pass sequence is fixed by the seed.
  std::set<std::vector<std::string>> orders{first};
  for (int pass = 0; pass < 8; ++pass) orders.insert(names(a));
  EXPECT_GT(orders.size(), 1u);
  auto c = Dataset::list_files({dir_ / "*.rec"}, true, 42);
  EXPECT_EQ(names(c), first);
}

TEST_F(ListFiles, Errors) {
  EXPECT_THROW_WITH(Dataset::list_files({dir_ / "*.none"}), InvalidArgumentError, "No files matched pattern", "*.none");
  EXPECT_THROW_WITH(Dataset::list_files({}), InvalidArgumentError, "no file patterns");
  EXPECT_THROW_WITH(Dataset::list_files({""}), InvalidArgumentError, "empty file pattern");
  EXPECT_THROW_WITH(Dataset::list_files({"/nonexistent-dir/*"}), InvalidArgumentError, "/nonexistent-dir/*");
}

TEST_F(ListFiles, Resumes) {
  expect_resumes_anywhere([&] { return Dataset::list_files({dir_ / "*"}, false); });
  expect_resumes_anywhere([&] { return Dataset::list_files({dir_ / "*"}, true, 7); });
}

TEST_F(ListFiles, FeedsInterleavedTFRecordReaders) {
  for (int f = 0; f < 3; ++f) {
    std::vector<std::string> records;
    for (int r = 0; r < 4; ++r) records.push_back(std::to_string(f) + ":" + std::to_string(r));
    write_tfrecord_file(dir_ / ("part" + std::to_string(f) + ".tfrecord"), records);
  }
  auto ds = Dataset::list_files({dir_ / "part*.tfrecord"}, false)
                .interleave([](const Element& e) { return tfrecord_dataset({e[0].item<std::string>()}); }, 2, 2, 2);
  EXPECT_EQ(names(ds), (std::vector<std::string>{"0:0", "0:1", "1:0", "1:1", "0:2", "0:3", "1:2", "1:3", "2:0", "2:1",
                                                 "2:2", "2:3"}));
}

}  // namespace
}  // namespace chorus::data
