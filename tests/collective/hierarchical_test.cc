// The hierarchical composition, with P "processes" emulated in one process: P local
// shared-memory groups of k threads and one shared-memory group of the P local rank 0s standing
// in for the cross-process (MPI) group. Global rank g = p*k + r contributes x_g.
#include <gtest/gtest.h>

#include "analytic.h"
#include "collective/hierarchical.h"
#include "collective/shared_memory.h"
#include "core/error.h"
#include "group_harness.h"

namespace chorus::collective {
namespace {

std::vector<std::unique_ptr<Communicator>> make_emulated(int processes, int k) {
  testing::use_cpu_devices(processes * k);
  auto cross = make_shared_memory_group(processes, "cross");
  std::vector<std::shared_ptr<Communicator>> leaders;
  for (auto& c : cross) leaders.push_back(std::move(c));
  std::vector<std::unique_ptr<Communicator>> out;
  for (int p = 0; p < processes; ++p) {
    auto local = make_shared_memory_group(k, "local" + std::to_string(p));
    for (int r = 0; r < k; ++r)
      out.push_back(make_hierarchical(std::move(local[r]), r == 0 ? leaders[p] : nullptr, p, processes));
  }
  return out;
}

TEST(HierarchicalTest, AllCollectivesMatchTheClosedForms) {
  for (auto [P, k] : {std::pair{1, 3}, std::pair{2, 2}, std::pair{3, 2}, std::pair{2, 3}}) {
    auto comms = make_emulated(P, k);
    const int n = P * k;
    for (DType dt : {DType::kFloat32, DType::kInt64, DType::kBFloat16})
      for (ReduceOp op : kOps) {
        if (op == ReduceOp::kMean && is_integer(dt)) continue;  // mean of means: see hierarchical.h
        std::vector<Tensor> ar(n), red(n), bc(n), ag(n), rs(n);
        const std::int64_t m = 6;
        const int root = n - 1;
        testing::rethrow_first(testing::run_ranks(comms, [&](int g, Communicator& c) {
          ASSERT_EQ(c.rank(), g);
          ASSERT_EQ(c.size(), n);
          const std::string dev = "/cpu:" + std::to_string(g);
          ar[g] = make_input(g, 37, dt);
          c.all_reduce(ar[g], ar[g], {.op = op})->wait();
          red[g] = Tensor::full({37}, -1, dt, dev);
          c.reduce(make_input(g, 37, dt), red[g], {.op = op, .root = root})->wait();
          bc[g] = make_input(g, 37, dt);
          c.broadcast(bc[g], {.root = root})->wait();
          ag[g] = Tensor::zeros({n * m}, dt, dev);
          c.all_gather(make_input(g, m, dt), ag[g])->wait();
          rs[g] = Tensor::zeros({m}, dt, dev);
          c.reduce_scatter(make_input(g, n * m, dt), rs[g], {.op = op})->wait();
          c.barrier()->wait();
        }));
        for (int g = 0; g < n; ++g) {
          auto a = ar[g].to_vector<double>(), rd = red[g].to_vector<double>(), b = bc[g].to_vector<double>(),
               gg = ag[g].to_vector<double>(), s = rs[g].to_vector<double>();
          for (int i = 0; i < 37; ++i) {
            const double want = expected(op, n, i, dt);
            ASSERT_NEAR(a[i], want, tolerance(dt, want)) << "P=" << P << " k=" << k << " " << dtype_name(dt) << " "
                                                         << reduce_op_name(op) << " rank " << g << " i=" << i;
            ASSERT_NEAR(rd[i], g == root ? want : -1.0, tolerance(dt, want));
            ASSERT_EQ(b[i], x(root, i));
          }
          for (std::int64_t i = 0; i < n * m; ++i) ASSERT_EQ(gg[i], x(static_cast<int>(i / m), i % m));
          for (std::int64_t i = 0; i < m; ++i) {
            const double want = expected(op, n, g * m + i, dt);
            ASSERT_NEAR(s[i], want, tolerance(dt, want)) << "reduce_scatter rank " << g;
          }
        }
      }
  }
}

TEST(HierarchicalTest, CrossFailureReleasesTheLocalRanks) {
  auto comms = make_emulated(2, 2);
  const auto start = std::chrono::steady_clock::now();
  auto errors = testing::run_ranks(comms, [&](int g, Communicator& c) {
    if (g == 2) return;  // process 1's leader never shows up
    Tensor t = Tensor::zeros({4}, DType::kFloat32, "/cpu:" + std::to_string(g));
    c.all_reduce(t, t, {.timeout = std::chrono::milliseconds(300)});
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_THROW(std::rethrow_exception(errors[0]), DeadlineExceededError);  // process 0's leader: cross timeout
  EXPECT_TRUE(errors[1]);  // released by the abort (or its own local timeout), never stuck
  EXPECT_TRUE(errors[3]);
}

TEST(HierarchicalTest, RejectsInconsistentWiring) {
  testing::use_cpu_devices(2);
  auto local = make_shared_memory_group(2);
  auto cross = make_shared_memory_group(2);
  std::shared_ptr<Communicator> c0(std::move(cross[0]));
  EXPECT_THROW(make_hierarchical(std::move(local[1]), c0, 0, 2), InvalidArgumentError);       // non-leader with cross
  EXPECT_THROW(make_hierarchical(std::move(local[0]), nullptr, 0, 2), InvalidArgumentError);  // leader without
}

}  // namespace
}  // namespace chorus::collective
