// NCCL over a store on real GPUs (collective/nccl/nccl_store.h): one rank per GPU, ranks as threads
// of this process each with its own store client (NCCL allows one communicator per thread and
// GPU). Skips without a GPU or NCCL; with one GPU, a communicator of one rank.
#include <chorus/collective/nccl/nccl_store.h>

#include <gtest/gtest.h>

#include <thread>

#include <chorus/collective/nccl/nccl.h>
#include <chorus/collective/store/tcp_store.h>
#include <chorus/core/error.h>
#include <chorus/core/gpu.h>
#include <chorus/core/tensor.h>

namespace chorus::collective {
namespace {

using namespace std::chrono_literals;

TEST(NcclStoreGpuTest, AllReduceAcrossRanksOfOneStore) {
  if (nccl_version().empty()) GTEST_SKIP() << "built without NCCL";
  if (gpu::device_count() == 0) GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason();
  const int k = std::min(gpu::device_count(), 4);
  TcpStoreServer server(0);
  std::vector<std::string> errors(static_cast<std::size_t>(k));
  std::vector<double> results(static_cast<std::size_t>(k));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < k; ++rank)
    threads.emplace_back([&, rank] {
      try {
        auto store = std::make_shared<TcpStore>("127.0.0.1", server.port(),
                                                TcpStoreOptions{.connect_timeout = 30s, .timeout = 30s});
        auto comm = make_nccl_communicator("/gpu:" + std::to_string(rank), store, rank, k, {.timeout = 60s});
        EXPECT_EQ(comm->backend(), "nccl_store");
        Tensor t = Tensor::from_vector<float>({static_cast<float>(rank + 1)}, {1}, "/gpu:" + std::to_string(rank));
        comm->all_reduce(t, t, {.timeout = 60s})->wait(60s);
        comm->barrier({.timeout = 60s})->wait(60s);
        results[static_cast<std::size_t>(rank)] = t.to_vector<double>()[0];
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(rank)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < k; ++rank) {
    EXPECT_EQ(errors[static_cast<std::size_t>(rank)], "");
    EXPECT_EQ(results[static_cast<std::size_t>(rank)], k * (k + 1) / 2.0);  // 1 + 2 + ... + k
  }
}

}  // namespace
}  // namespace chorus::collective
