// data/interleave.cc: TF's interleave order (sequential and with worker threads), nondeterministic
// mode, errors, early destruction, and iterator state at every position.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "tests/data/data_test_util.h"
#include <chorus/data/dataset.h>

namespace chorus::data {
namespace {

using testing::expect_resumes_anywhere;
using testing::first_components;
using testing::values;
using V = std::vector<std::int64_t>;

std::int64_t value_of(const Element& e) { return e[0].item<std::int64_t>(); }

// The example of tf.data.Dataset.interleave's documentation.
Dataset doc_example(std::int64_t parallel) {
  return Dataset::range(1, 6).interleave([](const Element& e) { return Dataset::from_tensors(e).repeat(6); },
                                         /*cycle_length=*/2, /*block_length=*/4, parallel);
}
const V kDocExample = {1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5};

TEST(Interleave, TheDocumentationsExample) {
  EXPECT_EQ(values(doc_example(1)), kDocExample);
  EXPECT_EQ(doc_example(1).cardinality(), kUnknownCardinality);
}

TEST(Interleave, UnevenInnerDatasetsRefillTheirSlot) {
  // x -> [10x, 10x + x), cycle 3, block 2: slot order as TF's InterleaveDataset.
  auto ds = Dataset::range(1, 6).interleave(
      [](const Element& e) { return Dataset::range(10 * value_of(e), 11 * value_of(e)); }, 3, 2);
  EXPECT_EQ(values(ds), (V{10, 20, 21, 30, 31, 40, 41, 32, 42, 43, 50, 51, 52, 53, 54}));
}

TEST(Interleave, ParallelWorkersKeepTheSequentialOrder) {
  // Inner elements sleep unevenly, so workers finish out of order; the output must not change.
  auto make = [](std::int64_t parallel) {
    return Dataset::range(1, 8).interleave(
        [](const Element& e) {
          return Dataset::range(0, value_of(e)).map([x = value_of(e)](const Element& inner) {
            std::this_thread::sleep_for(std::chrono::microseconds(300 * ((x * 7 + value_of(inner)) % 5)));
            return Element{Tensor::scalar<std::int64_t>(100 * x + value_of(inner))};
          });
        },
        3, 2, parallel);
  };
  const V sequential = values(make(1));
  EXPECT_EQ(sequential.size(), 28u);
  EXPECT_EQ(values(make(2)), sequential);
  EXPECT_EQ(values(make(3)), sequential);
  EXPECT_EQ(values(make(kAutotune)), sequential);
  EXPECT_EQ(values(doc_example(2)), kDocExample);
}

TEST(Interleave, NondeterministicReturnsReadyElementsFirst) {
  // Inner dataset 0 is slow: each of its elements waits until the others have produced one (up to
  // 10 s: an interleave that runs the inner datasets one by one gets there only by the deadline),
  // then 30 ms more for that one to reach the output. With deterministic = false the others'
  // elements come first.
  auto others = std::make_shared<std::atomic<int>>(0);
  auto ds = Dataset::range(3).interleave(
      [others](const Element& e) {
        const std::int64_t x = value_of(e);
        return Dataset::range(10 * x, 10 * x + 3).map([x, others](const Element& inner) {
          if (x != 0) {
            ++*others;
            return inner;
          }
          const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          while (others->load() == 0 && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          std::this_thread::sleep_for(std::chrono::milliseconds(30));
          return inner;
        });
      },
      3, 1, 3, /*deterministic=*/false);
  V got = values(ds);
  ASSERT_EQ(got.size(), 9u);
  EXPECT_NE(got[0], 0) << "the slow inner dataset's first element came first";
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (V{0, 1, 2, 10, 11, 12, 20, 21, 22}));
}

TEST(Interleave, ArgumentErrors) {
  auto fn = [](const Element& e) { return Dataset::from_tensors(e); };
  EXPECT_THROW_WITH(Dataset::range(3).interleave(fn, 0), InvalidArgumentError,
                    "cycle_length must be greater than zero");
  EXPECT_THROW_WITH(Dataset::range(3).interleave(fn, 2, 0), InvalidArgumentError,
                    "block_length must be greater than zero");
  EXPECT_THROW_WITH(Dataset::range(3).interleave(fn, 2, 1, 0), InvalidArgumentError, "num_parallel_calls", "got 0");
  EXPECT_THROW_WITH(Dataset::range(3).interleave(fn, 2, 1, 4), InvalidArgumentError, "num_parallel_calls 4",
                    "cycle_length 2");
  EXPECT_THROW_WITH(Dataset::range(3).interleave(DatasetFn()), InvalidArgumentError, "empty");
}

TEST(Interleave, ErrorsSurfaceInPlaceAndIterationGoesOn) {
  for (std::int64_t parallel : {1, 2}) {
    auto ds = Dataset::range(2).interleave(
        [](const Element& e) {
          return Dataset::range(3).map([x = value_of(e)](const Element& inner) {
            if (x == 1 && value_of(inner) == 1) throw DataLossError("bad element");
            return Element{Tensor::scalar<std::int64_t>(10 * x + value_of(inner))};
          });
        },
        2, 1, parallel);
    auto it = ds.make_iterator();
    EXPECT_EQ(value_of(*it.next()), 0);
    EXPECT_EQ(value_of(*it.next()), 10);
    EXPECT_EQ(value_of(*it.next()), 1);
    EXPECT_THROW_WITH(it.next(), DataLossError, "bad element");  // slot 1's turn, its error
    EXPECT_EQ(first_components(it), (V{12, 2})) << "parallel " << parallel;
  }
  for (std::int64_t parallel : {1, 2}) {
    auto fn_throws = Dataset::range(5).interleave(
        [](const Element& e) {
          if (value_of(e) == 1) throw NotFoundError("no dataset for 1");
          return Dataset::range(10 * value_of(e), 10 * value_of(e) + 2);
        },
        2, 1, parallel);
    // Sequentially: slot 0 <- 0; slot 1 <- fn(1) throws; slot 1 <- 2; ...
    auto it = fn_throws.make_iterator();
    EXPECT_EQ(value_of(*it.next()), 0);
    EXPECT_THROW_WITH(it.next(), NotFoundError, "no dataset for 1");
    EXPECT_EQ(first_components(it), (V{20, 1, 21, 30, 40, 31, 41})) << "parallel " << parallel;
  }
}

TEST(Interleave, DestroyingEarlyDoesNotHang) {
  for (int round = 0; round < 20; ++round) {
    auto it = Dataset::range(100)
                  .interleave([](const Element& e) { return Dataset::from_tensors(e).repeat(50); }, 4, 3, 4)
                  .make_iterator();
    for (int i = 0; i < round; ++i) it.next();
  }
}

TEST(Interleave, Resumes) {
  auto fn = [](const Element& e) { return Dataset::range(10 * value_of(e), 11 * value_of(e)); };
  expect_resumes_anywhere([&] { return Dataset::range(1, 7).interleave(fn, 3, 2); });
  expect_resumes_anywhere([&] { return Dataset::range(1, 7).interleave(fn, 3, 2, 3); });
  expect_resumes_anywhere([&] { return Dataset::range(1, 7).interleave(fn, 2, 3, kAutotune); });
}

}  // namespace
}  // namespace chorus::data
