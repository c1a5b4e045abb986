// data/dataset.cc: sources and the single-threaded transformations, cardinality, argument errors,
// the pipeline device, and iterator save/restore. Expected sequences are derived from the
// definitions (TF's semantics), not from running the code.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <set>

#include "tests/data/data_test_util.h"
#include <chorus/core/placement.h>
#include <chorus/data/dataset.h>
#include <chorus/ops/elementwise.h>
#include <chorus/ops/random.h>

namespace chorus::data {
namespace {

using testing::first_components;
using testing::iota;
using testing::values;
using V = std::vector<std::int64_t>;

Dataset slices(std::int64_t n) {
  std::vector<std::int64_t> x = iota(0, n);
  return Dataset::from_tensor_slices({Tensor::from_vector<std::int64_t>(x, Shape{n})});
}

// A source whose cardinality is unknown (as a filter's would be).
class UnknownSizeDataset final : public DatasetBase {
 public:
  std::unique_ptr<IteratorBase> make_iterator() const override { return Dataset::range(3).impl()->make_iterator(); }
  std::string name() const override { return "Unknown"; }
  std::int64_t cardinality() const override { return kUnknownCardinality; }
};

TEST(Sources, FromTensorSlicesSlicesEveryComponent) {
  auto ds = Dataset::from_tensor_slices(
      {Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2}), Tensor::from_vector<std::int32_t>({7, 8, 9})});
  EXPECT_EQ(ds.cardinality(), 3);
  auto it = ds.make_iterator();
  for (int i = 0; i < 3; ++i) {
    auto e = it.next();
    ASSERT_TRUE(e.has_value());
    ASSERT_EQ(e->size(), 2u);
    EXPECT_EQ((*e)[0].shape(), Shape({2}));
    EXPECT_EQ((*e)[0].to_vector<float>(), (std::vector<float>{2.0f * i + 1, 2.0f * i + 2}));
    EXPECT_EQ((*e)[1].shape(), Shape({}));
    EXPECT_EQ((*e)[1].item<std::int32_t>(), 7 + i);
  }
  EXPECT_FALSE(it.next().has_value());
  EXPECT_FALSE(it.next().has_value());  // the end stays the end
}

TEST(Sources, FromTensorSlicesRejectsMismatchedRowsAndScalars) {
  EXPECT_THROW_WITH(Dataset::from_tensor_slices({Tensor::zeros({3, 2}), Tensor::zeros({4})}), InvalidArgumentError,
                    "component 1 has 4 rows", "component 0 has 3");
  EXPECT_THROW_WITH(Dataset::from_tensor_slices({Tensor::scalar<float>(1)}), InvalidArgumentError, "scalar");
  EXPECT_THROW_WITH(Dataset::from_tensor_slices({}), InvalidArgumentError, "no components");
  EXPECT_THROW_WITH(Dataset().batch(2), FailedPreconditionError, "undefined");
}

TEST(Sources, EmptySlicesAndFromTensors) {
  EXPECT_EQ(values(Dataset::from_tensor_slices({Tensor::zeros({0, 3})})), V{});
  auto one = Dataset::from_tensors({Tensor::from_vector<std::int64_t>({4, 5})});
  EXPECT_EQ(one.cardinality(), 1);
  EXPECT_EQ(values(one), (V{4, 5}));
}

TEST(Sources, RangeFollowsPythonRange) {
  EXPECT_EQ(values(Dataset::range(5)), iota(0, 5));
  EXPECT_EQ(values(Dataset::range(2, 10, 3)), (V{2, 5, 8}));
  EXPECT_EQ(values(Dataset::range(5, 0, -2)), (V{5, 3, 1}));
  EXPECT_EQ(values(Dataset::range(0)), V{});
  EXPECT_EQ(values(Dataset::range(3, 1)), V{});
  EXPECT_EQ(Dataset::range(2, 10, 3).cardinality(), 3);
  EXPECT_EQ(Dataset::range(5, 0, -2).cardinality(), 3);
  EXPECT_EQ(Dataset::range(3, 1).cardinality(), 0);
  auto e = Dataset::range(1).make_iterator().next();
  EXPECT_EQ((*e)[0].dtype(), DType::kInt64);  // TF's range yields int64
  EXPECT_EQ((*e)[0].shape(), Shape({}));
  EXPECT_THROW_WITH(Dataset::range(0, 5, 0), InvalidArgumentError, "step must not be 0");
}

TEST(Batch, RemainderAndDropRemainder) {
  EXPECT_EQ(values(Dataset::range(7).batch(3)), iota(0, 7));
  auto it = Dataset::range(7).batch(3).make_iterator();
  EXPECT_EQ((*it.next())[0].shape(), Shape({3}));
  EXPECT_EQ((*it.next())[0].shape(), Shape({3}));
  EXPECT_EQ((*it.next())[0].to_vector<std::int64_t>(), V{6});  // the remainder
  EXPECT_FALSE(it.next().has_value());
  EXPECT_EQ(values(Dataset::range(7).batch(3, true)), iota(0, 6));
  EXPECT_EQ(Dataset::range(7).batch(3).cardinality(), 3);
  EXPECT_EQ(Dataset::range(7).batch(3, true).cardinality(), 2);
  EXPECT_EQ(values(Dataset::range(0).batch(3)), V{});
  EXPECT_EQ(values(Dataset::range(2).batch(3, true)), V{});
  auto rows = Dataset::from_tensor_slices({Tensor::zeros({5, 2, 3})}).batch(2).make_iterator();
  EXPECT_EQ((*rows.next())[0].shape(), Shape({2, 2, 3}));
}

TEST(Batch, ErrorsNameTheNumbers) {
  EXPECT_THROW_WITH(Dataset::range(3).batch(0), InvalidArgumentError, "batch_size must be > 0, got 0");
  EXPECT_THROW_WITH(Dataset::range(3).batch(-4), InvalidArgumentError, "got -4");
  // Elements of different shapes cannot be stacked: the error comes from next().
  auto ragged = Dataset::range(1, 4).map(
      [](const Element& e) { return Element{Tensor::zeros(Shape{e[0].item<std::int64_t>()})}; });
  auto it = ragged.batch(2).make_iterator();
  EXPECT_THROW_WITH(it.next(), InvalidArgumentError,
                    "component 0 of element 1 of the batch is (2,) float32 but element 0's is (1,) float32");
}

TEST(Shuffle, IsAPermutationAndDeterministicWithASeed) {
  auto a = values(Dataset::range(100).shuffle(10, 42));
  auto b = values(Dataset::range(100).shuffle(10, 42));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, iota(0, 100));
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, iota(0, 100));
  EXPECT_NE(values(Dataset::range(100).shuffle(10, 43)), a);
  EXPECT_EQ(values(Dataset::range(0).shuffle(10, 1)), V{});
  EXPECT_EQ(values(Dataset::range(20).shuffle(1, 5)), iota(0, 20));  // a buffer of one shuffles nothing
}

TEST(Shuffle, BufferSemantics) {
  // Output j is drawn from a buffer holding input elements [0, j + buffer): never later ones.
  const std::int64_t buffer = 5;
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    auto out = values(Dataset::range(50).shuffle(buffer, seed));
    for (std::size_t j = 0; j < out.size(); ++j)
      EXPECT_LT(out[j], static_cast<std::int64_t>(j) + buffer) << "seed " << seed;
  }
  // With the whole input in the buffer, the first element is uniform over it: 4000 seeds over 4
  // values give 1000 each, standard deviation sqrt(4000 * 1/4 * 3/4) ≈ 27; allow 6 sigma.
  std::map<std::int64_t, int> first;
  for (std::uint64_t seed = 0; seed < 4000; ++seed) first[values(Dataset::range(4).shuffle(4, seed), 1)[0]]++;
  for (std::int64_t v = 0; v < 4; ++v) EXPECT_NEAR(first[v], 1000, 165) << "value " << v;
}

TEST(Shuffle, ReshuffleEachIteration) {
  auto ds = Dataset::range(30).shuffle(30, 7);
  auto epoch0 = values(ds), epoch1 = values(ds), epoch2 = values(ds);
  EXPECT_NE(epoch0, epoch1);
  EXPECT_NE(epoch1, epoch2);
  // A rebuilt pipeline with the same seed walks the same sequence of orders.
  auto again = Dataset::range(30).shuffle(30, 7);
  EXPECT_EQ(values(again), epoch0);
  EXPECT_EQ(values(again), epoch1);
  // Under repeat, each epoch is a new permutation of the same sequence.
  auto repeated = values(Dataset::range(30).shuffle(30, 7).repeat(3));
  ASSERT_EQ(repeated.size(), 90u);
  EXPECT_EQ(V(repeated.begin(), repeated.begin() + 30), epoch0);
  EXPECT_EQ(V(repeated.begin() + 30, repeated.begin() + 60), epoch1);
  EXPECT_EQ(V(repeated.begin() + 60, repeated.end()), epoch2);
  // reshuffle_each_iteration=false: every pass has the same order.
  auto fixed = Dataset::range(30).shuffle(30, 7, false);
  auto f0 = values(fixed);
  EXPECT_EQ(values(fixed), f0);
  EXPECT_EQ(f0, epoch0);
}

TEST(Shuffle, UnseededFollowsTheGlobalSeed) {
  ops::set_seed(11);
  auto a = values(Dataset::range(40).shuffle(40));
  ops::set_seed(11);
  auto b = values(Dataset::range(40).shuffle(40));
  EXPECT_EQ(a, b);
}

TEST(Shuffle, Errors) {
  EXPECT_THROW_WITH(Dataset::range(3).shuffle(0), InvalidArgumentError, "buffer_size must be > 0, got 0");
  EXPECT_THROW_WITH(Dataset::range(3).shuffle(-2, 1), InvalidArgumentError, "got -2");
}

TEST(Repeat, CountsAndForever) {
  EXPECT_EQ(values(Dataset::range(2).repeat(3)), (V{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(values(Dataset::range(2).repeat(0)), V{});
  EXPECT_EQ(values(Dataset::range(2).repeat().take(7)), (V{0, 1, 0, 1, 0, 1, 0}));
  EXPECT_EQ(values(Dataset::range(2).repeat(-1).take(5)), (V{0, 1, 0, 1, 0}));
  EXPECT_EQ(values(Dataset::range(0).repeat()), V{});  // an empty pass ends an endless repeat
  EXPECT_EQ(Dataset::range(2).repeat(3).cardinality(), 6);
  EXPECT_EQ(Dataset::range(2).repeat().cardinality(), kInfiniteCardinality);
  EXPECT_EQ(Dataset::range(0).repeat().cardinality(), 0);
  EXPECT_EQ(Dataset::range(2).repeat(0).cardinality(), 0);
  EXPECT_EQ(Dataset(std::make_shared<UnknownSizeDataset>()).repeat(2).cardinality(), kUnknownCardinality);
  EXPECT_THROW_WITH(Dataset::range(2).repeat(-2), InvalidArgumentError, "count must be >= -1", "got -2");
}

TEST(TakeSkip, Semantics) {
  EXPECT_EQ(values(Dataset::range(5).take(2)), (V{0, 1}));
  EXPECT_EQ(values(Dataset::range(5).take(0)), V{});
  EXPECT_EQ(values(Dataset::range(5).take(-1)), iota(0, 5));
  EXPECT_EQ(values(Dataset::range(5).take(9)), iota(0, 5));
  EXPECT_EQ(values(Dataset::range(5).skip(2)), (V{2, 3, 4}));
  EXPECT_EQ(values(Dataset::range(5).skip(0)), iota(0, 5));
  EXPECT_EQ(values(Dataset::range(5).skip(-1)), V{});
  EXPECT_EQ(values(Dataset::range(5).skip(9)), V{});
  EXPECT_EQ(values(Dataset::range(3).repeat().skip(2).take(4)), (V{2, 0, 1, 2}));
  EXPECT_EQ(values(Dataset::range(10).skip(3).take(2)), (V{3, 4}));

  EXPECT_EQ(Dataset::range(10).take(3).cardinality(), 3);
  EXPECT_EQ(Dataset::range(2).take(3).cardinality(), 2);
  EXPECT_EQ(Dataset::range(10).take(-1).cardinality(), 10);
  EXPECT_EQ(Dataset::range(2).repeat().take(3).cardinality(), 3);
  EXPECT_EQ(Dataset::range(10).skip(3).cardinality(), 7);
  EXPECT_EQ(Dataset::range(10).skip(30).cardinality(), 0);
  EXPECT_EQ(Dataset::range(10).skip(-1).cardinality(), 0);
  EXPECT_EQ(Dataset::range(2).repeat().skip(3).cardinality(), kInfiniteCardinality);
  Dataset unknown(std::make_shared<UnknownSizeDataset>());
  EXPECT_EQ(unknown.take(2).cardinality(), kUnknownCardinality);
  EXPECT_EQ(unknown.skip(2).cardinality(), kUnknownCardinality);
  EXPECT_EQ(unknown.batch(2).cardinality(), kUnknownCardinality);

  EXPECT_THROW_WITH(Dataset::range(5).take(-2), InvalidArgumentError, "take", "got -2");
  EXPECT_THROW_WITH(Dataset::range(5).skip(-3), InvalidArgumentError, "skip", "got -3");
}

TEST(Take, NeverPullsPastTheCount) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto ds = Dataset::range(100).map([calls](const Element& e) {
    ++*calls;
    return e;
  });
  EXPECT_EQ(values(ds.take(3)), (V{0, 1, 2}));
  EXPECT_EQ(calls->load(), 3);
}

TEST(Cache, SecondEpochReadsTheCache) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto ds = Dataset::range(6)
                .map([calls](const Element& e) {
                  ++*calls;
                  return Element{ops::mul(e[0], Tensor::scalar<std::int64_t>(10))};
                })
                .cache();
  const V expected = {0, 10, 20, 30, 40, 50};
  EXPECT_EQ(values(ds.repeat(3)), [&] {
    V v;
    for (int r = 0; r < 3; ++r) v.insert(v.end(), expected.begin(), expected.end());
    return v;
  }());
  EXPECT_EQ(calls->load(), 6);  // epochs 2 and 3 never ran the map
  EXPECT_EQ(values(ds), expected);
  EXPECT_EQ(calls->load(), 6);
  EXPECT_EQ(ds.cardinality(), 6);
}

TEST(Cache, AnAbandonedFirstPassStoresNothing) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto ds = Dataset::range(5)
                .map([calls](const Element& e) {
                  ++*calls;
                  return e;
                })
                .cache();
  EXPECT_EQ(values(ds, 2), (V{0, 1}));
  EXPECT_EQ(calls->load(), 2);
  EXPECT_EQ(values(ds), iota(0, 5));  // reads the input again, to the end
  EXPECT_EQ(calls->load(), 7);
  EXPECT_EQ(values(ds), iota(0, 5));
  EXPECT_EQ(calls->load(), 7);
  EXPECT_EQ(values(Dataset::range(0).cache().repeat(3)), V{});
}

TEST(Cache, FreezesAShuffledOrder) {
  auto ds = Dataset::range(20).shuffle(20, 3).cache();
  auto first = values(ds);
  EXPECT_EQ(values(ds), first);
  EXPECT_NE(first, iota(0, 20));
}

TEST(EmptyDataset, EveryTransformationPassesTheEnd) {
  auto ds = Dataset::range(0)
                .shuffle(4, 1)
                .map([](const Element& e) { return e; }, 2)
                .batch(2)
                .repeat(2)
                .skip(1)
                .take(3)
                .cache()
                .prefetch(2);
  EXPECT_EQ(values(ds), V{});
  EXPECT_EQ(ds.cardinality(), 0);
}

TEST(PipelineDevice, ElementsAndMapFunctionsFollowTheCallersScope) {
  testing::make_two_cpus();
  auto ds = Dataset::range(4).map([](const Element& e) { return Element{e[0], Tensor::zeros({1})}; }, 2);
  {
    auto e = ds.make_iterator().next();
    EXPECT_NE((*e)[0].device_name().find("CPU:0"), std::string::npos) << (*e)[0].device_name();
    EXPECT_NE((*e)[1].device_name().find("CPU:0"), std::string::npos) << (*e)[1].device_name();
  }
  DeviceScope scope("/CPU:1");
  auto it = ds.prefetch(2).make_iterator();
  auto e = it.next();
  EXPECT_NE((*e)[0].device_name().find("CPU:1"), std::string::npos) << (*e)[0].device_name();
  EXPECT_NE((*e)[1].device_name().find("CPU:1"), std::string::npos) << (*e)[1].device_name();
}

// ---- iterator state ----

// Runs `ds` for `before` elements, saves, and checks that a fresh iterator of a freshly built
// description restored from the state yields exactly what the original goes on to yield.
void expect_resumes(const std::function<Dataset()>& build, std::int64_t before) {
  auto ds = build();
  auto it = ds.make_iterator();
  auto head = first_components(it, before);
  IteratorState state = it.save();
  auto rest = first_components(it);

  auto fresh = build();
  auto resumed = fresh.make_iterator();
  resumed.restore(state);
  EXPECT_EQ(first_components(resumed), rest) << "saved after " << before << " elements";
  // The original and the restored pipeline agree on the whole sequence, head + rest.
  auto whole = build().make_iterator();
  auto all = first_components(whole);
  V joined = head;
  joined.insert(joined.end(), rest.begin(), rest.end());
  EXPECT_EQ(all, joined);
}

TEST(IteratorState, SourcesAndTransformationsResumeExactly) {
  for (std::int64_t k : {0, 1, 5, 9, 10, 11, 17}) expect_resumes([] { return Dataset::range(10).repeat(2); }, k);
  for (std::int64_t k : {0, 3, 12, 24})
    expect_resumes([] { return slices(13).shuffle(5, 99).repeat(2).skip(1).take(24); }, k);
  for (std::int64_t k : {0, 2, 6, 13})
    expect_resumes([] { return Dataset::range(40).shuffle(8, 1).batch(3).repeat(2).take(14); }, k);
  for (std::int64_t k : {0, 4, 7, 12})
    expect_resumes([] { return Dataset::range(7).shuffle(7, 5).cache().repeat(3).take(17); }, k);
  for (std::int64_t k : {0, 1})
    expect_resumes([] { return Dataset::from_tensors({Tensor::from_vector<std::int64_t>({3})}).repeat(2); }, k);
}

TEST(IteratorState, ARestoredShuffleContinuesTheSeedSequence) {
  auto build = [] { return Dataset::range(10).shuffle(10, 4).repeat(); };
  auto it = build().make_iterator();
  first_components(it, 15);  // into epoch 1
  IteratorState state = it.save();
  EXPECT_EQ(state.get_int("input/shuffle.pass"), 1);
  auto later = first_components(it, 30);  // the rest of epoch 1, epochs 2 and 3
  auto resumed = build().make_iterator();
  resumed.restore(state);
  EXPECT_EQ(first_components(resumed, 30), later);
}

TEST(IteratorState, MismatchedStateIsRejected) {
  auto it = Dataset::range(5).batch(2).make_iterator();
  it.next();
  IteratorState state = it.save();
  EXPECT_EQ(state.get_int("input/range.index"), 2);
  auto other = Dataset::range(5).take(2).make_iterator();
  EXPECT_THROW_WITH(other.restore(state), NotFoundError, "take.taken");
  auto short_range = Dataset::range(1).batch(2).make_iterator();
  EXPECT_THROW_WITH(short_range.restore(state), InvalidArgumentError, "range index 2", "[0, 1]");

  class Opaque final : public DatasetBase {
   public:
    std::unique_ptr<IteratorBase> make_iterator() const override {
      struct It final : IteratorBase {
        std::optional<Element> next() override { return std::nullopt; }
      };
      return std::make_unique<It>();
    }
    std::string name() const override { return "Opaque"; }
    std::int64_t cardinality() const override { return 0; }
  };
  auto opaque = Dataset(std::make_shared<Opaque>()).batch(2).make_iterator();
  EXPECT_THROW_WITH(opaque.save(), UnimplementedError, "save()");
}

}  // namespace
}  // namespace chorus::data
