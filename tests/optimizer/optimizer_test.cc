// The Optimizer base: iterations, variables() and slot names, slots under MirroredStrategy (built
// in the scope or lazily inside run through merge_call), the missing-gradient warning, minimize,
// and every error of apply_gradients.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/optimizer/test_util.h"
#include <chorus/core/distribution.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/distribute/mirrored_variable.h>
#include <chorus/optimizer/optimizers.h>

namespace chorus::optimizers {
namespace {

using distribute::MirroredStrategy;
using distribute::MirroredVariable;
using testing::f64;
using testing::host;
using testing::OptimizerTest;

std::vector<std::string> names(const std::vector<Variable>& vars) {
  std::vector<std::string> out;
  for (const Variable& v : vars) out.push_back(v.name());
  return out;
}

const MirroredVariable* mirrored(const Variable& v) { return dynamic_cast<const MirroredVariable*>(v.impl().get()); }

// A schedule that records the steps it is asked for.
struct RecordingSchedule final : LearningRateSchedule {
  std::shared_ptr<std::vector<std::int64_t>> seen = std::make_shared<std::vector<std::int64_t>>();
  double operator()(std::int64_t step) const override {
    seen->push_back(step);
    return 0.01;
  }
  std::string get_config() const override { return "{}"; }
};

// The step counter's host copy (Optimizer::read_iterations): the schedule sees 0, 1, 2 from the
// optimizer's own count, then the value an assign() wrote (the copy is stale: its storage's write
// count moved), then counts on from there.
TEST_F(OptimizerTest, TheStepCounterFollowsAnAssignToIterations) {
  RecordingSchedule schedule;
  const auto seen = schedule.seen;
  SGD sgd(SGDOptions{.learning_rate = schedule});
  Variable w = make_variable({.initial_value = f64({1, 2}), .name = "w"});
  for (int i = 0; i < 3; ++i) sgd.apply_gradients({{f64({1, 1}), w}});
  Variable counter = sgd.iterations();  // a handle: the same variable
  counter.assign(Tensor::scalar<std::int64_t>(10));
  sgd.apply_gradients({{f64({1, 1}), w}});
  sgd.apply_gradients({{f64({1, 1}), w}});
  EXPECT_EQ(*seen, (std::vector<std::int64_t>{0, 1, 2, 10, 11}));
  EXPECT_EQ(sgd.iterations().read_value().item<std::int64_t>(), 12);
}

TEST_F(OptimizerTest, VariablesAreIterationsThenSlotsInOrder) {
  Adam adam;
  Variable a = make_variable({.initial_value = f64({1, 2}), .name = "dense/kernel"});
  Variable b = make_variable({.initial_value = f64({3}), .name = "dense/bias"});
  EXPECT_EQ(names(adam.variables()), (std::vector<std::string>{"Adam/iterations"}));
  adam.apply_gradients({{f64({1, 1}), a}, {f64({1}), b}});
  EXPECT_EQ(names(adam.variables()), (std::vector<std::string>{"Adam/iterations", "dense/kernel/m", "dense/kernel/v",
                                                               "dense/bias/m", "dense/bias/v"}));
  for (const Variable& v : adam.variables()) EXPECT_FALSE(v.trainable()) << v.name();
  EXPECT_EQ(adam.iterations().dtype(), DType::kInt64);
  EXPECT_EQ(adam.iterations().read_value().item<std::int64_t>(), 1);
  adam.apply_gradients({{f64({1, 1}), a}, {f64({1}), b}});
  EXPECT_EQ(adam.iterations().read_value().item<std::int64_t>(), 2);
  EXPECT_EQ(adam.variables().size(), 5u);  // no new slots on later steps
  EXPECT_EQ(adam.get_slot(b, "v").shape(), Shape({1}));
}

TEST_F(OptimizerTest, BuildCreatesSlotsBeforeTheFirstStep) {
  RMSprop rms({.momentum = 0.5, .centered = true});
  Variable a = make_variable({.initial_value = f64({1, 2}), .name = "a"});
  rms.build({a, a});
  rms.build({a});  // idempotent
  EXPECT_EQ(names(rms.variables()),
            (std::vector<std::string>{"RMSprop/iterations", "a/velocity", "a/momentum", "a/average_gradient"}));
  EXPECT_EQ(host(rms.get_slot(a, "velocity")), (std::vector<double>{0, 0}));
  EXPECT_EQ(rms.iterations().read_value().item<std::int64_t>(), 0);
}

TEST_F(OptimizerTest, GetSlotErrors) {
  SGD sgd({.momentum = 0.9});
  Variable a = make_variable({.initial_value = f64({1}), .name = "a"});
  EXPECT_THROW_WITH(sgd.get_slot(a, "momentum"), NotFoundError, "no slots for variable 'a'");
  sgd.build({a});
  EXPECT_THROW_WITH(sgd.get_slot(a, "m"), NotFoundError, "no slot 'm'", "['momentum']");
}

TEST_F(OptimizerTest, MissingGradientsAreSkippedWithOneWarning) {
  chorus::testing::LogCapture logs;
  SGD sgd(0.5);
  Variable a = make_variable({.initial_value = f64({1}), .name = "a"});
  Variable b = make_variable({.initial_value = f64({1}), .name = "dense/bias"});
  sgd.apply_gradients({{f64({1}), a}, {Tensor(), b}});
  sgd.apply_gradients({{f64({1}), a}, {Tensor(), b}});
  EXPECT_EQ(host(a)[0], 0.0);
  EXPECT_EQ(host(b)[0], 1.0);
  int warnings = 0;
  for (const std::string& line : logs.lines())
    if (line.find("Gradients do not exist for variables ['dense/bias'] when minimizing the loss") != std::string::npos)
      ++warnings;
  EXPECT_EQ(warnings, 1);
  EXPECT_THROW_WITH(sgd.apply_gradients({{Tensor(), a}, {Tensor(), b}}), InvalidArgumentError,
                    "No gradients provided for any variable", "'a'", "'dense/bias'");
}

TEST_F(OptimizerTest, ArgumentErrorsNameTheVariable) {
  Adam adam;
  Variable w = make_variable({.initial_value = f64({1, 2}), .name = "dense/kernel"});
  Variable i = make_variable({.initial_value = Tensor::from_vector<std::int32_t>({1, 2}), .name = "counter"});
  EXPECT_THROW_WITH(adam.apply_gradients({{f64({1, 2, 3}), w}}), InvalidArgumentError, "'dense/kernel'", "(3,)",
                    "(2,)");
  EXPECT_THROW_WITH(adam.apply_gradients({{Tensor::from_vector<float>({1, 2}), w}}), InvalidArgumentError,
                    "'dense/kernel'", "float32", "float64");
  EXPECT_THROW_WITH(adam.apply_gradients({{Tensor::from_vector<std::int32_t>({1, 2}), i}}), InvalidArgumentError,
                    "'counter'", "int32", "floating-point");
  EXPECT_THROW_WITH(adam.apply_gradients({{f64({1, 2}), w}, {f64({1, 2}), w}}), InvalidArgumentError, "'dense/kernel'",
                    "more than once");
  EXPECT_THROW_WITH(adam.apply_gradients({{f64({1, 2}), Variable()}}), InvalidArgumentError, "undefined variable");
  EXPECT_THROW_WITH(adam.build({i}), InvalidArgumentError, "'counter'", "int32");
  // Nothing was applied by the failed calls.
  EXPECT_EQ(adam.iterations().read_value().item<std::int64_t>(), 0);
  EXPECT_EQ(host(w), (std::vector<double>{1, 2}));
}

TEST_F(OptimizerTest, MinimizeWithACallableAndWithATape) {
  SGD sgd(0.25);
  Variable w = make_variable({.initial_value = f64({1, 5}), .name = "w"});
  auto loss_fn = [&] { return ops::reduce_sum(ops::square(w.value() - 3.0)); };
  Tensor loss = sgd.minimize(loss_fn, {w});  // grad 2(w − 3) → w − 0.5(w − 3)
  EXPECT_DOUBLE_EQ(loss.item<double>(), 8.0);
  EXPECT_EQ(host(w), (std::vector<double>{2, 4}));
  {
    ops::GradientTape tape;
    Tensor l = loss_fn();
    sgd.minimize(l, {w}, tape);
  }
  EXPECT_EQ(host(w), (std::vector<double>{2.5, 3.5}));
}

TEST_F(OptimizerTest, ApplyWhileAPersistentTapeIsAlive) {
  SGD sgd(0.5);
  Variable w = make_variable({.initial_value = f64({1}), .name = "w"});
  ops::GradientTape tape(/*persistent=*/true);
  Tensor loss = ops::reduce_sum(ops::square(w.value()));
  auto g = tape.gradient(loss, std::vector<Variable>{w});
  sgd.apply_gradients({{g[0], w}});
  EXPECT_EQ(host(w)[0], 0.0);
  // The tape still works. (Its saved input aliases w's storage, as Variable::value() does, so it
  // now sees the updated w: d(w²)/dw = 2·0.)
  EXPECT_EQ(tape.gradient(loss, std::vector<Variable>{w})[0].item<double>(), 0.0);
}

TEST_F(OptimizerTest, OptimizersMove) {
  SGD a({.learning_rate = 0.5, .momentum = 0.5});
  Variable w = make_variable({.initial_value = f64({1}), .name = "w"});
  a.apply_gradients({{f64({1}), w}});
  SGD b = std::move(a);
  b.apply_gradients({{f64({1}), w}});
  EXPECT_EQ(b.iterations().read_value().item<std::int64_t>(), 2);
  EXPECT_DOUBLE_EQ(host(w)[0], 1.0 - 0.5 - 0.75);
}

// ---- under MirroredStrategy ----

class Mirrored : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { testing::make_cpus(GetParam()); }
  void TearDown() override { chorus::internal::reset_runtime_for_testing(); }
  int n() const { return GetParam(); }
};

TEST_P(Mirrored, BuildInTheScopeMakesMirroredSlots) {
  MirroredStrategy strategy(testing::cpus(n()));
  auto scope = strategy.scope();
  Variable w = make_variable({.initial_value = f64({1, 2}), .name = "w"});
  Adam adam({.amsgrad = true});
  adam.build({w});
  ASSERT_EQ(adam.variables().size(), 4u);
  for (const Variable& v : adam.variables()) {
    const MirroredVariable* mv = mirrored(v);
    ASSERT_NE(mv, nullptr) << v.name();
    ASSERT_EQ(mv->components().size(), static_cast<std::size_t>(n()));
    for (int r = 0; r < n(); ++r)
      EXPECT_EQ(mv->components()[r].device(), runtime::find("/cpu:" + std::to_string(r))->name());
  }
  EXPECT_EQ(adam.iterations().aggregation(), VariableAggregation::kOnlyFirstReplica);
  EXPECT_EQ(adam.iterations().synchronization(), VariableSynchronization::kOnWrite);
}

TEST_P(Mirrored, SlotsCreatedInsideRunAreCreatedOnceAndStayEqual) {
  MirroredStrategy strategy(testing::cpus(n()));
  Variable a, b;
  std::unique_ptr<RMSprop> rms;
  {
    auto scope = strategy.scope();
    a = make_variable({.initial_value = f64({1, 2, 3}), .name = "a"});
    b = make_variable({.initial_value = f64({-1}), .name = "b"});
    rms = std::make_unique<RMSprop>(RMSpropOptions{.learning_rate = 0.1, .momentum = 0.9, .centered = true});
  }
  for (int step = 0; step < 3; ++step) {
    strategy.run([&] {
      const double r = get_replica_context()->replica_id_in_sync_group();
      rms->apply_gradients({{f64({r, 1 - r, 2 * r}), a}, {f64({r + 1}), b}});
    });
    EXPECT_EQ(names(rms->variables()),
              (std::vector<std::string>{"RMSprop/iterations", "a/velocity", "a/momentum", "a/average_gradient",
                                        "b/velocity", "b/momentum", "b/average_gradient"}));
    std::vector<Variable> all = rms->variables();
    all.push_back(a);
    all.push_back(b);
    for (const Variable& v : all) {
      ASSERT_NE(mirrored(v), nullptr) << v.name();
      auto bytes = testing::component_bytes(v);
      ASSERT_EQ(bytes.size(), static_cast<std::size_t>(n()));
      for (int r = 1; r < n(); ++r) EXPECT_EQ(bytes[r], bytes[0]) << v.name() << " replica " << r;
    }
  }
  EXPECT_EQ(rms->iterations().read_value().item<std::int64_t>(), 3);
  // Every replica's counter component counted 3 steps (once per step, not once per replica).
  for (const Variable& c : mirrored(rms->iterations())->components()) EXPECT_EQ(c.read_value().item<std::int64_t>(), 3);
}

TEST_P(Mirrored, GradientsAreSummedAcrossReplicas) {
  MirroredStrategy strategy(testing::cpus(n()));
  Variable w;
  std::unique_ptr<SGD> sgd;
  {
    auto scope = strategy.scope();
    w = make_variable({.initial_value = f64({0, 0}), .name = "w"});
    sgd = std::make_unique<SGD>(1.0);
  }
  strategy.run([&] {
    const double r = get_replica_context()->replica_id_in_sync_group();
    sgd->apply_gradients({{f64({1.0, r}), w}});
  });
  const double n = GetParam();
  for (const Variable& c : mirrored(w)->components())
    EXPECT_EQ(c.read_value().to_vector<double>(), (std::vector<double>{-n, -n * (n - 1) / 2}));
}

TEST_P(Mirrored, MissingGradientsWarnOnceForAllReplicas) {
  chorus::testing::LogCapture logs;
  MirroredStrategy strategy(testing::cpus(n()));
  Variable a, b;
  std::unique_ptr<SGD> sgd;
  {
    auto scope = strategy.scope();
    a = make_variable({.initial_value = f64({1}), .name = "a"});
    b = make_variable({.initial_value = f64({1}), .name = "b"});
    sgd = std::make_unique<SGD>(0.5);
  }
  for (int i = 0; i < 2; ++i) strategy.run([&] { sgd->apply_gradients({{f64({1}), a}, {Tensor(), b}}); });
  int warnings = 0;
  for (const std::string& line : logs.lines())
    if (line.find("Gradients do not exist for variables ['b']") != std::string::npos) ++warnings;
  EXPECT_EQ(warnings, 1);
  for (const Variable& c : mirrored(b)->components()) EXPECT_EQ(c.read_value().item<double>(), 1.0);
  for (const Variable& c : mirrored(a)->components()) EXPECT_EQ(c.read_value().item<double>(), 1.0 - 2 * 0.5 * n());
}

// Issue 39: a NaN gradient went on into the weights, hidden by relu (which turned NaN into 0); the
// loss stayed finite and TerminateOnNaN never fired. With check_numerics a non-finite summed
// gradient stops the update on every replica, naming the variable and the step.
TEST_P(Mirrored, CheckNumericsStopsANonFiniteGradientBeforeTheUpdateOnEveryReplica) {
  for (const int stage : {0, 2}) {
    if (stage == 2 && n() == 1) continue;
    testing::make_cpus(n());
    MirroredStrategy strategy(testing::cpus(n()), {.sharding = {.stage = stage}});
    Variable a, b;
    std::unique_ptr<Adam> adam;
    {
      auto scope = strategy.scope();
      a = make_variable({.initial_value = f64({1, 2, 3, 4}), .name = "a"});
      b = make_variable({.initial_value = f64({1, 2, 3, 4}), .name = "b"});
      adam = std::make_unique<Adam>(0.1);
    }
    adam->set_check_numerics(true);
    strategy.run([&] { adam->apply_gradients({{f64({1, 1, 1, 1}), a}, {f64({1, 1, 1, 1}), b}}); });
    const auto before = testing::component_bytes(b);
    std::string message;
    try {
      strategy.run([&] {
        // Only the last replica's gradient of b is bad: the sum is NaN on every replica.
        const bool last = get_replica_context()->replica_id_in_sync_group() == n() - 1;
        adam->apply_gradients({{f64({1, 1, 1, 1}), a}, {f64({1, last ? std::nan("") : 1.0, 1, 1}), b}});
      });
      ADD_FAILURE() << "stage " << stage << ": no error";
    } catch (const InvalidArgumentError& e) {
      message = e.message();
    }
    EXPECT_NE(message.find("holds NaN or Inf at step 2"), std::string::npos) << message;
    if (stage == 0 || n() == 1) EXPECT_NE(message.find("variable 'b'"), std::string::npos) << message;
    EXPECT_EQ(testing::component_bytes(b), before) << "stage " << stage << ": the update ran";
    adam->set_check_numerics(false);  // off: the NaN goes into the weights, as Keras's fit does
    strategy.run([&] { adam->apply_gradients({{f64({1, 1, 1, 1}), a}, {f64({1, std::nan(""), 1, 1}), b}}); });
    EXPECT_TRUE(std::isnan(b.read_value().to_vector<double>()[1])) << "stage " << stage;
  }
}

TEST_P(Mirrored, CrossReplicaContextIsRefused) {
  MirroredStrategy strategy(testing::cpus(n()));
  auto scope = strategy.scope();
  Variable w = make_variable({.initial_value = f64({1}), .name = "w"});
  SGD sgd(0.1);
  if (n() == 1) {
    sgd.apply_gradients({{f64({1}), w}});  // one replica: as under the default strategy
    EXPECT_DOUBLE_EQ(host(w)[0], 0.9);
    return;
  }
  EXPECT_THROW_WITH(sgd.apply_gradients({{f64({1}), w}}), InvalidArgumentError, "cross-replica context",
                    "strategy.run");
}

TEST_P(Mirrored, ErrorsInsideRunReachTheCaller) {
  MirroredStrategy strategy(testing::cpus(n()));
  Variable w;
  std::unique_ptr<Adam> adam;
  {
    auto scope = strategy.scope();
    w = make_variable({.initial_value = f64({1, 2}), .name = "w"});
    adam = std::make_unique<Adam>();
  }
  EXPECT_THROW_WITH(strategy.run([&] {
    adam->apply_gradients({{f64({1}), w}});
  }),
                    InvalidArgumentError, "'w'", "shape");
  // The strategy and the optimizer are still usable.
  strategy.run([&] { adam->apply_gradients({{f64({1, 1}), w}}); });
  EXPECT_EQ(adam->iterations().read_value().item<std::int64_t>(), 1);
}

INSTANTIATE_TEST_SUITE_P(Replicas, Mirrored, ::testing::Values(1, 2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "replicas"; });

class TwoReplicas : public ::testing::Test {
 protected:
  void SetUp() override { testing::make_cpus(2); }
  void TearDown() override { chorus::internal::reset_runtime_for_testing(); }
};

TEST_F(TwoReplicas, PlainVariablesAreRefusedInsideRun) {
  MirroredStrategy strategy(testing::cpus(2));
  Variable plain = make_variable({.initial_value = f64({1}), .name = "plain"});  // outside the scope
  std::unique_ptr<SGD> sgd;
  {
    auto scope = strategy.scope();
    sgd = std::make_unique<SGD>(0.1);
  }
  EXPECT_THROW_WITH(strategy.run([&] {
    sgd->apply_gradients({{f64({1}), plain}});
  }),
                    InvalidArgumentError, "'plain'", "not mirrored", "strategy.scope()");
  EXPECT_EQ(host(plain)[0], 1.0);
}

TEST_F(TwoReplicas, AnOptimizerCreatedOutsideTheScopeIsRefusedInsideRun) {
  MirroredStrategy strategy(testing::cpus(2));
  SGD sgd(0.1);  // its iterations variable is a plain one
  Variable w;
  {
    auto scope = strategy.scope();
    w = make_variable({.initial_value = f64({1}), .name = "w"});
  }
  EXPECT_THROW_WITH(strategy.run([&] {
    sgd.apply_gradients({{f64({1}), w}});
  }),
                    InvalidArgumentError, "SGD/iterations", "not mirrored");
}

TEST_F(TwoReplicas, MirroredVariablesAreRefusedOutsideTheirRun) {
  MirroredStrategy strategy(testing::cpus(2));
  Variable w;
  {
    auto scope = strategy.scope();
    w = make_variable({.initial_value = f64({1}), .name = "w"});
  }
  SGD sgd(0.1);  // default strategy
  EXPECT_THROW_WITH(sgd.apply_gradients({{f64({1}), w}}), InvalidArgumentError, "'w'", "mirrored over 2 replicas",
                    "strategy.run");
}

}  // namespace
}  // namespace chorus::optimizers
