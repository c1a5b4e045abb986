// ZeRO stages 1, 2 and 3 under MultiWorkerMirroredStrategy (distribute/sharding_options.h,
// docs/sharding.md "Several workers"), run by CTest as `mpirun -n 2` and `-n 3` (label mpi), with
// one CPU device per worker (MPI between the processes) and two (hierarchical: shared memory in
// the process, MPI between them), so 2, 3, 4 and 6 replicas, uneven and empty shards
// (tests/optimizer/sharding_util.h's model). Every worker checks:
//   - parity: the same model, data and seed trained with a custom loop at stages 1, 2 and 3 end with
//     the weights of stage 0 (MWMS, same worker and device counts) to 1e-6 relative, and the slots'
//     checkpoint values (every worker's shards gathered) equal stage 0's slots to 1e-6;
//   - the shards: each slot (and at stage 3 each parameter) has this worker's k shards, of the
//     global layout over all replicas;
//   - checkpoints: saved at stage 2 after 3 steps, restored at stage 0 (and at stages 1 and 3), 3
//     more steps end where 6 uninterrupted stage-0 steps end; saved at stage 3, restored at stage 0.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "tests/collective/mpi_test_main.h"
#include "tests/optimizer/sharding_util.h"
#include <chorus/checkpoint/checkpoint.h>
#include <chorus/checkpoint/checkpoint_manager.h>
#include <chorus/distribute/multi_worker_mirrored_strategy.h>

namespace chorus::sharding_testing {
namespace {

using distribute::MultiWorkerMirroredStrategy;

constexpr std::chrono::milliseconds kTimeout{60000};
constexpr int kCpuDevices = 2, kFirst = 3, kMore = 3;

MultiWorkerMirroredStrategy make_strategy(int k, int stage) {
  return MultiWorkerMirroredStrategy({.cpu_devices_per_worker = k, .timeout = kTimeout, .sharding = {.stage = stage}});
}

// Steps [first, first + steps): replica g (global id) takes rows [g·12/n, (g+1)·12/n) of the
// global batch every worker computes alike; the loss is the sum of squared errors over the 12.
void train_loop_mw(MultiWorkerMirroredStrategy& strategy, model::Sequential& m, optimizers::Optimizer& opt, int first,
                   int steps) {
  const int n = strategy.num_replicas_in_sync();
  const int rows = kGlobalRows / n;
  const std::vector<std::string> devices = strategy.replica_devices();
  for (int s = first; s < first + steps; ++s) {
    auto [x, y] = batch(s);
    std::vector<Tensor> xs, ys;
    for (int r = 0; r < strategy.num_local_replicas(); ++r) {
      const int g = strategy.worker_offset() + r;
      xs.push_back(ops::slice(x, {g * rows, 0}, {rows, kIn}).to(devices[static_cast<std::size_t>(r)]));
      ys.push_back(ops::slice(y, {g * rows, 0}, {rows, 1}).to(devices[static_cast<std::size_t>(r)]));
    }
    strategy.run(
        [&](const Tensor& xr, const Tensor& yr) {
          ops::GradientTape tape;
          Tensor loss = ops::reduce_sum(ops::square(m(xr, true) - yr)) / static_cast<double>(kGlobalRows);
          std::vector<Variable> vars = m.trainable_variables();
          std::vector<Tensor> grads = tape.gradient(loss, vars);
          optimizers::GradsAndVars gv;
          for (std::size_t i = 0; i < vars.size(); ++i) gv.emplace_back(grads[i], vars[i]);
          opt.apply_gradients(gv);
        },
        distribute::PerReplica<Tensor>(xs), distribute::PerReplica<Tensor>(ys));
  }
}

struct Trained {
  State state;
  std::string saved;  // the checkpoint written after kFirst steps, if asked
};

Trained train(int k, int stage, Opt o, int steps, const std::string& save_dir = "") {
  MultiWorkerMirroredStrategy strategy = make_strategy(k, stage);
  EXPECT_EQ(strategy.sharding_stage(), stage);
  std::unique_ptr<model::Sequential> m;
  std::shared_ptr<optimizers::Optimizer> opt;
  {
    auto scope = strategy.scope();
    m = make_model();
    opt = make_optimizer(o);
  }
  Trained out;
  train_loop_mw(strategy, *m, *opt, 0, std::min(steps, kFirst));
  if (!save_dir.empty()) {
    train::Checkpoint ckpt({{"model", *m}, {"optimizer", *opt}});
    train::CheckpointManager manager(ckpt, save_dir, 2);
    out.saved = manager.save().value();
  }
  if (steps > kFirst) train_loop_mw(strategy, *m, *opt, kFirst, steps - kFirst);
  // The shards: this worker's k, of the layout over every worker's replicas.
  std::vector<std::pair<Variable, bool>> to_check;  // (variable, sharded at this stage)
  for (const auto& ref : opt->slot_variables()) to_check.push_back({ref.slot, stage >= 1});
  for (const Variable& v : m->trainable_variables()) to_check.push_back({v, stage >= 3});
  for (const auto& [v, sharded] : to_check) {
    const ShardedVariable* sv = as_sharded(v);
    EXPECT_EQ(sv != nullptr, sharded) << v.name();
    if (sv == nullptr) continue;
    EXPECT_EQ(sv->layout().num_shards, strategy.num_replicas_in_sync()) << v.name();
    EXPECT_EQ(static_cast<int>(sv->components().size()), k) << v.name();
    for (int r = 0; r < k; ++r)
      EXPECT_EQ(sv->components()[static_cast<std::size_t>(r)].shape().num_elements(),
                sv->layout().length(strategy.worker_offset() + r))
          << v.name() << " local shard " << r;
  }
  out.state = snapshot(*m, *opt);
  return out;
}

State resume(int k, int stage, const std::string& path) {
  MultiWorkerMirroredStrategy strategy = make_strategy(k, stage);
  return resume_and_train(strategy, path, kFirst, [&](model::Sequential& m, optimizers::Optimizer& opt) {
    train_loop_mw(strategy, m, opt, kFirst, kMore);
  });
}

class ShardingMpi : public ::testing::TestWithParam<int> {};

TEST_P(ShardingMpi, StagesOneTwoAndThreeMatchStageZero) {
  const int k = GetParam();
  for (Opt o : {Opt::kAdam, Opt::kSgdMomentum, Opt::kAdamGlobalClipnorm}) {
    const State s0 = train(k, 0, o, 6).state;
    ASSERT_FALSE(s0.slots.empty());
    // The training moved the weights (a parity of untrained weights would prove nothing).
    const State untrained = train(k, 0, o, 0).state;
    EXPECT_GT(relative_difference(s0.weights[0], untrained.weights[0]), 1e-3) << opt_name(o);
    for (int stage : {1, 2, 3}) {
      const State s = train(k, stage, o, 6).state;
      expect_states_equal(s, s0, 1e-6, std::string(opt_name(o)) + " stage " + std::to_string(stage));
    }
  }
}

TEST_P(ShardingMpi, CheckpointsOfStagesTwoAndThreeRestoreAtOtherStages) {
  const int k = GetParam();
  MultiWorkerMirroredStrategy probe = make_strategy(k, 0);
  auto* comm = probe.worker_communicator();
  ASSERT_NE(comm, nullptr);
  Tensor pid = Tensor::from_vector<std::int64_t>({static_cast<std::int64_t>(::getpid())}, {1}, "/cpu:0");
  comm->broadcast(pid, {.root = 0, .timeout = kTimeout})->wait(kTimeout);
  const std::string dir =
      "/tmp/chorus_mw_zero_ckpt_" + std::to_string(pid.to_vector<std::int64_t>()[0]) + "_k" + std::to_string(k);

  const Trained saved = train(k, 2, Opt::kAdam, kFirst, dir);
  EXPECT_EQ(saved.saved, dir + "/ckpt-1");
  const State uninterrupted = train(k, 0, Opt::kAdam, kFirst + kMore).state;
  expect_states_equal(resume(k, 0, saved.saved), uninterrupted, 1e-6, "stage 2 → stage 0");
  expect_states_equal(resume(k, 1, saved.saved), uninterrupted, 1e-6, "stage 2 → stage 1");
  expect_states_equal(resume(k, 3, saved.saved), uninterrupted, 1e-6, "stage 2 → stage 3");
  const Trained saved3 = train(k, 3, Opt::kAdam, kFirst, dir + "_3");
  expect_states_equal(resume(k, 0, saved3.saved), uninterrupted, 1e-6, "stage 3 → stage 0");
  comm->barrier({.timeout = kTimeout})->wait(kTimeout);
  if (probe.is_chief()) {
    std::filesystem::remove_all(dir);
    std::filesystem::remove_all(dir + "_3");
  }
}

TEST(ShardingMpiErrors, StagesOutsideZeroToThreeAreInvalid) {
  EXPECT_THROW(make_strategy(1, 4), InvalidArgumentError);
  EXPECT_THROW(make_strategy(1, -1), InvalidArgumentError);
}

INSTANTIATE_TEST_SUITE_P(LocalDevices, ShardingMpi, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& i) { return "k" + std::to_string(i.param); });

}  // namespace
}  // namespace chorus::sharding_testing

int main(int argc, char** argv) {
  return chorus::testing::run_tests_under_mpi_on_cpus(argc, argv, chorus::sharding_testing::kCpuDevices, 256);
}
