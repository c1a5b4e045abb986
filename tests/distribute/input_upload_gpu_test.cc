// Distributed input on GPUs (distribute/input_upload.h): batches reach each virtual GPU through
// pinned staging and the host-to-device stream, with no host wait, and the step that reads them
// sees every value (label gpu: skips without a GPU).
#include <gtest/gtest.h>

#include <numeric>

#include "tests/core/virtual_gpus.h"

#include <chorus/core/config.h>
#include <chorus/core/gpu.h>
#include <chorus/core/host_memory.h>
#include <chorus/core/runtime.h>
#include <chorus/distribute/input_upload.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/ops/ops.h>

namespace chorus::distribute {
namespace {

class UploadGpus : public chorus::testing::TwoVirtualGpusTest<1024> {};

// `batches` batches of `rows` rows, in host memory as a pipeline's: images of `width` small
// integers in [-3, 3], a pattern that shifts with the row (so that every sum of a batch is exact in
// float32, in any order, and batches differ), and labels 0, 1, 2, ...
data::Dataset images(int batches, int rows, std::int64_t width = 784) {
  const std::int64_t n = static_cast<std::int64_t>(batches) * rows;
  std::vector<float> x(static_cast<std::size_t>(n * width));
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>((i / static_cast<std::size_t>(width) + i) % 7) - 3;
  std::vector<std::int32_t> y(static_cast<std::size_t>(n));
  std::iota(y.begin(), y.end(), 0);
  return data::Dataset::from_tensor_slices(
             {Tensor::from_vector<float>(x, {n, width}, "/CPU:0"), Tensor::from_vector<std::int32_t>(y, {n}, "/CPU:0")})
      .batch(rows);
}

// A checksum of a batch part that reads every element: sum(x) + sum(y), exact.
Tensor checksum(const Tensor& x, const Tensor& y) {
  return ops::add(ops::reduce_sum(x), ops::cast(ops::reduce_sum(y), DType::kFloat32));
}

TEST_F(UploadGpus, RowsArriveThroughPinnedStagingWithoutAHostWait) {
  const std::string gpu1 = runtime::find("/gpu:1")->name();
  const Tensor x = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7}, {4, 2}, "/CPU:0");
  const std::string pinned = offload_device(gpu1, 1);
  ASSERT_TRUE(runtime::is_host_memory(pinned));
  internal::InputUpload upload;
  std::vector<internal::UploadWait> waits;
  const std::int64_t before = gpu::host_waits();
  Tensor a = upload.rows(x, 1, 2, gpu1, 1, &waits);
  Tensor b = upload.rows(x, 3, 1, gpu1, 1, &waits);
  internal::hand_over(waits);
  EXPECT_EQ(gpu::host_waits() - before, 0);
  EXPECT_EQ(config::get_memory_info(pinned).num_allocs, 2) << "each copy staged in pinned memory";
  ASSERT_EQ(waits.size(), 1u) << "one wait per device: its copies are in order on one stream";
  EXPECT_EQ(waits[0].device->name(), gpu1);
  EXPECT_EQ(a.device_name(), gpu1);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{2, 3, 4, 5}));
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{6, 7}));
  Tensor c = upload.rows(x, 0, 4, gpu1, 1, &waits);  // reaps the finished copies' staging
  EXPECT_LE(upload.in_flight(), 1u);
  internal::hand_over(waits);
  EXPECT_EQ(c.to_vector<float>(), x.to_vector<float>());
}

TEST_F(UploadGpus, BatchesAreMadeAheadWithoutHostWaitsAndStepsSeeThemWhole) {
  MirroredStrategy strategy;
  ASSERT_EQ(strategy.num_replicas_in_sync(), 2);
  constexpr int kBatches = 64, kRows = 512;
  auto dist = strategy.experimental_distribute_dataset(images(kBatches, kRows));
  auto it = dist.make_iterator();
  // Each step reads its batch right after next(): a copy the step did not wait for shows as a wrong sum.
  std::vector<PerReplica<Tensor>> sums;
  while (auto batch = it.next())
    sums.push_back(strategy.run([](const data::Element& e) { return checksum(e[0], e[1]); }, *batch));
  // The input alone (a second epoch, its batches held): made and uploaded without a host wait.
  {
    auto again = dist.make_iterator();
    std::vector<DistributedDataset::Batch> held{*again.next()};
    const std::int64_t before = gpu::host_waits();
    while (auto batch = again.next()) held.push_back(std::move(*batch));
    EXPECT_EQ(gpu::host_waits() - before, 0) << "63 batches made and uploaded to 2 GPUs";
    EXPECT_EQ(held.size(), static_cast<std::size_t>(kBatches));
  }
  ASSERT_EQ(sums.size(), static_cast<std::size_t>(kBatches));
  auto reference = images(kBatches, kRows).make_iterator();
  for (int step = 0; step < kBatches; ++step) {
    const data::Element want = *reference.next();
    for (int r = 0; r < 2; ++r) {
      const std::int64_t at = r * kRows / 2;
      const float expected =
          checksum(ops::slice(want[0], {at, 0}, {kRows / 2, 784}), ops::slice(want[1], {at}, {kRows / 2}))
              .item<float>();
      EXPECT_EQ(sums[static_cast<std::size_t>(step)][r].item<float>(), expected) << "step " << step << " replica " << r;
    }
  }
}

// Batches of 32 MB per replica: the DMA takes about a millisecond, so a step that did not wait for
// its copy would read a partly written batch; each step starts the moment next() returns.
TEST_F(UploadGpus, LargeBatchesAreReadOnlyAfterTheirCopyLanded) {
  MirroredStrategy strategy;
  constexpr int kBatches = 6;
  constexpr std::int64_t kWidth = std::int64_t{8} << 20;  // floats per row: one row per replica
  auto it = strategy.experimental_distribute_dataset(images(kBatches, 2, kWidth)).make_iterator();
  std::vector<PerReplica<Tensor>> sums;
  while (auto batch = it.next())
    sums.push_back(strategy.run([](const data::Element& e) { return checksum(e[0], e[1]); }, *batch));
  auto reference = images(kBatches, 2, kWidth).make_iterator();
  for (int step = 0; step < kBatches; ++step) {
    const data::Element want = *reference.next();
    for (int r = 0; r < 2; ++r) {
      const float expected =
          checksum(ops::slice(want[0], {r, 0}, {1, kWidth}), ops::slice(want[1], {r}, {1})).item<float>();
      EXPECT_EQ(sums[static_cast<std::size_t>(step)][r].item<float>(), expected) << "step " << step << " replica " << r;
    }
  }
}

// An iterator dropped with a batch made but not taken, or mid-epoch, frees it only after its copies.
TEST_F(UploadGpus, AnIteratorDroppedMidEpochLeavesTheDeviceConsistent) {
  MirroredStrategy strategy;
  auto dist = strategy.experimental_distribute_dataset(images(8, 256));
  for (int round = 0; round < 4; ++round) {
    auto it = dist.make_iterator();
    for (int step = 0; step < round; ++step) ASSERT_TRUE(it.next().has_value());
  }
  auto it = dist.make_iterator();
  auto batch = it.next();
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ((*batch)[1][1].to_vector<std::int32_t>()[0], 128);
}

}  // namespace
}  // namespace chorus::distribute
