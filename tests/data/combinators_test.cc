// data/combinators.cc and data/batching.cc: filter, zip, concatenate, enumerate, shard, flat_map,
// padded_batch, unbatch — order, cardinality, errors, and iterator state at every position.
// (Their element order against TensorFlow itself: tf_data_interop_test.cc.)
#include <gtest/gtest.h>

#include "tests/data/data_test_util.h"
#include <chorus/data/dataset.h>

namespace chorus::data {
namespace {

using testing::describe;
using testing::describe_all;
using testing::expect_resumes_anywhere;
using testing::first_components;
using testing::iota;
using testing::values;
using V = std::vector<std::int64_t>;

std::int64_t value_of(const Element& e) { return e[0].item<std::int64_t>(); }
// [v, v, ..., v] (n times), int64 — tf.fill([n], v).
Tensor fill(std::int64_t n, std::int64_t v) { return Tensor::full(Shape{n}, static_cast<double>(v), DType::kInt64); }

TEST(Filter, KeepsMatchingElementsInOrder) {
  auto ds = Dataset::range(20).filter([](const Element& e) { return value_of(e) % 3 == 0; });
  EXPECT_EQ(values(ds), (V{0, 3, 6, 9, 12, 15, 18}));
  EXPECT_EQ(ds.cardinality(), kUnknownCardinality);
  EXPECT_EQ(Dataset::range(0).filter([](const Element&) { return true; }).cardinality(), 0);
  EXPECT_EQ(values(Dataset::range(5).filter([](const Element&) { return false; })), V{});
  EXPECT_THROW_WITH(Dataset::range(3).filter(PredicateFn()), InvalidArgumentError, "predicate is empty");
}

TEST(Filter, APredicateErrorSurfacesAndIterationGoesOn) {
  auto ds = Dataset::range(6).filter([](const Element& e) {
    if (value_of(e) == 2) throw InvalidArgumentError("bad 2");
    return value_of(e) % 2 == 0;
  });
  auto it = ds.make_iterator();
  EXPECT_EQ(value_of(*it.next()), 0);
  EXPECT_THROW_WITH(it.next(), InvalidArgumentError, "bad 2");
  EXPECT_EQ(first_components(it), (V{4}));
}

TEST(Filter, Resumes) {
  expect_resumes_anywhere(
      [] { return Dataset::range(30).filter([](const Element& e) { return value_of(e) % 4 != 1; }); });
}

TEST(Zip, StopsAtTheShortestAndFlattensComponents) {
  auto ds = Dataset::zip({Dataset::range(5), Dataset::range(10, 20), Dataset::range(100, 103)});
  EXPECT_EQ(ds.cardinality(), 3);
  auto it = ds.make_iterator();
  for (std::int64_t i = 0; i < 3; ++i) {
    auto e = it.next();
    ASSERT_TRUE(e);
    ASSERT_EQ(e->size(), 3u);
    EXPECT_EQ((*e)[0].item<std::int64_t>(), i);
    EXPECT_EQ((*e)[1].item<std::int64_t>(), 10 + i);
    EXPECT_EQ((*e)[2].item<std::int64_t>(), 100 + i);
  }
  EXPECT_FALSE(it.next());
  EXPECT_FALSE(it.next());
}

TEST(Zip, CardinalityAndErrors) {
  EXPECT_EQ(Dataset::zip({Dataset::range(3), Dataset::range(10).repeat()}).cardinality(), 3);
  EXPECT_EQ(Dataset::zip({Dataset::range(3).repeat(), Dataset::range(10).repeat()}).cardinality(),
            kInfiniteCardinality);
  EXPECT_EQ(
      Dataset::zip({Dataset::range(3), Dataset::range(9).filter([](const Element&) { return true; })}).cardinality(),
      kUnknownCardinality);
  EXPECT_THROW_WITH(Dataset::zip({}), InvalidArgumentError, "at least one dataset");
  EXPECT_THROW_WITH(Dataset::zip({Dataset::range(2), Dataset()}), FailedPreconditionError, "undefined");
}

TEST(Zip, Resumes) {
  expect_resumes_anywhere([] { return Dataset::zip({Dataset::range(7).shuffle(4, 1), Dataset::range(50, 60)}); });
}

TEST(Concatenate, OrderCardinalityAndStructure) {
  auto ds = Dataset::range(3).concatenate(Dataset::range(10, 13));
  EXPECT_EQ(values(ds), (V{0, 1, 2, 10, 11, 12}));
  EXPECT_EQ(ds.cardinality(), 6);
  EXPECT_EQ(Dataset::range(3).concatenate(Dataset::range(3).repeat()).cardinality(), kInfiniteCardinality);
  EXPECT_EQ(values(Dataset::range(0).concatenate(Dataset::range(2))), (V{0, 1}));
  // Different shapes are allowed (as TF); different dtypes or component counts are not.
  EXPECT_EQ(describe_all(Dataset::from_tensors({fill(2, 1)}).concatenate(Dataset::from_tensors({fill(3, 2)}))),
            (std::vector<std::string>{"int64[2][1, 1]", "int64[3][2, 2, 2]"}));
  auto floats = Dataset::from_tensor_slices({Tensor::from_vector<float>({1, 2})});
  auto it = Dataset::range(2).concatenate(floats).make_iterator();
  it.next();
  it.next();
  EXPECT_THROW_WITH(it.next(), InvalidArgumentError, "incompatible dataset elements", "(int64) vs (float32)");
  auto pairs = Dataset::zip({Dataset::range(2), Dataset::range(2)});
  auto it2 = Dataset::range(1).concatenate(pairs).make_iterator();
  it2.next();
  EXPECT_THROW_WITH(it2.next(), InvalidArgumentError, "(int64) vs (int64, int64)");
}

TEST(Concatenate, Resumes) {
  expect_resumes_anywhere([] { return Dataset::range(4).concatenate(Dataset::range(20, 25).shuffle(3, 9)); });
}

TEST(Enumerate, PrependsACounter) {
  auto ds = Dataset::range(100, 104).enumerate(3);
  EXPECT_EQ(describe_all(ds), (std::vector<std::string>{"int64[][3] ; int64[][100]", "int64[][4] ; int64[][101]",
                                                        "int64[][5] ; int64[][102]", "int64[][6] ; int64[][103]"}));
  EXPECT_EQ(ds.cardinality(), 4);
  expect_resumes_anywhere([] { return Dataset::range(10, 16).enumerate(); });
}

TEST(Shard, EveryNthFromIndex) {
  EXPECT_EQ(values(Dataset::range(10).shard(3, 1)), (V{1, 4, 7}));
  EXPECT_EQ(values(Dataset::range(10).shard(3, 0)), (V{0, 3, 6, 9}));
  EXPECT_EQ(values(Dataset::range(10).shard(1, 0)), iota(0, 10));
  EXPECT_EQ(values(Dataset::range(2).shard(5, 4)), V{});
  EXPECT_EQ(Dataset::range(10).shard(3, 1).cardinality(), 3);
  EXPECT_EQ(Dataset::range(10).shard(3, 0).cardinality(), 4);
  EXPECT_EQ(Dataset::range(10).repeat().shard(3, 0).cardinality(), kInfiniteCardinality);
  EXPECT_THROW_WITH(Dataset::range(5).shard(2, 2), InvalidArgumentError, "index must be between 0 and 1", "index = 2");
  EXPECT_THROW_WITH(Dataset::range(5).shard(2, -1), InvalidArgumentError, "index = -1");
  EXPECT_THROW_WITH(Dataset::range(5).shard(0, 0), InvalidArgumentError, "num_shards = 0");
  expect_resumes_anywhere([] { return Dataset::range(23).shard(4, 3); });
}

TEST(FlatMap, ConcatenatesTheInnerDatasets) {
  auto ds = Dataset::range(5).flat_map([](const Element& e) { return Dataset::range(value_of(e)); });
  EXPECT_EQ(values(ds), (V{0, 0, 1, 0, 1, 2, 0, 1, 2, 3}));
  EXPECT_EQ(ds.cardinality(), kUnknownCardinality);
  EXPECT_THROW_WITH(Dataset::range(2).flat_map(DatasetFn()), InvalidArgumentError, "empty");
  auto bad = Dataset::range(3).flat_map([](const Element& e) {
    if (value_of(e) == 1) throw NotFoundError("no 1");
    return Dataset::from_tensors(e);
  });
  auto it = bad.make_iterator();
  EXPECT_EQ(value_of(*it.next()), 0);
  EXPECT_THROW_WITH(it.next(), NotFoundError, "no 1");
  EXPECT_EQ(first_components(it), (V{2}));
  expect_resumes_anywhere([] {
    return Dataset::range(6).flat_map([](const Element& e) { return Dataset::range(value_of(e)).shuffle(3, 5); });
  });
}

TEST(PaddedBatch, PadsToTheLargestInTheBatch) {
  // tf.data.Dataset.range(1, 6).map(lambda x: tf.fill([x], x)).padded_batch(2)
  auto ds = Dataset::range(1, 6)
                .map([](const Element& e) { return Element{fill(value_of(e), value_of(e))}; })
                .padded_batch(2);
  EXPECT_EQ(describe_all(ds),
            (std::vector<std::string>{"int64[2, 2][1, 0, 2, 2]", "int64[2, 4][3, 3, 3, 0, 4, 4, 4, 4]",
                                      "int64[1, 5][5, 5, 5, 5, 5]"}));
  EXPECT_EQ(ds.cardinality(), 3);
  EXPECT_EQ(ds.unbatch().cardinality(), kUnknownCardinality);
}

TEST(PaddedBatch, FixedShapesValuesAndDropRemainder) {
  auto ds = Dataset::range(1, 6)
                .map([](const Element& e) {
                  return Element{fill(value_of(e), value_of(e)), e[0]};
                })
                .padded_batch(2, std::vector<std::vector<std::int64_t>>{{6}, {}},
                              std::vector<Tensor>{Tensor::scalar<std::int64_t>(-1), Tensor::scalar<std::int64_t>(0)},
                              /*drop_remainder=*/true);
  EXPECT_EQ(ds.cardinality(), 2);
  EXPECT_EQ(describe_all(ds),
            (std::vector<std::string>{"int64[2, 6][1, -1, -1, -1, -1, -1, 2, 2, -1, -1, -1, -1] ; int64[2][1, 2]",
                                      "int64[2, 6][3, 3, 3, -1, -1, -1, 4, 4, 4, 4, -1, -1] ; int64[2][3, 4]"}));
}

TEST(PaddedBatch, TwoDimensions) {
  // Element x: a [x % 3 + 1, x] int32 block of x; padded to [4, -1].
  auto ds = Dataset::range(1, 5)
                .map([](const Element& e) {
                  const std::int64_t x = value_of(e);
                  return Element{Tensor::full(Shape{x % 3 + 1, x}, static_cast<double>(x), DType::kInt32)};
                })
                .padded_batch(3, std::vector<std::vector<std::int64_t>>{{4, -1}});
  EXPECT_EQ(describe_all(ds),
            (std::vector<std::string>{
                "int32[3, 4, 3][1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 0, 2, 2, 0, 2, 2, 0, 0, 0, 0, 3, 3, 3, 0, "
                "0, 0, 0, 0, 0, 0, 0, 0]",
                "int32[1, 4, 4][4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0]"}));
}

TEST(PaddedBatch, Errors) {
  auto ragged = Dataset::range(1, 5).map([](const Element& e) { return Element{fill(value_of(e), value_of(e))}; });
  auto small = ragged.padded_batch(2, std::vector<std::vector<std::int64_t>>{{2}}).make_iterator();
  small.next();  // [1], [2] fit
  EXPECT_THROW_WITH(small.next(), InvalidArgumentError, "smaller size than the input element", "size 4");
  EXPECT_THROW_WITH(ragged.padded_batch(2, std::vector<std::vector<std::int64_t>>{{2, 2}}).make_iterator().next(),
                    InvalidArgumentError, "not compatible", "rank 2 vs 1");
  EXPECT_THROW_WITH(
      ragged.padded_batch(2, std::nullopt, std::vector<Tensor>{Tensor::scalar<float>(1)}).make_iterator().next(),
      InvalidArgumentError, "padding_values[0] is float32", "int64");
  EXPECT_THROW_WITH(ragged.padded_batch(2, std::nullopt, std::vector<Tensor>{fill(1, 1)}), InvalidArgumentError,
                    "must be a scalar");
  EXPECT_THROW_WITH(ragged.padded_batch(0), InvalidArgumentError, "batch_size must be > 0");
  EXPECT_THROW_WITH(ragged.padded_batch(2, std::vector<std::vector<std::int64_t>>{{-2}}), InvalidArgumentError,
                    "dimension -2");
  auto mixed =
      Dataset::from_tensors({fill(2, 1)}).concatenate(Dataset::from_tensors({Tensor::scalar<std::int64_t>(3)}));
  EXPECT_THROW_WITH(mixed.padded_batch(2).make_iterator().next(), InvalidArgumentError, "elements may differ only");
  EXPECT_THROW_WITH(ragged.padded_batch(2, std::vector<std::vector<std::int64_t>>{{2}, {}}).make_iterator().next(),
                    InvalidArgumentError, "2 padded_shapes for elements of 1 components");
}

TEST(PaddedBatch, Resumes) {
  expect_resumes_anywhere([] {
    return Dataset::range(1, 9)
        .map([](const Element& e) { return Element{fill(value_of(e), value_of(e))}; })
        .shuffle(4, 2)
        .padded_batch(3);
  });
}

TEST(Unbatch, SplitsRows) {
  EXPECT_EQ(values(Dataset::range(10).batch(3).unbatch()), iota(0, 10));
  auto ds = Dataset::zip({Dataset::range(4).batch(2), Dataset::range(10, 14).batch(2)}).unbatch();
  EXPECT_EQ(describe_all(ds), (std::vector<std::string>{"int64[][0] ; int64[][10]", "int64[][1] ; int64[][11]",
                                                        "int64[][2] ; int64[][12]", "int64[][3] ; int64[][13]"}));
  EXPECT_EQ(values(Dataset::from_tensors({Tensor::zeros(Shape{0, 2}, DType::kInt64)}).unbatch()), V{});
}

TEST(Unbatch, Errors) {
  EXPECT_THROW_WITH(Dataset::range(3).unbatch().make_iterator().next(), InvalidArgumentError, "scalar components");
  auto mismatch = Dataset::zip({Dataset::range(3).batch(2), Dataset::range(3).batch(3)}).unbatch().make_iterator();
  EXPECT_THROW_WITH(mismatch.next(), InvalidArgumentError, "same batch size", "Component 0 had size 2",
                    "component 1 had size 3");
}

TEST(Unbatch, Resumes) {
  expect_resumes_anywhere([] { return Dataset::range(11).batch(4).unbatch(); });
  expect_resumes_anywhere([] { return Dataset::range(11).shuffle(5, 3).batch(4).unbatch().batch(3); });
}

}  // namespace
}  // namespace chorus::data
