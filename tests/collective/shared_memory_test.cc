// Analytic checks of the in-process backends (shared memory and the reduction-to-one-device
// reference): rank r contributes x_r[i] = (r + 1) + (i % 7), so every expected value has a
// closed form. Every backend, dtype, op, participant count 1-5, sizes 0 to ~1M (odd ones too),
// in-place and out-of-place; then mismatch, timeout, abort and bad-argument propagation.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include "analytic.h"
#include "group_harness.h"
#include <chorus/collective/reference.h>
#include <chorus/collective/rendezvous.h>
#include <chorus/collective/shared_memory.h>
#include <chorus/core/error.h>
#include <chorus/core/tensor.h>

namespace chorus::collective {
namespace {

using testing::run_ranks;
using testing::use_cpu_devices;
using Factory = std::vector<std::unique_ptr<Communicator>> (*)(int, const std::string&);

class InProcessTest : public ::testing::TestWithParam<Factory> {};

// Every rank's output of an all_reduce of make_input(r, n, dt) with `op` over k ranks holds the
// analytic result (analytic.h); `how` is added to the failure message.
void expect_all_reduced(const std::vector<Tensor>& outs, ReduceOp op, int k, std::int64_t n, DType dt,
                        const std::string& how = "") {
  for (int r = 0; r < k; ++r) {
    auto got = outs[r].to_vector<double>();
    for (std::int64_t i = 0; i < n; ++i) {
      const double want = expected(op, k, i, dt);
      ASSERT_NEAR(got[i], want, tolerance(dt, want))
          << "k=" << k << " dtype=" << dtype_name(dt) << " n=" << n << " op=" << reduce_op_name(op) << " rank=" << r
          << " i=" << i << how;
    }
  }
}

TEST_P(InProcessTest, AllReduceEveryOpDtypeCountAndSize) {
  for (int k = 1; k <= 5; ++k) {
    use_cpu_devices(k);
    auto comms = GetParam()(k, "test");
    bool in_place = false;
    for (DType dt : kDtypes)
      for (std::int64_t n : {0, 1, 17, 1000})
        for (ReduceOp op : kOps) {
          in_place = !in_place;
          std::vector<Tensor> outs(k);
          auto errors = run_ranks(comms, [&](int r, Communicator& c) {
            Tensor in = make_input(r, n, dt);
            Tensor out = in_place ? in : Tensor::zeros({n}, dt, "/cpu:" + std::to_string(r));
            c.all_reduce(in, out, {.op = op})->wait();
            outs[r] = out;
          });
          testing::rethrow_first(errors);
          expect_all_reduced(outs, op, k, n, dt, in_place ? " in-place" : "");
        }
  }
}

TEST_P(InProcessTest, AllReduceLargeOddSize) {
  const std::int64_t n = (1 << 20) + 3;
  for (int k : {2, 3}) {
    use_cpu_devices(k);
    auto comms = GetParam()(k, "test");
    std::vector<Tensor> outs(k);
    testing::rethrow_first(run_ranks(comms, [&](int r, Communicator& c) {
      Tensor t = make_input(r, n, DType::kFloat32);
      c.all_reduce(t, t)->wait();
      outs[r] = t;
    }));
    for (int r = 0; r < k; ++r) {
      auto got = outs[r].to_vector<float>();
      for (std::int64_t i = 0; i < n; i += 9973) ASSERT_EQ(got[i], expected(ReduceOp::kSum, k, i, DType::kFloat32));
      ASSERT_EQ(got[n - 1], expected(ReduceOp::kSum, k, n - 1, DType::kFloat32));
    }
  }
}

// Sizes that span several work chunks (64 KiB at most) with a ragged last chunk and a
// tail shorter than one vector step, for every dtype, op and participant count: the chunked,
// vectorized path, where the small sizes above take only the first chunk.
TEST_P(InProcessTest, AllReduceSeveralChunksEveryOpDtypeAndCount) {
  const std::int64_t n = 3 * 16384 + 1029;
  for (int k = 2; k <= 5; ++k) {
    use_cpu_devices(k);
    auto comms = GetParam()(k, "test");
    bool in_place = false;
    for (DType dt : kDtypes)
      for (ReduceOp op : kOps) {
        in_place = !in_place;
        std::vector<Tensor> outs(k);
        testing::rethrow_first(run_ranks(comms, [&](int r, Communicator& c) {
          Tensor in = make_input(r, n, dt);
          Tensor out = in_place ? in : Tensor::zeros({n}, dt, "/cpu:" + std::to_string(r));
          c.all_reduce(in, out, {.op = op})->wait();
          outs[r] = out;
        }));
        for (int r = 0; r < k; ++r) {
          auto got = outs[r].to_vector<double>();
          for (std::int64_t i = 0; i < n; i += (i < 64 || i > n - 64) ? 1 : 61) {
            const double want = expected(op, k, i, dt);
            ASSERT_NEAR(got[i], want, tolerance(dt, want))
                << "k=" << k << " dtype=" << dtype_name(dt) << " op=" << reduce_op_name(op) << " rank=" << r
                << " i=" << i << (in_place ? " in-place" : "");
          }
        }
      }
  }
}

// Back-to-back collectives on fresh buffers, each rank freeing its tensors as soon as its call
// returns: a rank that leaves an all_reduce early (all chunks done) must not be written into or
// read from afterwards, while slower peers are still inside the same call. Sanitizer builds catch
// a use after free or a race; the values catch a chunk reduced from the wrong buffers.
TEST_P(InProcessTest, BackToBackCollectivesOnFreshBuffers) {
  for (int k : {2, 3, 5}) {
    use_cpu_devices(k);
    auto comms = GetParam()(k, "test");
    testing::rethrow_first(run_ranks(comms, [&](int r, Communicator& c) {
      const std::string dev = "/cpu:" + std::to_string(r);
      for (int step = 0; step < 60; ++step) {
        const std::int64_t n = step % 3 == 0 ? 40000 + step : 100 + step;
        Tensor t = Tensor::full({n}, static_cast<float>(r + step), DType::kFloat32, dev);
        c.all_reduce(t, t)->wait();
        const float want = static_cast<float>(k * step + k * (k - 1) / 2);
        auto got = t.to_vector<float>();
        for (std::int64_t i = 0; i < n; i += 997) ASSERT_EQ(got[i], want) << "k=" << k << " step=" << step;
        ASSERT_EQ(got[n - 1], want);
        if (step % 4 == 1) {
          Tensor g = Tensor::zeros({k * 8}, DType::kFloat32, dev);
          c.all_gather(Tensor::full({8}, static_cast<float>(r), DType::kFloat32, dev), g)->wait();
          auto v = g.to_vector<float>();
          for (int j = 0; j < k * 8; ++j) ASSERT_EQ(v[j], static_cast<float>(j / 8));
        }
      }
    }));
  }
}

// All-reduces of up to Rendezvous::kStagingBytes meet once, each rank reducing every rank's staged
// copy (up to kInlineBytes staged on the rank's arrival flag's cache line); one element more takes
// the chunked path. Both sides of both boundaries, every dtype and op.
TEST_P(InProcessTest, AllReduceAtTheStagingBoundaryEveryOpAndDtype) {
  for (int k : {2, 3, 4}) {
    use_cpu_devices(k);
    auto comms = GetParam()(k, "test");
    for (DType dt : kDtypes) {
      const auto at_boundary = static_cast<std::int64_t>(Rendezvous::kStagingBytes / dtype_size(dt));
      const auto inline_max = static_cast<std::int64_t>(Rendezvous::kInlineBytes / dtype_size(dt));
      for (std::int64_t n : {inline_max - 1, inline_max, inline_max + 1, at_boundary - 1, at_boundary, at_boundary + 1})
        for (ReduceOp op : kOps) {
          std::vector<Tensor> outs(k);
          testing::rethrow_first(run_ranks(comms, [&](int r, Communicator& c) {
            Tensor in = make_input(r, n, dt);
            c.all_reduce(in, in, {.op = op})->wait();
            outs[r] = in;
          }));
          expect_all_reduced(outs, op, k, n, dt, " (staging boundary)");
        }
    }
  }
}

// The staging buffers alternate between phases: a rank racing ahead into the next small all_reduce
// must never overwrite what a slow peer still reads. Ranks sleep at random points; between the
// small all_reduces come two-phase collectives (broadcast), barriers and a chunked all_reduce, so
// the phase parity at each small call varies.
TEST_P(InProcessTest, SmallAllReducesBackToBackWithStragglersAndOtherCollectivesBetween) {
  for (int k : {2, 3}) {
    use_cpu_devices(k);
    auto comms = GetParam()(k, "test");
    testing::rethrow_first(run_ranks(comms, [&](int r, Communicator& c) {
      const std::string dev = "/cpu:" + std::to_string(r);
      std::uint32_t seed = 12345u + static_cast<std::uint32_t>(r);
      for (int step = 0; step < 400; ++step) {
        seed = seed * 1664525u + 1013904223u;
        if ((seed >> 24) % 5 == 0) std::this_thread::sleep_for(std::chrono::microseconds((seed >> 8) % 200));
        const std::int64_t n = 1 + step % 37;
        Tensor t = Tensor::full({n}, static_cast<float>(r * 1000 + step), DType::kFloat32, dev);
        c.all_reduce(t, t)->wait();
        const float want = static_cast<float>(1000 * k * (k - 1) / 2 + k * step);
        const auto got = t.to_vector<float>();
        for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], want) << "k=" << k << " step=" << step;
        if (step % 7 == 3) {
          Tensor b = Tensor::full({5}, static_cast<float>(r + step), DType::kFloat32, dev);
          c.broadcast(b, {.root = step % k})->wait();
          ASSERT_EQ(b.to_vector<float>()[4], static_cast<float>(step % k + step));
        }
        if (step % 11 == 5) c.barrier()->wait();
        if (step % 13 == 8) {
          Tensor big = Tensor::full({5000}, 1.0f, DType::kFloat32, dev);
          c.all_reduce(big, big)->wait();
          ASSERT_EQ(big.to_vector<float>()[4999], static_cast<float>(k));
        }
      }
    }));
  }
}

TEST_P(InProcessTest, BroadcastAndReduceFromEveryRoot) {
  const int k = 4;
  use_cpu_devices(k);
  auto comms = GetParam()(k, "test");
  for (DType dt : kDtypes)
    for (int root = 0; root < k; ++root) {
      std::vector<Tensor> b(k), red(k);
      testing::rethrow_first(run_ranks(comms, [&](int r, Communicator& c) {
        b[r] = make_input(r, 33, dt);
        c.broadcast(b[r], {.root = root})->wait();
        Tensor in = make_input(r, 33, dt);
        red[r] = Tensor::full({33}, -1.0, dt, "/cpu:" + std::to_string(r));
        c.reduce(in, red[r], {.op = ReduceOp::kMax, .root = root})->wait();
      }));
      for (int r = 0; r < k; ++r) {
        auto got = b[r].to_vector<double>();
        auto red_got = red[r].to_vector<double>();
        for (int i = 0; i < 33; ++i) {
          ASSERT_EQ(got[i], x(root, i)) << dtype_name(dt) << " root " << root << " rank " << r;
          ASSERT_EQ(red_got[i], r == root ? x(k - 1, i) : -1.0) << "reduce writes only the root";
        }
      }
    }
}

TEST_P(InProcessTest, AllGatherAndReduceScatter) {
  for (int k = 1; k <= 5; ++k) {
    use_cpu_devices(k);
    auto comms = GetParam()(k, "test");
    const std::int64_t m = 5;
    std::vector<Tensor> gathered(k), scattered(k);
    testing::rethrow_first(run_ranks(comms, [&](int r, Communicator& c) {
      const std::string dev = "/cpu:" + std::to_string(r);
      Tensor in = Tensor::full({m}, r, DType::kInt32, dev);
      gathered[r] = Tensor::zeros({k * m}, DType::kInt32, dev);
      c.all_gather(in, gathered[r])->wait();
      Tensor big = make_input(r, k * m, DType::kFloat32);
      scattered[r] = Tensor::zeros({m}, DType::kFloat32, dev);
      c.reduce_scatter(big, scattered[r])->wait();
      c.barrier()->wait();
    }));
    for (int r = 0; r < k; ++r) {
      auto g = gathered[r].to_vector<int>();
      for (std::int64_t i = 0; i < k * m; ++i) ASSERT_EQ(g[i], i / m) << "k=" << k;
      auto s = scattered[r].to_vector<float>();
      for (std::int64_t i = 0; i < m; ++i) ASSERT_EQ(s[i], expected(ReduceOp::kSum, k, r * m + i, DType::kFloat32));
    }
  }
}

TEST_P(InProcessTest, SeesDataStillQueuedOnTheDeviceStream) {
  const int k = 3;
  use_cpu_devices(k);
  auto comms = GetParam()(k, "test");
  std::vector<Tensor> outs(k);
  testing::rethrow_first(run_ranks(comms, [&](int r, Communicator& c) {
    for (int step = 0; step < 20; ++step) {
      Tensor t = Tensor::full({4096}, r + step, DType::kFloat32, "/cpu:" + std::to_string(r));  // asynchronous fill
      c.all_reduce(t, t)->wait();
      outs[r] = t;
      ASSERT_EQ(t.to_vector<float>()[4095], static_cast<float>(3 * step + 3));
    }
  }));
}

TEST_P(InProcessTest, MismatchedCallsRaiseInEveryRankAndTheGroupRecovers) {
  const int k = 3;
  use_cpu_devices(k);
  auto comms = GetParam()(k, "test");
  auto errors = run_ranks(comms, [&](int r, Communicator& c) {
    Tensor t = Tensor::zeros({r == 2 ? 5 : 4}, DType::kFloat32, "/cpu:" + std::to_string(r));
    c.all_reduce(t, t, {.timeout = std::chrono::seconds(20)});
  });
  for (int r = 0; r < k; ++r) {
    ASSERT_TRUE(errors[r]) << "rank " << r << " did not throw";
    try {
      std::rethrow_exception(errors[r]);
    } catch (const InvalidArgumentError& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("rank 0 called all_reduce #0 float32(4,) op=sum"), std::string::npos) << m;
      EXPECT_NE(m.find("rank 2 called all_reduce #0 float32(5,) op=sum"), std::string::npos) << m;
    }
  }
  // Different collectives at the same step.
  errors = run_ranks(comms, [&](int r, Communicator& c) {
    Tensor t = Tensor::zeros({4}, DType::kFloat32, "/cpu:" + std::to_string(r));
    if (r == 1)
      c.broadcast(t, {.root = 0});
    else
      c.all_reduce(t, t);
  });
  for (int r = 0; r < k; ++r) EXPECT_TRUE(errors[r]);
  // Every rank names the same pair, in the same words.
  std::vector<std::string> messages(k);
  for (int r = 0; r < k; ++r) try {
      std::rethrow_exception(errors[r]);
    } catch (const InvalidArgumentError& e) {
      messages[r] = e.what();
    }
  EXPECT_NE(messages[0].find("rank 0 called all_reduce #1"), std::string::npos) << messages[0];
  EXPECT_NE(messages[0].find("rank 1 called broadcast #1"), std::string::npos) << messages[0];
  for (int r = 1; r < k; ++r) EXPECT_EQ(messages[r], messages[0]);
  // Everybody threw symmetrically: the next collective works.
  testing::rethrow_first(run_ranks(comms, [&](int r, Communicator& c) { c.barrier()->wait(); }));
}

TEST_P(InProcessTest, MissingRankTimesOutNamingItThenTheGroupIsUnusable) {
  const int k = 3;
  use_cpu_devices(k);
  auto comms = GetParam()(k, "test");
  auto errors = run_ranks(comms, [&](int r, Communicator& c) {
    Tensor t = Tensor::zeros({8}, DType::kFloat32, "/cpu:" + std::to_string(r));
    c.all_reduce(t, t)->wait();  // #0 completes everywhere
    if (r == 2) return;          // rank 2 skips #1
    c.all_reduce(t, t, {.timeout = std::chrono::milliseconds(300)});
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(errors[r]);
    try {
      std::rethrow_exception(errors[r]);
    } catch (const DeadlineExceededError& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("all_reduce #1"), std::string::npos) << m;
      EXPECT_NE(m.find("rank(s) [2] of 3"), std::string::npos) << m;
      EXPECT_NE(m.find("rank 2: all_reduce #0"), std::string::npos) << m;  // the last completed collectives
    }
  }
  EXPECT_FALSE(errors[2]);
  // The late rank does not wait for partners that are gone.
  Tensor t = Tensor::zeros({8}, DType::kFloat32, "/cpu:2");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(comms[2]->all_reduce(t, t), AbortedError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

// The message of a DeadlineExceededError held by `error`; a test failure (and "") for anything else.
std::string deadline_message(const std::exception_ptr& error) {
  if (!error) {
    ADD_FAILURE() << "no error, expected DeadlineExceededError";
    return "";
  }
  try {
    std::rethrow_exception(error);
  } catch (const DeadlineExceededError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected DeadlineExceededError, got: " << e.what();
  }
  return "";
}

TEST_P(InProcessTest, ATimeoutListsEachRanksLastThreeCollectivesOldestFirst) {
  const int k = 2;
  use_cpu_devices(k);
  auto comms = GetParam()(k, "test");
  auto errors = run_ranks(comms, [&](int r, Communicator& c) {
    Tensor t = Tensor::zeros({8}, DType::kFloat32, "/cpu:" + std::to_string(r));
    for (int i = 0; i < 5; ++i) c.all_reduce(t, t)->wait();  // #0 .. #4 complete everywhere
    if (r == 1) return;
    c.all_reduce(t, t, {.timeout = std::chrono::milliseconds(200)});
  });
  const std::string m = deadline_message(errors[0]);
  const std::size_t rank1 = m.find("rank 1: all_reduce #2");
  ASSERT_NE(rank1, std::string::npos) << m;
  const std::size_t three = m.find("all_reduce #3", rank1), four = m.find("all_reduce #4", rank1);
  EXPECT_NE(three, std::string::npos) << m;
  EXPECT_NE(four, std::string::npos) << m;
  EXPECT_LT(three, four) << m;
  EXPECT_EQ(m.find("all_reduce #1 "), std::string::npos) << m;  // older ones are not kept
  // The rank that timed out lists three as well, though its own #5 is posted and not completed.
  EXPECT_NE(m.find("rank 0: all_reduce #2"), std::string::npos) << m;
}

// Flight records (collective/flight_record.h): with CHORUS_FLIGHT_RECORD_DIR set, each rank that
// times out writes flight-<rank>.json, named by its error; unset, nothing is written.
TEST_P(InProcessTest, ATimeoutWritesAFlightRecordPerRankOnlyWhenAsked) {
  const int k = 3;
  use_cpu_devices(k);
  const std::string dir = ::testing::TempDir() + "chorus_flight_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  const auto run = [&] {
    auto comms = GetParam()(k, "flight");
    return run_ranks(comms, [&](int r, Communicator& c) {
      Tensor t = Tensor::zeros({8}, DType::kFloat32, "/cpu:" + std::to_string(r));
      for (int i = 0; i < 20; ++i) c.all_reduce(t, t)->wait();  // #0 .. #19 complete everywhere
      if (r == 2) return;                                       // rank 2 skips #20
      c.all_reduce(t, t, {.timeout = std::chrono::milliseconds(200)});
    });
  };
  // Off by default: no file.
  ::unsetenv("CHORUS_FLIGHT_RECORD_DIR");
  auto errors = run();
  EXPECT_EQ(deadline_message(errors[0]).find("Flight record"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir));

  ::setenv("CHORUS_FLIGHT_RECORD_DIR", dir.c_str(), 1);
  errors = run();
  ::unsetenv("CHORUS_FLIGHT_RECORD_DIR");
  EXPECT_FALSE(errors[2]);
  for (int r = 0; r < 2; ++r) {
    const std::string path = dir + "/flight-" + std::to_string(r) + ".json";
    const std::string m = deadline_message(errors[r]);
    EXPECT_NE(m.find("Flight record: " + path), std::string::npos) << m;
    std::ifstream in(path);
    ASSERT_TRUE(in) << path;
    const auto doc = nlohmann::json::parse(in);  // throws (and fails the test) unless valid JSON
    const auto& rec = doc.at("chorus_flight_record");
    EXPECT_EQ(rec.at("rank"), r);
    EXPECT_EQ(rec.at("size"), k);
    EXPECT_EQ(rec.at("trigger"), "timeout");
    EXPECT_EQ(rec.at("failing_call").at("call").get<std::string>().rfind("all_reduce #20 ", 0), 0u) << rec.dump();
    // Deeper than the message's three, oldest first: the ring's kRing - 1 = 15 entries below the
    // newest post hold #6..#19 and the posted, unfinished #20 (rank 2's: #5..#19).
    const auto& done = rec.at("completed");
    ASSERT_EQ(done.size(), 14u) << rec.dump();
    for (std::size_t i = 0; i < done.size(); ++i) EXPECT_EQ(done[i].at("sequence"), 6 + i) << rec.dump();
    EXPECT_EQ(rec.at("peers").at("2").size(), 15u) << rec.dump();
    EXPECT_EQ(rec.at("peers").at(std::to_string(1 - r)).size(), 14u) << rec.dump();
    EXPECT_TRUE(doc.at("traceEvents").is_array());
  }
  std::filesystem::remove_all(dir);
}

TEST_P(InProcessTest, ACallThatFailedValidationIsNotListedAsCompleted) {
  const int k = 2;
  use_cpu_devices(k);
  auto comms = GetParam()(k, "test");
  auto errors = run_ranks(comms, [&](int r, Communicator& c) {
    Tensor t = Tensor::zeros({8}, DType::kFloat32, "/cpu:" + std::to_string(r));
    c.all_reduce(t, t)->wait();  // #0
    try {
      if (r == 1)
        c.broadcast(t, {.root = 0});  // #1: differs from rank 0's, fails on both
      else
        c.all_reduce(t, t);
      ADD_FAILURE() << "rank " << r << ": the mismatched call did not throw";
    } catch (const InvalidArgumentError&) {
    }
    c.all_reduce(t, t)->wait();  // #2 completes everywhere
    if (r == 1) return;
    c.all_reduce(t, t, {.timeout = std::chrono::milliseconds(200)});
  });
  const std::string m = deadline_message(errors[0]);
  EXPECT_NE(m.find("rank 0: all_reduce #0 float32(8,) op=sum, all_reduce #2"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 1: all_reduce #0 float32(8,) op=sum, all_reduce #2"), std::string::npos) << m;
  EXPECT_EQ(m.find("#1"), std::string::npos) << m;
}

TEST_P(InProcessTest, ATimeoutOfMillisecondsMaxMeansNoDeadline) {
  // A waiter that sleeps with milliseconds::max() must not compute now() + timeout (an overflow
  // into the past, which timed out at once): the late rank arrives, both complete.
  const int k = 2;
  use_cpu_devices(k);
  auto comms = GetParam()(k, "test");
  const auto forever = std::chrono::milliseconds::max();
  testing::rethrow_first(run_ranks(comms, [&](int r, Communicator& c) {
    Tensor small = Tensor::full({4}, static_cast<float>(r + 1), DType::kFloat32, "/cpu:" + std::to_string(r));
    Tensor big = Tensor::full({5000}, 1.0f, DType::kFloat32, "/cpu:" + std::to_string(r));
    for (int i = 0; i < 2; ++i) {
      if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 0 sleeps on the condvar
      c.all_reduce(small, small, {.timeout = forever})->wait(forever);
      c.all_reduce(big, big, {.timeout = forever})->wait(forever);
      c.broadcast(small, {.root = 1, .timeout = forever})->wait(forever);
      c.barrier({.timeout = forever})->wait(forever);
    }
    EXPECT_EQ(big.to_vector<float>()[4999], 4.0f);
  }));
}

TEST_P(InProcessTest, TheDefaultTimeoutComesFromChorusCollectiveTimeout) {
  setenv("CHORUS_COLLECTIVE_TIMEOUT", "0.3", 1);  // seconds
  EXPECT_EQ(AllReduceOptions{}.timeout, std::chrono::milliseconds(300));
  EXPECT_EQ(BarrierOptions{}.timeout, std::chrono::milliseconds(300));
  const int k = 2;
  use_cpu_devices(k);
  auto comms = GetParam()(k, "test");
  const auto start = std::chrono::steady_clock::now();
  auto errors = run_ranks(comms, [&](int r, Communicator& c) {
    if (r == 1) return;  // never arrives
    Tensor t = Tensor::zeros({8}, DType::kFloat32, "/cpu:0");
    c.all_reduce(t, t)->wait();  // default options: 0.3 s, not 300 s
  });
  const auto took = std::chrono::steady_clock::now() - start;
  setenv("CHORUS_COLLECTIVE_TIMEOUT", "-1", 1);
  try {
    AllReduceOptions bad;
    ADD_FAILURE() << "CHORUS_COLLECTIVE_TIMEOUT=-1 was accepted: " << bad.timeout.count() << " ms";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("CHORUS_COLLECTIVE_TIMEOUT='-1'"), std::string::npos) << e.what();
  }
  unsetenv("CHORUS_COLLECTIVE_TIMEOUT");
  EXPECT_EQ(AllReduceOptions{}.timeout, kDefaultTimeout);
  EXPECT_LT(took, std::chrono::seconds(10));
  ASSERT_TRUE(errors[0]);
  EXPECT_THROW(std::rethrow_exception(errors[0]), DeadlineExceededError);
}

TEST_P(InProcessTest, AbortWakesEveryoneWithTheReason) {
  const int k = 4;
  use_cpu_devices(k);
  auto comms = GetParam()(k, "test");
  const auto start = std::chrono::steady_clock::now();
  auto errors = run_ranks(comms, [&](int r, Communicator& c) {
    if (r == 3) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      c.abort("replica 3 hit a NaN loss");
      return;
    }
    Tensor t = Tensor::zeros({8}, DType::kFloat32, "/cpu:" + std::to_string(r));
    c.all_reduce(t, t, {.timeout = std::chrono::seconds(60)});
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(errors[r]);
    try {
      std::rethrow_exception(errors[r]);
    } catch (const AbortedError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 3 aborted the communicator: replica 3 hit a NaN loss"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST_P(InProcessTest, BadArgumentOnOneRankFailsItAndReleasesTheOthers) {
  const int k = 3;
  use_cpu_devices(k);
  auto comms = GetParam()(k, "test");
  const auto start = std::chrono::steady_clock::now();
  auto errors = run_ranks(comms, [&](int r, Communicator& c) {
    const std::string dev = "/cpu:" + std::to_string(r);
    Tensor in = Tensor::zeros({8}, DType::kFloat32, dev);
    Tensor out = Tensor::zeros({r == 1 ? 9 : 8}, DType::kFloat32, dev);
    c.all_reduce(in, out, {.timeout = std::chrono::seconds(60)});
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_THROW(std::rethrow_exception(errors[1]), InvalidArgumentError);
  EXPECT_THROW(std::rethrow_exception(errors[0]), AbortedError);
  EXPECT_THROW(std::rethrow_exception(errors[2]), AbortedError);
}

TEST_P(InProcessTest, RejectsWhatCollectivesCannotDo) {
  use_cpu_devices(1);
  auto comms = GetParam()(1, "test");
  Communicator& c = *comms[0];
  Tensor u8 = Tensor::zeros({4}, DType::kUInt8);
  EXPECT_THROW(c.all_reduce(u8, u8), InvalidArgumentError);
  comms = GetParam()(1, "test");
  Tensor f = Tensor::zeros({4});
  EXPECT_THROW(comms[0]->broadcast(f, {.root = 1}), InvalidArgumentError);
  comms = GetParam()(1, "test");
  EXPECT_THROW(comms[0]->all_gather(f, Tensor::zeros({5})), InvalidArgumentError);
  comms = GetParam()(2, "test");
  EXPECT_THROW(comms[0]->reduce_scatter(Tensor::zeros({3}), Tensor::zeros({1})), InvalidArgumentError);
}

INSTANTIATE_TEST_SUITE_P(Backends, InProcessTest, ::testing::Values(&make_shared_memory_group, &make_reference_group),
                         [](const ::testing::TestParamInfo<Factory>& info) {
                           return info.param == &make_shared_memory_group ? std::string("SharedMemory")
                                                                          : std::string("Reference");
                         });

}  // namespace
}  // namespace chorus::collective
