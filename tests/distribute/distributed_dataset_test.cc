// Distributed input: global batches split across replicas, uneven last batches, per-replica
// datasets from a function; and the minimal data::Dataset underneath.
#include <gtest/gtest.h>

#include "tests/core/test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/runtime.h>
#include <chorus/distribute/distributed_dataset.h>
#include <chorus/distribute/input_upload.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/ops/reduction.h>
#include <chorus/ops/shape_ops.h>

namespace chorus::distribute {
namespace {

void make_cpus(int n) { chorus::testing::make_cpus(n, 128); }

using chorus::testing::cpus;

data::Dataset numbers(int count) {
  std::vector<float> x(static_cast<std::size_t>(count) * 2);
  std::vector<std::int32_t> y(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    x[static_cast<std::size_t>(2 * i)] = static_cast<float>(i);
    x[static_cast<std::size_t>(2 * i + 1)] = static_cast<float>(-i);
    y[static_cast<std::size_t>(i)] = i;
  }
  return data::Dataset::from_tensor_slices(
      {Tensor::from_vector<float>(x, {count, 2}), Tensor::from_vector<std::int32_t>(y)});
}

TEST(Dataset, SlicesAndBatches) {
  make_cpus(1);
  auto it = numbers(5).batch(2).make_iterator();
  std::vector<std::vector<std::int32_t>> labels;
  while (auto e = it.next()) {
    ASSERT_EQ(e->size(), 2u);
    EXPECT_EQ((*e)[0].shape().dims()[1], 2);
    labels.push_back((*e)[1].to_vector<std::int32_t>());
  }
  EXPECT_EQ(labels, (std::vector<std::vector<std::int32_t>>{{0, 1}, {2, 3}, {4}}));
  EXPECT_EQ(numbers(5).batch(2).cardinality(), 3);
  EXPECT_EQ(numbers(5).batch(2, true).cardinality(), 2);
  EXPECT_THROW_WITH(numbers(5).batch(0), InvalidArgumentError, "batch_size must be > 0");
  EXPECT_THROW_WITH(data::Dataset::from_tensor_slices({Tensor::zeros({3}), Tensor::zeros({4})}), InvalidArgumentError,
                    "has 4 rows");
  // An iterator outlives its dataset.
  auto orphan = data::Dataset::from_tensor_slices({Tensor::from_vector<float>({7, 8})}).make_iterator();
  EXPECT_EQ(orphan.next()->at(0).item<float>(), 7.0f);
}

TEST(DistributeDataset, EachReplicaGetsItsContiguousSliceOnItsDevice) {
  make_cpus(4);
  MirroredStrategy s(cpus(4));
  auto it = s.experimental_distribute_dataset(numbers(11).batch(8)).make_iterator();
  auto first = it.next();
  ASSERT_TRUE(first.has_value());
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ((*first)[r][1].to_vector<std::int32_t>(), (std::vector<std::int32_t>{2 * r, 2 * r + 1}));
    EXPECT_EQ((*first)[r][0].device_name(), runtime::find("/cpu:" + std::to_string(r))->name());
  }
  auto last = it.next();  // 3 rows over 4 replicas: 1, 1, 1, 0
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ((*last)[0][1].to_vector<std::int32_t>(), std::vector<std::int32_t>{8});
  EXPECT_EQ((*last)[2][1].to_vector<std::int32_t>(), std::vector<std::int32_t>{10});
  EXPECT_EQ((*last)[3][1].shape(), Shape({0}));
  EXPECT_EQ((*last)[3][0].shape(), Shape({0, 2}));
  EXPECT_FALSE(it.next().has_value());
  EXPECT_FALSE(it.next().has_value());
}

TEST(DistributeDataset, UnevenSplitsAreAsEvenAsPossible) {
  make_cpus(3);
  MirroredStrategy s(cpus(3));
  auto it = s.experimental_distribute_dataset(numbers(7).batch(7)).make_iterator();
  auto b = it.next();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ((*b)[0][1].num_elements(), 3);
  EXPECT_EQ((*b)[1][1].num_elements(), 2);
  EXPECT_EQ((*b)[2][1].num_elements(), 2);
  // The replicas can run a step on them, empty or not, and reduce per example.
  auto sums = s.run([](const data::Element& e) { return ops::reduce_sum(e[1]); }, *b);
  EXPECT_EQ(s.reduce(ReduceOp::kSum, sums).item<int>(), 21);
}

TEST(DistributeDataset, FromFunctionHandsConsecutiveElementsToReplicas) {
  make_cpus(2);
  MirroredStrategy s(cpus(2));
  InputContext seen;
  auto dist = s.distribute_datasets_from_function([&](const InputContext& ctx) {
    seen = ctx;
    return numbers(6).batch(ctx.get_per_replica_batch_size(4));
  });
  EXPECT_EQ(seen.num_replicas_in_sync, 2);
  EXPECT_EQ(seen.num_input_pipelines, 1);
  auto it = dist.make_iterator();
  auto a = it.next();
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ((*a)[0][1].to_vector<std::int32_t>(), (std::vector<std::int32_t>{0, 1}));
  EXPECT_EQ((*a)[1][1].to_vector<std::int32_t>(), (std::vector<std::int32_t>{2, 3}));
  auto b = it.next();  // one element left: replica 1 gets an empty batch
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ((*b)[0][1].to_vector<std::int32_t>(), (std::vector<std::int32_t>{4, 5}));
  EXPECT_EQ((*b)[1][1].shape(), Shape({0}));
  EXPECT_FALSE(it.next().has_value());
  EXPECT_THROW_WITH(InputContext({1, 0, 2}).get_per_replica_batch_size(5), InvalidArgumentError, "divisible");
}

// The host rows a replica gets (distribute/input_upload.h): one copy into its device's memory,
// equal to the op slice for every dtype, empty ranges included; the cases it leaves to ops.
TEST(InputUpload, RowsOnACpuReplicaEqualTheOpSlice) {
  make_cpus(2);
  const std::string cpu1 = runtime::find("/cpu:1")->name();
  internal::InputUpload upload;
  std::vector<internal::UploadWait> waits;
  const Tensor f = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {4, 3});
  const Tensor i64 = Tensor::from_vector<std::int64_t>({-1, 2, -3, 4, -5}, {5});
  const Tensor b = Tensor::from_vector<bool>({true, false, true, true}, {2, 1, 2});
  for (const Tensor* t : {&f, &i64, &b}) {
    const std::int64_t rows = t->shape().dims()[0];
    for (std::int64_t at = 0; at <= rows; ++at) {
      for (std::int64_t len = 0; at + len <= rows; ++len) {
        Tensor u = upload.rows(*t, at, len, cpu1, 1, &waits);
        ASSERT_TRUE(u.defined());
        EXPECT_EQ(u.device_name(), cpu1);
        std::vector<std::int64_t> begin(t->shape().rank(), 0), size = t->shape().dims();
        begin[0] = at;
        size[0] = len;
        const Tensor want = ops::slice(*t, begin, size).to(cpu1);
        EXPECT_EQ(u.shape(), want.shape());
        EXPECT_EQ(u.dtype(), want.dtype());
        EXPECT_EQ(u.to_string(), want.to_string()) << "rows " << at << "+" << len;
      }
    }
  }
  EXPECT_TRUE(waits.empty()) << "a CPU replica's rows are complete when rows() returns";
  EXPECT_EQ(upload.in_flight(), 0u);
  EXPECT_THROW_WITH(upload.rows(f, 3, 2, cpu1, 1, &waits), InvalidArgumentError, "rows [3, 5) of a tensor with 4 rows");
  EXPECT_THROW_WITH(upload.rows(f, -1, 1, cpu1, 1, &waits), InvalidArgumentError, "rows [-1, 0)");
  // Left to ops: strings (objects, not bytes) and scalars (no rows).
  EXPECT_FALSE(upload.rows(Tensor::from_vector<std::string>({"a", "b"}), 0, 1, cpu1, 1, &waits).defined());
  EXPECT_FALSE(upload.rows(Tensor::scalar<float>(1), 0, 0, cpu1, 1, &waits).defined());
}

// The dataset's batches are uploaded rows, not views of the pipeline's tensors: a replica that
// writes into its batch does not change what the next epoch reads.
TEST(DistributeDataset, BatchesAreCopiesOfTheInput) {
  make_cpus(2);
  MirroredStrategy s(cpus(2));
  auto ds = numbers(4).batch(4).cache();
  auto dist = s.experimental_distribute_dataset(ds);
  for (int epoch = 0; epoch < 2; ++epoch) {
    auto it = dist.make_iterator();
    auto b = it.next();
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ((*b)[1][1].to_vector<std::int32_t>(), (std::vector<std::int32_t>{2, 3})) << "epoch " << epoch;
    Tensor mine = (*b)[1][1];
    mine.copy_from(Tensor::from_vector<std::int32_t>({-7, -7}).to(mine.device_name()));
  }
}

}  // namespace
}  // namespace chorus::distribute
