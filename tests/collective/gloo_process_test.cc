// The Gloo backend with every rank a process: each TEST forks 2 or 3 children that meet through a
// real store — a FileStore in a fresh temporary directory, or a TcpStore that the parent serves on
// 127.0.0.1 (collective/store/) — and run one of gloo_cases.h's cases over TCP loopback, then the
// hostile ones only processes have: a peer killed with SIGKILL. A child exits 0 when its case
// passed (its gtest failures are printed by the child), 1 when it failed, 2 when it threw.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "gloo_cases.h"
#include "tests/collective/fork_workers.h"
#include "tests/core/test_util.h"
#include <chorus/collective/gloo/gloo.h>
#include <chorus/collective/store/file_store.h>
#include <chorus/collective/store/tcp_store.h>

namespace chorus::collective {
namespace {

using gloo_cases::contains;
using gloo_cases::kTimeout;
using std::chrono::milliseconds;
using Case = std::function<void(Communicator&, const std::string&)>;

enum class StoreKind { kFile, kTcp };

// The store a child rank meets the others through: the directory's FileStore, or a client of the
// parent's TCP store on `port`.
std::unique_ptr<Store> child_store(StoreKind kind, const std::string& dir, int port) {
  if (kind == StoreKind::kFile) return std::make_unique<FileStore>(dir);
  return std::make_unique<TcpStore>("127.0.0.1", port, TcpStoreOptions{.connect_timeout = std::chrono::seconds(10)});
}

// Runs `fn` in k forked ranks over a store of `kind`; returns each child's wait status. The TCP
// store's server (a thread) starts after the forks, on a port found free before them: a child
// forked from a process with threads may only call async-signal-safe functions.
std::vector<int> run_processes(int k, const Case& fn, StoreKind kind = StoreKind::kFile, bool validate = true) {
  chorus::testing::TempDir dir;
  const int port = kind == StoreKind::kTcp ? chorus::testing::free_port() : 0;
  std::unique_ptr<TcpStoreServer> server;
  return chorus::testing::fork_workers(
      k,
      [&](int r) {
        auto store = child_store(kind, dir.path(), port);
        auto comm = make_gloo_communicator(
            *store, r, k, {.prefix = "job", .hostname = "127.0.0.1", .validate = validate, .timeout = kTimeout});
        fn(*comm, "/cpu:0");
      },
      [&] {
        if (kind == StoreKind::kTcp) server = std::make_unique<TcpStoreServer>(port, "127.0.0.1");
      });
}

void expect_all_passed(const std::vector<int>& statuses) { chorus::testing::expect_all_exited_zero(statuses); }

TEST(GlooProcessTest, AllReduceEveryOpDtypeAndSize) {
  for (int k : {2, 3}) expect_all_passed(run_processes(k, gloo_cases::all_reduce_every_op_dtype_and_size));
}
TEST(GlooProcessTest, AllReduceOverTheTcpStoreOfTheParent) {
  for (int k : {2, 3})
    expect_all_passed(run_processes(k, gloo_cases::all_reduce_every_op_dtype_and_size, StoreKind::kTcp));
}
TEST(GlooProcessTest, BroadcastReduceAllGatherReduceScatterBarrier) {
  for (int k : {2, 3}) expect_all_passed(run_processes(k, gloo_cases::broadcast_reduce_gather_scatter));
}
TEST(GlooProcessTest, ValidationOffStillComputes) {
  expect_all_passed(run_processes(3, gloo_cases::validation_off_still_computes, StoreKind::kFile, false));
}
TEST(GlooProcessTest, MismatchedCallsRaiseOnEveryRankAndTheCommunicatorRecovers) {
  for (int k : {2, 3}) expect_all_passed(run_processes(k, gloo_cases::mismatch_raises_everywhere_and_recovers));
}
TEST(GlooProcessHostileTest, MissingRankTimesOutNamingIt) {
  for (int k : {2, 3}) expect_all_passed(run_processes(k, gloo_cases::missing_rank_times_out));
}
TEST(GlooProcessHostileTest, AbortWakesEveryoneWithTheReason) {
  for (int k : {2, 3}) expect_all_passed(run_processes(k, gloo_cases::abort_wakes_everyone_with_the_reason));
}
TEST(GlooProcessHostileTest, AbortFromAnotherThreadWakesTheLocalWaiter) {
  expect_all_passed(run_processes(2, gloo_cases::abort_from_another_thread_wakes_the_local_waiter));
}

// The last rank dies (SIGKILL) after all_reduce #0, between collectives or inside #1's data phase
// (a large tensor); the others, with a 60 s timeout, raise UnavailableError naming it within
// seconds, and the communicator stays unusable.
void killed_peer(bool in_data_phase, StoreKind kind = StoreKind::kFile) {
  for (int k : {2, 3}) {
    const auto statuses = run_processes(
        k,
        [&](Communicator& comm, const std::string& dev) {
          const int last = comm.size() - 1;
          Tensor t = Tensor::ones({8}, DType::kFloat32, dev);
          comm.all_reduce(t, t, {.timeout = kTimeout})->wait();
          const std::int64_t n = in_data_phase ? std::int64_t{1} << 24 : 8;
          Tensor big = Tensor::ones({n}, DType::kFloat32, dev);
          if (comm.rank() == last) {
            if (in_data_phase) {
              std::thread([] {
                std::this_thread::sleep_for(milliseconds(5));
                ::raise(SIGKILL);
              }).detach();
              comm.all_reduce(big, big, {.timeout = kTimeout});
            }
            ::raise(SIGKILL);
          }
          const auto start = gloo_cases::Clock::now();
          const std::string m = chorus::testing::message_of<UnavailableError>(
              [&] { comm.all_reduce(big, big, {.timeout = milliseconds(60000)}); });
          EXPECT_LT(gloo_cases::Clock::now() - start, std::chrono::seconds(10));
          EXPECT_TRUE(contains(m, "all_reduce #1 float32(")) << m;
          EXPECT_TRUE(contains(m, "a peer process is lost")) << m;
          EXPECT_TRUE(contains(m, "rank " + std::to_string(last) + " (host ")) << m;
          EXPECT_TRUE(contains(m, "[127.0.0.1]:")) << m;
          for (int r = 0; r < last; ++r)  // the survivors are not taken for dead
            EXPECT_FALSE(contains(m, "lost: rank " + std::to_string(r) + " (host") ||
                         contains(m, "; rank " + std::to_string(r) + " (host"))
                << m;
          EXPECT_THROW(comm.barrier({.timeout = kTimeout}), UnavailableError);
        },
        kind);
    ASSERT_EQ(statuses.size(), static_cast<std::size_t>(k));
    for (int r = 0; r + 1 < k; ++r)
      EXPECT_TRUE(WIFEXITED(statuses[r]) && WEXITSTATUS(statuses[r]) == 0) << "rank " << r << " of " << k;
    EXPECT_TRUE(WIFSIGNALED(statuses[k - 1]) && WTERMSIG(statuses[k - 1]) == SIGKILL) << "the killed rank";
  }
}
TEST(GlooProcessHostileTest, KilledPeerBetweenCollectivesIsNamedWithinSeconds) { killed_peer(false); }
TEST(GlooProcessHostileTest, KilledPeerInTheDataPhaseIsNamedWithinSeconds) { killed_peer(true); }
TEST(GlooProcessHostileTest, KilledPeerOverTheTcpStoreIsNamedWithinSeconds) { killed_peer(false, StoreKind::kTcp); }
TEST(GlooProcessHostileTest, KilledPeerInTheDataPhaseOverTheTcpStoreIsNamedWithinSeconds) {
  killed_peer(true, StoreKind::kTcp);
}

}  // namespace
}  // namespace chorus::collective
