// Analytic checks of the MPI backend, run by CTest as `mpirun -n 2` and `-n 3` (label mpi): rank r
// contributes x_r[i] = (r + 1) + (i % 7) (analytic.h), so every expected value has a closed form.
// Every process runs every test in the same order; each test creates its communicators first,
// unconditionally, so a rank that fails an assertion early still meets the others at the next
// test. Timeouts are short so that a bug fails in seconds, not at CTest's limit.
// main() initializes MPI (MpiEnvironment), and after the tests all ranks agree on the exit status:
// a failure on any rank makes every rank, and so mpirun, exit non-zero.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "analytic.h"
#include "tests/collective/mpi_test_main.h"
#include "tests/core/test_util.h"
#include <chorus/collective/hierarchical.h>
#include <chorus/collective/mpi/mpi.h>
#include <chorus/collective/shared_memory.h>
#include <chorus/core/error.h>
#include <chorus/core/tensor.h>

namespace chorus::collective {
namespace {

using chorus::testing::message_of;

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kTimeout{20000};  // for calls expected to succeed
const char* const kCpu = "/cpu:0";

std::unique_ptr<Communicator> make_comm(bool validate = true) {
  return make_mpi_communicator({.validate = validate, .timeout = kTimeout});
}

// x_r as a tensor of `dt` on this process's CPU device.
Tensor input(int r, std::int64_t n, DType dt) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[i] = x(r, i);
  std::vector<std::uint8_t> raw(v.size() * dtype_size(dt));
  convert(v.data(), DType::kFloat64, raw.data(), dt, v.size());
  return Tensor::from_host(raw.data(), {n}, dt, kCpu);
}

// Rank r's value at i, for the 16-bit tests: magnitudes from 2^-6 to 2^6 with both signs, most
// of them not representable in 16 bits (so a float32 sum of their 16-bit roundings is inexact).
float noisy(int r, std::int64_t i) {
  const std::uint32_t h = static_cast<std::uint32_t>(i * 2654435761u + static_cast<std::uint32_t>(r) * 40503u);
  const float mantissa = 1.0f + static_cast<float>(h % 100003) / 100003.0f;
  const int exponent = static_cast<int>((h >> 17) % 13) - 6;
  return ((h >> 11) & 1 ? -1.0f : 1.0f) * std::ldexp(mantissa, exponent);
}

// The message of the exception `fn` throws as E ("" and a test failure if it throws nothing or another type).

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(MpiTest, EnvironmentAndIdentity) {
  auto comm = make_comm();
  EXPECT_EQ(comm->backend(), "mpi");
  EXPECT_TRUE(MpiEnvironment::launched_by_mpirun());
  MpiEnvironment again;  // MPI is initialized by main(): this one neither initializes nor finalizes
  EXPECT_FALSE(again.owns_mpi());
  EXPECT_EQ(again.world_rank(), comm->rank());
  EXPECT_EQ(again.world_size(), comm->size());
  // main() asked for SERIALIZED. Open MPI provides what is asked, so MULTIPLE is then unavailable;
  // an MPI that provides more passes both checks.
  if (again.thread_level() == "MPI_THREAD_SERIALIZED") {
    const std::string m = message_of<UnavailableError>([] { MpiEnvironment multiple(MpiThreadLevel::kMultiple); });
    EXPECT_TRUE(contains(m, "MPI provides MPI_THREAD_SERIALIZED but MPI_THREAD_MULTIPLE is required")) << m;
  } else {
    EXPECT_EQ(again.thread_level(), "MPI_THREAD_MULTIPLE");
  }
  RecordProperty("mpi_cuda_aware", mpi_cuda_aware() ? "yes" : "no");  // false for Debian's Open MPI
}

TEST(MpiTest, AllReduceEveryOpDtypeAndSize) {
  auto comm = make_comm();
  const int k = comm->size();
  bool in_place = false;
  for (DType dt : kDtypes)
    for (std::int64_t n : {0, 1, 17, 1000})
      for (ReduceOp op : kOps) {
        in_place = !in_place;
        Tensor in = input(comm->rank(), n, dt);
        Tensor out = in_place ? in : Tensor::full({n}, -1.0, dt, kCpu);
        comm->all_reduce(in, out, {.op = op, .timeout = kTimeout})->wait();
        auto got = out.to_vector<double>();
        for (std::int64_t i = 0; i < n; ++i) {
          const double want = expected(op, k, i, dt);
          ASSERT_NEAR(got[i], want, tolerance(dt, want)) << dtype_name(dt) << " n=" << n << " op=" << reduce_op_name(op)
                                                         << " i=" << i << (in_place ? " in-place" : "");
        }
        if (!in_place && n > 0) {
          ASSERT_EQ(in.to_vector<double>()[n - 1], x(comm->rank(), n - 1)) << "input untouched";
        }
      }
}

TEST(MpiTest, AllReduceLargeOddSize) {
  auto comm = make_comm();
  const int k = comm->size();
  const std::int64_t n = (1 << 20) + 3;
  for (bool in_place : {true, false})
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean}) {
      Tensor in = input(comm->rank(), n, DType::kFloat32);
      Tensor out = in_place ? in : Tensor::zeros({n}, DType::kFloat32, kCpu);
      comm->all_reduce(in, out, {.op = op, .timeout = kTimeout})->wait();
      auto got = out.to_vector<float>();
      for (std::int64_t i = 0; i < n; i += 997) ASSERT_FLOAT_EQ(got[i], expected(op, k, i, DType::kFloat32)) << i;
      ASSERT_FLOAT_EQ(got[n - 1], expected(op, k, n - 1, DType::kFloat32));
    }
}

// 16-bit all_reduce travels as 16 bits (all-to-all, reduce, all-gather) and reduces in float32,
// rounding once: the result is bitwise fl16(((x_0 + x_1) + x_2) / k) summed in rank order in
// float32, for sizes not divisible by the number of ranks, fewer elements than ranks, in place or
// not, and every op.
TEST(MpiTest, AllReduce16BitRoundsOnceAfterAFloat32Sum) {
  auto comm = make_comm();
  const int k = comm->size();
  for (DType dt : {DType::kFloat16, DType::kBFloat16})
    for (std::int64_t n : {1, 2, 5, 4099, (1 << 18) + 1})
      for (ReduceOp op : kOps)
        for (bool in_place : {true, false}) {
          auto values = [&](int r) {
            std::vector<float> v(static_cast<std::size_t>(n));
            for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = noisy(r, i);
            return v;
          };
          std::vector<std::uint16_t> raw(static_cast<std::size_t>(n));
          convert(values(comm->rank()).data(), DType::kFloat32, raw.data(), dt, raw.size());
          Tensor in = Tensor::from_host(raw.data(), {n}, dt, kCpu);
          Tensor out = in_place ? in : Tensor::full({n}, -1.0, dt, kCpu);
          comm->all_reduce(in, out, {.op = op, .timeout = kTimeout})->wait();
          // The reference: every rank's 16-bit input widened to float32, combined in rank order.
          std::vector<float> acc(static_cast<std::size_t>(n));
          for (int r = 0; r < k; ++r) {
            std::vector<std::uint16_t> bits(static_cast<std::size_t>(n));
            std::vector<float> wide(static_cast<std::size_t>(n));
            convert(values(r).data(), DType::kFloat32, bits.data(), dt, bits.size());
            convert(bits.data(), dt, wide.data(), DType::kFloat32, wide.size());
            for (std::size_t i = 0; i < acc.size(); ++i) {
              float& a = acc[i];
              if (r == 0)
                a = wide[i];
              else if (op == ReduceOp::kSum || op == ReduceOp::kMean)
                a += wide[i];
              else if (op == ReduceOp::kProd)
                a *= wide[i];
              else if (op == ReduceOp::kMin)
                a = std::min(a, wide[i]);
              else
                a = std::max(a, wide[i]);
            }
          }
          if (op == ReduceOp::kMean)
            for (float& a : acc) a /= static_cast<float>(k);
          std::vector<std::uint16_t> want(acc.size()), got(acc.size());
          convert(acc.data(), DType::kFloat32, want.data(), dt, want.size());
          out.copy_to_host(got.data());
          for (std::size_t i = 0; i < got.size(); ++i)
            ASSERT_EQ(got[i], want[i]) << dtype_name(dt) << " n=" << n << " " << reduce_op_name(op) << " i=" << i
                                       << (in_place ? " in place" : "");
          if (!in_place) {
            std::vector<std::uint16_t> after(raw.size());
            in.copy_to_host(after.data());
            ASSERT_EQ(after, raw) << "input untouched";
          }
        }
}

TEST(MpiTest, BroadcastAndReduceFromEveryRoot) {
  auto comm = make_comm();
  const int k = comm->size(), me = comm->rank();
  for (DType dt : kDtypes)
    for (int root = 0; root < k; ++root) {
      Tensor b = input(me, 33, dt);
      comm->broadcast(b, {.root = root, .timeout = kTimeout})->wait();
      Tensor red = Tensor::full({33}, -1.0, dt, kCpu);
      comm->reduce(input(me, 33, dt), red, {.op = ReduceOp::kMax, .root = root, .timeout = kTimeout})->wait();
      Tensor mean = input(me, 33, dt);  // in place on the root
      comm->reduce(mean, mean, {.op = ReduceOp::kMean, .root = root, .timeout = kTimeout})->wait();
      auto got = b.to_vector<double>(), red_got = red.to_vector<double>(), mean_got = mean.to_vector<double>();
      for (int i = 0; i < 33; ++i) {
        ASSERT_EQ(got[i], x(root, i)) << dtype_name(dt) << " root " << root;
        ASSERT_EQ(red_got[i], me == root ? x(k - 1, i) : -1.0) << "reduce writes only the root";
        const double want = me == root ? expected(ReduceOp::kMean, k, i, dt) : x(me, i);
        ASSERT_NEAR(mean_got[i], want, tolerance(dt, want)) << dtype_name(dt) << " root " << root;
      }
    }
}

TEST(MpiTest, AllGatherAndReduceScatter) {
  auto comm = make_comm();
  const int k = comm->size(), me = comm->rank();
  const std::int64_t m = 5;
  for (DType dt : kDtypes) {
    Tensor gathered = Tensor::zeros({k * 2, 3}, dt, kCpu);
    comm->all_gather(Tensor::full({2, 3}, me + 1, dt, kCpu), gathered, {.timeout = kTimeout})->wait();
    auto g = gathered.to_vector<double>();
    for (std::int64_t i = 0; i < k * 6; ++i) ASSERT_EQ(g[i], i / 6 + 1) << dtype_name(dt);
    for (ReduceOp op : kOps) {
      Tensor scattered = Tensor::zeros({m}, dt, kCpu);
      comm->reduce_scatter(input(me, k * m, dt), scattered, {.op = op, .timeout = kTimeout})->wait();
      auto s = scattered.to_vector<double>();
      for (std::int64_t i = 0; i < m; ++i) {
        const double want = expected(op, k, me * m + i, dt);
        ASSERT_NEAR(s[i], want, tolerance(dt, want)) << dtype_name(dt) << " " << reduce_op_name(op) << " i=" << i;
      }
    }
  }
  Tensor empty_out = Tensor::zeros({0}, DType::kFloat32, kCpu);
  comm->all_gather(Tensor::zeros({0}, DType::kFloat32, kCpu), empty_out, {.timeout = kTimeout})->wait();
  comm->reduce_scatter(Tensor::zeros({0}, DType::kInt64, kCpu), Tensor::zeros({0}, DType::kInt64, kCpu),
                       {.timeout = kTimeout})
      ->wait();
  for (int i = 0; i < 5; ++i) comm->barrier({.timeout = kTimeout})->wait();
}

TEST(MpiTest, SeesDataStillQueuedOnTheDeviceStream) {
  auto comm = make_comm();
  const int k = comm->size();
  for (int step = 0; step < 20; ++step) {
    Tensor t = Tensor::full({4096}, comm->rank() + step, DType::kFloat32, kCpu);  // asynchronous fill
    auto work = comm->all_reduce(t, t, {.timeout = kTimeout});
    EXPECT_TRUE(work->is_completed());
    EXPECT_EQ(work->description(), "all_reduce #" + std::to_string(step) + " float32(4096,) op=sum");
    ASSERT_EQ(t.to_vector<float>()[4095], static_cast<float>(k * step + k * (k - 1) / 2));
  }
}

TEST(MpiTest, ValidationOffStillComputes) {
  auto comm = make_comm(/*validate=*/false);
  const int k = comm->size(), me = comm->rank();
  for (DType dt : kDtypes) {
    Tensor t = input(me, 100, dt);
    comm->all_reduce(t, t, {.op = ReduceOp::kMean, .timeout = kTimeout})->wait();
    Tensor b = input(me, 10, dt);
    comm->broadcast(b, {.root = k - 1, .timeout = kTimeout})->wait();
    Tensor s = Tensor::zeros({3}, dt, kCpu);
    comm->reduce_scatter(input(me, 3 * k, dt), s, {.timeout = kTimeout})->wait();
    comm->barrier({.timeout = milliseconds::max()})->wait();  // "no deadline" must not overflow
    auto got = t.to_vector<double>(), bg = b.to_vector<double>(), sg = s.to_vector<double>();
    for (int i = 0; i < 100; ++i) {
      const double want = expected(ReduceOp::kMean, k, i, dt);
      ASSERT_NEAR(got[i], want, tolerance(dt, want)) << dtype_name(dt);
    }
    for (int i = 0; i < 10; ++i) ASSERT_EQ(bg[i], x(k - 1, i));
    for (int i = 0; i < 3; ++i) ASSERT_EQ(sg[i], expected(ReduceOp::kSum, k, me * 3 + i, dt));
  }
}

TEST(MpiTest, MismatchedCallsRaiseOnEveryRankAndTheCommunicatorRecovers) {
  auto comm = make_comm();
  const int k = comm->size(), me = comm->rank(), last = k - 1;
  if (k < 2) GTEST_SKIP() << "needs 2 processes";
  Tensor t = Tensor::zeros({me == last ? 5 : 4}, DType::kFloat32, kCpu);
  std::string m = message_of<InvalidArgumentError>([&] { comm->all_reduce(t, t, {.timeout = kTimeout}); });
  EXPECT_TRUE(contains(m, "rank 0 called all_reduce #0 float32(4,) op=sum")) << m;
  EXPECT_TRUE(contains(m, "rank " + std::to_string(last) + " called all_reduce #0 float32(5,) op=sum")) << m;
  // Different collectives at the same step.
  Tensor u = Tensor::zeros({4}, DType::kFloat32, kCpu);
  m = message_of<InvalidArgumentError>([&] {
    if (me == 1)
      comm->broadcast(u, {.root = 0, .timeout = kTimeout});
    else
      comm->all_reduce(u, u, {.timeout = kTimeout});
  });
  EXPECT_TRUE(contains(m, "rank 1 called broadcast #1 float32(4,) root=0")) << m;
  // Everybody threw symmetrically: the next collectives work.
  comm->barrier({.timeout = kTimeout})->wait();
  Tensor v = Tensor::ones({4}, DType::kInt32, kCpu);
  comm->all_reduce(v, v, {.timeout = kTimeout})->wait();
  EXPECT_EQ(v.to_vector<int>()[3], k);
}

// Rank `last` skips a collective. The others time out naming it; the communicator is then unusable
// everywhere. Runs with validation on (timeout in the fingerprint exchange) and off (timeout in
// the data phase, the tensor's storage is kept alive for MPI).
void missing_rank_times_out(bool validate) {
  auto comm = make_comm(validate);
  const int k = comm->size(), me = comm->rank(), last = k - 1;
  if (k < 2) GTEST_SKIP() << "needs 2 processes";
  Tensor t = Tensor::ones({8}, DType::kFloat32, kCpu);
  comm->all_reduce(t, t, {.timeout = kTimeout})->wait();  // #0 completes everywhere
  if (me != last) {
    const auto start = Clock::now();
    const std::string m =
        message_of<DeadlineExceededError>([&] { comm->all_reduce(t, t, {.timeout = milliseconds(300)}); });
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
    EXPECT_TRUE(contains(m, "all_reduce #1 float32(8,) op=sum timed out")) << m;
    EXPECT_TRUE(contains(m, "rank(s) [" + std::to_string(last) + "] of " + std::to_string(k))) << m;
    EXPECT_TRUE(contains(m, "Last completed collectives on rank " + std::to_string(me) + ": all_reduce #0")) << m;
    const auto again = Clock::now();
    EXPECT_THROW(comm->barrier({.timeout = kTimeout}), AbortedError);
    EXPECT_LT(Clock::now() - again, std::chrono::seconds(1));
  }
  // A fresh communicator still works; creating it is the point where the late rank meets the others.
  auto fresh = make_comm();
  fresh->barrier({.timeout = kTimeout})->wait();
  if (me == last) {
    std::this_thread::sleep_for(milliseconds(100));  // the others' notices were sent before they got here
    const auto start = Clock::now();
    const std::string m = message_of<AbortedError>([&] { comm->all_reduce(t, t, {.timeout = kTimeout}); });
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));
    EXPECT_TRUE(contains(m, "unusable: rank ") && contains(m, " timed out after 3")) << m;  // whoever gave up first
  }
  Tensor v = Tensor::ones({3}, DType::kInt64, kCpu);
  fresh->all_reduce(v, v, {.timeout = kTimeout})->wait();
  EXPECT_EQ(v.to_vector<std::int64_t>()[2], k);
}

TEST(MpiTest, MissingRankTimesOutNamingItThenTheCommunicatorIsUnusable) { missing_rank_times_out(true); }
TEST(MpiTest, MissingRankTimesOutInTheDataPhaseWithoutValidation) { missing_rank_times_out(false); }

TEST(MpiTest, AbortWakesEveryoneWithTheReason) {
  auto comm = make_comm();
  const int k = comm->size(), me = comm->rank(), last = k - 1;
  if (k < 2) GTEST_SKIP() << "needs 2 processes";
  if (me == last) {
    std::this_thread::sleep_for(milliseconds(50));
    comm->abort("replica hit a NaN loss");
    EXPECT_THROW(comm->barrier({.timeout = kTimeout}), AbortedError);
    return;
  }
  const auto start = Clock::now();
  Tensor t = Tensor::zeros({8}, DType::kFloat32, kCpu);
  const std::string m = message_of<AbortedError>([&] { comm->all_reduce(t, t, {.timeout = kTimeout}); });
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(contains(m, "rank " + std::to_string(last) + " aborted the communicator: replica hit a NaN loss")) << m;
}

TEST(MpiTest, AbortFromAnotherThreadWakesTheLocalWaiter) {
  auto comm = make_comm();
  if (comm->size() < 2) GTEST_SKIP() << "needs 2 processes";
  if (comm->rank() != 0) return;  // nobody joins rank 0's barrier: only abort() ends it
  std::thread watchdog([&] {
    std::this_thread::sleep_for(milliseconds(100));
    comm->abort("watchdog: step took too long");
  });
  const auto start = Clock::now();
  const std::string m = message_of<AbortedError>([&] { comm->barrier({.timeout = kTimeout}); });
  watchdog.join();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(contains(m, "rank 0 aborted the communicator: watchdog: step took too long")) << m;
}

TEST(MpiTest, BadArgumentOnOneRankFailsItAndReleasesTheOthers) {
  auto comm = make_comm();
  const int k = comm->size(), me = comm->rank();
  if (k < 2) GTEST_SKIP() << "needs 2 processes";
  const auto start = Clock::now();
  Tensor in = Tensor::zeros({8}, DType::kFloat32, kCpu);
  Tensor out = Tensor::zeros({me == 1 ? 9 : 8}, DType::kFloat32, kCpu);
  if (me == 1) {
    EXPECT_THROW(comm->all_reduce(in, out, {.timeout = kTimeout}), InvalidArgumentError);
  } else {
    const std::string m = message_of<AbortedError>([&] { comm->all_reduce(in, out, {.timeout = kTimeout}); });
    EXPECT_TRUE(contains(m, "rank 1 aborted the communicator: all_reduce #0 float32(8,) op=sum had a bad argument"))
        << m;
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

TEST(MpiTest, HierarchicalWithMpiBetweenProcesses) {
  // Two replica threads per process (shared memory), MPI between the processes' local rank 0s:
  // global rank g = process * 2 + local rank contributes x_g.
  constexpr int k = 2;
  std::shared_ptr<Communicator> cross = make_comm();
  const int P = cross->size();
  const int p = cross->rank();
  auto local = make_shared_memory_group(k, "local");
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < k; ++r) comms.push_back(make_hierarchical(std::move(local[r]), r == 0 ? cross : nullptr, p, P));
  const int n = P * k;
  std::vector<Tensor> sum(k), bc(k), gathered(k);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(k);
  for (int r = 0; r < k; ++r)
    threads.emplace_back([&, r] {
      try {
        Communicator& c = *comms[r];
        const int g = c.rank();
        sum[r] = input(g, 37, DType::kFloat32);
        c.all_reduce(sum[r], sum[r], {.timeout = kTimeout})->wait();
        bc[r] = input(g, 37, DType::kFloat64);
        c.broadcast(bc[r], {.root = n - 1, .timeout = kTimeout})->wait();
        gathered[r] = Tensor::zeros({n * 3}, DType::kInt32, kCpu);
        c.all_gather(input(g, 3, DType::kInt32), gathered[r], {.timeout = kTimeout})->wait();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < k; ++r) {
    ASSERT_EQ(errors[r], "") << "local rank " << r;
    EXPECT_EQ(comms[r]->rank(), p * k + r);
    EXPECT_EQ(comms[r]->size(), n);
    auto s = sum[r].to_vector<double>(), b = bc[r].to_vector<double>(), gv = gathered[r].to_vector<double>();
    for (int i = 0; i < 37; ++i) {
      ASSERT_EQ(s[i], expected(ReduceOp::kSum, n, i, DType::kFloat32)) << "i=" << i;
      ASSERT_EQ(b[i], x(n - 1, i));
    }
    for (int i = 0; i < n * 3; ++i) ASSERT_EQ(gv[i], x(i / 3, i % 3));
  }
}

TEST(MpiTest, RejectsWhatItCannotDo) {
  // Every rank makes the same bad call, so each fails on its own; a fresh communicator per case.
  auto c1 = make_comm(), c2 = make_comm(), c3 = make_comm(), c4 = make_comm(), c5 = make_comm();
  const int k = c1->size();
  Tensor u8 = Tensor::zeros({4}, DType::kUInt8, kCpu);
  EXPECT_THROW(c1->all_reduce(u8, u8), InvalidArgumentError);
  Tensor f = Tensor::zeros({4}, DType::kFloat32, kCpu);
  EXPECT_THROW(c2->broadcast(f, {.root = k}), InvalidArgumentError);
  EXPECT_THROW(c3->all_gather(f, Tensor::zeros({4 * k + 1}, DType::kFloat32, kCpu)), InvalidArgumentError);
  EXPECT_THROW(
      c4->reduce_scatter(Tensor::zeros({k + 1}, DType::kFloat32, kCpu), Tensor::zeros({1}, DType::kFloat32, kCpu)),
      InvalidArgumentError);
  EXPECT_THROW(c5->all_reduce(Tensor(), f), InvalidArgumentError);
  // A failed communicator stays failed.
  EXPECT_THROW(c1->barrier({.timeout = kTimeout}), AbortedError);
}

}  // namespace
}  // namespace chorus::collective

int main(int argc, char** argv) { return chorus::testing::run_tests_under_mpi(argc, argv); }
