// Optimizer-state offload (distribute/optimizer_offload.h) on GPUs (label gpu; skipped with the
// CUDA runtime's reason without one): on 2 virtual GPUs carved out of GPU:0, the custom loop of
// tests/optimizer/sharding_util.h at ZeRO stages 1, 2 and 3 with offload ends with the weights and
// slots of the same stage without offload, bit for bit (Adam, SGD with momentum; the host update
// runs the optimizer's CPU kernels where the GPU ran its CUDA ones, so the two are compared to
// 1e-6 relative, the CPU/GPU kernels' rounding); every slot shard lives in page-locked host memory
// ("/job:pinned_host_memory/..."), and a step's peak per virtual GPU at stage 3 falls by the slots'
// bytes.
#include <gtest/gtest.h>

#include <iostream>

#include "tests/optimizer/sharding_util.h"
#include <chorus/core/gpu.h>
#include <chorus/core/host_memory.h>

namespace chorus::sharding_testing {
namespace {

constexpr int kSteps = 6;

bool make_virtual_gpus(int n, std::int64_t limit_mb, std::string* why) {
  if (gpu::device_count() == 0) {
    *why = "no GPU: " + gpu::unavailable_reason();
    return false;
  }
  chorus::internal::reset_runtime_for_testing();
  config::set_logical_device_configuration(
      config::list_physical_devices("GPU")[0],
      std::vector<LogicalDeviceConfiguration>(static_cast<std::size_t>(n), {.memory_limit_mb = limit_mb}));
  return true;
}

std::vector<std::string> gpus(int n) {
  std::vector<std::string> d;
  for (int i = 0; i < n; ++i) d.push_back("/gpu:" + std::to_string(i));
  return d;
}

struct Result {
  std::vector<Tensor> weights, slots;  // whole values, host copies
  std::size_t peak = 0;                // max over the virtual GPUs, of the timed steps
};

Result train_on(int n, int stage, bool offload, Opt o) {
  distribute::MirroredStrategy strategy(gpus(n), {.sharding = {.stage = stage, .offload_optimizer_state = offload}});
  std::unique_ptr<model::Sequential> m;
  std::shared_ptr<optimizers::Optimizer> opt;
  {
    auto scope = strategy.scope();
    m = make_model();
    opt = make_optimizer(o);
  }
  train_loop(strategy, *m, *opt, 0, 1);  // the slots exist from here
  for (const std::string& d : strategy.replica_devices()) config::reset_memory_stats(d);
  train_loop(strategy, *m, *opt, 1, kSteps - 1);
  Result r;
  for (const std::string& d : strategy.replica_devices()) r.peak = std::max(r.peak, config::get_memory_info(d).peak);
  for (const Variable& v : m->trainable_variables()) r.weights.push_back(checkpoint_value(v).to("/cpu:0"));
  for (const auto& ref : opt->slot_variables()) {
    r.slots.push_back(checkpoint_value(ref.slot).to("/cpu:0"));
    const ShardedVariable* sv = as_sharded(ref.slot);
    EXPECT_NE(sv, nullptr);
    if (sv == nullptr) continue;
    for (const Variable& c : sv->components()) {
      if (offload)
        EXPECT_EQ(c.device().find("/job:pinned_host_memory/"), 0u) << ref.slot.name() << " on " << c.device();
      else
        EXPECT_FALSE(runtime::is_host_memory(c.device())) << c.device();
    }
  }
  return r;
}

class OffloadGpu : public ::testing::Test {
 protected:
  void TearDown() override { chorus::internal::reset_runtime_for_testing(); }
};

TEST_F(OffloadGpu, EveryStageWithOffloadMatchesItWithoutOnVirtualGpus) {
  std::string why;
  if (!make_virtual_gpus(2, 256, &why)) GTEST_SKIP() << why;
  for (const Opt o : {Opt::kAdam, Opt::kSgdMomentum}) {
    for (const int stage : {1, 2, 3}) {
      const Result plain = train_on(2, stage, false, o);
      const Result off = train_on(2, stage, true, o);
      const std::string what = std::string(opt_name(o)) + " stage " + std::to_string(stage);
      ASSERT_EQ(off.weights.size(), plain.weights.size());
      ASSERT_EQ(off.slots.size(), plain.slots.size());
      for (std::size_t i = 0; i < off.weights.size(); ++i)
        EXPECT_LE(relative_difference(off.weights[i], plain.weights[i]), 1e-6) << what << " weight " << i;
      for (std::size_t i = 0; i < off.slots.size(); ++i)
        EXPECT_LE(relative_difference(off.slots[i], plain.slots[i]), 1e-6) << what << " slot " << i;
      if (stage == 3) {
        std::cout << what << ": peak per virtual GPU " << plain.peak << " B, with offload " << off.peak << " B\n";
        EXPECT_LT(off.peak, plain.peak) << what;
      }
    }
  }
}

}  // namespace
}  // namespace chorus::sharding_testing
