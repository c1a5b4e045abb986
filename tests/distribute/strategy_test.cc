// MirroredStrategy / OneDeviceStrategy / default strategy: scope, run, reduce, gather, replica
// contexts, mirrored variables, failures. Runs on 1–4 logical CPU devices.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tests/core/test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/distribution.h>
#include <chorus/core/runtime.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/distribute/mirrored_variable.h>
#include <chorus/distribute/replica_context.h>
#include <chorus/ops/ops.h>

namespace chorus::distribute {
namespace {

using namespace std::chrono_literals;

void make_cpus(int n) {
  chorus::internal::reset_runtime_for_testing();
  config::set_visible_devices({}, "GPU");
  if (n > 1) {
    std::vector<LogicalDeviceConfiguration> cfgs(static_cast<std::size_t>(n),
                                                 LogicalDeviceConfiguration{.memory_limit_mb = 128});
    config::set_logical_device_configuration(config::list_physical_devices("CPU")[0], cfgs);
  }
}

std::vector<std::string> cpus(int n) {
  std::vector<std::string> d;
  for (int i = 0; i < n; ++i) d.push_back("/cpu:" + std::to_string(i));
  return d;
}

StrategyReplicaContext& ctx() {
  auto* c = dynamic_cast<StrategyReplicaContext*>(get_replica_context());
  if (c == nullptr) throw InternalError("not in a strategy replica context");
  return *c;
}

class Replicas : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { make_cpus(GetParam()); }
  int n() const { return GetParam(); }
};

TEST_P(Replicas, RunGivesEachReplicaItsIdDeviceAndThread) {
  MirroredStrategy strategy(cpus(n()));
  EXPECT_EQ(strategy.num_replicas_in_sync(), n());
  EXPECT_EQ(strategy.cross_device_ops().ops, CrossDeviceOps::kSharedMemory);
  auto ids = strategy.run([&] {
    EXPECT_FALSE(in_cross_replica_context());
    EXPECT_TRUE(has_strategy());
    EXPECT_EQ(&get_strategy(), &strategy);
    EXPECT_EQ(get_replica_context()->num_replicas_in_sync(), n());
    return get_replica_context()->replica_id_in_sync_group();
  });
  auto devices = strategy.run([] { return Tensor::zeros({1}).device_name(); });
  for (int r = 0; r < n(); ++r) {
    EXPECT_EQ(ids[r], r);
    EXPECT_EQ(devices[r], runtime::find("/cpu:" + std::to_string(r))->name());
  }
  EXPECT_EQ(strategy.experimental_local_results(ids).size(), static_cast<std::size_t>(n()));
}

TEST_P(Replicas, PerReplicaArgumentsAreSplit) {
  MirroredStrategy strategy(cpus(n()));
  auto values = strategy.run([] { return get_replica_context()->replica_id_in_sync_group() * 10; });
  auto doubled = strategy.run([](int mine, int shared) { return mine * 2 + shared; }, values, 1);
  for (int r = 0; r < n(); ++r) EXPECT_EQ(doubled[r], r * 20 + 1);
}

TEST_P(Replicas, AllReduceSumsAndAveragesReplicaIds) {
  MirroredStrategy strategy(cpus(n()));
  auto out = strategy.run([] {
    const double r = get_replica_context()->replica_id_in_sync_group();
    Tensor t = Tensor::full({3}, r);
    return std::make_pair(get_replica_context()->all_reduce(ReduceOp::kSum, t),
                          get_replica_context()->all_reduce(ReduceOp::kMean, t));
  });
  const double sum = n() * (n() - 1) / 2.0;
  for (int r = 0; r < n(); ++r) {
    EXPECT_EQ(out[r].first.to_vector<double>(), std::vector<double>(3, sum));
    EXPECT_EQ(out[r].second.to_vector<double>(), std::vector<double>(3, sum / n()));
  }
}

TEST_P(Replicas, StrategyReduceWithAndWithoutAxis) {
  MirroredStrategy strategy(cpus(n()));
  // Replica r has r+1 rows of value r (uneven batches).
  auto v = strategy.run([] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    return Tensor::full({r + 1, 2}, r);
  });
  double total = 0, rows = 0;
  for (int r = 0; r < n(); ++r) {
    total += r * (r + 1);
    rows += r + 1;
  }
  Tensor s = strategy.reduce(ReduceOp::kSum, v, 0);
  EXPECT_EQ(s.to_vector<double>(), std::vector<double>(2, total));
  Tensor m = strategy.reduce(ReduceOp::kMean, v, 0);
  EXPECT_NEAR(m.to_vector<double>()[0], total / rows, 1e-6);  // per example, not per replica
  auto same = strategy.run([] { return Tensor::full({2}, 3.0); });
  EXPECT_EQ(strategy.reduce(ReduceOp::kSum, same).to_vector<double>(), std::vector<double>(2, 3.0 * n()));
  EXPECT_EQ(strategy.reduce(ReduceOp::kMean, same).to_vector<double>(), std::vector<double>(2, 3.0));
  EXPECT_EQ(strategy.reduce(ReduceOp::kSum, Tensor::full({1}, 2.0)).item<double>(), 2.0 * n());
  Tensor g = strategy.gather(v, 0);
  EXPECT_EQ(g.shape(), Shape({static_cast<std::int64_t>(rows), 2}));
}

TEST_P(Replicas, AllGatherHandlesUnevenLengthsOnAnyAxis) {
  MirroredStrategy strategy(cpus(n()));
  auto out = strategy.run([] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    Tensor rows = Tensor::full({r + 1, 2}, r);
    Tensor cols = Tensor::full({2, r + 1}, r);
    return std::make_pair(get_replica_context()->all_gather(rows, 0), get_replica_context()->all_gather(cols, 1));
  });
  std::vector<double> expect_rows, expect_cols_row0;
  for (int r = 0; r < n(); ++r)
    for (int i = 0; i < r + 1; ++i) {
      expect_rows.push_back(r);
      expect_rows.push_back(r);
      expect_cols_row0.push_back(r);
    }
  for (int r = 0; r < n(); ++r) {
    EXPECT_EQ(out[r].first.to_vector<double>(), expect_rows);
    auto c = out[r].second.to_vector<double>();
    EXPECT_EQ(std::vector<double>(c.begin(), c.begin() + static_cast<long>(expect_cols_row0.size())), expect_cols_row0);
  }
}

TEST_P(Replicas, ScopeMirrorsVariablesWithIdenticalInitialValues) {
  MirroredStrategy strategy(cpus(n()));
  Variable w;
  {
    auto scope = strategy.scope();
    EXPECT_TRUE(in_cross_replica_context());
    EXPECT_EQ(get_replica_context(), nullptr);
    w = make_variable({.initial_value = Tensor::from_vector<float>({1, 2, 3}), .name = "dense/kernel"});
  }
  EXPECT_FALSE(has_strategy());
  auto mv = std::dynamic_pointer_cast<MirroredVariable>(w.impl());
  ASSERT_NE(mv, nullptr);
  ASSERT_EQ(mv->components().size(), static_cast<std::size_t>(n()));
  for (int r = 0; r < n(); ++r) {
    EXPECT_EQ(mv->components()[r].device(), runtime::find("/cpu:" + std::to_string(r))->name());
    EXPECT_EQ(mv->components()[r].value().to_vector<float>(), (std::vector<float>{1, 2, 3}));
  }
  auto seen = strategy.run([&] { return w.value().device_name(); });
  for (int r = 0; r < n(); ++r) EXPECT_EQ(seen[r], mv->components()[r].device());
}

TEST_P(Replicas, OnWriteAggregationFollowsTensorFlow) {
  MirroredStrategy strategy(cpus(n()));
  Variable mean, sum, first, none;
  {
    auto scope = strategy.scope();
    mean = make_variable(
        {.initial_value = Tensor::scalar(5.0f), .name = "mean", .aggregation = VariableAggregation::kMean});
    sum =
        make_variable({.initial_value = Tensor::scalar(5.0f), .name = "sum", .aggregation = VariableAggregation::kSum});
    first = make_variable({.initial_value = Tensor::scalar(0.0f),
                           .name = "first",
                           .aggregation = VariableAggregation::kOnlyFirstReplica});
    none = make_variable({.initial_value = Tensor::scalar(0.0f), .name = "none"});
  }
  strategy.run([&] {
    const float r = static_cast<float>(get_replica_context()->replica_id_in_sync_group());
    mean.assign_add(Tensor::scalar(1.0f));
    sum.assign_add(Tensor::scalar(1.0f));
    first.assign(Tensor::scalar(r + 7));
  });
  auto results = strategy.run([&] {
    return std::vector<float>{mean.value().item<float>(), sum.value().item<float>(), first.value().item<float>()};
  });
  for (int r = 0; r < n(); ++r) EXPECT_EQ(results[r], (std::vector<float>{6.0f, 5.0f + n(), 7.0f}));
  if (n() > 1) {
    EXPECT_THROW_WITH(strategy.run([&] { none.assign(Tensor::scalar(1.0f)); }), InvalidArgumentError,
                      "You must specify an aggregation method");
  }
  // Cross-replica writes go to every component.
  mean.assign(Tensor::scalar(2.0f));
  for (const auto& c : std::dynamic_pointer_cast<MirroredVariable>(mean.impl())->components())
    EXPECT_EQ(c.value().item<float>(), 2.0f);
}

TEST_P(Replicas, OnReadVariablesAreLocalAndAggregateOnRead) {
  MirroredStrategy strategy(cpus(n()));
  Variable total, avg;
  {
    auto scope = strategy.scope();
    total = make_variable({.initial_value = Tensor::scalar(0.0),
                           .name = "total",
                           .synchronization = VariableSynchronization::kOnRead,
                           .aggregation = VariableAggregation::kSum});
    avg = make_variable({.initial_value = Tensor::scalar(0.0),
                         .name = "avg",
                         .synchronization = VariableSynchronization::kOnRead,
                         .aggregation = VariableAggregation::kMean});
  }
  EXPECT_FALSE(total.trainable());
  auto local = strategy.run([&] {
    const double r = get_replica_context()->replica_id_in_sync_group();
    total.assign_add(Tensor::scalar(r + 1));
    avg.assign(Tensor::scalar(r));
    return total.value().item<double>();
  });
  for (int r = 0; r < n(); ++r) EXPECT_EQ(local[r], r + 1);  // no communication in replica context
  EXPECT_EQ(total.value().item<double>(), n() * (n() + 1) / 2.0);
  EXPECT_EQ(avg.value().item<double>(), (n() - 1) / 2.0);
  total.assign(Tensor::scalar(12.0));  // cross-replica: each component 12/n, the sum reads 12
  EXPECT_DOUBLE_EQ(total.value().item<double>(), 12.0);
}

TEST_P(Replicas, VariablesCreatedInsideRunAreCreatedOnce) {
  MirroredStrategy strategy(cpus(n()));
  auto vars = strategy.run([] {
    const float r = static_cast<float>(get_replica_context()->replica_id_in_sync_group());
    return make_variable({.initial_value = Tensor::scalar(r + 3), .name = "slot"});
  });
  for (int r = 1; r < n(); ++r) EXPECT_TRUE(vars[r].is(vars[0]));
  auto mv = std::dynamic_pointer_cast<MirroredVariable>(vars[0].impl());
  ASSERT_NE(mv, nullptr);
  for (const auto& c : mv->components()) EXPECT_EQ(c.value().item<float>(), 3.0f);  // replica 0's initial value
}

TEST_P(Replicas, MergeCallRunsOnceInCrossReplicaContext) {
  MirroredStrategy strategy(cpus(n()));
  std::atomic<int> calls{0};
  auto out = strategy.run([&] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    return get_replica_context()->merge_call<int, int>(
        [&](const std::vector<int>& all) {
          ++calls;
          EXPECT_TRUE(in_cross_replica_context());
          int s = 0;
          for (int v : all) s += v;
          return s;
        },
        r);
  });
  EXPECT_EQ(calls.load(), 1);
  for (int r = 0; r < n(); ++r) EXPECT_EQ(out[r], n() * (n() - 1) / 2);
}

TEST_P(Replicas, PackedAllReduceOfAGradientList) {
  MirroredStrategy strategy(cpus(n()));
  auto out = strategy.run([] {
    const double r = get_replica_context()->replica_id_in_sync_group();
    std::vector<Tensor> grads{Tensor::full({3, 2}, r), Tensor(), Tensor::full({5}, 2 * r),
                              Tensor::full({2}, r, DType::kInt32), Tensor::full({1}, r)};
    return ctx().all_reduce(ReduceOp::kSum, grads, {.bytes_per_pack = 64});
  });
  const double s = n() * (n() - 1) / 2.0;
  for (int r = 0; r < n(); ++r) {
    EXPECT_EQ(out[r][0].to_vector<double>(), std::vector<double>(6, s));
    EXPECT_FALSE(out[r][1].defined());
    EXPECT_EQ(out[r][2].to_vector<double>(), std::vector<double>(5, 2 * s));
    EXPECT_EQ(out[r][3].to_vector<int>(), std::vector<int>(2, static_cast<int>(s)));
    EXPECT_EQ(out[r][4].shape(), Shape({1}));
  }
}

TEST_P(Replicas, GradientsOfMirroredVariablesPerReplica) {
  MirroredStrategy strategy(cpus(n()));
  Variable w;
  {
    auto scope = strategy.scope();
    w = make_variable({.initial_value = Tensor::from_vector<double>({1, 2}), .name = "w"});
  }
  auto grads = strategy.run([&] {
    const double r = get_replica_context()->replica_id_in_sync_group();
    ops::GradientTape tape;
    Tensor loss = ops::reduce_sum(ops::mul(w.value(), Tensor::full({2}, r + 1, DType::kFloat64)));
    Tensor g = tape.gradient(loss, std::vector<Variable>{w})[0];
    return get_replica_context()->all_reduce(ReduceOp::kSum, g);
  });
  const double s = n() * (n() + 1) / 2.0;
  for (int r = 0; r < n(); ++r) EXPECT_EQ(grads[r].to_vector<double>(), std::vector<double>(2, s));
}

TEST_P(Replicas, AnExceptionInOneReplicaReleasesTheOthersAndTheNextRunWorks) {
  if (n() < 2) GTEST_SKIP() << "needs two replicas";
  MirroredStrategy strategy(cpus(n()), {.timeout = 20s});
  const auto start = std::chrono::steady_clock::now();
  const int last = n() - 1;
  EXPECT_THROW_WITH(strategy.run([last] {
    if (get_replica_context()->replica_id_in_sync_group() == last) throw InvalidArgumentError("bad batch");
    get_replica_context()->all_reduce(ReduceOp::kSum, Tensor::ones({4}));
  }),
                    InvalidArgumentError, "bad batch");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);  // released by the abort, not the timeout
  auto ok =
      strategy.run([] { return get_replica_context()->all_reduce(ReduceOp::kSum, Tensor::ones({1})).item<double>(); });
  for (int r = 0; r < n(); ++r) EXPECT_EQ(ok[r], n());
}

TEST_P(Replicas, MismatchedCollectivesRaiseInsteadOfHanging) {
  if (n() < 2) GTEST_SKIP() << "needs two replicas";
  MirroredStrategy strategy(cpus(n()), {.timeout = 20s});
  EXPECT_THROW_WITH(strategy.run([] {
    const int r = get_replica_context()->replica_id_in_sync_group();
    get_replica_context()->all_reduce(ReduceOp::kSum, Tensor::ones({r == 0 ? 2 : 3}));
  }),
                    InvalidArgumentError, "");
}

INSTANTIATE_TEST_SUITE_P(Cpus, Replicas, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "replicas"; });

TEST(DefaultStrategy, NoScopeMeansOneReplicaOnTheCallingThread) {
  make_cpus(1);
  EXPECT_FALSE(has_strategy());
  EXPECT_FALSE(in_cross_replica_context());
  Strategy& s = get_strategy();
  EXPECT_EQ(s.name(), "DefaultDistributionStrategy");
  EXPECT_EQ(s.num_replicas_in_sync(), 1);
  const auto caller = std::this_thread::get_id();
  auto out = s.run([&] {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    return get_replica_context()->all_reduce(ReduceOp::kSum, Tensor::full({2}, 4.0)).to_vector<double>();
  });
  EXPECT_EQ(out[0], std::vector<double>(2, 4.0));
  {
    auto scope = s.scope();  // the default strategy's scope changes nothing
    EXPECT_FALSE(has_strategy());
    Variable v = make_variable({.initial_value = Tensor::zeros({1})});
    EXPECT_EQ(std::dynamic_pointer_cast<MirroredVariable>(v.impl()), nullptr);
  }
}

TEST(OneDeviceStrategy, RunsOnTheCallingThreadOnItsDevice) {
  make_cpus(2);
  OneDeviceStrategy s("/cpu:1");
  EXPECT_EQ(s.num_replicas_in_sync(), 1);
  Variable v;
  {
    auto scope = s.scope();
    v = make_variable({.initial_value = Tensor::zeros({1}, DType::kFloat32, "/cpu:0"), .name = "v"});
  }
  EXPECT_EQ(v.device(), runtime::find("/cpu:1")->name());
  EXPECT_EQ(std::dynamic_pointer_cast<MirroredVariable>(v.impl()), nullptr);
  const auto caller = std::this_thread::get_id();
  auto placed = s.run([&] {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    return Tensor::zeros({1}).device_name();
  });
  EXPECT_EQ(placed[0], runtime::find("/cpu:1")->name());
}

TEST(StrategyErrors, TwoStrategiesScopesDoNotMix) {
  make_cpus(2);
  MirroredStrategy a(cpus(2)), b(cpus(2));
  auto scope = a.scope();
  EXPECT_THROW_WITH(b.scope(), FailedPreconditionError, "Mixing different tf.distribute.Strategy objects");
  auto again = a.scope();  // the same strategy nests
}

// A component of a mirrored variable must be a plain variable on its replica's device (a
// MirroredVariable there means a second creator mirrored each component again).
void expect_mirrored_once(const Variable& v, const Strategy& s) {
  auto mv = std::dynamic_pointer_cast<MirroredVariable>(v.impl());
  ASSERT_NE(mv, nullptr) << v.name();
  EXPECT_EQ(&mv->strategy(), &s);
  ASSERT_EQ(mv->components().size(), s.replica_devices().size()) << v.name();
  for (std::size_t r = 0; r < mv->components().size(); ++r) {
    const Variable& c = mv->components()[r];
    EXPECT_TRUE(std::dynamic_pointer_cast<MirroredVariable>(c.impl()) == nullptr)
        << v.name() << " component " << r << " is itself a MirroredVariable";
    EXPECT_EQ(c.device(), s.replica_devices()[r]) << v.name() << " component " << r;
  }
}

TEST(StrategyScope, ReenteringTheSameStrategysScopeMirrorsOnce) {
  make_cpus(2);
  MirroredStrategy s(cpus(2));
  Variable inner, outer, in_run;
  {
    auto s1 = s.scope();
    {
      auto s2 = s.scope();
      auto s3 = s.scope();
      EXPECT_EQ(&get_strategy(), &s);
      EXPECT_TRUE(in_cross_replica_context());
      inner = make_variable({.initial_value = Tensor::full({3}, 2.0), .name = "inner"});
    }
    // Leaving the nested scopes leaves the outer one (and its creator) in place.
    EXPECT_EQ(&get_strategy(), &s);
    outer = make_variable({.initial_value = Tensor::full({3}, 3.0), .name = "outer"});
    // run() inside the scope: its replicas create the variable once, mirrored once.
    s.run([&] {
      auto again = s.scope();  // the same strategy's scope in a replica: no second creator either
      Variable v = make_variable({.initial_value = Tensor::full({3}, 4.0), .name = "in_run"});
      if (get_replica_context()->replica_id_in_sync_group() == 0) in_run = v;
    });
  }
  EXPECT_FALSE(has_strategy());
  for (const Variable* v : {&inner, &outer, &in_run}) expect_mirrored_once(*v, s);
  EXPECT_EQ(inner.name(), "inner");
  EXPECT_EQ(inner.read_value().to_vector<float>(), (std::vector<float>{2, 2, 2}));
  auto mv = std::dynamic_pointer_cast<MirroredVariable>(inner.impl());
  EXPECT_EQ(mv->components()[1].name(), "inner/replica_1");
  EXPECT_EQ(mv->components()[1].read_value().to_vector<float>(), (std::vector<float>{2, 2, 2}));
  // Out of every scope: plain variables again.
  Variable plain = make_variable({.initial_value = Tensor::zeros({1}), .name = "plain"});
  EXPECT_EQ(std::dynamic_pointer_cast<MirroredVariable>(plain.impl()), nullptr);
}

TEST(StrategyScope, AUserCreatorInsideTheScopeRunsOncePerVariable) {
  make_cpus(2);
  MirroredStrategy s(cpus(2));
  int calls = 0;
  Variable v;
  {
    auto s1 = s.scope();
    VariableCreatorScope counting([&](const VariableArgs& args, const NextCreator& next) {
      ++calls;
      return next(args);
    });
    auto s2 = s.scope();  // must not put a second mirrored creator inside the user's
    v = make_variable({.initial_value = Tensor::ones({2}), .name = "counted"});
  }
  EXPECT_EQ(calls, 1);  // the user's creator wraps the strategy's, as TF's variable_creator_scope
  expect_mirrored_once(v, s);
}

TEST(StrategyScope, OneDeviceStrategyRunInsideItsScopeCreatesOnItsDevice) {
  make_cpus(2);
  OneDeviceStrategy s("/cpu:1");
  int calls = 0;
  Variable v;
  {
    auto scope = s.scope();
    VariableCreatorScope counting([&](const VariableArgs& args, const NextCreator& next) {
      ++calls;
      return next(args);
    });
    s.run([&] { v = make_variable({.initial_value = Tensor::zeros({1}, DType::kFloat32, "/cpu:0"), .name = "v"}); });
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(std::dynamic_pointer_cast<MirroredVariable>(v.impl()), nullptr);
  EXPECT_EQ(v.device(), runtime::find("/cpu:1")->name());
}

TEST(StrategyErrors, AnotherStrategysScopeInsideANestedScopeIsRefused) {
  make_cpus(2);
  MirroredStrategy a(cpus(2)), b(cpus(2));
  OneDeviceStrategy one("/cpu:1");
  auto s1 = a.scope();
  auto s2 = a.scope();
  // TF raises RuntimeError here (a wrong-time error: FailedPreconditionError, docs/errors.md).
  EXPECT_THROW_WITH(b.scope(), FailedPreconditionError, "Mixing different tf.distribute.Strategy objects",
                    "MirroredStrategy");
  EXPECT_THROW_WITH(one.scope(), FailedPreconditionError, "Mixing different tf.distribute.Strategy objects",
                    "OneDeviceStrategy");
  // The failed attempts changed nothing: still a's scope, variables still mirrored once.
  EXPECT_EQ(&get_strategy(), &a);
  expect_mirrored_once(make_variable({.initial_value = Tensor::zeros({1}), .name = "after"}), a);
  // b's scope inside one of b's replicas is the same strategy; a's is not.
  EXPECT_THROW_WITH(b.run([&] { auto inner = a.scope(); }), FailedPreconditionError, "Mixing different");
}

TEST(StrategyErrors, AVariableBelongsToItsStrategy) {
  make_cpus(2);
  MirroredStrategy a(cpus(2)), b(cpus(2));
  Variable v;
  {
    auto scope = a.scope();
    v = make_variable({.initial_value = Tensor::zeros({1}), .name = "owned_by_a"});
  }
  EXPECT_THROW_WITH(b.run([&] { (void)v.value(); }), FailedPreconditionError, "owned_by_a");
}

TEST(StrategyErrors, AVariableCreatedOutsideTheScopeIsNamedWhenAReplicaUsesIt) {
  // TF users' most common mistake: the model built before (outside) strategy.scope(). The op's
  // device mismatch says so instead of only "inputs must be on one device".
  make_cpus(2);
  MirroredStrategy strategy(cpus(2));
  Variable w = make_variable({.initial_value = Tensor::ones({2, 2}), .name = "kernel"});  // on /cpu:0 only
  EXPECT_THROW_WITH(strategy.run([&] {
    (void)ops::matmul(Tensor::ones({1, 2}), w.value());
  }),
                    InvalidArgumentError, "is a variable on", "replica 1 of 2", "created outside strategy.scope()",
                    "strategy.scope()");
  // A plain tensor on another device keeps the general message.
  Tensor elsewhere = Tensor::ones({2, 2}, DType::kFloat32, "/cpu:0");
  EXPECT_THROW_WITH(strategy.run([&] {
    (void)ops::matmul(Tensor::ones({1, 2}), elsewhere);
  }),
                    InvalidArgumentError, "inputs must be on one device");
}

TEST(StrategyErrors, NoneSynchronizationAndBadDevicesAreRefused) {
  make_cpus(2);
  MirroredStrategy s(cpus(2));
  auto scope = s.scope();
  EXPECT_THROW_WITH(
      make_variable(
          {.initial_value = Tensor::zeros({1}), .name = "nosync", .synchronization = VariableSynchronization::kNone}),
      InvalidArgumentError, "`NONE` variable synchronization mode is not supported");
  EXPECT_THROW_WITH(MirroredStrategy({"/cpu:0", "/cpu:0"}), InvalidArgumentError, "listed twice");
  EXPECT_THROW_WITH(MirroredStrategy({"/cpu:7"}), InvalidArgumentError, "");
  EXPECT_THROW_WITH(MirroredStrategy(cpus(2), {.cross_device_ops = CrossDeviceOps::kVirtualGpu}), InvalidArgumentError,
                    "");
}

TEST(StrategyErrors, RunInsideRunIsRefused) {
  make_cpus(2);
  MirroredStrategy s(cpus(2));
  EXPECT_THROW_WITH(s.run([&] { s.run([] {}); }), FailedPreconditionError, "");
}

TEST(StrategyErrors, CommunicationOptionsMustMatchTheStrategy) {
  make_cpus(2);
  MirroredStrategy s(cpus(2));
  EXPECT_THROW_WITH(s.run([] {
    ctx().all_reduce(ReduceOp::kSum, std::vector<Tensor>{Tensor::ones({1})}, {.implementation = CrossDeviceOps::kNccl});
  }),
                    InvalidArgumentError, "differs from the strategy's shared_memory");
}

TEST(MirroredStrategyDefaults, AllLogicalCpusWithoutGpus) {
  make_cpus(3);
  MirroredStrategy s;
  EXPECT_EQ(s.num_replicas_in_sync(), 3);
  EXPECT_NE(s.cross_device_ops().reason, "");
}
}  // namespace
}  // namespace chorus::distribute
