// String components (DType::kString) through the data module: slicing, batching (plain and
// padded, with "" and with a string padding value), unbatch, shuffle, take/skip/repeat, map,
// filter, cache() in memory and on disk (and the cache file's string encoding, its corruption),
// iterator save/restore, string tensors kept on the host under a GPU DeviceScope, and
// experimental_distribute_dataset splitting string components over replicas on the host.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "tests/data/data_test_util.h"
#include <chorus/core/placement.h>
#include <chorus/data/cache_file_internal.h>
#include <chorus/data/dataset.h>
#include <chorus/distribute/mirrored_strategy.h>

namespace chorus::data {
namespace {

using testing::describe_all;
using testing::expect_resumes_anywhere;
using testing::slurp;
using testing::spit;
using testing::TempDir;
using Strings = std::vector<std::string>;

const std::string kLong(300, 'L');  // on the heap, past the small-string buffer
const Strings kWords = {"a", "bb", "", std::string("\0\xff", 2), kLong, "f"};

Dataset words() { return Dataset::from_tensor_slices({Tensor::from_vector(kWords)}); }

// The first component of every element, each a scalar string.
Strings scalars(const Dataset& ds) {
  Strings out;
  for (auto it = ds.make_iterator(); auto e = it.next();) {
    EXPECT_EQ((*e)[0].dtype(), DType::kString);
    EXPECT_EQ((*e)[0].shape().rank(), 0);
    out.push_back((*e)[0].item<std::string>());
  }
  return out;
}

TEST(StringDataset, SlicesAreScalarStringsAndRowsOfMatrices) {
  EXPECT_EQ(scalars(words()), kWords);
  Tensor m = Tensor::from_vector<std::string>({"a", "b", "c", "d", "e", "f"}, {3, 2});
  Tensor ids = Tensor::from_vector<std::int64_t>({7, 8, 9});
  auto it = Dataset::from_tensor_slices({m, ids}).make_iterator();
  auto e = it.next();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)[0].shape(), Shape({2}));
  EXPECT_EQ((*e)[0].to_vector<std::string>(), (Strings{"a", "b"}));
  EXPECT_EQ((*e)[1].item<std::int64_t>(), 7);
  EXPECT_EQ((*it.next())[0].to_vector<std::string>(), (Strings{"c", "d"}));
}

TEST(StringDataset, BatchAndUnbatchRoundTrip) {
  auto it = words().batch(4).make_iterator();
  auto b0 = it.next();
  ASSERT_TRUE(b0.has_value());
  EXPECT_EQ((*b0)[0].shape(), Shape({4}));
  EXPECT_EQ((*b0)[0].to_vector<std::string>(), Strings(kWords.begin(), kWords.begin() + 4));
  EXPECT_EQ((*it.next())[0].to_vector<std::string>(), Strings(kWords.begin() + 4, kWords.end()));  // remainder
  EXPECT_FALSE(it.next().has_value());
  EXPECT_EQ(scalars(words().batch(4).unbatch()), kWords);
  EXPECT_EQ(scalars(words().batch(4, /*drop_remainder=*/true).unbatch()), Strings(kWords.begin(), kWords.begin() + 4));
  // Mixed with numbers, of different shapes per element: batch refuses, as for numbers.
  auto ragged = Dataset::range(1, 3).map([](const Element& e) {
    return Element{Tensor::from_vector(Strings(static_cast<std::size_t>(e[0].item<std::int64_t>()), "x"))};
  });
  EXPECT_THROW(ragged.batch(2).make_iterator().next(), InvalidArgumentError);
}

// Element i (1-based): a [i % 3 + 1, i] string matrix of "i", and i.
Dataset matrices(std::int64_t n) {
  return Dataset::range(1, n + 1).map([](const Element& e) {
    const std::int64_t x = e[0].item<std::int64_t>();
    const Strings v(static_cast<std::size_t>((x % 3 + 1) * x), std::to_string(x) + kLong);
    return Element{Tensor::from_vector(v, Shape{x % 3 + 1, x}), e[0]};
  });
}

TEST(StringDataset, PaddedBatchPadsWithEmptyStringsOrTheGivenValue) {
  auto it = matrices(2).padded_batch(2).make_iterator();
  auto b = it.next();
  ASSERT_TRUE(b.has_value());
  // Element 1 is [2, 1], element 2 is [3, 2]: the batch is [2, 3, 2].
  ASSERT_EQ((*b)[0].shape(), Shape({2, 3, 2}));
  const std::string one = "1" + kLong, two = "2" + kLong;
  EXPECT_EQ((*b)[0].to_vector<std::string>(), (Strings{one, "", one, "", "", "", two, two, two, two, two, two}));
  EXPECT_EQ((*b)[1].to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 2}));

  auto padded = matrices(1).padded_batch(1, std::vector<std::vector<std::int64_t>>{{3, 2}, {}},
                                         std::vector<Tensor>{Tensor::scalar("pad"), Tensor::scalar<std::int64_t>(0)});
  auto p = padded.make_iterator().next();
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ((*p)[0].to_vector<std::string>(), (Strings{one, "pad", one, "pad", "pad", "pad"}));

  // A numeric padding value for a string component, and the other way round.
  auto wrong = matrices(1).padded_batch(1, std::nullopt,
                                        std::vector<Tensor>{Tensor::scalar<std::int64_t>(0), Tensor::scalar("x")});
  try {
    wrong.make_iterator().next();
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("padding_values[0] is int64 but component 0 is string"), std::string::npos)
        << e.what();
  }
}

TEST(StringDataset, ShuffleTakeSkipRepeatMapFilter) {
  Strings shuffled = scalars(words().shuffle(6, 3));
  EXPECT_NE(shuffled, kWords);  // seed 3 moves something
  std::sort(shuffled.begin(), shuffled.end());
  Strings sorted = kWords;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(shuffled, sorted);
  EXPECT_EQ(scalars(words().skip(1).take(2).repeat(2)), (Strings{"bb", "", "bb", ""}));
  auto upper =
      words().filter([](const Element& e) { return !e[0].item<std::string>().empty(); }).map([](const Element& e) {
        std::string s = e[0].item<std::string>();
        for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        return Element{Tensor::scalar(s)};
      });
  EXPECT_EQ(scalars(upper), (Strings{"A", "BB", std::string("\0\xff", 2), std::string(300, 'L'), "F"}));
}

TEST(StringDataset, IteratorStateResumesAnywhere) {
  expect_resumes_anywhere([] { return words().shuffle(3, 11).batch(2); });
  expect_resumes_anywhere([] { return words().batch(4).unbatch(); });
  expect_resumes_anywhere([] { return matrices(5).padded_batch(2).prefetch(2); });
  expect_resumes_anywhere([] { return words().cache().repeat(2); });
}

TEST(StringDataset, CacheInMemoryReadsTheInputOnce) {
  auto reads = std::make_shared<std::atomic<int>>(0);
  auto ds = words()
                .map([reads](const Element& e) {
                  ++*reads;
                  return e;
                })
                .cache();
  EXPECT_EQ(scalars(ds), kWords);
  EXPECT_EQ(scalars(ds), kWords);
  EXPECT_EQ(reads->load(), 6);
}

TEST(StringDataset, CacheFileRoundTripsStringsAndResumes) {
  TempDir dir;
  auto reads = std::make_shared<std::atomic<int>>(0);
  auto build = [&] {
    return matrices(4)
        .map([reads](const Element& e) {
          ++*reads;
          return e;
        })
        .cache(dir / "strings.cache");
  };
  const auto first = describe_all(build());
  EXPECT_EQ(reads->load(), 4);
  EXPECT_EQ(describe_all(build()), first);  // read from the file
  EXPECT_EQ(reads->load(), 4);
  expect_resumes_anywhere(build);
  // The record of one element: its string component encoded as length + bytes per element.
  const std::string rec = internal::encode_cache_element({Tensor::from_vector<std::string>({"ab", ""})});
  const std::string want = std::string("E\x01\0\0\0", 5) + "\x08\x01" + std::string("\x02\0\0\0\0\0\0\0", 8) +
                           std::string("\x02\0\0\0\0\0\0\0", 8) + "ab" + std::string(8, '\0');
  EXPECT_EQ(rec, want);
  const Element back = internal::decode_cache_element(rec, "/CPU:0", "test");
  EXPECT_EQ(back.at(0).to_vector<std::string>(), (Strings{"ab", ""}));
  EXPECT_EQ(internal::encode_cache_element(back), rec);  // canonical
}

// A string length past the record's end, and a count of strings the record cannot hold: refused
// before anything is allocated for them.
TEST(StringDataset, CorruptStringRecordsAreDataLoss) {
  std::string rec = internal::encode_cache_element({Tensor::from_vector<std::string>({"ab", "cd"})});
  std::string bad_len = rec;
  bad_len[5 + 2 + 8] = '\x7f';  // the first string's length: 127 bytes
  try {
    internal::decode_cache_element(bad_len, "/CPU:0", "'x' at offset 9");
    ADD_FAILURE() << "no error";
  } catch (const DataLossError& e) {
    EXPECT_NE(std::string(e.what()).find("a string of 127 bytes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'x' at offset 9"), std::string::npos) << e.what();
  }
  std::string huge = rec;
  huge[5 + 2 + 7] = '\x7f';  // the dimension: about 2^63 strings
  EXPECT_THROW(internal::decode_cache_element(huge, "/CPU:0", "x"), DataLossError);
  EXPECT_THROW(internal::decode_cache_element(rec.substr(0, rec.size() - 1), "/CPU:0", "x"), DataLossError);
}

TEST(StringDataset, StringsStayOnTheHostUnderAGpuScope) {
  chorus::testing::make_cpus(2);
  DeviceScope scope("/GPU:0");  // no GPU here: numbers soft-place, strings go to the host anyway
  auto it = words().batch(2).make_iterator();
  auto e = it.next();
  ASSERT_TRUE(e.has_value());
  EXPECT_FALSE((*e)[0].device_context().is_gpu());
  EXPECT_EQ((*e)[0].to_vector<std::string>(), (Strings{"a", "bb"}));
  auto p = matrices(2).padded_batch(2).make_iterator().next();
  ASSERT_TRUE(p.has_value());
  EXPECT_FALSE((*p)[0].device_context().is_gpu());
}

TEST(StringDataset, DistributeDatasetSplitsStringComponentsOnTheHost) {
  chorus::testing::make_cpus(2);
  distribute::MirroredStrategy strategy(chorus::testing::cpus(2));
  Tensor ids = Tensor::from_vector<std::int64_t>({0, 1, 2, 3, 4, 5});
  auto global = Dataset::from_tensor_slices({Tensor::from_vector(kWords), ids}).batch(3);
  auto it = strategy.experimental_distribute_dataset(global).make_iterator();
  std::vector<std::vector<Strings>> got;  // step → replica → strings
  while (auto batch = it.next()) {
    got.emplace_back();
    for (int r = 0; r < 2; ++r) {
      const Element& part = (*batch)[r];
      EXPECT_EQ(part[0].dtype(), DType::kString);
      EXPECT_EQ(part[0].device_name(), part[1].device_name()) << "a CPU replica gets its strings on its device";
      got.back().push_back(part[0].to_vector<std::string>());
    }
  }
  // 3 rows over 2 replicas: 2 and 1.
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0][0], (Strings{"a", "bb"}));
  EXPECT_EQ(got[0][1], (Strings{""}));
  EXPECT_EQ(got[1][0], (Strings{std::string("\0\xff", 2), kLong}));
  EXPECT_EQ(got[1][1], (Strings{"f"}));
  // A last global batch of one row: the second replica gets an empty [0] string slice.
  auto last = strategy.experimental_distribute_dataset(global.unbatch().batch(5)).make_iterator();
  last.next();
  auto tail = last.next();
  ASSERT_TRUE(tail.has_value());
  EXPECT_EQ((*tail)[0][0].to_vector<std::string>(), (Strings{"f"}));
  EXPECT_EQ((*tail)[1][0].shape(), Shape({0}));
  EXPECT_EQ((*tail)[1][0].dtype(), DType::kString);
}

}  // namespace
}  // namespace chorus::data
