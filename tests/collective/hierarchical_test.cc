// The hierarchical composition, with P "processes" emulated in one process: P local
// shared-memory groups of k threads and one shared-memory group of the P local rank 0s standing
// in for the cross-process (MPI) group. Global rank g = p*k + r contributes x_g.
#include <gtest/gtest.h>

#include <cmath>

#include "analytic.h"
#include "group_harness.h"
#include <chorus/collective/hierarchical.h>
#include <chorus/collective/shared_memory.h>
#include <chorus/core/error.h>

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

// 16-bit all-reduce rounds twice in the hierarchy (the local reduce to 16 bits, then the cross
// all-reduce): the bound of distribute/communication_options.h with k = 3 roundings counting the
// inputs' own (here the inputs g are float32 values, rounded to 16 bits on the way in), i.e.
// |result − Σg| ≤ ((1 + u)^3 − 1 + 2·n·2^-24)·Σ|g|; and some elements differ from one rounding of
// the float32 sum of the 16-bit inputs (what a flat shared-memory group returns): the second
// rounding is real, which is why the bound needs k = 3.
TEST(HierarchicalTest, SixteenBitAllReduceWithinTheTwoLevelBound) {
  for (auto [P, k] : {std::pair{2, 2}, std::pair{3, 2}})
    for (DType dt : {DType::kFloat16, DType::kBFloat16})
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean}) {
        auto comms = make_emulated(P, k);
        const int n = P * k;
        const std::int64_t m = 4001;
        auto g = [](int r, std::int64_t i) {  // float32 values, 2^-6 .. 2^7, both signs
          std::uint64_t h =
              static_cast<std::uint64_t>(i) * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(r) * 77777;
          h ^= h >> 31;
          h *= 0xBF58476D1CE4E5B9ull;
          h ^= h >> 29;
          const float mant = 1.0f + static_cast<float>(h % 65521) / 65521.0f;
          return ((h >> 40) & 1 ? -1.0f : 1.0f) * std::ldexp(mant, static_cast<int>((h >> 20) % 14) - 6);
        };
        std::vector<Tensor> out(n);
        testing::rethrow_first(testing::run_ranks(comms, [&](int r, Communicator& c) {
          std::vector<float> v(m);
          for (std::int64_t i = 0; i < m; ++i) v[i] = g(r, i);
          std::vector<std::uint16_t> bits(m);
          convert(v.data(), DType::kFloat32, bits.data(), dt, bits.size());
          out[r] = Tensor::from_host(bits.data(), {m}, dt, "/cpu:" + std::to_string(r));
          c.all_reduce(out[r], out[r], {.op = op})->wait();
        }));
        const double u = std::ldexp(1.0, dt == DType::kFloat16 ? -11 : -8);
        const double bound3 = std::pow(1 + u, 3) - 1 + 2.0 * n * std::ldexp(1.0, -24);
        int differ_from_one_rounding = 0;
        for (int r = 0; r < n; ++r) {
          const auto got = out[r].to_vector<double>();
          for (std::int64_t i = 0; i < m; ++i) {
            double sum = 0, abs_sum = 0;
            for (int q = 0; q < n; ++q) sum += g(q, i), abs_sum += std::abs(g(q, i));
            const double scale = op == ReduceOp::kMean ? 1.0 / n : 1.0;
            const double err = std::abs(got[i] - sum * scale);
            ASSERT_LE(err, bound3 * abs_sum * scale) << "P=" << P << " k=" << k << " " << dtype_name(dt) << " "
                                                     << reduce_op_name(op) << " rank " << r << " i=" << i;
            float f32 = 0;  // the flat reduction: float32 sum of the 16-bit inputs, rounded once
            for (int q = 0; q < n; ++q) {
              const float in = g(q, i);
              std::uint16_t b;
              float wide;
              convert(&in, DType::kFloat32, &b, dt, 1);
              convert(&b, dt, &wide, DType::kFloat32, 1);
              f32 += wide;
            }
            if (op == ReduceOp::kMean) f32 /= static_cast<float>(n);
            std::uint16_t once;
            float once_wide;
            convert(&f32, DType::kFloat32, &once, dt, 1);
            convert(&once, dt, &once_wide, DType::kFloat32, 1);
            differ_from_one_rounding += got[i] != static_cast<double>(once_wide) ? 1 : 0;
          }
        }
        EXPECT_GT(differ_from_one_rounding, 0) << "P=" << P << " " << dtype_name(dt) << " " << reduce_op_name(op);
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
