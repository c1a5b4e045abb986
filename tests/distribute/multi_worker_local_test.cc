// The parts of multi-worker training that one process can check: dataset sharding across workers
// (each worker's view computed in turn), MultiWorkerMirroredStrategy with one worker (no MPI),
// and PreemptionWatcher's local flag and signal handler. The multi-process behaviour is in
// multi_worker_mpi_test.cc (run under mpirun).
#include <gtest/gtest.h>

#include <csignal>

#include <chorus/core/config.h>
#include <chorus/core/error.h>
#include <chorus/data/dataset.h>
#include <chorus/distribute/multi_worker_mirrored_strategy.h>
#include <chorus/distribute/preemption.h>

namespace chorus::distribute {
namespace {

void configure_cpus(int n) {
  config::set_logical_device_configuration(
      config::list_physical_devices("CPU")[0],
      std::vector<LogicalDeviceConfiguration>(static_cast<std::size_t>(n), {.memory_limit_mb = 256}));
}

// Rows 0..n-1 as a dataset of global batches of `batch` rows (one float column).
data::Dataset rows(std::int64_t n, std::int64_t batch) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(i);
  return data::Dataset::from_tensor_slices({Tensor::from_vector<float>(v, {n, 1}, "/cpu:0")}).batch(batch);
}

// Per step, per local replica: the row values that replica got.
std::vector<std::vector<std::vector<float>>> view(const data::Dataset& ds, int k, WorkerSharding sharding) {
  std::vector<std::string> devices;
  for (int r = 0; r < k; ++r) devices.push_back("/cpu:" + std::to_string(r));
  DistributedDataset dist(ds, devices, DistributedDataset::Mode::kSplitGlobalBatch, sharding);
  auto it = dist.make_iterator();
  std::vector<std::vector<std::vector<float>>> steps;
  while (auto batch = it.next()) {
    std::vector<std::vector<float>> step;
    for (int r = 0; r < k; ++r) step.push_back((*batch)[r][0].to_vector<float>());
    steps.push_back(step);
  }
  return steps;
}

TEST(WorkerShardingTest, DataPolicySplitsEachGlobalBatchOverAllReplicasOfAllWorkers) {
  configure_cpus(2);
  const int workers = 3, k = 2, batch = 10;  // 10 rows over 6 replicas: 2,2,2,2,1,1; last batch 3 rows
  const auto ds = rows(23, batch);
  std::vector<std::vector<std::vector<std::vector<float>>>> views;
  for (int w = 0; w < workers; ++w) views.push_back(view(ds, k, {workers, w, AutoShardPolicy::kData}));
  for (int w = 0; w < workers; ++w) ASSERT_EQ(views[w].size(), 3u) << "every worker takes a step per global batch";
  for (int step = 0; step < 3; ++step) {
    const std::int64_t first = step * batch, n = std::min<std::int64_t>(batch, 23 - first);
    // Expected: the global replica g = w*k + r gets slice g of n rows over 6 (first n % 6 get one more).
    std::int64_t at = first;
    for (int g = 0; g < workers * k; ++g) {
      const std::int64_t len = n / (workers * k) + (g < n % (workers * k) ? 1 : 0);
      std::vector<float> expect;
      for (std::int64_t i = 0; i < len; ++i) expect.push_back(static_cast<float>(at + i));
      EXPECT_EQ(views[g / k][step][g % k], expect) << "step " << step << " global replica " << g;
      at += len;
    }
    EXPECT_EQ(at, first + n);
  }
}

TEST(WorkerShardingTest, OffPolicyGivesEveryWorkerEverySliceKPerStep) {
  configure_cpus(2);
  const int workers = 2, k = 2;
  const auto ds = rows(12, 8);  // per-replica slices of 2 rows (8 over 4), last batch 4 rows → 1 each
  for (int w = 0; w < workers; ++w) {
    auto steps = view(ds, k, {workers, w, AutoShardPolicy::kOff});
    std::vector<float> seen;
    for (const auto& s : steps)
      for (const auto& r : s) seen.insert(seen.end(), r.begin(), r.end());
    std::vector<float> all;
    for (int i = 0; i < 12; ++i) all.push_back(static_cast<float>(i));
    EXPECT_EQ(seen, all) << "worker " << w << " sees the whole data, in order";
    ASSERT_EQ(steps.size(), 4u);  // 8 slices over 2 replicas
    EXPECT_EQ(steps[0][0], (std::vector<float>{0, 1}));
    EXPECT_EQ(steps[0][1], (std::vector<float>{2, 3}));
    EXPECT_EQ(steps[2][0], (std::vector<float>{8}));
  }
}

TEST(WorkerShardingTest, OneWorkerIsTheMirroredSplit) {
  configure_cpus(2);
  const auto steps = view(rows(5, 5), 2, {1, 0, AutoShardPolicy::kData});
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0][0], (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(steps[0][1], (std::vector<float>{3, 4}));
  EXPECT_THROW(DistributedDataset(rows(5, 5), {"/cpu:0"}, DistributedDataset::Mode::kSplitGlobalBatch, {2, 2}),
               InvalidArgumentError);
}

TEST(MultiWorkerLocalTest, OneWorkerWithoutMpiIsAMirroredStrategy) {
  configure_cpus(2);
  MultiWorkerMirroredStrategy strategy({.cluster_resolver = ClusterResolver(), .cpu_devices_per_worker = 2});
  EXPECT_EQ(strategy.num_workers(), 1);
  EXPECT_TRUE(strategy.is_chief());
  EXPECT_EQ(strategy.num_replicas_in_sync(), 2);
  EXPECT_EQ(strategy.worker_communicator(), nullptr);
  Variable w;
  {
    auto scope = strategy.scope();
    w = make_variable({.initial_value = Tensor::ones({3}, DType::kFloat32, "/cpu:0"), .name = "w"});
  }
  auto ids = strategy.run([&] {
    auto* ctx = get_replica_context();
    Tensor s = ctx->all_reduce(ReduceOp::kSum, w.value());
    return Tensor::full({1}, ctx->replica_id_in_sync_group() + 10.0 * s.to_vector<float>()[0]);
  });
  EXPECT_EQ(strategy.gather(ids, 0).to_vector<float>(), (std::vector<float>{20, 21}));
  EXPECT_EQ(strategy.reduce(ReduceOp::kMean, ids).to_vector<float>(), (std::vector<float>{20.5}));
  InputContext seen;
  strategy.distribute_datasets_from_function([&](const InputContext& c) {
    seen = c;
    return rows(4, 2);
  });
  EXPECT_EQ(seen.num_input_pipelines, 1);
  EXPECT_EQ(seen.input_pipeline_id, 0);
  EXPECT_EQ(seen.num_replicas_in_sync, 2);
}

TEST(MultiWorkerLocalTest, RefusesWhatCannotWork) {
  configure_cpus(1);
  std::string m;
  try {
    MultiWorkerMirroredStrategy s(
        {.cluster_resolver = ClusterResolver(), .implementation = CommunicationImplementation::kNccl});
  } catch (const InvalidArgumentError& e) {
    m = e.what();
  }
  EXPECT_NE(m.find("implementation nccl was requested but the devices are CPUs"), std::string::npos) << m;
  auto evaluator = ClusterResolver::from_tf_config(
      R"({"cluster": {"worker": ["a:1"], "evaluator": ["e:1"]}, "task": {"type": "evaluator", "index": 0}})");
  EXPECT_THROW(MultiWorkerMirroredStrategy({.cluster_resolver = evaluator}), InvalidArgumentError);
}

TEST(PreemptionWatcherTest, SigtermSetsTheFlagAndStopsAtThatStep) {
  configure_cpus(1);
  MultiWorkerMirroredStrategy strategy({.cluster_resolver = ClusterResolver()});
  auto before = std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGTERM, before);
  {
    PreemptionWatcher watcher(strategy);
    EXPECT_THROW(PreemptionWatcher second(strategy), FailedPreconditionError);
    EXPECT_FALSE(watcher.should_stop(0));
    EXPECT_FALSE(PreemptionWatcher::signal_received());
    std::raise(SIGTERM);  // handled: the process goes on
    EXPECT_TRUE(PreemptionWatcher::signal_received());
    EXPECT_TRUE(watcher.should_stop(1));
    EXPECT_TRUE(watcher.should_stop(2));  // stays stopped
    ASSERT_TRUE(watcher.stop_step().has_value());
    EXPECT_EQ(*watcher.stop_step(), 1);
    EXPECT_EQ(watcher.signalled_ranks(), std::vector<int>{0});
  }
  // After a stop the process is shutting down: SIGTERM stays caught, so the scheduler's signal
  // arriving late (at another rank's agreed stop) cannot kill it while it saves and exits.
  std::raise(SIGTERM);  // would end the test binary if the default were back
  auto now = std::signal(SIGTERM, SIG_DFL);
  EXPECT_NE(now, before);
  std::signal(SIGTERM, before);
  // Without a stop, the previous disposition is back.
  {
    PreemptionWatcher watcher(strategy);
    EXPECT_FALSE(watcher.should_stop(0));
  }
  now = std::signal(SIGTERM, SIG_DFL);
  EXPECT_EQ(now, before);
  std::signal(SIGTERM, now);
}

// Issue 40, 4: SIGINT (Ctrl-C, or a scheduler that interrupts) gets SIGTERM's agreement and backup;
// before, it killed the process, once in ten times between a save's commit and its state write.
TEST(PreemptionWatcherTest, SigintStopsLikeSigtermAndASecondOneIsNotCaught) {
  configure_cpus(1);
  MultiWorkerMirroredStrategy strategy({.cluster_resolver = ClusterResolver()});
  struct sigaction before {};
  ASSERT_EQ(sigaction(SIGINT, nullptr, &before), 0);
  {
    PreemptionWatcher watcher(strategy);
    EXPECT_FALSE(watcher.should_stop(0));
    std::raise(SIGINT);  // handled: the process goes on
    EXPECT_TRUE(PreemptionWatcher::signal_received());
    EXPECT_TRUE(watcher.should_stop(1));
    EXPECT_EQ(watcher.stop_step(), std::optional<std::int64_t>(1));
    struct sigaction now {};
    ASSERT_EQ(sigaction(SIGINT, nullptr, &now), 0);
    EXPECT_EQ(now.sa_handler, SIG_DFL) << "a second Ctrl-C must end the process at once";
  }
  struct sigaction after {};
  ASSERT_EQ(sigaction(SIGINT, nullptr, &after), 0);
  EXPECT_EQ(after.sa_handler, before.sa_handler) << "the previous disposition is back";
}

}  // namespace
}  // namespace chorus::distribute
