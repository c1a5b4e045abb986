// Optimizer-state offload (distribute/optimizer_offload.h) under MultiWorkerMirroredStrategy, run
// by CTest as `mpirun -n 2` (label mpi), with one CPU device per worker (MPI between the processes)
// and two (hierarchical): at ZeRO stages 1, 2 and 3 (Adam, SGD with momentum) the custom loop of
// tests/optimizer/sharding_util.h ends with offload where it ends without — weights and slots bit
// for bit —, every slot shard of this worker lives in host memory, and a checkpoint saved with
// offload at stage 2 (every worker's shards gathered from host memory) restores without offload
// at stage 0 and trains on to the uninterrupted run's state.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "tests/collective/mpi_test_main.h"
#include "tests/optimizer/sharding_util.h"
#include <chorus/checkpoint/checkpoint.h>
#include <chorus/checkpoint/checkpoint_manager.h>
#include <chorus/core/host_memory.h>
#include <chorus/distribute/multi_worker_mirrored_strategy.h>

namespace chorus::sharding_testing {
namespace {

using distribute::MultiWorkerMirroredStrategy;

constexpr std::chrono::milliseconds kTimeout{60000};
constexpr int kCpuDevices = 2, kFirst = 3, kMore = 3;

MultiWorkerMirroredStrategy make_strategy(int k, int stage, bool offload) {
  return MultiWorkerMirroredStrategy({.cpu_devices_per_worker = k,
                                      .timeout = kTimeout,
                                      .sharding = {.stage = stage, .offload_optimizer_state = offload}});
}

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
          opt.apply_gradients(std::move(gv));
        },
        distribute::PerReplica<Tensor>(xs), distribute::PerReplica<Tensor>(ys));
  }
}

struct Trained {
  State state;
  std::string saved;
};

Trained train(int k, int stage, bool offload, Opt o, int steps, const std::string& save_dir = "") {
  MultiWorkerMirroredStrategy strategy = make_strategy(k, stage, offload);
  EXPECT_EQ(strategy.offloads_optimizer_state(), offload);
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
  for (const auto& ref : opt->slot_variables()) {
    const ShardedVariable* sv = as_sharded(ref.slot);
    EXPECT_NE(sv, nullptr) << ref.slot.name();
    if (sv == nullptr) continue;
    EXPECT_EQ(static_cast<int>(sv->components().size()), k);
    for (const Variable& c : sv->components())
      EXPECT_EQ(runtime::is_host_memory(c.device()), offload) << ref.slot.name() << " on " << c.device();
  }
  out.state = snapshot(*m, *opt);
  return out;
}

class OffloadMpi : public ::testing::TestWithParam<int> {};

TEST_P(OffloadMpi, EveryStageWithOffloadEqualsItWithout) {
  const int k = GetParam();
  for (Opt o : {Opt::kAdam, Opt::kSgdMomentum}) {
    for (int stage : {1, 2, 3}) {
      const State plain = train(k, stage, false, o, 6).state;
      const State off = train(k, stage, true, o, 6).state;
      expect_states_equal(off, plain, 0.0, std::string(opt_name(o)) + " stage " + std::to_string(stage));
    }
  }
}

TEST_P(OffloadMpi, ACheckpointSavedWithOffloadRestoresWithout) {
  const int k = GetParam();
  MultiWorkerMirroredStrategy probe = make_strategy(k, 0, false);
  auto* comm = probe.worker_communicator();
  ASSERT_NE(comm, nullptr);
  Tensor pid = Tensor::from_vector<std::int64_t>({static_cast<std::int64_t>(::getpid())}, {1}, "/cpu:0");
  comm->broadcast(pid, {.root = 0, .timeout = kTimeout})->wait(kTimeout);
  const std::string dir =
      "/tmp/chorus_mw_offload_ckpt_" + std::to_string(pid.to_vector<std::int64_t>()[0]) + "_k" + std::to_string(k);
  const Trained saved = train(k, 2, true, Opt::kAdam, kFirst, dir);
  const State uninterrupted = train(k, 2, false, Opt::kAdam, kFirst + kMore).state;
  MultiWorkerMirroredStrategy strategy = make_strategy(k, 0, false);
  const State resumed = resume_and_train(
      strategy, saved.saved, kFirst,
      [&](model::Sequential& m, optimizers::Optimizer& opt) { train_loop_mw(strategy, m, opt, kFirst, kMore); });
  expect_states_equal(resumed, uninterrupted, 1e-6, "stage 2 with offload → stage 0 without");
  comm->barrier({.timeout = kTimeout})->wait(kTimeout);
  if (probe.is_chief()) std::filesystem::remove_all(dir);
}

TEST(OffloadMpiErrors, OffloadAtStageZeroIsInvalid) { EXPECT_THROW(make_strategy(1, 0, true), InvalidArgumentError); }

INSTANTIATE_TEST_SUITE_P(LocalDevices, OffloadMpi, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& i) { return "k" + std::to_string(i.param); });

}  // namespace
}  // namespace chorus::sharding_testing

int main(int argc, char** argv) {
  return chorus::testing::run_tests_under_mpi_on_cpus(argc, argv, chorus::sharding_testing::kCpuDevices, 256);
}
