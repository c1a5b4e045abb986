// NCCL's bootstrap over a store, host side (collective/nccl/nccl_side.h, nccl_store.h): the store
// side channel between threads (all-gather, broadcast, barrier, abort notices, a rank that never
// comes, a block of the wrong size), the GPU-claim exchange and check, and make_nccl_communicator
// over a store on a machine without a GPU. No GPU, NCCL or MPI needed.
#include <chorus/collective/nccl/nccl_side.h>

#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "tests/core/test_util.h"
#include <chorus/collective/nccl/nccl.h>
#include <chorus/collective/nccl/nccl_store.h>
#include <chorus/collective/store/prefix_store.h>
#include <chorus/collective/store/tcp_store.h>
#include <chorus/core/error.h>
#include <chorus/core/gpu.h>

namespace chorus::collective {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Runs fn(rank, side) for ranks 0..size-1 in threads, each with its own client of one TCP store.
// Returns each rank's error message ("" when it returned).
std::vector<std::string> run_ranks(int size, const std::function<void(int, NcclSide&)>& fn,
                                   const std::vector<int>& ranks_present = {}) {
  TcpStoreServer server(0);
  std::vector<int> ranks = ranks_present;
  if (ranks.empty())
    for (int r = 0; r < size; ++r) ranks.push_back(r);
  std::vector<std::string> errors(ranks.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < ranks.size(); ++i)
    threads.emplace_back([&, i] {
      auto store =
          std::make_shared<TcpStore>("127.0.0.1", server.port(), TcpStoreOptions{.connect_timeout = 5s, .timeout = 5s});
      auto side = make_store_side(std::make_shared<PrefixStore>("job", store), ranks[i], size);
      try {
        fn(ranks[i], *side);
      } catch (const Error& e) {
        errors[i] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

TEST(NcclStoreSideTest, AllGatherBroadcastAndBarrierAgreeOnEveryRank) {
  const auto errors = run_ranks(3, [](int rank, NcclSide& side) {
    EXPECT_EQ(side.backend(), "nccl_store");
    for (int round = 0; round < 3; ++round) {
      const auto all = side.all_gather({rank * 10 + round, -rank}, "test", 5s);
      ASSERT_EQ(all.size(), 6u);
      for (int r = 0; r < 3; ++r) {
        EXPECT_EQ(all[static_cast<std::size_t>(2 * r)], r * 10 + round);
        EXPECT_EQ(all[static_cast<std::size_t>(2 * r + 1)], -r);
      }
      std::vector<std::int64_t> words = {rank == 0 ? 42 : 0, rank == 0 ? round : -1};
      side.broadcast(words, 5s);
      EXPECT_EQ(words, (std::vector<std::int64_t>{42, round}));
      side.barrier(5s);
    }
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

TEST(NcclStoreSideTest, ClaimsOnOneGpuAreRefusedOnEveryRankNamingBoth) {
  const auto errors = run_ranks(3, [](int rank, NcclSide& side) {
    const GpuClaim mine{.rank = rank,
                        .host = "node7",
                        .pci_bus_id = rank == 2 ? "0000:19:00.0" : std::string("0000:") + char('a' + rank) + "0:00.0",
                        .device = "/gpu:0"};
    GpuClaim shared = mine;
    if (rank == 0) shared.pci_bus_id = "0000:19:00.0";  // ranks 0 and 2 on one GPU
    const auto claims = exchange_gpu_claims(side, shared, 5s);
    ASSERT_EQ(claims.size(), 3u);
    EXPECT_EQ(claims[1].pci_bus_id, "0000:b0:00.0");
    EXPECT_EQ(claims[1].host, "node7");
    EXPECT_EQ(claims[1].rank, 1);
    check_distinct_gpus(claims, side.how_to_choose_gpus());
  });
  for (const auto& e : errors) {
    EXPECT_TRUE(contains(e, "ranks 0 and 2 both use GPU 0000:19:00.0 on host node7")) << e;
    EXPECT_TRUE(contains(e, "LOCAL_RANK")) << e;
  }
}

TEST(NcclStoreSideTest, AnAbortNoticeReleasesTheWaitingRanksAtOnce) {
  const auto start = Clock::now();
  const auto errors = run_ranks(3, [](int rank, NcclSide& side) {
    if (rank == 1) {
      std::this_thread::sleep_for(100ms);
      side.abort("its GPU lookup failed");
      throw InvalidArgumentError("rank 1's own error");
    }
    side.all_gather({rank}, "gpu_claims", 20s);
  });
  EXPECT_LT(Clock::now() - start, 5s);
  for (int r : {0, 2}) {
    EXPECT_TRUE(contains(errors[static_cast<std::size_t>(r)], "ABORTED")) << errors[static_cast<std::size_t>(r)];
    EXPECT_TRUE(contains(errors[static_cast<std::size_t>(r)], "rank 1: its GPU lookup failed"))
        << errors[static_cast<std::size_t>(r)];
  }
}

TEST(NcclStoreSideTest, ARankThatNeverComesIsNamedAfterTheTimeout) {
  const auto start = Clock::now();
  const auto errors =
      run_ranks(3, [](int rank, NcclSide& side) { side.all_gather({rank}, "gpu_claims", 400ms); }, {0, 1});
  EXPECT_GE(Clock::now() - start, 350ms);
  EXPECT_LT(Clock::now() - start, 5s);
  for (const auto& e : errors) {
    EXPECT_TRUE(contains(e, "DEADLINE_EXCEEDED")) << e;
    EXPECT_TRUE(contains(e, "rank(s) [2] did not take part")) << e;
  }
  const auto bcast = run_ranks(2,
                               [](int, NcclSide& side) {
                                 std::vector<std::int64_t> w(16);
                                 side.broadcast(w, 300ms);
                               },
                               {1});
  EXPECT_TRUE(contains(bcast[0], "rank 0 did not send it")) << bcast[0];
}

TEST(NcclStoreSideTest, ABlockOfTheWrongSizeIsDataLossNamingTheRank) {
  const auto errors = run_ranks(2, [](int rank, NcclSide& side) {
    side.all_gather(std::vector<std::int64_t>(rank == 1 ? 3 : 2, 0), "outcomes", 5s);
  });
  EXPECT_TRUE(contains(errors[0], "DATA_LOSS") && contains(errors[0], "rank 1 sent 24 bytes")) << errors[0];
  EXPECT_TRUE(contains(errors[1], "rank 0 sent 16 bytes")) << errors[1];
}

TEST(NcclStoreTest, ArgumentsAndAMachineWithoutAGpu) {
  TcpStoreServer server(0);
  auto store =
      std::make_shared<TcpStore>("127.0.0.1", server.port(), TcpStoreOptions{.connect_timeout = 2s, .timeout = 2s});
  EXPECT_THROW(make_nccl_communicator("/gpu:0", store, 2, 2), InvalidArgumentError);
  EXPECT_THROW(make_nccl_communicator("/gpu:0", nullptr, 0, 1), InvalidArgumentError);
  if (nccl_version().empty()) {
    EXPECT_THROW_WITH(make_nccl_communicator("/gpu:0", store, 0, 1), UnavailableError, "built without NCCL");
    return;
  }
  if (gpu::device_count() > 0) GTEST_SKIP() << "this host has a GPU (nccl_store_gpu_test covers it)";
  const auto start = Clock::now();
  // Rank 0 of 2 fails its lookup and tells rank 1 (not there: the notice waits in the store).
  EXPECT_THROW_WITH(make_nccl_communicator("/gpu:0", store, 0, 2, {.timeout = 10s}), InvalidArgumentError,
                    "unknown device '/gpu:0'");
  EXPECT_LT(Clock::now() - start, 5s);
  EXPECT_TRUE(store->check({"nccl/abort"}));
  EXPECT_THROW_WITH(make_nccl_communicator("/gpu:0", store, 1, 2, {.timeout = 10s}), InvalidArgumentError,
                    "unknown device");
}

}  // namespace
}  // namespace chorus::collective
