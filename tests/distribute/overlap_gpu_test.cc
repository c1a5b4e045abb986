// The gradient all-reduce overlapped with the backward pass on GPUs (docs/overlap.md): each
// bucket on its device's side stream, ordered against the compute stream by events. Two virtual
// GPUs carved out of GPU:0 (the virtual-GPU backend) and, with two physical GPUs, NCCL: a custom
// loop with small buckets gives bitwise the weights of the same loop with overlap off, the buckets
// ran on the communication threads, and a fit of a small CNN does the same. The default leaves
// GPUs off until a GPU run validates it. Skips without a GPU (label gpu), with the CUDA runtime's
// reason.
#include <gtest/gtest.h>

#include "tests/distribute/overlap_util.h"
#include <chorus/core/config.h>
#include <chorus/core/gpu.h>
#include <chorus/core/runtime.h>
#include <chorus/data/dataset.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/model/layers.h>
#include <chorus/model/losses.h>
#include <chorus/model/model.h>
#include <chorus/ops/ops.h>
#include <chorus/optimizer/adam.h>

namespace chorus::distribute {
namespace {

using overlap_testing::Outcome;

// Three steps of a three-layer net on each replica's own rows, 4 KiB buckets.
Outcome train(const std::vector<std::string>& devices, bool overlap) {
  MirroredStrategy s(devices,
                     {.communication_options = {.bytes_per_pack = 4096}, .overlap_gradient_all_reduce = overlap});
  EXPECT_EQ(s.overlaps_gradient_all_reduce(), overlap) << s.overlap_reason();
  return overlap_testing::train_three_layers(s, {32, 256, 128, 10}, 64, 0.2);
}

void expect_same(const Outcome& on, const Outcome& off) {
  ASSERT_EQ(on.weights.size(), off.weights.size());
  for (std::size_t v = 0; v < on.weights.size(); ++v)
    for (std::size_t i = 0; i < on.weights[v].size(); ++i)
      ASSERT_EQ(on.weights[v][i], off.weights[v][i]) << "variable " << v << " element " << i;
  EXPECT_EQ(on.counters.collectives, off.counters.collectives);
  EXPECT_EQ(off.counters.overlapped, 0);
  EXPECT_EQ(on.counters.overlapped, on.counters.collectives) << "every gradient pack was a bucket";
  EXPECT_GE(on.counters.overlapped, 3 * 2 * 3) << "several buckets per step and replica";
}

TEST(OverlapGpu, VirtualGpusGiveBitwiseTheNonOverlappedWeights) {
  if (gpu::device_count() == 0) GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason();
  chorus::internal::reset_runtime_for_testing();
  config::set_logical_device_configuration(config::list_physical_devices("GPU")[0],
                                           {{.memory_limit_mb = 512}, {.memory_limit_mb = 512}});
  MirroredStrategy automatic({"/gpu:0", "/gpu:1"});
  EXPECT_TRUE(automatic.overlaps_gradient_all_reduce()) << "on by default between virtual GPUs (measured faster)";
  EXPECT_EQ(automatic.overlap_reason(), "on: virtual GPUs of one GPU (measured faster there, docs/overlap.md)");
  const Outcome off = train({"/gpu:0", "/gpu:1"}, false);
  const Outcome on = train({"/gpu:0", "/gpu:1"}, true);
  expect_same(on, off);
  chorus::internal::reset_runtime_for_testing();
}

TEST(OverlapGpu, NcclOnTwoPhysicalGpusGivesBitwiseTheNonOverlappedWeights) {
  if (gpu::device_count() < 2)
    GTEST_SKIP() << "needs 2 GPUs, found " << gpu::device_count() << ": " << gpu::unavailable_reason();
  chorus::internal::reset_runtime_for_testing();
  const Outcome off = train({"/gpu:0", "/gpu:1"}, false);
  const Outcome on = train({"/gpu:0", "/gpu:1"}, true);
  expect_same(on, off);
  chorus::internal::reset_runtime_for_testing();
}

// fit with mixed layers (convolution, pooling, dense) on two virtual GPUs: the same losses and
// weights with overlap on and off.
TEST(OverlapGpu, FitOnVirtualGpusIsBitwiseTheSame) {
  if (gpu::device_count() == 0) GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason();
  chorus::internal::reset_runtime_for_testing();
  config::set_logical_device_configuration(config::list_physical_devices("GPU")[0],
                                           {{.memory_limit_mb = 512}, {.memory_limit_mb = 512}});
  auto fit = [](bool overlap) {
    MirroredStrategy s({"/gpu:0", "/gpu:1"},
                       {.communication_options = {.bytes_per_pack = 2048}, .overlap_gradient_all_reduce = overlap});
    auto scope = s.scope();
    ops::set_seed(42);
    model::Sequential m(std::vector<layers::LayerPtr>{layers::Conv2D(8, 3, "relu"), layers::MaxPooling2D(2),
                                                      layers::Flatten(), layers::Dense(16, "relu"), layers::Dense(4)});
    m.compile(std::make_shared<optimizers::Adam>(1e-2), std::make_shared<losses::MeanSquaredError>());
    const Tensor x = ops::stateless_random_uniform({32, 10, 10, 1}, {1, 2});
    const Tensor y = ops::stateless_random_uniform({32, 4}, {3, 4});
    std::pair<std::vector<double>, std::vector<std::vector<float>>> out;
    out.first =
        m.fit(data::Dataset::from_tensor_slices({x, y}).batch(16), {.epochs = 2, .verbose = 0}).history.at("loss");
    for (const Variable& v : m.trainable_variables()) out.second.push_back(v.read_value().to_vector<float>());
    return out;
  };
  const auto off = fit(false);
  const auto on = fit(true);
  EXPECT_EQ(on.first, off.first);
  EXPECT_EQ(on.second, off.second);
  chorus::internal::reset_runtime_for_testing();
}

}  // namespace
}  // namespace chorus::distribute
