// ZeRO memory on logical devices with a memory limit (issue 17, docs/sharding.md "The memory
// test"): a parameter-dominated model (8 × Dense(512→512), Adam, P ≈ 8.4 MB of float32 weights)
// whose Model::fit raises ResourceExhaustedError under MirroredStrategy (stage 0) on 4 logical CPU
// devices trains under ZeRO stages 2 and 3 with the same per-device limit; stage 3's peak is at
// most 0.35× stage 0's (the goal) and below stage 2's, which is below stage 1's.
//
// The limit is chosen from the peaks measured in the same process (config::get_memory_info(d).peak
// after config::reset_memory_stats, one fit of each stage on devices with room to spare): above
// stage 2's largest peak by kAboveStage2 and below stage 0's largest by kBelowStage0 (and stage 2's
// peak at most kGoalStage2 × stage 0's, the goal) — so the test
// fails when the stages' peaks come too close to leave both margins, when stage 0 fits under the
// limit, or when stage 2 does not. Device configuration is frozen at first use and is per process,
// so each configuration starts from chorus::internal::reset_runtime_for_testing().
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <chorus/core/config.h>
#include <chorus/core/error.h>
#include <chorus/core/runtime.h>
#include <chorus/data/dataset.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/model/initializers.h>
#include <chorus/model/layers.h>
#include <chorus/model/losses.h>
#include <chorus/model/model.h>
#include <chorus/ops/ops.h>
#include <chorus/optimizer/adam.h>

namespace chorus {
namespace {

constexpr int kReplicas = 4, kLayers = 8, kWidth = 512, kGlobalBatch = 32, kRows = 64;
constexpr std::int64_t kMiB = 1 << 20;
constexpr std::int64_t kRoomyLimitMb = 512;  // per device, for measuring
// Stage 2's fit peak is ≈ 0.43× stage 0's here (docs/sharding.md): a limit 15% above it is still
// ≤ 0.6× stage 0's peak, below even stage 0's resident weights and slots (3P).
constexpr double kAboveStage2 = 1.15, kBelowStage0 = 0.60;
constexpr double kGoalStage2 = 0.5;   // the goal: stage 2 peak ≤ 0.5× stage 0's (4 replicas, Adam)
constexpr double kGoalStage3 = 0.35;  // and stage 3's ≤ 0.35×

void make_cpus(std::int64_t limit_mb) {
  chorus::internal::reset_runtime_for_testing();
  config::set_visible_devices({}, "GPU");
  std::vector<LogicalDeviceConfiguration> cfgs(static_cast<std::size_t>(kReplicas),
                                               LogicalDeviceConfiguration{.memory_limit_mb = limit_mb});
  config::set_logical_device_configuration(config::list_physical_devices("CPU")[0], cfgs);
}

struct FitOutcome {
  std::optional<std::string> oom;   // the ResourceExhaustedError's message, if fit raised one
  std::vector<std::int64_t> peaks;  // per replica device, bytes, from reset (after build) to the end
  std::int64_t max_peak() const { return *std::max_element(peaks.begin(), peaks.end()); }
  double last_loss = NAN;
};

// One fit (2 epochs of 2 steps) at `stage` on freshly configured devices of `limit_mb` each.
FitOutcome fit_at(int stage, std::int64_t limit_mb) {
  make_cpus(limit_mb);
  std::vector<std::string> devices;
  for (int i = 0; i < kReplicas; ++i) devices.push_back("/cpu:" + std::to_string(i));
  distribute::MirroredStrategy strategy(devices, {.sharding = {.stage = stage}});
  std::unique_ptr<model::Sequential> m;
  {
    auto scope = strategy.scope();
    std::vector<layers::LayerPtr> ls;
    for (int i = 0; i < kLayers; ++i)
      ls.push_back(layers::Dense(kWidth, i + 1 < kLayers ? "relu" : "", true, initializers::glorot_uniform(i + 1)));
    m = std::make_unique<model::Sequential>(std::move(ls));
    m->build(Shape({kGlobalBatch, kWidth}));
    m->compile(std::make_shared<optimizers::Adam>(optimizers::AdamOptions{.learning_rate = 1e-4}),
               std::make_shared<losses::MeanSquaredError>());
  }
  Tensor x = ops::stateless_random_uniform({kRows, kWidth}, {1, 2}, {.minval = -1, .maxval = 1});
  Tensor y = ops::stateless_random_uniform({kRows, kWidth}, {3, 4}, {.minval = -1, .maxval = 1});
  auto ds = data::Dataset::from_tensor_slices({x, y}).batch(kGlobalBatch);
  for (const std::string& d : devices) config::reset_memory_stats(d);
  FitOutcome out;
  try {
    auto history = m->fit(ds, {.epochs = 2, .verbose = 0});
    out.last_loss = history.history.at("loss").back();
  } catch (const ResourceExhaustedError& e) {
    out.oom = e.what();
  }
  for (const std::string& d : devices) out.peaks.push_back(static_cast<std::int64_t>(config::get_memory_info(d).peak));
  return out;
}

std::string mb(std::int64_t bytes) { return std::to_string(static_cast<double>(bytes) / kMiB) + " MiB"; }

TEST(ShardingMemory, FitThatExhaustsMirroredStrategyTrainsAtStages2And3UnderTheSameLimit) {
  // 1. The peaks with room to spare: every stage trains.
  const FitOutcome roomy0 = fit_at(0, kRoomyLimitMb);
  const FitOutcome roomy1 = fit_at(1, kRoomyLimitMb);
  const FitOutcome roomy2 = fit_at(2, kRoomyLimitMb);
  const FitOutcome roomy3 = fit_at(3, kRoomyLimitMb);
  for (const FitOutcome* o : {&roomy0, &roomy1, &roomy2, &roomy3}) {
    ASSERT_FALSE(o->oom.has_value()) << *o->oom;
    ASSERT_TRUE(std::isfinite(o->last_loss));
  }
  std::cout << "[sharding memory] fit peak per replica (max over 4), limit " << kRoomyLimitMb << " MiB: stage 0 "
            << mb(roomy0.max_peak()) << ", stage 1 " << mb(roomy1.max_peak()) << " ("
            << static_cast<double>(roomy1.max_peak()) / static_cast<double>(roomy0.max_peak()) << "x), stage 2 "
            << mb(roomy2.max_peak()) << " ("
            << static_cast<double>(roomy2.max_peak()) / static_cast<double>(roomy0.max_peak()) << "x), stage 3 "
            << mb(roomy3.max_peak()) << " ("
            << static_cast<double>(roomy3.max_peak()) / static_cast<double>(roomy0.max_peak()) << "x)\n";
  EXPECT_LE(static_cast<double>(roomy2.max_peak()), kGoalStage2 * static_cast<double>(roomy0.max_peak()))
      << "stage 2's fit peak " << mb(roomy2.max_peak()) << " is above " << kGoalStage2 << "x stage 0's "
      << mb(roomy0.max_peak());
  EXPECT_LE(static_cast<double>(roomy3.max_peak()), kGoalStage3 * static_cast<double>(roomy0.max_peak()))
      << "stage 3's fit peak " << mb(roomy3.max_peak()) << " is above " << kGoalStage3 << "x stage 0's "
      << mb(roomy0.max_peak());
  // Each stage holds less than the one before (a stage 3 that used more than stage 2 would be a bug).
  EXPECT_LT(roomy3.max_peak(), roomy2.max_peak());
  EXPECT_LT(roomy2.max_peak(), roomy1.max_peak());
  // The same losses: stages 2 and 3 are stage 0 to rounding.
  EXPECT_NEAR(roomy2.last_loss, roomy0.last_loss, 1e-5 * std::max(1.0, std::abs(roomy0.last_loss)));
  EXPECT_NEAR(roomy3.last_loss, roomy0.last_loss, 1e-5 * std::max(1.0, std::abs(roomy0.last_loss)));

  // 2. The limit, in whole MiB, above stage 2's peak and below stage 0's, both with margins.
  const auto limit_mb = static_cast<std::int64_t>(
      std::ceil(kAboveStage2 * static_cast<double>(roomy2.max_peak()) / static_cast<double>(kMiB)));
  std::cout << "[sharding memory] limit " << limit_mb << " MiB per device\n";
  ASSERT_LE(static_cast<double>(limit_mb * kMiB), kBelowStage0 * static_cast<double>(roomy0.max_peak()))
      << "stage 2's peak (" << mb(roomy2.max_peak()) << ") is too close to stage 0's (" << mb(roomy0.max_peak())
      << ") for a limit with both margins";

  // 3. MirroredStrategy runs out of memory, naming a device.
  const FitOutcome capped0 = fit_at(0, limit_mb);
  ASSERT_TRUE(capped0.oom.has_value()) << "stage 0 trained under " << limit_mb << " MiB per device (peak "
                                       << mb(capped0.max_peak()) << ")";
  std::cout << "[sharding memory] stage 0 under " << limit_mb << " MiB: " << capped0.oom->substr(0, 300) << "\n";
  bool names_a_replica_device = false;
  for (int r = 0; r < kReplicas; ++r)
    names_a_replica_device |= capped0.oom->find("/device:CPU:" + std::to_string(r)) != std::string::npos;
  EXPECT_TRUE(names_a_replica_device) << *capped0.oom;
  EXPECT_NE(capped0.oom->find("limit"), std::string::npos) << *capped0.oom;

  // 4. Stage 2 trains under the same limit, to the losses it reached with room.
  const FitOutcome capped2 = fit_at(2, limit_mb);
  ASSERT_FALSE(capped2.oom.has_value()) << *capped2.oom;
  EXPECT_LE(capped2.max_peak(), limit_mb * kMiB);
  EXPECT_DOUBLE_EQ(capped2.last_loss, roomy2.last_loss);

  // 4b. So does stage 3.
  const FitOutcome capped3 = fit_at(3, limit_mb);
  ASSERT_FALSE(capped3.oom.has_value()) << *capped3.oom;
  EXPECT_LE(capped3.max_peak(), limit_mb * kMiB);
  EXPECT_DOUBLE_EQ(capped3.last_loss, roomy3.last_loss);

  // 5. Stage 1, reported either way (its slots are sharded, its gradients whole).
  const FitOutcome capped1 = fit_at(1, limit_mb);
  std::cout << "[sharding memory] stage 1 under " << limit_mb
            << " MiB: " << (capped1.oom ? "ResourceExhaustedError" : "trains") << " (peak with room "
            << mb(roomy1.max_peak()) << ")\n";
  if (!capped1.oom) {
    EXPECT_DOUBLE_EQ(capped1.last_loss, roomy1.last_loss);
  }
}

}  // namespace
}  // namespace chorus
