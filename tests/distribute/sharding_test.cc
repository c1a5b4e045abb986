// ZeRO sharding under MirroredStrategy (distribute/sharding_options.h): the flat layout
// (core/sharded_variable.h) for E ∈ {0, 1, 3, 35} × n ∈ {1..4}; the option's validation and log
// stage; which variables become sharded; ZeroVariable's reads, writes, checkpoint_value and restore
// (distribute/zero_variable.h) with uneven and empty shards; stage 2's reduce_scatter_shards
// (distribute/replica_context.h) with uneven, empty and compressed packs.
#include <gtest/gtest.h>

#include <numeric>

#include "tests/core/test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/distribution.h>
#include <chorus/core/runtime.h>
#include <chorus/core/sharded_variable.h>
#include <chorus/core/step_policy.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/distribute/mirrored_variable.h>
#include <chorus/distribute/replica_context.h>
#include <chorus/distribute/zero_variable.h>
#include <chorus/ops/ops.h>

namespace chorus::distribute {
namespace {

using chorus::testing::cpus;
void make_cpus(int n) { chorus::testing::make_cpus(n, 64); }

// --- ShardLayout ---

TEST(ShardLayout, ShardsCoverEveryElementExactlyOnceInReplicaOrder) {
  for (std::int64_t e : {0, 1, 3, 35}) {
    for (int n = 1; n <= 4; ++n) {
      const ShardLayout l = ShardLayout::of(e, n);
      EXPECT_EQ(l.num_elements, e);
      EXPECT_EQ(l.num_shards, n);
      EXPECT_EQ(l.padded, (e + n - 1) / n) << "E=" << e << " n=" << n;
      std::int64_t next = 0;
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(l.begin(r), next) << "E=" << e << " n=" << n << " r=" << r;  // contiguous, no gap or overlap
        EXPECT_GE(l.length(r), 0);
        EXPECT_LE(l.length(r), l.padded);
        next += l.length(r);
      }
      EXPECT_EQ(next, e) << "E=" << e << " n=" << n;  // covers [0, E)
    }
  }
}

TEST(ShardLayout, UnevenAndEmptyShards) {
  const ShardLayout a = ShardLayout::of(35, 4);  // c = 9
  EXPECT_EQ((std::vector<std::int64_t>{a.length(0), a.length(1), a.length(2), a.length(3)}),
            (std::vector<std::int64_t>{9, 9, 9, 8}));
  const ShardLayout b = ShardLayout::of(1, 4);
  EXPECT_EQ((std::vector<std::int64_t>{b.length(0), b.length(1), b.length(2), b.length(3)}),
            (std::vector<std::int64_t>{1, 0, 0, 0}));
  EXPECT_EQ(b.begin(3), 1);
  const ShardLayout c = ShardLayout::of(3, 2);  // c = 2: 2, 1
  EXPECT_EQ(c.length(0), 2);
  EXPECT_EQ(c.length(1), 1);
  const ShardLayout d = ShardLayout::of(5, 4);  // c = 2: 2, 2, 1, 0
  EXPECT_EQ((std::vector<std::int64_t>{d.length(0), d.length(1), d.length(2), d.length(3)}),
            (std::vector<std::int64_t>{2, 2, 1, 0}));
  const ShardLayout z = ShardLayout::of(0, 3);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(z.length(r), 0);
}

TEST(ShardLayout, RejectsBadArguments) {
  EXPECT_THROW(ShardLayout::of(-1, 2), InvalidArgumentError);
  EXPECT_THROW(ShardLayout::of(4, 0), InvalidArgumentError);
}

// --- options ---

TEST(ShardingOptions, StagesZeroToThreeAreAcceptedOthersInvalid) {
  make_cpus(2);
  EXPECT_EQ(MirroredStrategy(cpus(2), {.sharding = {.stage = 3}}).sharding_stage(), 3);
  EXPECT_EQ(MirroredStrategy(cpus(2), {.sharding = {.stage = 2}}).sharding_stage(), 2);
  for (int stage : {-1, 4, 17}) {
    try {
      MirroredStrategy s(cpus(2), {.sharding = {.stage = stage}});
      ADD_FAILURE() << "stage " << stage << " was accepted";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(stage)), std::string::npos) << e.what();
    }
  }
}

TEST(ShardingOptions, StageIsReportedAndLogged) {
  make_cpus(2);
  ::testing::internal::CaptureStderr();
  MirroredStrategy one(cpus(2), {.sharding = {.stage = 1}});
  MirroredStrategy zero(cpus(2));
  MirroredStrategy two(cpus(2), {.sharding = {.stage = 2}});
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(two.sharding_stage(), 2);
  EXPECT_NE(log.find("ZeRO stage 2 (optimizer slots and gradients partitioned over 2 replicas)"), std::string::npos)
      << log;
  EXPECT_EQ(one.sharding_stage(), 1);
  EXPECT_EQ(zero.sharding_stage(), 0);
  EXPECT_EQ(OneDeviceStrategy("/cpu:0").sharding_stage(), 0);
  EXPECT_EQ(get_strategy().sharding_stage(), 0);
  EXPECT_NE(log.find("ZeRO stage 1 (optimizer slots partitioned over 2 replicas)"), std::string::npos) << log;
  EXPECT_NE(log.find("sharding: off (ZeRO stage 0)"), std::string::npos) << log;
}

// --- which variables are sharded ---

TEST(ZeroVariable, OnlyOnWriteVariablesAskingForItAtStageOne) {
  make_cpus(3);
  MirroredStrategy one(cpus(3), {.sharding = {.stage = 1}});
  MirroredStrategy zero(cpus(3));
  const Tensor init = Tensor::from_vector<float>({1, 2, 3, 4, 5}, {5});
  {
    auto scope = one.scope();
    Variable asked =
        make_variable({.initial_value = init, .name = "m", .trainable = false, .shard_over_replicas = true});
    Variable plain = make_variable({.initial_value = init, .name = "w"});
    Variable on_read = make_variable({.initial_value = init,
                                      .name = "acc",
                                      .trainable = false,
                                      .synchronization = VariableSynchronization::kOnRead,
                                      .aggregation = VariableAggregation::kSum,
                                      .shard_over_replicas = true});
    ASSERT_NE(as_sharded(asked), nullptr);
    EXPECT_NE(dynamic_cast<ZeroVariable*>(asked.impl().get()), nullptr);
    EXPECT_EQ(as_sharded(plain), nullptr);
    EXPECT_NE(dynamic_cast<MirroredVariable*>(plain.impl().get()), nullptr);
    EXPECT_EQ(as_sharded(on_read), nullptr);
    EXPECT_NE(dynamic_cast<MirroredVariable*>(on_read.impl().get()), nullptr);
  }
  {
    auto scope = zero.scope();
    Variable asked = make_variable({.initial_value = init, .name = "m", .shard_over_replicas = true});
    EXPECT_EQ(as_sharded(asked), nullptr);  // stage 0: mirrored, as always
    EXPECT_NE(dynamic_cast<MirroredVariable*>(asked.impl().get()), nullptr);
  }
  // No strategy: a plain variable.
  Variable lone = make_variable({.initial_value = init, .name = "m", .shard_over_replicas = true});
  EXPECT_EQ(as_distributed(lone), nullptr);
}

// 35 elements over 4 replicas (9, 9, 9, 8), as a [5, 7] variable with values 0..34.
std::vector<float> iota(int n, float start = 0) {
  std::vector<float> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(ZeroVariable, ComponentsAreTheFlatShardsOnEachReplicasDevice) {
  make_cpus(4);
  MirroredStrategy s(cpus(4), {.sharding = {.stage = 1}});
  auto scope = s.scope();
  Variable v = make_variable({.initial_value = Tensor::from_vector<float>(iota(35), {5, 7}),
                              .name = "k/m",
                              .trainable = false,
                              .shard_over_replicas = true});
  ShardedVariable* sv = as_sharded(v);
  ASSERT_NE(sv, nullptr);
  EXPECT_EQ(v.shape(), Shape({5, 7}));
  EXPECT_EQ(v.dtype(), DType::kFloat32);
  EXPECT_EQ(v.name(), "k/m");
  EXPECT_FALSE(v.trainable());
  EXPECT_EQ(v.synchronization(), VariableSynchronization::kOnWrite);
  EXPECT_EQ(v.device(), s.replica_devices()[0]);
  EXPECT_EQ(&sv->strategy(), &s);
  ASSERT_EQ(sv->components().size(), 4u);
  const std::vector<std::int64_t> begin{0, 9, 18, 27}, length{9, 9, 9, 8};
  for (std::size_t r = 0; r < 4; ++r) {
    const Variable& c = sv->components()[r];
    EXPECT_EQ(c.device(), s.replica_devices()[r]);
    EXPECT_EQ(c.shape(), Shape({length[r]}));
    EXPECT_EQ(c.read_value().to_vector<float>(), iota(static_cast<int>(length[r]), static_cast<float>(begin[r])));
  }
  // Cross-replica reads: the whole variable, a new tensor.
  EXPECT_EQ(v.read_value().shape(), Shape({5, 7}));
  EXPECT_EQ(v.read_value().to_vector<float>(), iota(35));
  EXPECT_EQ(v.value().to_vector<float>(), iota(35));
  EXPECT_EQ(sv->checkpoint_value().shape(), Shape({5, 7}));
  EXPECT_EQ(sv->checkpoint_value().to_vector<float>(), iota(35));
  EXPECT_THROW(sv->local_shard(), FailedPreconditionError);
}

TEST(ZeroVariable, ReplicaContextReadsAndWritesItsShard) {
  make_cpus(3);
  MirroredStrategy s(cpus(3), {.sharding = {.stage = 1}});
  Variable v, summed;
  {
    auto scope = s.scope();
    v = make_variable({.initial_value = Tensor::from_vector<float>(iota(7), {7}),
                       .name = "v",
                       .trainable = false,
                       .shard_over_replicas = true});
    summed = make_variable({.initial_value = Tensor::zeros({7}),
                            .name = "s",
                            .aggregation = VariableAggregation::kSum,
                            .shard_over_replicas = true});
  }
  // 7 over 3: c = 3 → 3, 3, 1.
  auto lengths = s.run([&] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    Tensor mine = v.value();
    EXPECT_TRUE(mine.device_name() == s.replica_devices()[static_cast<std::size_t>(r)]);
    Tensor local = as_sharded(v)->local_shard();
    local.add_inplace(Tensor::ones(local.shape(), DType::kFloat32, local.device_name()));  // in place, aliasing
    // A whole value: combined across replicas (SUM), each keeps its slice.
    summed.assign_add(Tensor::from_vector<float>(iota(7, static_cast<float>(r)), {7}).to(local.device_name()));
    EXPECT_THROW(v.assign(Tensor::zeros({7}).to(local.device_name())), InvalidArgumentError);  // NONE, 3 replicas
    return mine.num_elements();
  });
  EXPECT_EQ(lengths.values(), (std::vector<std::int64_t>{3, 3, 1}));
  EXPECT_EQ(v.read_value().to_vector<float>(), iota(7, 1));
  // Σ_r (i + r) = 3i + 3.
  std::vector<float> want;
  for (int i = 0; i < 7; ++i) want.push_back(static_cast<float>(3 * i + 3));
  EXPECT_EQ(summed.read_value().to_vector<float>(), want);
}

TEST(ZeroVariable, CrossReplicaWritesRestoreAndShapeErrors) {
  make_cpus(4);
  MirroredStrategy s(cpus(4), {.sharding = {.stage = 1}});
  auto scope = s.scope();
  Variable bias = make_variable(
      {.initial_value = Tensor::from_vector<float>({5}, {1}), .name = "b/m", .shard_over_replicas = true});
  ShardedVariable* sv = as_sharded(bias);
  ASSERT_NE(sv, nullptr);
  EXPECT_EQ(sv->components()[0].shape(), Shape({1}));
  for (std::size_t r = 1; r < 4; ++r) EXPECT_EQ(sv->components()[r].shape(), Shape({0}));  // empty shards
  EXPECT_EQ(bias.read_value().to_vector<float>(), std::vector<float>{5});
  bias.assign(Tensor::from_vector<float>({2}, {1}));
  bias.assign_add(Tensor::from_vector<float>({1}, {1}));
  EXPECT_EQ(bias.read_value().to_vector<float>(), std::vector<float>{3});
  EXPECT_THROW(bias.assign(Tensor::zeros({2})), InvalidArgumentError);
  EXPECT_THROW(bias.assign(Tensor::zeros({1}, DType::kFloat64)), InvalidArgumentError);

  Variable k = make_variable({.initial_value = Tensor::zeros({5, 7}), .name = "k/m", .shard_over_replicas = true});
  as_sharded(k)->restore(Tensor::from_vector<float>(iota(35, 100), {5, 7}));
  EXPECT_EQ(as_sharded(k)->components()[3].read_value().to_vector<float>(), iota(8, 127));
  EXPECT_EQ(as_sharded(k)->checkpoint_value().to_vector<float>(), iota(35, 100));

  Variable empty = make_variable({.initial_value = Tensor::zeros({0, 3}), .name = "e/m", .shard_over_replicas = true});
  ASSERT_NE(as_sharded(empty), nullptr);
  EXPECT_EQ(as_sharded(empty)->checkpoint_value().shape(), Shape({0, 3}));
  as_sharded(empty)->restore(Tensor::zeros({0, 3}));

  Variable scalar =
      make_variable({.initial_value = Tensor::scalar<float>(4), .name = "s/m", .shard_over_replicas = true});
  EXPECT_EQ(scalar.read_value().shape(), Shape({}));
  EXPECT_EQ(scalar.read_value().item<float>(), 4.0f);
}

TEST(ZeroVariable, UsedInAnotherStrategysReplicaIsAnError) {
  make_cpus(2);
  MirroredStrategy a(cpus(2), {.sharding = {.stage = 1}});
  MirroredStrategy b(cpus(2));
  Variable v;
  {
    auto scope = a.scope();
    v = make_variable({.initial_value = Tensor::zeros({4}), .name = "v", .shard_over_replicas = true});
  }
  EXPECT_THROW(b.run([&] { (void)v.value(); }), FailedPreconditionError);
}

}  // namespace
}  // namespace chorus::distribute

namespace chorus::distribute {
namespace {

// --- stage 2: reduce_scatter_shards ---

// Replica q contributes value i = (q + 1) · (iota(E_i) mod 8) + i; replica r must receive its shard
// [begin_i(r), begin_i(r) + length_i(r)) of Σ_q, for E ∈ {35, 1, 0, 7, 12} over 2, 3 and 4
// replicas, one pack (and one float64 value: a second pack), with and without compression
// (small integers: exact in bfloat16).
TEST(ReduceScatterShards, EachReplicaGetsItsShardOfTheSum) {
  for (int n : {1, 2, 3, 4}) {
    for (bool compress : {false, true}) {
      make_cpus(n);
      MirroredStrategy s(
          cpus(n), {.communication_options = {.compression = compress ? Compression::kBFloat16 : Compression::kNone},
                    .sharding = {.stage = 2}});
      const std::vector<std::int64_t> sizes{35, 1, 0, 7, 12};
      s.read_and_reset_all_reduce_counters();
      auto results = s.run([&] {
        ReplicaContext* ctx = get_replica_context();
        auto* sc = dynamic_cast<StrategyReplicaContext*>(ctx);
        EXPECT_NE(sc, nullptr);
        const int q = ctx->replica_id_in_sync_group();
        std::vector<Tensor> values;
        std::vector<ShardLayout> layouts;
        for (std::size_t i = 0; i < sizes.size(); ++i) {
          std::vector<float> v(static_cast<std::size_t>(sizes[i]));
          for (std::size_t e = 0; e < v.size(); ++e) v[e] = static_cast<float>((q + 1) * (e % 8) + i);
          Tensor t = Tensor::from_vector<float>(v, {sizes[i]});
          values.push_back(i == 4 ? ops::cast(ops::reshape(t, {3, 4}), DType::kFloat64) : t);
          layouts.push_back(ShardLayout::of(sizes[i], n));
        }
        return sc->reduce_scatter_shards(ReduceOp::kSum, values, layouts);
      });
      const double k = n * (n + 1) / 2.0;  // Σ_q (q + 1)
      for (int r = 0; r < n; ++r) {
        const std::vector<Tensor>& got = results[r];
        ASSERT_EQ(got.size(), sizes.size());
        for (std::size_t i = 0; i < sizes.size(); ++i) {
          const ShardLayout l = ShardLayout::of(sizes[i], n);
          EXPECT_EQ(got[i].shape(), Shape({l.length(r)})) << "n=" << n << " r=" << r << " i=" << i;
          EXPECT_EQ(got[i].dtype(), i == 4 ? DType::kFloat64 : DType::kFloat32);
          EXPECT_EQ(got[i].device_name(), s.replica_devices()[static_cast<std::size_t>(r)]);
          const std::vector<double> values = got[i].to_vector<double>();
          for (std::int64_t e = 0; e < l.length(r); ++e)
            EXPECT_EQ(values[static_cast<std::size_t>(e)],
                      k * static_cast<double>((l.begin(r) + e) % 8) + n * double(i))
                << "n=" << n << " r=" << r << " i=" << i << " e=" << e << " compress=" << compress;
        }
      }
      if (n > 1) {
        const AllReduceCounters c = s.all_reduce_counters();
        EXPECT_EQ(c.collectives, 2 * n) << "a float32 pack and a float64 pack per replica";
        EXPECT_EQ(c.bytes < c.uncompressed_bytes, compress);
      }
    }
  }
}

TEST(StepPolicy, TheDefaultStrategysSumsNothingGathersNothingAndOverlapsNothing) {
  StepPolicy& policy = step_policy();
  Variable w = make_variable({.initial_value = Tensor::from_vector<float>({1, 2}, {2}), .name = "w"});
  const Tensor g = Tensor::from_vector<float>({3, 4}, {2});
  EXPECT_EQ(policy.begin_gradient_sum({w.value()}), nullptr);
  EXPECT_EQ(policy.gather_parameters({w}), nullptr);
  std::vector<StepPolicy::Summed> summed = policy.sum_gradients({g}, {w}, {Variable()}, nullptr);
  ASSERT_EQ(summed.size(), 1u);
  EXPECT_FALSE(summed[0].slice);
  EXPECT_EQ(summed[0].gradient.to_vector<float>(), g.to_vector<float>());
  int calls = 0;
  policy.update({w}, std::move(summed), {{}}, [&](std::vector<StepPolicy::UpdateItem>& items) {
    ++calls;
    ASSERT_EQ(items.size(), 1u);
    EXPECT_EQ(items[0].index, 0u);
    items[0].weight.copy_from(items[0].gradient);
  });
  EXPECT_EQ(calls, 1) << "every variable in one group";
  EXPECT_EQ(w.value().to_vector<float>(), (std::vector<float>{3, 4})) << "the update writes the variable itself";
}

TEST(StepPolicy, AStageTwoReplicasPolicyReduceScattersTheGradientsOfShardedState) {
  make_cpus(2);
  MirroredStrategy s(cpus(2), {.sharding = {.stage = 2}});
  Variable w, slot;
  {
    auto scope = s.scope();
    w = make_variable({.initial_value = Tensor::zeros({6}), .name = "w"});
    slot = make_variable(
        {.initial_value = Tensor::zeros({6}), .name = "w/m", .trainable = false, .shard_over_replicas = true});
  }
  auto results = s.run([&] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    std::vector<StepPolicy::Summed> summed =
        step_policy().sum_gradients({Tensor::from_vector<float>({1.f + r, 2, 3, 4, 5, 6}, {6})}, {w}, {slot}, nullptr);
    EXPECT_TRUE(summed[0].slice);
    return summed[0].gradient.to_vector<float>();
  });
  EXPECT_EQ(results[0], (std::vector<float>{3, 4, 6})) << "replica 0's half of the sum";
  EXPECT_EQ(results[1], (std::vector<float>{8, 10, 12}));
}

}  // namespace
}  // namespace chorus::distribute
