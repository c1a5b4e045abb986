// MirroredStrategy on two virtual GPUs carved out of GPU:0 (label gpu: skips without a GPU).
#include <gtest/gtest.h>

#include <chorus/core/config.h>
#include <chorus/core/gpu.h>
#include <chorus/core/runtime.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/distribute/mirrored_variable.h>
#include <chorus/ops/ops.h>

namespace chorus::distribute {
namespace {

class VirtualGpus : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::device_count() == 0) GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason();
    chorus::internal::reset_runtime_for_testing();
    auto gpus = config::list_physical_devices("GPU");
    config::set_logical_device_configuration(gpus[0], {{.memory_limit_mb = 1024}, {.memory_limit_mb = 1024}});
  }
};

TEST_F(VirtualGpus, MirroredStrategyUsesTheVirtualGpuReduction) {
  MirroredStrategy strategy;
  ASSERT_EQ(strategy.num_replicas_in_sync(), 2);
  EXPECT_EQ(strategy.cross_device_ops().ops, CrossDeviceOps::kVirtualGpu);
  Variable w;
  {
    auto scope = strategy.scope();
    w = make_variable({.initial_value = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}),
                       .name = "w",
                       .aggregation = VariableAggregation::kMean});
  }
  auto out = strategy.run([&] {
    const float r = static_cast<float>(get_replica_context()->replica_id_in_sync_group());
    Tensor x = Tensor::full({3, 2}, r + 1);
    ops::GradientTape tape;
    Tensor loss = ops::reduce_sum(ops::matmul(x, w.value()));
    Tensor g = tape.gradient(loss, std::vector<Variable>{w})[0];
    Tensor summed = get_replica_context()->all_reduce(ReduceOp::kSum, g);
    w.assign_add(ops::neg(summed));  // MEAN of identical updates: every replica subtracts the same
    return std::make_pair(summed.device_name(), summed.to_vector<float>());
  });
  // d/dw sum(x @ w) = x^T 1 = 3 (r+1) per entry; summed over replicas: 3*(1+2) = 9.
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(out[r].first, runtime::find("/gpu:" + std::to_string(r))->name());
    EXPECT_EQ(out[r].second, std::vector<float>(4, 9.0f));
  }
  for (const auto& c : std::dynamic_pointer_cast<MirroredVariable>(w.impl())->components())
    EXPECT_EQ(c.value().to_vector<float>(), (std::vector<float>{-8, -7, -6, -5}));
}

TEST_F(VirtualGpus, DistributedBatchesLandOnEachReplicasGpu) {
  MirroredStrategy strategy;
  auto ds = data::Dataset::from_tensor_slices({Tensor::from_vector<float>({0, 1, 2, 3, 4, 5})}).batch(6);
  auto it = strategy.experimental_distribute_dataset(ds).make_iterator();
  auto batch = it.next();
  ASSERT_TRUE(batch.has_value());
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ((*batch)[r][0].device_name(), runtime::find("/gpu:" + std::to_string(r))->name());
    EXPECT_EQ((*batch)[r][0].num_elements(), 3);
  }
}

}  // namespace
}  // namespace chorus::distribute
