// MultiWorkerMirroredStrategy without MPI, end to end: 2 and 3 forked processes whose environment
// holds nothing but what a launcher sets — torchrun's MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE, or
// TF_CONFIG alone — each build the strategy (1 or 2 logical CPU devices per worker: Gloo between
// the processes, or the hierarchical path), meet through the store rank 0 serves, and train a step
// whose gradients are all-reduced over every worker's replicas; the result is checked against its
// analytic value. Then the chief's initial value, the variable check and the rebuilt communicators
// after a failed run; and the hostile end: a worker killed mid-run is named by the others, with
// UnavailableError, within 10 s. A child exits 0 when its checks passed, 1 when one failed, 2 when
// it threw; the parent test checks every child's status.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tests/collective/fork_workers.h"
#include "tests/core/test_util.h"
#include <chorus/collective/gloo/gloo.h>
#include <chorus/collective/store/tcp_store.h>
#include <chorus/core/config.h>
#include <chorus/core/error.h>
#include <chorus/core/variable.h>
#include <chorus/distribute/multi_worker_mirrored_strategy.h>
#include <chorus/distribute/replica_context.h>
#include <chorus/distribute/worker_transport.h>
#include <chorus/ops/elementwise.h>
#include <chorus/ops/reduction.h>
#include <chorus/ops/tape.h>
#include <chorus/optimizer/sgd.h>

namespace chorus::distribute {
namespace {

using chorus::testing::Env;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using chorus::testing::message_of;

constexpr std::chrono::milliseconds kTimeout{30000};  // for calls expected to succeed

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// What one worker does: (its rank, the number of workers, logical CPU devices per worker).
using Body = std::function<void(int rank, int workers, int devices)>;

// In the child: the whole environment replaced by `env`, `devices` logical CPU devices, then `body`.
void worker(const Env& env, int rank, int workers, int devices, const Body& body) {
  chorus::testing::replace_environment(env);
  config::set_logical_device_configuration(
      config::list_physical_devices("CPU")[0],
      std::vector<LogicalDeviceConfiguration>(static_cast<std::size_t>(devices), {.memory_limit_mb = 256}));
  body(rank, workers, devices);
}

// Forks one worker per environment (worker r gets envs[r]); each child's wait status, by rank
// (tests/collective/fork_workers.h).
std::vector<int> run_workers(const std::vector<Env>& envs, int devices, const Body& body) {
  const int k = static_cast<int>(envs.size());
  return chorus::testing::fork_workers(k,
                                       [&](int r) { worker(envs[static_cast<std::size_t>(r)], r, k, devices, body); });
}

void expect_all_passed(const std::vector<int>& statuses, const std::string& what) {
  chorus::testing::expect_all_exited_zero(statuses, what);
}

using chorus::testing::free_port;
using chorus::testing::torchrun_envs;
std::vector<Env> tf_config_envs(int k, int port) { return chorus::testing::tf_config_envs(k, port, /*chief=*/true); }

MultiWorkerMirroredStrategyOptions options(int devices, std::chrono::milliseconds timeout = kTimeout) {
  return {.device_policy = WorkerDevicePolicy::kCpu, .cpu_devices_per_worker = devices, .timeout = timeout};
}

// The strategy over the store: identity, the chief's initial value, one SGD step whose gradients
// are summed over all R replicas (replica g's gradient is g + 1: w = 1 - 0.25 · R(R+1)/2, exact in
// float), reduce across workers, the variable check and a run after the failed one (new Gloo keys).
void train_and_check(int rank, int workers, int devices, int port) {
  MultiWorkerMirroredStrategy s(options(devices));
  EXPECT_EQ(s.worker_index(), rank);
  EXPECT_EQ(s.num_workers(), workers);
  EXPECT_EQ(s.num_local_replicas(), devices);
  const int R = s.num_replicas_in_sync();
  EXPECT_EQ(R, workers * devices);
  ASSERT_NE(s.worker_communicator(), nullptr);
  EXPECT_EQ(s.worker_communicator()->backend(), "gloo");
  const std::string& reason = s.cross_device_ops().reason;
  EXPECT_TRUE(contains(reason, "Gloo between processes (store at 127.0.0.1:" + std::to_string(port) + ")")) << reason;
  EXPECT_EQ(contains(reason, "hierarchical"), devices > 1) << reason;

  Variable w;
  std::unique_ptr<optimizers::SGD> sgd;
  {
    auto scope = s.scope();
    w = make_variable({.initial_value = Tensor::full({3}, rank + 1.0), .name = "w"});  // differs per worker
    sgd = std::make_unique<optimizers::SGD>(0.25);
    sgd->build({w});
  }
  EXPECT_EQ(w.value().to_vector<float>(), std::vector<float>(3, 1.0f)) << "the chief's initial value";
  s.run([&] {
    const int g = get_replica_context()->replica_id_in_sync_group();
    ops::GradientTape tape;
    Tensor loss = ops::reduce_sum(w.value() * Tensor::full({3}, g + 1.0));
    std::vector<Tensor> grads = tape.gradient(loss, std::vector<Variable>{w});
    sgd->apply_gradients({{grads[0], w}});
  });
  const float expect = 1.0f - 0.25f * static_cast<float>(R * (R + 1) / 2);
  EXPECT_EQ(w.value().to_vector<float>(), std::vector<float>(3, expect)) << R << " replicas";
  auto ids = s.run([] { return Tensor::full({2}, get_replica_context()->replica_id_in_sync_group()); });
  EXPECT_EQ(s.reduce(ReduceOp::kSum, ids).to_vector<float>(), std::vector<float>(2, R * (R - 1) / 2.0f));

  // One worker changes a variable behind the strategy's back: every worker is told at the next run.
  Variable v;
  {
    auto scope = s.scope();
    v = make_variable({.initial_value = Tensor::zeros({2}), .name = "v"});
  }
  if (rank == workers - 1) v.assign(Tensor::full({2}, 5.0));
  const std::string m = message_of<FailedPreconditionError>([&] { s.run([] {}); });
  EXPECT_TRUE(contains(m, "variable 'v' differs across workers")) << m;
  EXPECT_TRUE(contains(m, "but rank " + std::to_string(workers - 1) + " has")) << m;
  v.assign(Tensor::zeros({2}));
  // The failed run marked the communicators broken: this run builds new ones (keys gloo/cross/1).
  auto sums = s.run([] {
    return get_replica_context()->all_reduce(ReduceOp::kSum,
                                             Tensor::full({4}, get_replica_context()->replica_id_in_sync_group()));
  });
  for (int r = 0; r < devices; ++r) EXPECT_EQ(sums[r].to_vector<float>(), std::vector<float>(4, R * (R - 1) / 2.0f));
}

TEST(MultiWorkerRendezvousTest, TorchrunVariablesOnly) {
  for (int workers : {2, 3})
    for (int devices : {1, 2}) {
      const int port = free_port();
      expect_all_passed(run_workers(torchrun_envs(workers, port), devices,
                                    [port](int r, int k, int d) { train_and_check(r, k, d, port); }),
                        "torchrun " + std::to_string(workers) + " workers x " + std::to_string(devices));
    }
}

TEST(MultiWorkerRendezvousTest, TfConfigOnly) {
  for (int workers : {2, 3})
    for (int devices : {1, 2}) {
      const int port = free_port();
      expect_all_passed(run_workers(tf_config_envs(workers, port), devices,
                                    [port](int r, int k, int d) { train_and_check(r, k, d, port); }),
                        "TF_CONFIG " + std::to_string(workers) + " workers x " + std::to_string(devices));
    }
}

// PyTorch's GLOO_SOCKET_IFNAME picks the interface Gloo binds to and advertises (the test hosts'
// eth0 in tests/hosts/; here the loopback interface).
TEST(MultiWorkerRendezvousTest, GlooSocketIfnameNamesTheInterface) {
  EXPECT_EQ(collective::interface_address("lo"), "127.0.0.1");
  const std::string m =
      chorus::testing::message_of<InvalidArgumentError>([] { collective::interface_address("no-such-if0"); });
  EXPECT_NE(m.find("GLOO_SOCKET_IFNAME='no-such-if0'"), std::string::npos) << m;
  EXPECT_NE(m.find("'lo'"), std::string::npos) << "names the interfaces there are: " << m;
  const int port = free_port();
  std::vector<Env> envs = torchrun_envs(2, port);
  for (Env& e : envs) e.emplace_back("GLOO_SOCKET_IFNAME", "lo,eth0");  // the first of a list
  expect_all_passed(run_workers(envs, 1, [port](int r, int k, int d) { train_and_check(r, k, d, port); }),
                    "torchrun 2 workers with GLOO_SOCKET_IFNAME=lo");
}

// Under mpirun's variables, but with MPI not initialized by the program, there is no store to meet
// at: the strategy says what to do (before any I/O), on every worker.
TEST(MultiWorkerRendezvousHostileTest, AnMpiLaunchWithoutMpiEnvironmentIsToldWhatToDo) {
  std::vector<Env> envs;
  for (int r = 0; r < 2; ++r)
    envs.push_back({{"OMPI_COMM_WORLD_RANK", std::to_string(r)}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  expect_all_passed(run_workers(envs, 1,
                                [](int, int, int) {
                                  const std::string m = message_of<FailedPreconditionError>(
                                      [] { MultiWorkerMirroredStrategy s(options(1)); });
                                  EXPECT_TRUE(contains(m, "create a chorus::collective::MpiEnvironment")) << m;
                                  EXPECT_TRUE(contains(m, "MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE")) << m;
                                }),
                    "OMPI_COMM_WORLD_* without MPI_Init");
}

// Workers step until `victim` kills itself (SIGKILL) before its 5th step, while the others are in
// that step's all-reduce. The others' run() must raise UnavailableError naming the victim's rank
// within 10 s — the timeout is 60 s, so only the closed connections can tell them that soon.
void step_until_a_worker_dies(int rank, int /*workers*/, int devices, int victim) {
  MultiWorkerMirroredStrategy s(options(devices, 60s));
  for (int step = 0; step < 1000; ++step) {
    if (rank == victim && step == 5) ::kill(::getpid(), SIGKILL);
    const auto start = Clock::now();
    try {
      s.run([] { get_replica_context()->all_reduce(ReduceOp::kSum, Tensor::full({1024}, 1.0)); });
    } catch (const UnavailableError& e) {
      const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
      EXPECT_EQ(step, 5) << e.what();
      EXPECT_LT(took, 10s) << e.what();
      EXPECT_TRUE(contains(e.what(), "rank " + std::to_string(victim) + " (host")) << e.what();
      std::fprintf(stderr, "rank %d: worker %d's death raised UnavailableError after %lld ms (%d device(s))\n", rank,
                   victim, static_cast<long long>(took.count()), devices);
      return;
    }
  }
  ADD_FAILURE() << "rank " << rank << " never saw worker " << victim << " die";
}

TEST(MultiWorkerRendezvousHostileTest, AKilledWorkerIsNamedWithinTenSeconds) {
  struct Case {
    int victim, devices;
  };
  for (const Case c : {Case{2, 1}, Case{0, 1}, Case{1, 2}}) {  // rank 0 serves the store
    const auto start = Clock::now();
    const std::vector<int> st = run_workers(torchrun_envs(3, free_port()), c.devices,
                                            [c](int r, int k, int d) { step_until_a_worker_dies(r, k, d, c.victim); });
    const std::string what = "victim " + std::to_string(c.victim) + ", " + std::to_string(c.devices) + " device(s)";
    for (int r = 0; r < 3; ++r) {
      const int s = st[static_cast<std::size_t>(r)];
      if (r == c.victim)
        EXPECT_TRUE(WIFSIGNALED(s) && WTERMSIG(s) == SIGKILL) << what << ": status " << s;
      else
        EXPECT_TRUE(WIFEXITED(s) && WEXITSTATUS(s) == 0) << what << ": rank " << r << " status " << s;
    }
    // The survivors' strategies end without waiting for the dead worker (no goodbye after a failure).
    EXPECT_LT(Clock::now() - start, 30s) << what;
  }
}

}  // namespace
}  // namespace chorus::distribute
