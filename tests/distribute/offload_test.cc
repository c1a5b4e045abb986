// Optimizer-state offload (ShardingOptions::offload_optimizer_state, distribute/optimizer_offload.h)
// on logical CPU devices: the option's validation; training with offload at ZeRO stages 1-3 ends
// with weights and slots bitwise equal to the same stage without offload (Adam, SGD with momentum,
// AdamW, Adam with global_clipnorm, Adam accumulating gradients over 2 steps, a LossScaleOptimizer
// under mixed_bfloat16; custom loop and fit;
// 2 and 4 replicas, uneven and empty shards); the slots' shards live on the host memory devices
// (core/host_memory.h), not on the replicas' devices, whose allocators no longer hold them; a model
// that does not fit under the devices' memory limit at stage 3 (ResourceExhaustedError) trains with
// offload to the weights it reaches with room; checkpoints saved with offload restore without, and
// back, with the same keys and values; the gradients' host copies start during the backward pass
// from the second step on (staging), without changing a bit.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <tuple>

#include "tests/optimizer/sharding_util.h"
#include <chorus/checkpoint/bundle.h>
#include <chorus/core/host_memory.h>
#include <chorus/model/mixed_precision.h>
#include <chorus/optimizer/loss_scale_optimizer.h>

namespace chorus::sharding_testing {
namespace {

constexpr int kSteps = 6;

distribute::MirroredStrategyOptions options(int stage, bool offload) {
  return {.sharding = {.stage = stage, .offload_optimizer_state = offload}};
}

// --- the option ---

TEST(OffloadOptions, StageZeroIsRefusedAtConstructionStagesOneToThreeAccepted) {
  make_cpus(2);
  try {
    distribute::MirroredStrategy s(cpus(2), options(0, true));
    FAIL() << "offload at stage 0 was accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("offload_optimizer_state needs sharding.stage 1, 2 or 3"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("MirroredStrategy"), std::string::npos) << e.what();
  }
  for (int stage : {1, 2, 3}) {
    distribute::MirroredStrategy s(cpus(2), options(stage, true));
    EXPECT_TRUE(s.offloads_optimizer_state());
    EXPECT_EQ(s.sharding_stage(), stage);
  }
  EXPECT_FALSE(distribute::MirroredStrategy(cpus(2), options(2, false)).offloads_optimizer_state());
}

// --- parity ---

struct Outcome {
  State state;
  std::vector<std::string> slot_devices;  // every slot shard's device
};

std::shared_ptr<optimizers::Optimizer> make(const std::string& which) {
  if (which == "AdamW")
    return std::make_shared<optimizers::AdamW>(optimizers::AdamWOptions{.learning_rate = 0.05, .weight_decay = 0.1});
  if (which == "LossScale")
    return std::make_shared<optimizers::LossScaleOptimizer>(
        std::make_shared<optimizers::Adam>(optimizers::AdamOptions{.learning_rate = 0.05}),
        optimizers::LossScaleOptions{.initial_scale = 256});
  if (which == "SgdMomentum") return make_optimizer(Opt::kSgdMomentum);
  if (which == "AdamAccumulate")  // stage 3's accumulators are sharded like the slots: in host memory too
    return std::make_shared<optimizers::Adam>(
        optimizers::AdamOptions{.learning_rate = 0.05, .gradient_accumulation_steps = 2});
  if (which == "AdamGlobalClipnorm") return make_optimizer(Opt::kAdamGlobalClipnorm);
  return make_optimizer(Opt::kAdam);
}

Outcome train_with(int k, int stage, bool offload, const std::string& which, bool fit) {
  const bool mixed = which == "LossScale";
  if (mixed) mixed_precision::set_global_policy("mixed_bfloat16");
  distribute::MirroredStrategy strategy(cpus(k), options(stage, offload));
  std::unique_ptr<model::Sequential> m;
  std::shared_ptr<optimizers::Optimizer> opt;
  {
    auto scope = strategy.scope();
    m = make_model();
    opt = make(which);
  }
  if (mixed) mixed_precision::set_global_policy("float32");
  if (fit) {
    auto scope = strategy.scope();
    train_fit(*m, opt, kSteps);
  } else {
    train_loop(strategy, *m, *opt, 0, kSteps);
  }
  Outcome out;
  out.state = snapshot(*m, *opt);
  for (const auto& ref : opt->slot_variables()) {
    const ShardedVariable* sv = as_sharded(ref.slot);
    // Every slot is sharded; so is an accumulator at stage 3 (at 1-2 it is each replica's own sum).
    EXPECT_TRUE(sv != nullptr || (which == "AdamAccumulate" && stage < 3)) << ref.slot.name();
    if (sv == nullptr) continue;
    for (const Variable& c : sv->components()) out.slot_devices.push_back(c.device());
  }
  return out;
}

using Param = std::tuple<int, int, std::string, bool>;  // replicas, stage, optimizer, fit

class OffloadParity : public ::testing::TestWithParam<Param> {};

TEST_P(OffloadParity, WeightsAndSlotsBitwiseEqualTheSameStageWithoutOffload) {
  const auto& [k, stage, which, fit] = GetParam();
  make_cpus(k);
  const Outcome plain = train_with(k, stage, false, which, fit);
  const Outcome off = train_with(k, stage, true, which, fit);
  EXPECT_EQ(off.state.iterations, kSteps);  // with accumulation: micro-steps
  expect_states_equal(off.state, plain.state, 0.0, "offload vs not, stage " + std::to_string(stage) + " " + which);
  ASSERT_FALSE(off.slot_devices.empty());
  for (std::size_t i = 0; i < off.slot_devices.size(); ++i) {
    EXPECT_TRUE(runtime::is_host_memory(off.slot_devices[i])) << off.slot_devices[i];
    EXPECT_EQ(off.slot_devices[i].find("/job:host_memory/"), 0u) << "pageable host memory on CPU replicas";
    EXPECT_FALSE(runtime::is_host_memory(plain.slot_devices[i])) << plain.slot_devices[i];
  }
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::to_string(std::get<0>(info.param)) + "replicas_stage" + std::to_string(std::get<1>(info.param)) + "_" +
         std::get<2>(info.param) + (std::get<3>(info.param) ? "_fit" : "_loop");
}

INSTANTIATE_TEST_SUITE_P(Stages, OffloadParity,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::Values(1, 2, 3),
                                            ::testing::Values("Adam", "SgdMomentum", "AdamW", "AdamGlobalClipnorm",
                                                              "AdamAccumulate"),
                                            ::testing::Bool()),
                         param_name);
// Mixed precision through fit (which casts the bfloat16 output to float32 for the loss).
INSTANTIATE_TEST_SUITE_P(MixedPrecision, OffloadParity,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::Values(1, 2, 3),
                                            ::testing::Values("LossScale"), ::testing::Values(true)),
                         param_name);

// Offload with stage 2-3's overlapped reduce-scatter and stage 3's prefetch (two features that
// landed apart): the weights and slots are bitwise those of the same stage without offload, overlap
// or prefetch.
TEST(OffloadParity, WithOverlapAndPrefetchBitwiseEqualThePlainStage) {
  make_cpus(2);
  for (const int stage : {2, 3}) {
    const auto run = [&](bool offload, bool overlap) {
      distribute::MirroredStrategy strategy(
          cpus(2), {.sharding = {.stage = stage, .prefetch_limit = overlap ? 1 : 0, .offload_optimizer_state = offload},
                    .overlap_gradient_all_reduce = overlap});
      EXPECT_EQ(strategy.overlaps_gradient_all_reduce(), overlap);
      std::unique_ptr<model::Sequential> m;
      std::shared_ptr<optimizers::Optimizer> opt;
      {
        auto scope = strategy.scope();
        m = make_model();
        opt = make("Adam");
      }
      train_loop(strategy, *m, *opt, 0, kSteps);
      return snapshot(*m, *opt);
    };
    const State plain = run(false, false);
    const State both = run(true, true);
    EXPECT_EQ(both.iterations, kSteps);
    expect_states_equal(both, plain, 0.0, "offload + overlap + prefetch, stage " + std::to_string(stage));
  }
}

// --- staging: the gradients' host copies overlap the backward pass ---

// Stage 2 with overlap (the communication thread copies each bucket's shards to the host once
// reduce-scattered) and stage 3 with and without overlap (the GatherParameters node copies the
// shards it returns), through fit: the first step copies every offloaded gradient at the update
// (it learns which variables are offloaded), every later step stages them all during the backward
// pass (Strategy::offload_counters) — and the weights and slots are bitwise those without offload.
TEST(OffloadStaging, GradientsReachTheHostDuringTheBackwardPassWithTheSameBits) {
  for (const int k : {2, 4}) {
    make_cpus(k);
    for (const int stage : {2, 3}) {
      for (const bool overlap : {false, true}) {
        if (stage == 2 && !overlap) continue;  // reduced after the backward pass: nothing to stage early
        const std::string what = std::to_string(k) + " replicas, stage " + std::to_string(stage) +
                                 (overlap ? " with overlap" : " without overlap");
        const auto run = [&](bool offload, int steps, distribute::OffloadCounters* counted) {
          distribute::MirroredStrategy strategy(cpus(k),
                                                {.sharding = {.stage = stage, .offload_optimizer_state = offload},
                                                 .overlap_gradient_all_reduce = overlap});
          std::unique_ptr<model::Sequential> m;
          std::shared_ptr<optimizers::Optimizer> opt;
          {
            auto scope = strategy.scope();
            m = make_model();
            opt = make("Adam");
            train_fit(*m, opt, steps);
          }
          if (counted != nullptr) *counted = strategy.offload_counters();
          return snapshot(*m, *opt);
        };
        distribute::OffloadCounters first, all;
        run(true, 1, &first);
        EXPECT_GT(first.copied, 0) << what;
        EXPECT_EQ(first.staged, 0) << what;
        const State staged = run(true, kSteps, &all);
        EXPECT_EQ(all.copied, first.copied) << what << ": only the first step copies at the update";
        EXPECT_EQ(all.staged, first.copied * (kSteps - 1)) << what;
        const State plain = run(false, kSteps, nullptr);
        expect_states_equal(staged, plain, 0.0, "staged offload vs none, " + what);
      }
    }
  }
}

// A gradient the optimizer changes after the sum (global_clipnorm scales every one) is not the
// tensor that was staged: it is copied at the update, and the result is still bitwise the same.
TEST(OffloadStaging, AClippedGradientIsCopiedAtTheUpdate) {
  make_cpus(2);
  const auto run = [&](bool offload, distribute::OffloadCounters* counted) {
    distribute::MirroredStrategy strategy(cpus(2), options(3, offload));
    std::unique_ptr<model::Sequential> m;
    std::shared_ptr<optimizers::Optimizer> opt;
    {
      auto scope = strategy.scope();
      m = make_model();
      opt = make("AdamGlobalClipnorm");
      train_fit(*m, opt, kSteps);
    }
    if (counted != nullptr) *counted = strategy.offload_counters();
    return snapshot(*m, *opt);
  };
  distribute::OffloadCounters counted;
  const State off = run(true, &counted);
  EXPECT_EQ(counted.staged, 0);
  EXPECT_GT(counted.copied, 0);
  expect_states_equal(off, run(false, nullptr), 0.0, "clipped, stage 3");
}

// --- where the slots live ---

// Adam on 4 replicas at stage 1: the slot shards are variables on host memory device r (their
// tensors' allocator is that device's), the host devices' allocators hold their bytes, and the
// replicas' own allocators hold exactly those bytes less than without offload.
TEST(OffloadPlacement, SlotShardsLiveInHostMemoryNotOnTheReplicasDevices) {
  const int k = 4;
  std::vector<std::size_t> device_bytes[2];
  std::size_t slot_bytes = 0;
  for (int offload = 0; offload < 2; ++offload) {
    make_cpus(k);
    distribute::MirroredStrategy strategy(cpus(k), options(1, offload != 0));
    std::unique_ptr<model::Sequential> m;
    std::shared_ptr<optimizers::Optimizer> opt;
    {
      auto scope = strategy.scope();
      m = make_model();
      opt = make("Adam");
    }
    train_loop(strategy, *m, *opt, 0, 1);
    std::size_t bytes = 0;
    for (const auto& ref : opt->slot_variables()) {
      const ShardedVariable* sv = as_sharded(ref.slot);
      ASSERT_NE(sv, nullptr);
      for (std::size_t r = 0; r < sv->components().size(); ++r) {
        const Tensor t = sv->components()[r].value();
        bytes += t.nbytes();
        if (offload == 0) {
          EXPECT_EQ(t.device_name(), strategy.replica_devices()[r]);
          continue;
        }
        const std::string host = "/job:host_memory/replica:0/task:0/device:CPU:" + std::to_string(r);
        EXPECT_EQ(t.device_name(), host);
        EXPECT_EQ(&t.device_context(), runtime::find(host).get());
        EXPECT_EQ(t.device_context().allocator().name(), runtime::find(host)->allocator().name());
        EXPECT_GE(config::get_memory_info(host).current, t.nbytes());
      }
    }
    if (offload == 1) {
      EXPECT_EQ(bytes, slot_bytes);
    }
    slot_bytes = bytes;
    for (int r = 0; r < k; ++r) device_bytes[offload].push_back(config::get_memory_info(cpus(k)[r]).current);
  }
  ASSERT_GT(slot_bytes, 0u);
  std::size_t total[2] = {0, 0};
  for (int o = 0; o < 2; ++o)
    for (std::size_t b : device_bytes[o]) total[o] += b;
  // Allocations round up to 256 bytes: each of the 6 × 2 × 4 shards may round differently.
  EXPECT_GE(total[0] - total[1], slot_bytes) << total[0] << " vs " << total[1];
  EXPECT_LE(total[0] - total[1], slot_bytes + 6 * 2 * 4 * 256) << total[0] << " vs " << total[1];
}

// --- a model that does not fit at stage 3 alone ---

// 8 × Dense(512 → 512) with Adam (P ≈ 8.4 MB) on 4 logical CPU devices, global batch 32.
constexpr int kWidth = 512;

std::unique_ptr<model::Sequential> wide_model() {
  std::vector<layers::LayerPtr> ls;
  for (int i = 0; i < 8; ++i)
    ls.push_back(layers::Dense(kWidth, i < 7 ? "relu" : "", true, initializers::glorot_uniform(10 + i)));
  auto m = std::make_unique<model::Sequential>(std::move(ls));
  m->build(Shape({32, kWidth}));
  return m;
}

struct WideRun {
  std::size_t peak = 0;  // max over the replicas' devices, since they were created (model creation included)
  std::vector<std::vector<unsigned char>> weights;  // raw bytes: whole values stay off the limited devices
};

WideRun train_wide(int k, bool offload, int steps) {
  distribute::MirroredStrategy strategy(cpus(k), options(3, offload));
  std::unique_ptr<model::Sequential> m;
  std::shared_ptr<optimizers::Optimizer> opt;
  {
    auto scope = strategy.scope();
    m = wide_model();
    opt = make("Adam");
  }
  std::vector<float> x(32 * kWidth), y(32 * kWidth);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>(std::sin(0.01 * static_cast<double>(i)));
    y[i] = static_cast<float>(std::cos(0.013 * static_cast<double>(i)));
  }
  const Tensor xs = Tensor::from_vector<float>(x, {32, kWidth}), ys = Tensor::from_vector<float>(y, {32, kWidth});
  {
    auto scope = strategy.scope();
    m->compile(opt, std::make_shared<losses::MeanSquaredError>());
  }
  m->fit(data::Dataset::from_tensor_slices({xs, ys}).repeat(steps).batch(32), {.epochs = 1, .verbose = 0});
  WideRun out;
  for (const std::string& d : strategy.replica_devices())
    out.peak = std::max(out.peak, config::get_memory_info(d).peak);
  for (const Variable& v : m->trainable_variables()) out.weights.push_back(bytes_of(v.read_value()));
  return out;
}

TEST(OffloadMemory, AModelThatDoesNotFitAtStageThreeTrainsWithOffload) {
  const int k = 4;
  make_cpus(k);  // 64 MiB each: room
  const WideRun stage3 = train_wide(k, false, 2);
  make_cpus(k);
  const WideRun offload = train_wide(k, true, 2);
  std::cout << "fit peak per replica: stage 3 " << stage3.peak << " B, stage 3 + offload " << offload.peak
            << " B (ratio " << static_cast<double>(offload.peak) / static_cast<double>(stage3.peak) << ")\n";
  // Offload takes Adam's m and v (2P/4 per replica) off the devices.
  ASSERT_LT(static_cast<double>(offload.peak) * 1.2, static_cast<double>(stage3.peak));
  const std::int64_t limit_mb =
      static_cast<std::int64_t>(std::ceil(static_cast<double>(offload.peak) * 1.25 / (1 << 20)));
  ASSERT_LT(static_cast<std::size_t>(limit_mb) << 20, stage3.peak) << "the limit must be below stage 3's peak";
  auto limited = [&] {
    chorus::internal::reset_runtime_for_testing();
    config::set_visible_devices({}, "GPU");
    config::set_logical_device_configuration(
        config::list_physical_devices("CPU")[0],
        std::vector<LogicalDeviceConfiguration>(k, LogicalDeviceConfiguration{.memory_limit_mb = limit_mb}));
  };
  limited();
  try {
    train_wide(k, false, 2);
    FAIL() << "stage 3 trained under " << limit_mb << " MiB per device";
  } catch (const ResourceExhaustedError& e) {
    EXPECT_NE(std::string(e.what()).find("device:CPU:"), std::string::npos) << e.what();
  }
  limited();
  const WideRun under = train_wide(k, true, 2);
  EXPECT_LE(under.peak, static_cast<std::size_t>(limit_mb) << 20);
  ASSERT_EQ(under.weights.size(), stage3.weights.size());
  for (std::size_t i = 0; i < under.weights.size(); ++i)
    EXPECT_EQ(under.weights[i], stage3.weights[i]) << "weight " << i;
}

// --- checkpoints ---

std::vector<std::pair<std::string, Shape>> keys_of(const std::string& prefix) {
  std::vector<std::pair<std::string, Shape>> out;
  train::BundleReader reader(prefix);
  for (const std::string& key : reader.keys()) out.emplace_back(key, reader.entry(key).shape);
  return out;
}

// Saved with offload at stage 2, restored without (stage 2 and stage 0) and trained on; saved
// without, restored with offload (stage 3): each run ends where the uninterrupted one does, and
// the saves with and without offload hold the same keys, shapes and bytes.
TEST(OffloadCheckpoint, SavedWithOffloadRestoresWithoutAndBack) {
  const int k = 2;
  const std::string dir = ::testing::TempDir() + "/offload_ckpt";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto save_after = [&](bool offload, const std::string& name) {
    make_cpus(k);
    distribute::MirroredStrategy strategy(cpus(k), options(2, offload));
    std::unique_ptr<model::Sequential> m;
    std::shared_ptr<optimizers::Optimizer> opt;
    {
      auto scope = strategy.scope();
      m = make_model();
      opt = make("Adam");
    }
    train_loop(strategy, *m, *opt, 0, 3);
    train::Checkpoint ckpt({{"model", *m}, {"optimizer", *opt}});
    return ckpt.write(dir + "/" + name);
  };
  const std::string with = save_after(true, "with"), without = save_after(false, "without");
  ASSERT_EQ(keys_of(with), keys_of(without));
  {
    train::BundleReader a(with), b(without);
    for (const std::string& key : a.keys()) {
      if (a.entry(key).is_string) {
        EXPECT_EQ(a.read_strings(key), b.read_strings(key)) << key;
      } else {
        EXPECT_EQ(bytes_of(a.read(key)), bytes_of(b.read(key))) << key;
      }
    }
  }
  auto train_on = [&](distribute::Strategy& s) {
    return [&s](model::Sequential& m, optimizers::Optimizer& o) { train_loop(s, m, o, 3, 3); };
  };
  make_cpus(k);
  State want;
  {
    distribute::MirroredStrategy s(cpus(k), options(2, false));
    want = resume_and_train(s, without, 3, train_on(s));
  }
  for (int stage : {0, 2}) {
    make_cpus(k);
    distribute::MirroredStrategy s(cpus(k), options(stage, false));
    expect_states_equal(resume_and_train(s, with, 3, train_on(s)), want, stage == 0 ? 1e-6 : 0.0,
                        "saved with offload, restored at stage " + std::to_string(stage));
  }
  make_cpus(k);
  {
    distribute::MirroredStrategy s(cpus(k), options(2, true));
    expect_states_equal(resume_and_train(s, without, 3, train_on(s)), want, 0.0,
                        "saved without offload, restored with it at stage 2");
  }
  make_cpus(k);
  {
    distribute::MirroredStrategy s(cpus(k), options(3, true));
    expect_states_equal(resume_and_train(s, with, 3, train_on(s)), want, 1e-6,
                        "saved with offload, restored with it at stage 3");
  }
}

}  // namespace
}  // namespace chorus::sharding_testing
