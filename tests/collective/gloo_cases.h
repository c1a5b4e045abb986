// The Gloo backend's test cases, run by gloo_test.cc (every rank a thread of one process, over
// TCP loopback and a TCP store served by the test) and by gloo_process_test.cc (every rank a forked
// process, over a FileStore or the parent's TCP store). Rank r contributes x_r[i] = (r + 1) +
// (i % 7) (analytic.h). Each case is called by every rank with its communicator and its CPU device
// ("/cpu:r" or "/cpu:0").
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "analytic.h"
#include "tests/core/test_util.h"
#include <chorus/collective/communicator.h>
#include <chorus/core/error.h>
#include <chorus/core/tensor.h>

namespace chorus::collective::gloo_cases {

using chorus::testing::message_of;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

inline constexpr milliseconds kTimeout{20000};  // for calls expected to succeed

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

inline Tensor input(int r, std::int64_t n, DType dt, const std::string& dev) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = x(r, i);
  std::vector<std::uint8_t> raw(v.size() * dtype_size(dt));
  convert(v.data(), DType::kFloat64, raw.data(), dt, v.size());
  return Tensor::from_host(raw.data(), {n}, dt, dev);
}

inline void all_reduce_every_op_dtype_and_size(Communicator& comm, const std::string& dev) {
  const int k = comm.size();
  bool in_place = false;
  for (DType dt : kDtypes)
    for (std::int64_t n : {0, 1, 17, 1000})
      for (ReduceOp op : kOps) {
        in_place = !in_place;
        Tensor in = input(comm.rank(), n, dt, dev);
        Tensor out = in_place ? in : Tensor::full({n}, -1.0, dt, dev);
        comm.all_reduce(in, out, {.op = op, .timeout = kTimeout})->wait();
        auto got = out.to_vector<double>();
        for (std::int64_t i = 0; i < n; ++i) {
          const double want = expected(op, k, i, dt);
          ASSERT_NEAR(got[i], want, tolerance(dt, want))
              << dtype_name(dt) << " n=" << n << " op=" << reduce_op_name(op) << " i=" << i;
        }
        if (!in_place && n > 0) {
          ASSERT_EQ(in.to_vector<double>()[n - 1], x(comm.rank(), n - 1)) << "input untouched";
        }
      }
  // Large and odd: several of Gloo's 1 MiB segments per rank, a remainder.
  const std::int64_t n = (1 << 19) + 3;
  Tensor big = input(comm.rank(), n, DType::kFloat32, dev);
  comm.all_reduce(big, big, {.op = ReduceOp::kMean, .timeout = kTimeout})->wait();
  auto got = big.to_vector<float>();
  for (std::int64_t i = 0; i < n; i += 997) ASSERT_FLOAT_EQ(got[i], expected(ReduceOp::kMean, k, i, DType::kFloat32));
  ASSERT_FLOAT_EQ(got[n - 1], expected(ReduceOp::kMean, k, n - 1, DType::kFloat32));
}

inline void broadcast_reduce_gather_scatter(Communicator& comm, const std::string& dev) {
  const int k = comm.size(), me = comm.rank();
  for (DType dt : kDtypes) {
    for (int root = 0; root < k; ++root) {
      Tensor b = input(me, 33, dt, dev);
      comm.broadcast(b, {.root = root, .timeout = kTimeout})->wait();
      Tensor red = Tensor::full({33}, -1.0, dt, dev);
      comm.reduce(input(me, 33, dt, dev), red, {.op = ReduceOp::kMax, .root = root, .timeout = kTimeout})->wait();
      Tensor mean = input(me, 33, dt, dev);  // in place on the root
      comm.reduce(mean, mean, {.op = ReduceOp::kMean, .root = root, .timeout = kTimeout})->wait();
      auto got = b.to_vector<double>(), red_got = red.to_vector<double>(), mean_got = mean.to_vector<double>();
      for (int i = 0; i < 33; ++i) {
        ASSERT_EQ(got[i], x(root, i)) << dtype_name(dt) << " root " << root;
        ASSERT_EQ(red_got[i], me == root ? x(k - 1, i) : -1.0) << "reduce writes only the root";
        const double want = me == root ? expected(ReduceOp::kMean, k, i, dt) : x(me, i);
        ASSERT_NEAR(mean_got[i], want, tolerance(dt, want)) << dtype_name(dt) << " root " << root;
      }
    }
    Tensor gathered = Tensor::zeros({k * 2, 3}, dt, dev);
    comm.all_gather(Tensor::full({2, 3}, me + 1, dt, dev), gathered, {.timeout = kTimeout})->wait();
    auto g = gathered.to_vector<double>();
    for (std::int64_t i = 0; i < k * 6; ++i) ASSERT_EQ(g[i], i / 6 + 1) << dtype_name(dt);
    const std::int64_t m = 5;
    for (ReduceOp op : kOps) {
      Tensor scattered = Tensor::zeros({m}, dt, dev);
      comm.reduce_scatter(input(me, k * m, dt, dev), scattered, {.op = op, .timeout = kTimeout})->wait();
      auto s = scattered.to_vector<double>();
      for (std::int64_t i = 0; i < m; ++i) {
        const double want = expected(op, k, me * m + i, dt);
        ASSERT_NEAR(s[i], want, tolerance(dt, want)) << dtype_name(dt) << " " << reduce_op_name(op) << " i=" << i;
      }
    }
  }
  Tensor empty_out = Tensor::zeros({0}, DType::kFloat32, dev);
  comm.all_gather(Tensor::zeros({0}, DType::kFloat32, dev), empty_out, {.timeout = kTimeout})->wait();
  for (int i = 0; i < 5; ++i) comm.barrier({.timeout = kTimeout})->wait();
  auto work = comm.barrier({.timeout = milliseconds::max()});  // "no deadline" must not overflow
  EXPECT_TRUE(work->is_completed());
}

// With validate=false: the same results without fingerprints.
inline void validation_off_still_computes(Communicator& comm, const std::string& dev) {
  const int k = comm.size(), me = comm.rank();
  for (DType dt : kDtypes) {
    Tensor t = input(me, 100, dt, dev);
    comm.all_reduce(t, t, {.op = ReduceOp::kMean, .timeout = kTimeout})->wait();
    Tensor b = input(me, 10, dt, dev);
    comm.broadcast(b, {.root = k - 1, .timeout = kTimeout})->wait();
    Tensor s = Tensor::zeros({3}, dt, dev);
    comm.reduce_scatter(input(me, 3 * k, dt, dev), s, {.timeout = kTimeout})->wait();
    comm.barrier({.timeout = kTimeout})->wait();
    auto got = t.to_vector<double>(), bg = b.to_vector<double>(), sg = s.to_vector<double>();
    for (int i = 0; i < 100; ++i) {
      const double want = expected(ReduceOp::kMean, k, i, dt);
      ASSERT_NEAR(got[i], want, tolerance(dt, want)) << dtype_name(dt);
    }
    for (int i = 0; i < 10; ++i) ASSERT_EQ(bg[i], x(k - 1, i));
    for (int i = 0; i < 3; ++i) ASSERT_EQ(sg[i], expected(ReduceOp::kSum, k, me * 3 + i, dt));
  }
}

inline void mismatch_raises_everywhere_and_recovers(Communicator& comm, const std::string& dev) {
  const int k = comm.size(), me = comm.rank(), last = k - 1;
  Tensor t = Tensor::zeros({me == last ? 5 : 4}, DType::kFloat32, dev);
  std::string m = message_of<InvalidArgumentError>([&] { comm.all_reduce(t, t, {.timeout = kTimeout}); });
  EXPECT_TRUE(contains(m, "rank 0 called all_reduce #0 float32(4,) op=sum")) << m;
  EXPECT_TRUE(contains(m, "rank " + std::to_string(last) + " called all_reduce #0 float32(5,) op=sum")) << m;
  Tensor u = Tensor::zeros({4}, DType::kFloat32, dev);
  m = message_of<InvalidArgumentError>([&] {
    if (me == 1)
      comm.broadcast(u, {.root = 0, .timeout = kTimeout});
    else
      comm.all_reduce(u, u, {.timeout = kTimeout});
  });
  EXPECT_TRUE(contains(m, "rank 1 called broadcast #1 float32(4,) root=0")) << m;
  comm.barrier({.timeout = kTimeout})->wait();
  Tensor v = Tensor::ones({4}, DType::kInt32, dev);
  comm.all_reduce(v, v, {.timeout = kTimeout})->wait();
  EXPECT_EQ(v.to_vector<int>()[3], k);
}

// Rank `last` skips all_reduce #1 and comes late to it. The others time out naming it; the late
// rank is told that the communicator is unusable.
inline void missing_rank_times_out(Communicator& comm, const std::string& dev) {
  const int k = comm.size(), me = comm.rank(), last = k - 1;
  Tensor t = Tensor::ones({8}, DType::kFloat32, dev);
  comm.all_reduce(t, t, {.timeout = kTimeout})->wait();  // #0 completes everywhere
  if (me != last) {
    const auto start = Clock::now();
    const std::string m =
        message_of<DeadlineExceededError>([&] { comm.all_reduce(t, t, {.timeout = milliseconds(300)}); });
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
    EXPECT_TRUE(contains(m, "all_reduce #1 float32(8,) op=sum on rank")) << m;
    EXPECT_TRUE(contains(m, "rank(s) [" + std::to_string(last) + "] of " + std::to_string(k))) << m;
    EXPECT_TRUE(contains(m, "rank " + std::to_string(last) + " (host ")) << m;
    const auto again = Clock::now();
    EXPECT_THROW(comm.barrier({.timeout = kTimeout}), AbortedError);
    EXPECT_LT(Clock::now() - again, std::chrono::seconds(1));
  } else {
    std::this_thread::sleep_for(milliseconds(1500));  // the others gave up at 300 ms
    const auto start = Clock::now();
    const std::string m = message_of<AbortedError>([&] { comm.all_reduce(t, t, {.timeout = kTimeout}); });
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
    EXPECT_TRUE(contains(m, "timed out after")) << m;
    EXPECT_TRUE(contains(m, "rank(s) [" + std::to_string(last) + "]")) << m;
  }
}

// validate=false: no fingerprints, so the timeout comes in Gloo's data phase; the rank that did not
// mark itself stalled in the store within the grace second is named. Still a DeadlineExceededError
// within the timeout plus the grace, and the late rank is refused.
inline void missing_rank_times_out_in_the_data_phase(Communicator& comm, const std::string& dev) {
  const int me = comm.rank(), last = comm.size() - 1;
  Tensor t = Tensor::ones({1024}, DType::kFloat32, dev);
  comm.all_reduce(t, t, {.timeout = kTimeout})->wait();
  if (me != last) {
    const auto start = Clock::now();
    const std::string m =
        message_of<DeadlineExceededError>([&] { comm.all_reduce(t, t, {.timeout = milliseconds(300)}); });
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
    EXPECT_TRUE(contains(m, "all_reduce #1 float32(1024,) op=sum on rank")) << m;
    EXPECT_TRUE(contains(m, "data phase") || contains(m, "timed out with rank")) << m;
    EXPECT_TRUE(contains(m, "rank(s) [" + std::to_string(last) + "] of " + std::to_string(comm.size()))) << m;
    EXPECT_TRUE(contains(m, "rank " + std::to_string(last) + " (host ")) << m;
  } else {
    std::this_thread::sleep_for(milliseconds(2000));  // after the others gave up (300 ms + the grace second)
    EXPECT_THROW(comm.all_reduce(t, t, {.timeout = kTimeout}), Error);
  }
}

inline void abort_wakes_everyone_with_the_reason(Communicator& comm, const std::string& dev) {
  const int k = comm.size(), me = comm.rank(), last = k - 1;
  if (me == last) {
    std::this_thread::sleep_for(milliseconds(50));
    comm.abort("replica hit a NaN loss");
    EXPECT_THROW(comm.barrier({.timeout = kTimeout}), AbortedError);
    return;
  }
  const auto start = Clock::now();
  Tensor t = Tensor::zeros({8}, DType::kFloat32, dev);
  const std::string m = message_of<AbortedError>([&] { comm.all_reduce(t, t, {.timeout = kTimeout}); });
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(contains(m, "rank " + std::to_string(last) + " aborted the communicator: replica hit a NaN loss")) << m;
}

// Nobody joins rank 0's barrier: only abort() from another thread ends it. The others keep their
// communicators alive meanwhile (a destroyed one closes its connections).
inline void abort_from_another_thread_wakes_the_local_waiter(Communicator& comm, const std::string&) {
  if (comm.rank() != 0) {
    std::this_thread::sleep_for(milliseconds(2000));
    return;
  }
  std::thread watchdog([&] {
    std::this_thread::sleep_for(milliseconds(100));
    comm.abort("watchdog: step took too long");
  });
  const auto start = Clock::now();
  const std::string m = message_of<AbortedError>([&] { comm.barrier({.timeout = kTimeout}); });
  watchdog.join();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
  EXPECT_TRUE(contains(m, "rank 0 aborted the communicator: watchdog: step took too long")) << m;
}

inline void bad_argument_on_one_rank_releases_the_others(Communicator& comm, const std::string& dev) {
  const int me = comm.rank();
  const auto start = Clock::now();
  Tensor in = Tensor::zeros({8}, DType::kFloat32, dev);
  Tensor out = Tensor::zeros({me == 1 ? 9 : 8}, DType::kFloat32, dev);
  if (me == 1) {
    EXPECT_THROW(comm.all_reduce(in, out, {.timeout = kTimeout}), InvalidArgumentError);
  } else {
    const std::string m = message_of<AbortedError>([&] { comm.all_reduce(in, out, {.timeout = kTimeout}); });
    EXPECT_TRUE(contains(m, "rank 1 aborted the communicator: all_reduce #0 float32(8,) op=sum had a bad argument"))
        << m;
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

}  // namespace chorus::collective::gloo_cases
