// The rendezvous without MPI, end to end: 2 and 3 forked processes, each with an environment that
// holds nothing but what a launcher sets — torchrun's MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE, or
// TF_CONFIG alone — find each other through ClusterResolver::from_environment() and
// store_rendezvous() (rank 0 serves the TCP store on MASTER_PORT, or on the chief's port of
// TF_CONFIG), build a Gloo communicator on the rendezvous's store and check all_reduce and
// all_gather results. Then the hostile end: a worker that never comes is named by the others.
// A child exits 0 when its checks passed, 1 when one failed, 2 when it threw.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "gloo_cases.h"
#include <chorus/collective/gloo/gloo.h>
#include <chorus/collective/store/store_rendezvous.h>
#include <chorus/collective/store/tcp_store.h>
#include <chorus/distribute/cluster_resolver.h>

namespace chorus::collective {
namespace {

using gloo_cases::contains;
using gloo_cases::kTimeout;
using Env = std::vector<std::pair<std::string, std::string>>;
using namespace std::chrono_literals;

// In the child: the whole environment replaced by `env`; then the launcher-free path of a worker.
// Returns the exit code (see the header comment).
int worker(const Env& env, int expected_rank, int k) {
  ::clearenv();
  for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
  try {
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
    return ::testing::Test::HasFailure() ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d threw: %s\n", expected_rank, e.what());
    return 2;
  }
}

// Forks one worker per environment (worker r gets envs[r] and must end up rank r); each child's
// wait status.
std::vector<int> run_workers(const std::vector<Env>& envs) {
  std::fflush(nullptr);
  std::vector<pid_t> children;
  const int k = static_cast<int>(envs.size());
  for (int r = 0; r < k; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int code = worker(envs[static_cast<std::size_t>(r)], r, k);
      std::fflush(nullptr);
      ::_exit(code);
    }
    children.push_back(pid);
  }
  std::vector<int> statuses;
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    statuses.push_back(status);
  }
  return statuses;
}

void expect_all_passed(const std::vector<int>& statuses, const std::string& what) {
  for (std::size_t r = 0; r < statuses.size(); ++r)
    EXPECT_TRUE(WIFEXITED(statuses[r]) && WEXITSTATUS(statuses[r]) == 0)
        << what << ": rank " << r << " status " << statuses[r];
}

// A port free now (its server's thread is joined before any fork).
int free_port() { return TcpStoreServer(0, "127.0.0.1").port(); }

std::vector<Env> torchrun_envs(int k, int port) {
  std::vector<Env> envs;
  for (int r = 0; r < k; ++r)
    envs.push_back({{"MASTER_ADDR", "127.0.0.1"},
                    {"MASTER_PORT", std::to_string(port)},
                    {"RANK", std::to_string(r)},
                    {"WORLD_SIZE", std::to_string(k)}});
  return envs;
}

// With `chief`: {"chief": [127.0.0.1:port], "worker": [the others]}, TF's numbering (the chief is
// worker 0, task worker:i is worker i + 1); without: {"worker": [all k]}, worker 0 serving the
// store. Addresses other than the store's are labels only (Gloo binds its own ports).
std::vector<Env> tf_config_envs(int k, int port, bool chief) {
  std::vector<std::string> addresses;
  for (int r = 0; r < k; ++r) addresses.push_back("\"127.0.0.1:" + std::to_string(port + r) + "\"");
  auto list = [&](int from, int to) {
    std::string s;
    for (int r = from; r < to; ++r) s += (s.empty() ? "" : ",") + addresses[static_cast<std::size_t>(r)];
    return "[" + s + "]";
  };
  const std::string cluster =
      chief ? "{\"chief\":" + list(0, 1) + ",\"worker\":" + list(1, k) + "}" : "{\"worker\":" + list(0, k) + "}";
  std::vector<Env> envs;
  for (int r = 0; r < k; ++r) {
    const bool is_chief = chief && r == 0;
    const std::string task = is_chief ? R"({"type":"chief","index":0})"
                                      : R"({"type":"worker","index":)" + std::to_string(chief ? r - 1 : r) + "}";
    envs.push_back({{"TF_CONFIG", "{\"cluster\":" + cluster + ",\"task\":" + task + "}"}});
  }
  return envs;
}

TEST(GlooRendezvousTest, TorchrunVariablesOnly) {
  for (int k : {2, 3}) expect_all_passed(run_workers(torchrun_envs(k, free_port())), "torchrun np" + std::to_string(k));
}

TEST(GlooRendezvousTest, TfConfigOnly) {
  for (int k : {2, 3})
    for (bool chief : {false, true})
      expect_all_passed(run_workers(tf_config_envs(k, free_port(), chief)),
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
  std::fflush(nullptr);
  std::vector<pid_t> children;
  for (std::size_t r = 0; r < envs.size(); ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::clearenv();
      for (const auto& [name, value] : envs[r]) ::setenv(name.c_str(), value.c_str(), 1);
      const auto timeout = r == 0 ? 3000ms : 1500ms;
      const auto start = std::chrono::steady_clock::now();
      const std::string m = chorus::testing::message_of<DeadlineExceededError>([&] {
        store_rendezvous(
            distribute::store_rendezvous_options(distribute::ClusterResolver::from_environment(), timeout));
      });
      EXPECT_LT(std::chrono::steady_clock::now() - start, 2500ms);
      EXPECT_TRUE(contains(m, "rank 2 (127.0.0.1:" + std::to_string(port + 2) + ") did not arrive within 1500 ms"))
          << m;
      EXPECT_FALSE(contains(m, "rank 1 (")) << m;
      std::fflush(nullptr);
      ::_exit(::testing::Test::HasFailure() ? 1 : 0);
    }
    children.push_back(pid);
  }
  std::vector<int> statuses;
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    statuses.push_back(status);
  }
  expect_all_passed(statuses, "the two that came");
}

}  // namespace
}  // namespace chorus::collective
