// The rendezvous without MPI, end to end: 2 and 3 forked processes, each with an environment that
// holds nothing but what a launcher sets — torchrun's MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE, or
// TF_CONFIG alone — find each other through ClusterResolver::from_environment() and
// store_rendezvous() (rank 0 serves the TCP store on MASTER_PORT, or on the chief's port of
// TF_CONFIG), build a Gloo communicator on the rendezvous's store and check all_reduce and
// all_gather results. Then the hostile end: a worker that never comes is named by the others.
// A child exits 0 when its checks passed, 1 when one failed, 2 when it threw (fork_workers.h).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "gloo_cases.h"
#include "tests/collective/fork_workers.h"
#include <chorus/collective/gloo/gloo.h>
#include <chorus/collective/store/store_rendezvous.h>
#include <chorus/collective/store/tcp_store.h>
#include <chorus/distribute/cluster_resolver.h>

namespace chorus::collective {
namespace {

using chorus::testing::Env;
using chorus::testing::expect_all_exited_zero;
using chorus::testing::fork_workers;
using chorus::testing::free_port;
using chorus::testing::replace_environment;
using chorus::testing::tf_config_envs;
using chorus::testing::torchrun_envs;
using gloo_cases::contains;
using gloo_cases::kTimeout;
using namespace std::chrono_literals;

// In the child: the whole environment replaced by `env`; then the launcher-free path of a worker.
void worker(const Env& env, int expected_rank, int k) {
  replace_environment(env);
  {
    const auto resolver = distribute::ClusterResolver::from_environment();
    EXPECT_EQ(resolver.worker_index(), expected_rank) << resolver.to_string();
    EXPECT_EQ(resolver.num_workers(), k) << resolver.to_string();
    StoreRendezvous rdzv = store_rendezvous(distribute::store_rendezvous_options(resolver, 20s));
    EXPECT_EQ(rdzv.rank, expected_rank);
    EXPECT_EQ(rdzv.size, k);
    EXPECT_EQ(rdzv.server != nullptr, expected_rank == 0) << "rank 0 serves the store";
    {
      auto comm = make_gloo_communicator(*rdzv.store, rdzv.rank, rdzv.size,
                                         {.prefix = "gloo", .hostname = "127.0.0.1", .timeout = kTimeout});
      Tensor t = gloo_cases::input(rdzv.rank, 1000, DType::kFloat32, "/cpu:0");
      comm->all_reduce(t, t, {.timeout = kTimeout})->wait();
      const auto sum = t.to_vector<double>();
      for (std::int64_t i = 0; i < 1000; ++i) EXPECT_EQ(sum[i], expected(ReduceOp::kSum, k, i, DType::kFloat32));
      Tensor gathered = Tensor::zeros({k, 3}, DType::kInt64, "/cpu:0");
      comm->all_gather(Tensor::full({1, 3}, 10 * (rdzv.rank + 1), DType::kInt64, "/cpu:0"), gathered,
                       {.timeout = kTimeout})
          ->wait();
      const auto g = gathered.to_vector<std::int64_t>();
      for (int i = 0; i < 3 * k; ++i) EXPECT_EQ(g[i], 10 * (i / 3 + 1)) << "all_gather element " << i;
      comm->barrier({.timeout = kTimeout})->wait();  // nobody closes its connections under a peer
    }
    rdzv.leave(20s);  // rank 0 keeps serving until every worker said goodbye
  }
}

// Forks one worker per environment (worker r gets envs[r] and must end up rank r); each child's
// wait status.
std::vector<int> run_workers(const std::vector<Env>& envs) {
  const int k = static_cast<int>(envs.size());
  return fork_workers(k, [&](int r) { worker(envs[static_cast<std::size_t>(r)], r, k); });
}

TEST(GlooRendezvousTest, TorchrunVariablesOnly) {
  for (int k : {2, 3})
    expect_all_exited_zero(run_workers(torchrun_envs(k, free_port())), "torchrun np" + std::to_string(k));
}

TEST(GlooRendezvousTest, TfConfigOnly) {
  for (int k : {2, 3})
    for (bool chief : {false, true})
      expect_all_exited_zero(run_workers(tf_config_envs(k, free_port(), chief)),
                             "TF_CONFIG np" + std::to_string(k) + (chief ? " with a chief" : " workers only"));
}

// The last worker of 3 never starts: the two others' rendezvous ends after its timeout with a
// DeadlineExceededError naming rank 2 and, under TF_CONFIG, its address. Rank 1 gives up first
// (rank 0 keeps serving the store meanwhile, so what rank 1 sees is the timeout, not a closed
// store); rank 0 then reads the error rank 1 published and raises the same one, well before its own
// timeout.
TEST(GlooRendezvousHostileTest, AWorkerThatNeverComesIsNamed) {
  const int port = free_port();
  auto envs = tf_config_envs(3, port, false);
  envs.pop_back();
  const std::vector<int> statuses = fork_workers(2, [&](int r) {
    replace_environment(envs[static_cast<std::size_t>(r)]);
    const auto timeout = r == 0 ? 3000ms : 1500ms;
    const auto start = std::chrono::steady_clock::now();
    const std::string m = chorus::testing::message_of<DeadlineExceededError>([&] {
      store_rendezvous(distribute::store_rendezvous_options(distribute::ClusterResolver::from_environment(), timeout));
    });
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2500ms);
    EXPECT_TRUE(contains(m, "rank 2 (127.0.0.1:" + std::to_string(port + 2) + ") did not arrive within 1500 ms")) << m;
    EXPECT_FALSE(contains(m, "rank 1 (")) << m;
  });
  expect_all_exited_zero(statuses, "the two that came");
}

}  // namespace
}  // namespace chorus::collective
