// batch() and padded_batch() given elements that do not match (issue 40, item 9): before, a batch
// whose first element had no components came out as a batch of no components, the other elements
// of it silently dropped, and a mismatch in the component count was reported as
// "component 0: () int64 vs () int64" — the first element's spec twice over. Now every element is
// compared with the batch's first before anything is stacked, and the InvalidArgumentError names
// the element's index in the batch, the component, and both values. Label: hostile.
#include <gtest/gtest.h>

#include "tests/data/data_test_util.h"
#include <chorus/core/error.h>
#include <chorus/data/dataset.h>

namespace chorus::data {
namespace {

using testing::values;

// range(0, 20) with element 0 empty, the others (x).
Dataset first_empty() {
  return Dataset::range(20).map(
      [](const Element& e) { return e[0].to_vector<std::int64_t>()[0] == 0 ? Element{} : Element{e[0]}; });
}

std::string error_of(Iterator it) {
  try {
    for (int i = 0; i < 100; ++i)
      if (!it.next()) return "ended without an error";
  } catch (const InvalidArgumentError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong error class: ") + e.what();
  }
  return "no error in 100 calls";
}

void expect_has(const std::string& msg, const std::vector<std::string>& parts) {
  for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

TEST(BatchingHostile, AnEmptyFirstElementDoesNotSwallowTheBatch) {
  expect_has(error_of(first_empty().batch(10).make_iterator()),
             {"batch: element 1 of the batch has 1 components but element 0 has 0"});
  expect_has(error_of(first_empty().padded_batch(10).make_iterator()),
             {"padded_batch: element 1 of the batch has 1 components but element 0 has 0"});
}

TEST(BatchingHostile, AMismatchNamesTheElementTheComponentAndBothSpecs) {
  // Element 3 has two components where the others have one.
  Dataset extra = Dataset::range(8).map([](const Element& e) {
    return e[0].to_vector<std::int64_t>()[0] == 3 ? Element{e[0], e[0]} : Element{e[0]};
  });
  expect_has(error_of(extra.batch(4).make_iterator()), {"element 3 of the batch has 2 components but element 0 has 1"});
  // Element 2 of the second batch (overall 6) is float32 [2] where element 0 is int64 [].
  Dataset mixed = Dataset::range(8).map([](const Element& e) {
    return e[0].to_vector<std::int64_t>()[0] == 6 ? Element{Tensor::zeros(Shape{2}, DType::kFloat32)} : Element{e[0]};
  });
  auto it = mixed.batch(4).make_iterator();
  EXPECT_EQ(it.next()->at(0).to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 1, 2, 3}));
  expect_has(error_of(std::move(it)),
             {"batch: component 0 of element 2 of the batch is (2,) float32 but element 0's is () int64"});
  expect_has(error_of(mixed.padded_batch(4).make_iterator()),
             {"padded_batch: component 0 of element 2 of the batch is (2,) float32 but element 0's is () int64"});
}

TEST(BatchingHostile, ElementsWithNoComponentsAtAllStillBatch) {
  // All elements empty: as TF's batch of empty tuples, each batch is empty and takes batch_size
  // elements; nothing is dropped that was there.
  auto it = Dataset::range(5).map([](const Element&) { return Element{}; }).batch(2).make_iterator();
  int batches = 0;
  while (auto e = it.next()) {
    EXPECT_TRUE(e->empty());
    ++batches;
  }
  EXPECT_EQ(batches, 3);
  EXPECT_EQ(values(Dataset::range(5).batch(2)), (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
}

}  // namespace
}  // namespace chorus::data
