// The gradient all-reduce overlapped with the backward pass (distribute/overlapped_reduction.h)
// under MirroredStrategy on 2 and 3 logical CPU devices (the shared-memory backend): fit and a
// custom loop give bitwise the weights of the non-overlapped path for several bucket sizes and
// optimizers; the buckets really ran on the communication threads (the counters); unused
// variables neither hang nor corrupt a bucket; the sum travels as a value from the tape to
// apply_gradients (Optimizer::compute_gradients), so a loop that changes its gradients, or uses
// tape.gradient alone, reduces them in apply_gradients and begins no sum; gradient accumulation
// runs no collective on its micro-steps; a LossScaleOptimizer does not overlap, ZeRO stage 2 does; a replica
// failing with buckets in flight fails the step, never hangs it, and the next step works.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>

#include "tests/core/test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/distribution.h>
#include <chorus/core/runtime.h>
#include <chorus/data/synthetic_digits.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/model/layers.h>
#include <chorus/model/losses.h>
#include <chorus/model/model.h>
#include <chorus/ops/ops.h>
#include <chorus/ops/tape.h>
#include <chorus/optimizer/adam.h>
#include <chorus/optimizer/loss_scale_optimizer.h>
#include <chorus/optimizer/sgd.h>

namespace chorus::distribute {
namespace {

using chorus::testing::cpus;

struct Outcome {
  std::vector<std::vector<float>> weights;
  AllReduceCounters counters;
  std::vector<double> loss;
};

std::unique_ptr<model::Sequential> small_cnn() {
  return std::make_unique<model::Sequential>(
      std::vector<layers::LayerPtr>{layers::Conv2D(4, 3, "relu"), layers::MaxPooling2D(2), layers::Conv2D(6, 3, "relu"),
                                    layers::Flatten(), layers::Dense(16, "relu"), layers::Dense(10)});
}

std::vector<std::vector<float>> weights_of(const std::vector<Variable>& vars) {
  std::vector<std::vector<float>> w;
  for (const Variable& v : vars) w.push_back(v.read_value().to_vector<float>());
  return w;
}

void expect_bitwise(const Outcome& a, const Outcome& b, const std::string& what) {
  ASSERT_EQ(a.weights.size(), b.weights.size()) << what;
  for (std::size_t v = 0; v < a.weights.size(); ++v) {
    ASSERT_EQ(a.weights[v].size(), b.weights[v].size()) << what;
    for (std::size_t i = 0; i < a.weights[v].size(); ++i)
      ASSERT_EQ(a.weights[v][i], b.weights[v][i]) << what << ": variable " << v << " element " << i;
  }
}

// fit of the small CNN on 12×12 digits (48 rows, batches of 16: 3 steps per epoch).
Outcome fit_cnn(int replicas, bool overlap, std::int64_t pack_bytes, bool adam) {
  MirroredStrategy s(cpus(replicas),
                     {.communication_options = {.bytes_per_pack = pack_bytes}, .overlap_gradient_all_reduce = overlap});
  auto scope = s.scope();
  ops::set_seed(42);  // the same initial weights in every run
  auto m = small_cnn();
  std::shared_ptr<optimizers::Optimizer> opt;
  if (adam)
    opt = std::make_shared<optimizers::Adam>(1e-2);
  else
    opt = std::make_shared<optimizers::SGD>(optimizers::SGDOptions{.learning_rate = 0.05, .momentum = 0.9});
  m->compile(opt, std::make_shared<losses::SparseCategoricalCrossentropy>(true));
  auto ds = data::synthetic_digits(48, 7).map([](const data::Element& e) {
    return data::Element{ops::slice(e[0], {8, 8, 0}, {12, 12, 1}), e[1]};
  });
  s.read_and_reset_all_reduce_counters();
  Outcome out;
  out.loss = m->fit(ds.batch(16), {.epochs = 2, .verbose = 0}).history.at("loss");
  out.counters = s.read_and_reset_all_reduce_counters();
  out.weights = weights_of(m->trainable_variables());
  return out;
}

class OverlapFit : public ::testing::TestWithParam<std::tuple<int, std::int64_t, bool>> {};

TEST_P(OverlapFit, WeightsAreBitwiseTheNonOverlappedOnesAndTheBucketsRanDuringBackward) {
  const auto [replicas, pack_bytes, adam] = GetParam();
  chorus::testing::make_cpus(replicas, 256);
  const Outcome off = fit_cnn(replicas, false, pack_bytes, adam);
  const Outcome on = fit_cnn(replicas, true, pack_bytes, adam);
  expect_bitwise(on, off, "overlap on vs off");
  EXPECT_EQ(on.loss, off.loss);
  EXPECT_LT(on.loss.back(), on.loss.front());
  // The same collectives moved the same bytes; with overlap every gradient pack was one of the
  // communication threads' (6 steps × replicas), none without.
  EXPECT_EQ(on.counters.collectives, off.counters.collectives);
  EXPECT_EQ(on.counters.bytes, off.counters.bytes);
  EXPECT_EQ(off.counters.overlapped, 0);
  EXPECT_GT(on.counters.overlapped, 0);
  const std::int64_t metric_reduces = on.counters.collectives - on.counters.overlapped;
  EXPECT_GE(metric_reduces, 0);
  if (pack_bytes == 256) {
    EXPECT_GE(on.counters.overlapped, 6 * replicas * 4) << "many small buckets";
  }
  chorus::internal::reset_runtime_for_testing();
}

INSTANTIATE_TEST_SUITE_P(SharedMemory, OverlapFit,
                         ::testing::Combine(::testing::Values(2, 3), ::testing::Values<std::int64_t>(256, 4096, 0),
                                            ::testing::Bool()));

// What a custom loop does besides opt->compute_gradients + apply_gradients.
struct Loop {
  int steps = 3;
  // Applied to every defined gradient of replica `r` before apply_gradients (nullptr: none). The
  // loop then uses tape.gradient and apply_gradients(gv), without a sum.
  std::function<Tensor(int r, const Tensor&)> change;
  bool use_extra_variable = false;  // `unused` is read (and reaches the loss)
  bool dead_head = false;           // a variable `head2` is read, but its output is not in the loss
  int accumulate = 0;               // gradient_accumulation_steps
  bool plain = false;               // tape.gradient + apply_gradients(gv), as a TF custom loop
  bool reduce_between = false;      // a MEAN all-reduce of a 2-tensor list between gradient and apply
  bool sync_in_backward = false;    // an op whose gradient is all-reduced inside the backward pass
};

// y = x, whose gradient is the MEAN of every replica's (a single-tensor all-reduce during the
// backward pass, as SyncBatchNormalization's).
Tensor synced_identity(const Tensor& x) {
  Tensor y = ops::stop_gradient(x);
  if (ops::internal::should_record({x}))
    ops::internal::record("SyncedIdentity", {x}, {y}, [](const std::vector<Tensor>& g) {
      return std::vector<Tensor>{get_replica_context()->all_reduce(ReduceOp::kMean, g[0])};
    });
  return y;
}

// A custom loop: per-replica tape, apply_gradients in the replica, 512-byte buckets. Returns the
// weights after the steps.
Outcome custom_loop(int replicas, bool overlap, const Loop& loop) {
  MirroredStrategy s(cpus(replicas),
                     {.communication_options = {.bytes_per_pack = 512}, .overlap_gradient_all_reduce = overlap});
  Variable w1, b1, unused, w2, head2;
  std::shared_ptr<optimizers::Optimizer> opt;
  {
    auto scope = s.scope();
    w1 = make_variable({.initial_value = ops::stateless_random_uniform({8, 32}, {1, 1}), .name = "w1"});
    b1 = make_variable({.initial_value = Tensor::zeros({32}, DType::kFloat32), .name = "b1"});
    unused = make_variable({.initial_value = Tensor::ones({5}, DType::kFloat32), .name = "unused"});
    w2 = make_variable({.initial_value = ops::stateless_random_uniform({32, 4}, {2, 2}), .name = "w2"});
    head2 = make_variable({.initial_value = ops::stateless_random_uniform({32, 3}, {3, 3}), .name = "head2"});
    optimizers::AdamOptions options{.learning_rate = 1e-2};
    if (loop.accumulate > 0) options.gradient_accumulation_steps = loop.accumulate;
    opt = std::make_shared<optimizers::Adam>(options);
  }
  std::vector<Variable> vars{w1, b1, unused, w2};
  if (loop.dead_head) vars.push_back(head2);
  s.read_and_reset_all_reduce_counters();
  for (int step = 0; step < loop.steps; ++step) {
    s.run([&] {
      ReplicaContext* ctx = get_replica_context();
      const int r = ctx->replica_id_in_sync_group();
      const Tensor x = ops::stateless_random_uniform({6, 8}, {100 + step, r});
      const Tensor y = ops::stateless_random_uniform({6, 4}, {200 + step, r});
      ops::GradientTape tape;
      Tensor h = ops::relu(ops::matmul(x, w1.value()) + b1.value());
      if (loop.use_extra_variable) h = h * ops::reduce_sum(unused.value());
      if (loop.sync_in_backward) h = synced_identity(h);
      if (loop.dead_head) (void)ops::matmul(h, head2.value());  // computed, not in the loss
      const Tensor loss = ops::reduce_mean(ops::square(ops::matmul(h, w2.value()) - y));
      if (!loop.change && !loop.plain) {
        optimizers::Gradients g = opt->compute_gradients(loss, vars, tape);
        if (loop.reduce_between)
          (void)ctx->all_reduce(ReduceOp::kMean, std::vector<Tensor>{Tensor::scalar<float>(1.0f), loss});
        opt->apply_gradients(std::move(g));
        return;
      }
      std::vector<Tensor> grads = tape.gradient(loss, vars);
      if (loop.reduce_between)
        (void)ctx->all_reduce(ReduceOp::kMean, std::vector<Tensor>{Tensor::scalar<float>(1.0f), loss});
      optimizers::GradsAndVars gv;
      for (std::size_t i = 0; i < vars.size(); ++i)
        gv.emplace_back(loop.change && grads[i].defined() ? loop.change(r, grads[i]) : grads[i], vars[i]);
      opt->apply_gradients(std::move(gv));
    });
  }
  Outcome out;
  out.counters = s.read_and_reset_all_reduce_counters();
  out.weights = weights_of(vars);
  return out;
}

TEST(Overlap, AnUnusedVariableIsInNoBucketAndNothingWaitsForIt) {
  // `unused` gets no gradient (TF's None): apply_gradients warns and skips it; the buckets around
  // it still run during backward, and the weights are bitwise the non-overlapped ones.
  for (const int replicas : {2, 3}) {
    chorus::testing::make_cpus(replicas, 128);
    const Outcome off = custom_loop(replicas, false, {.steps = 4});
    const Outcome on = custom_loop(replicas, true, {.steps = 4});
    expect_bitwise(on, off, "unused variable");
    EXPECT_EQ(on.counters.collectives, off.counters.collectives);
    EXPECT_EQ(on.counters.overlapped, on.counters.collectives) << "every pack was a bucket";
    EXPECT_EQ(on.weights[2], std::vector<float>(5, 1.0f)) << "the unused variable is untouched";
    // Used on some steps only would change the tape, not the contract: the same on every replica.
    const Outcome used_off = custom_loop(replicas, false, {.use_extra_variable = true});
    const Outcome used_on = custom_loop(replicas, true, {.use_extra_variable = true});
    expect_bitwise(used_on, used_off, "used variable");
    // A variable read by an op whose output does not reach the loss (an unused head) gets no
    // gradient either: the tape expects none for it, so the buckets are used all the same.
    const Outcome dead_off = custom_loop(replicas, false, {.dead_head = true});
    const Outcome dead_on = custom_loop(replicas, true, {.dead_head = true});
    expect_bitwise(dead_on, dead_off, "unused head");
    EXPECT_EQ(dead_on.counters.overlapped, dead_on.counters.collectives) << "the buckets were taken";
    chorus::internal::reset_runtime_for_testing();
  }
}

// A loop that changes its gradients (clipped or scaled per replica) applies them without a sum:
// apply_gradients reduces what it is given, and no sum was begun for nothing. The same for a TF
// custom loop's tape.gradient + apply_gradients(gv), and for replica 0 alone changing its own.
TEST(Overlap, GradientsChangedBeforeApplyOrAPlainTapeGradientAreReducedInApplyGradients) {
  chorus::testing::make_cpus(2, 128);
  auto halve = [](int, const Tensor& g) { return g * 0.5; };
  auto first_halves = [](int r, const Tensor& g) { return r == 0 ? g * 0.5 : g; };
  for (const Loop& loop : {Loop{.change = halve}, Loop{.change = first_halves}, Loop{.plain = true}}) {
    const Outcome off = custom_loop(2, false, loop);
    const Outcome on = custom_loop(2, true, loop);
    expect_bitwise(on, off, "changed or plain gradients");
    EXPECT_EQ(on.counters.overlapped, 0) << "no sum was begun";
    EXPECT_EQ(on.counters.collectives, off.counters.collectives);
  }
  chorus::internal::reset_runtime_for_testing();
}

// Collectives of the replica thread between the buckets: an all-reduce inside the backward pass
// (as SyncBatchNormalization's) and a list all-reduce of other values between gradient and apply
// meet their peers in the same order on every replica, and the buckets are still taken.
TEST(Overlap, OtherCollectivesDuringAndAfterTheBackwardPassKeepTheirOrder) {
  for (const int replicas : {2, 3}) {
    chorus::testing::make_cpus(replicas, 128);
    const Loop loop{.reduce_between = true, .sync_in_backward = true};
    const Outcome off = custom_loop(replicas, false, loop);
    const Outcome on = custom_loop(replicas, true, loop);
    expect_bitwise(on, off, "collectives in between");
    EXPECT_EQ(on.counters.collectives, off.counters.collectives);
    EXPECT_GT(on.counters.overlapped, 0);
    EXPECT_EQ(on.counters.collectives - on.counters.overlapped, 3 * 2 * replicas)
        << "per step and replica: the backward's all-reduce and the list's (one pack), the rest buckets";
    chorus::internal::reset_runtime_for_testing();
  }
}

// A GAN-like step: two tapes record the same forward pass, each differentiates its own loss with
// respect to its own variables (compute_gradients), two optimizers apply. The tape asked first has
// the other still recording, so it begins no sum (its gradients could be differentiated again);
// the one asked second does (the first is spent). The weights are the non-overlapped ones.
TEST(Overlap, OfTwoTapesTheOneAskedSecondOverlaps) {
  chorus::testing::make_cpus(2, 128);
  auto run = [](bool overlap) {
    MirroredStrategy s(cpus(2),
                       {.communication_options = {.bytes_per_pack = 512}, .overlap_gradient_all_reduce = overlap});
    Variable g, d;
    std::shared_ptr<optimizers::Optimizer> g_opt, d_opt;
    {
      auto scope = s.scope();
      g = make_variable({.initial_value = ops::stateless_random_uniform({8, 16}, {1, 1}), .name = "g"});
      d = make_variable({.initial_value = ops::stateless_random_uniform({16, 1}, {2, 2}), .name = "d"});
      g_opt = std::make_shared<optimizers::Adam>(1e-2);
      d_opt = std::make_shared<optimizers::Adam>(1e-2);
    }
    s.read_and_reset_all_reduce_counters();
    for (int step = 0; step < 3; ++step) {
      s.run([&] {
        const int r = get_replica_context()->replica_id_in_sync_group();
        const Tensor z = ops::stateless_random_uniform({4, 8}, {300 + step, r});
        ops::GradientTape g_tape, d_tape;
        const Tensor score = ops::matmul(ops::tanh(ops::matmul(z, g.value())), d.value());
        const Tensor g_loss = ops::reduce_mean(ops::square(score - 1.0));
        const Tensor d_loss = ops::reduce_mean(ops::square(score));
        optimizers::Gradients dg = d_opt->compute_gradients(d_loss, {d}, d_tape);
        optimizers::Gradients gg = g_opt->compute_gradients(g_loss, {g}, g_tape);
        EXPECT_EQ(dg.sum, nullptr);
        d_opt->apply_gradients(std::move(dg));
        g_opt->apply_gradients(std::move(gg));
      });
    }
    Outcome out;
    out.counters = s.read_and_reset_all_reduce_counters();
    out.weights = weights_of({g, d});
    return out;
  };
  const Outcome off = run(false);
  const Outcome on = run(true);
  expect_bitwise(on, off, "two tapes");
  EXPECT_EQ(on.counters.collectives, off.counters.collectives);
  EXPECT_GT(on.counters.overlapped, 0) << "the second tape's buckets";
  EXPECT_LT(on.counters.overlapped, on.counters.collectives) << "not the first tape's";
  chorus::internal::reset_runtime_for_testing();
}

// With gradient_accumulation_steps no apply reduces the tape's gradients as they are (the N-th
// reduces the mean of the sum), so the tape begins no overlapped all-reduce: nothing is reduced
// for nothing, micro-steps run no collective, and the updates are the non-overlapped ones.
TEST(Overlap, GradientAccumulationBeginsNoOverlappedAllReduce) {
  chorus::testing::make_cpus(2, 128);
  const Outcome off = custom_loop(2, false, {.steps = 6, .accumulate = 3});
  const Outcome on = custom_loop(2, true, {.steps = 6, .accumulate = 3});
  expect_bitwise(on, off, "accumulation");
  EXPECT_EQ(on.counters.collectives, off.counters.collectives) << "collectives on the 2 updating steps only";
  EXPECT_EQ(on.counters.overlapped, 0);
  // A loop that begins a sum anyway (tape.gradient_and_sum) and passes it: the optimizer cannot use
  // a micro-batch's sum, so its buckets were reduced for nothing, and the updates are unchanged.
  {
    MirroredStrategy s(cpus(2), {.overlap_gradient_all_reduce = true});
    Variable w;
    std::shared_ptr<optimizers::Optimizer> opt;
    {
      auto scope = s.scope();
      w = make_variable({.initial_value = Tensor::ones({4}, DType::kFloat32), .name = "w"});
      opt = std::make_shared<optimizers::SGD>(
          optimizers::SGDOptions{.learning_rate = 0.5, .gradient_accumulation_steps = 2});
    }
    for (int step = 0; step < 2; ++step)
      s.run([&] {
        ops::GradientTape tape;
        const Tensor loss = ops::reduce_sum(ops::square(w.value()));
        ops::GradientsAndSum gs = tape.gradient_and_sum(loss, {w});
        EXPECT_NE(gs.sum, nullptr);
        opt->apply_gradients(optimizers::Gradients{{{gs.gradients[0], w}}, gs.sum});
      });
    // Each replica's gradient 2w = 2, summed over 2 replicas: 4; the mean of 2 calls: 4; w = 1 - 0.5·4.
    EXPECT_EQ(w.value().to_vector<float>(), std::vector<float>(4, -1.0f));
  }
  chorus::internal::reset_runtime_for_testing();
}

// A LossScaleOptimizer unscales each replica's gradients before the sum, so it begins no sum during
// the backward pass, at stage 0 as at stage 2. ZeRO stage 2 without one overlaps: from the second
// step on (the first builds the slots that decide what is reduce-scattered) its reduce-scatters
// run on the communication threads (tests/distribute/zero_overlap_test.cc: bitwise parity).
TEST(Overlap, ALossScaleOptimizerReducesAfterTheBackwardPassAndZeroStageTwoDuringIt) {
  chorus::testing::make_cpus(2, 128);
  for (const int stage : {0, 2}) {
    for (const bool loss_scale : {true, false}) {
      MirroredStrategy s(cpus(2), {.communication_options = {.bytes_per_pack = 256},
                                   .sharding = {.stage = stage},
                                   .overlap_gradient_all_reduce = true});
      EXPECT_TRUE(s.overlaps_gradient_all_reduce());
      auto scope = s.scope();
      auto m = std::make_unique<model::Sequential>(
          std::vector<layers::LayerPtr>{layers::Dense(8, "relu"), layers::Dense(3)});
      std::shared_ptr<optimizers::Optimizer> opt =
          std::make_shared<optimizers::SGD>(optimizers::SGDOptions{.learning_rate = 0.1, .momentum = 0.9});
      if (loss_scale) opt = std::make_shared<optimizers::LossScaleOptimizer>(opt);
      m->compile(opt, std::make_shared<losses::MeanSquaredError>());
      const Tensor x = ops::stateless_random_uniform({16, 4}, {1, 2});
      const Tensor y = ops::stateless_random_uniform({16, 3}, {3, 4});
      s.read_and_reset_all_reduce_counters();
      m->fit(data::Dataset::from_tensor_slices({x, y}).batch(8), {.epochs = 2, .verbose = 0});
      const AllReduceCounters c = s.read_and_reset_all_reduce_counters();
      EXPECT_GT(c.collectives, 0);
      if (loss_scale)
        EXPECT_EQ(c.overlapped, 0) << "stage " << stage;
      else
        EXPECT_GE(c.overlapped, 3 * 2) << "stage " << stage << ": steps 2-4 reduce during backward";
    }
  }
  chorus::internal::reset_runtime_for_testing();
}

TEST(Overlap, AReplicaFailingWithBucketsInFlightFailsTheStepAndTheNextStepWorks) {
  chorus::testing::make_cpus(2, 128);
  MirroredStrategy s(cpus(2), {.timeout = std::chrono::seconds(20), .overlap_gradient_all_reduce = true});
  Variable w;
  std::shared_ptr<optimizers::SGD> opt;
  {
    auto scope = s.scope();
    w = make_variable({.initial_value = Tensor::ones({64, 64}, DType::kFloat32), .name = "w"});
    opt = std::make_shared<optimizers::SGD>(0.1);
  }
  auto step = [&](bool fail) {
    s.run([&] {
      const int r = get_replica_context()->replica_id_in_sync_group();
      ops::GradientTape tape;
      const Tensor loss = ops::reduce_sum(ops::square(w.value()));
      optimizers::Gradients g = opt->compute_gradients(loss, {w}, tape);  // buckets in flight
      if (fail && r == 1) throw InvalidArgumentError("replica 1 gives up after its backward pass");
      opt->apply_gradients(std::move(g));
    });
  };
  const auto start = std::chrono::steady_clock::now();
  try {
    step(true);
    ADD_FAILURE() << "the failed step returned";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("replica 1 gives up"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15)) << "no wait for the timeout";
  try {
    step(false);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "the step after the failed one: " << e.what();
  }
  chorus::internal::reset_runtime_for_testing();
}

// The default (nullopt): on when the replicas' op threads leave a core of the host free for the
// communication threads; explicit true/false as asked. The reason says which.
TEST(Overlap, TheDefaultOverlapsWhenTheOpThreadsLeaveACoreFree) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (const int threads : {1, cores}) {
    chorus::internal::reset_runtime_for_testing();
    config::set_visible_devices({}, "GPU");
    config::set_logical_device_configuration(
        config::list_physical_devices("CPU")[0],
        std::vector<LogicalDeviceConfiguration>(2, {.memory_limit_mb = 64, .intra_op_threads = threads}));
    MirroredStrategy automatic(cpus(2));
    EXPECT_EQ(automatic.overlaps_gradient_all_reduce(), 2 * threads < cores) << automatic.overlap_reason();
    EXPECT_NE(automatic.overlap_reason().find("the op threads use " + std::to_string(2 * threads) + " of the host's " +
                                              std::to_string(cores) + " cores"),
              std::string::npos)
        << automatic.overlap_reason();
    MirroredStrategy on(cpus(2), {.overlap_gradient_all_reduce = true});
    EXPECT_TRUE(on.overlaps_gradient_all_reduce());
    EXPECT_EQ(on.overlap_reason(), "on: requested");
    MirroredStrategy off(cpus(2), {.overlap_gradient_all_reduce = false});
    EXPECT_FALSE(off.overlaps_gradient_all_reduce());
    EXPECT_EQ(off.overlap_reason(), "off: requested");
  }
  chorus::internal::reset_runtime_for_testing();
}

}  // namespace
}  // namespace chorus::distribute
