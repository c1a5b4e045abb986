// The Gloo backend with every rank a thread of this process: each thread its own Gloo context and
// TCP connections over loopback, all meeting through one TCP store (collective/store/tcp_store.h)
// that the test serves on 127.0.0.1, as Gloo's own tests run. The cases are gloo_cases.h's; gloo_process_test.cc runs
// them in processes.
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "gloo_cases.h"
#include "group_harness.h"
#include <chorus/collective/gloo/gloo.h>
#include <chorus/collective/gloo/gloo_internal.h>
#include <chorus/collective/store/tcp_store.h>

namespace chorus::collective {
namespace {

using gloo_cases::contains;
using gloo_cases::kTimeout;
using std::chrono::milliseconds;

// A TCP store served by this process on a port the OS picks, and its client (shared by the ranks'
// threads: TcpStore is thread-safe, each call on its own pooled connection).
struct LoopbackStore {
  TcpStoreServer server{0, "127.0.0.1"};
  TcpStore store{"127.0.0.1", server.port(), {.connect_timeout = std::chrono::seconds(10)}};
};

std::string fresh_prefix() {
  static std::atomic<int> n{0};
  return "gloo-test/" + std::to_string(n++);
}

// Runs fn(comm, "/cpu:r") on k threads, each with the communicator of its rank; rethrows the first
// error a rank threw (gtest failures inside are recorded by gtest itself).
void run_gloo(int k, const std::function<void(Communicator&, const std::string&)>& fn, bool validate = true,
              bool busy_poll = true) {
  chorus::testing::use_cpu_devices(k);
  LoopbackStore loopback;
  TcpStore& store = loopback.store;
  const std::string prefix = fresh_prefix();
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(k));
  std::vector<std::thread> threads;
  for (int r = 0; r < k; ++r)
    threads.emplace_back([&, r] {
      try {
        auto comm = make_gloo_communicator(store, r, k,
                                           {.prefix = prefix,
                                            .hostname = "127.0.0.1",
                                            .validate = validate,
                                            .busy_poll = busy_poll,
                                            .timeout = kTimeout});
        EXPECT_EQ(comm->backend(), "gloo");
        EXPECT_EQ(comm->rank(), r);
        EXPECT_EQ(comm->size(), k);
        fn(*comm, "/cpu:" + std::to_string(r));
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  chorus::testing::rethrow_first(errors);
}

TEST(GlooTest, AllReduceEveryOpDtypeAndSize) {
  for (int k : {1, 2, 3}) run_gloo(k, gloo_cases::all_reduce_every_op_dtype_and_size);
}
TEST(GlooTest, BroadcastReduceAllGatherReduceScatterBarrier) {
  for (int k : {1, 2, 3}) run_gloo(k, gloo_cases::broadcast_reduce_gather_scatter);
}
TEST(GlooTest, ValidationOffStillComputes) { run_gloo(3, gloo_cases::validation_off_still_computes, false); }
// Every other test runs with busy polling on (the default); the waits must not depend on it.
TEST(GlooTest, BusyPollOffStillComputes) {
  run_gloo(2, gloo_cases::all_reduce_every_op_dtype_and_size, /*validate=*/true, /*busy_poll=*/false);
}
TEST(GlooTest, MismatchedCallsRaiseOnEveryRankAndTheCommunicatorRecovers) {
  for (int k : {2, 3}) run_gloo(k, gloo_cases::mismatch_raises_everywhere_and_recovers);
}
TEST(GlooHostileTest, MissingRankTimesOutNamingIt) {
  for (int k : {2, 3}) run_gloo(k, gloo_cases::missing_rank_times_out);
}
TEST(GlooHostileTest, MissingRankTimesOutInTheDataPhaseWithoutValidation) {
  for (int k : {2, 3}) run_gloo(k, gloo_cases::missing_rank_times_out_in_the_data_phase, false);
}
TEST(GlooHostileTest, AbortWakesEveryoneWithTheReason) {
  for (int k : {2, 3}) run_gloo(k, gloo_cases::abort_wakes_everyone_with_the_reason);
}
TEST(GlooHostileTest, AbortFromAnotherThreadWakesTheLocalWaiter) {
  run_gloo(2, gloo_cases::abort_from_another_thread_wakes_the_local_waiter);
}
TEST(GlooHostileTest, BadArgumentOnOneRankFailsItAndReleasesTheOthers) {
  run_gloo(3, gloo_cases::bad_argument_on_one_rank_releases_the_others);
}

// Two of three ranks create the communicator; the third never comes.
TEST(GlooHostileTest, CreationTimesOutNamingTheMissingRank) {
  LoopbackStore loopback;
  TcpStore& store = loopback.store;
  std::vector<std::string> messages(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      messages[static_cast<std::size_t>(r)] = chorus::testing::message_of<DeadlineExceededError>([&] {
        make_gloo_communicator(store, r, 3, {.prefix = "late", .hostname = "127.0.0.1", .timeout = milliseconds(300)});
      });
    });
  for (auto& t : threads) t.join();
  for (const std::string& m : messages) {
    EXPECT_TRUE(contains(m, "rank(s) [2] to create their communicator")) << m;
    EXPECT_TRUE(contains(m, "prefix 'late' of tcp store 127.0.0.1:" + std::to_string(loopback.server.port()))) << m;
  }
}

TEST(GlooTest, RejectsBadArguments) {
  LoopbackStore loopback;
  TcpStore& store = loopback.store;
  EXPECT_THROW(make_gloo_communicator(store, 2, 2), InvalidArgumentError);
  EXPECT_THROW(make_gloo_communicator(store, -1, 2), InvalidArgumentError);
  EXPECT_THROW(make_gloo_communicator(store, 0, 0), InvalidArgumentError);
  EXPECT_THROW(make_gloo_communicator(store, 0, 1, {.prefix = ""}), InvalidArgumentError);
  EXPECT_TRUE(gloo_available());
  // Every rank makes the same bad call, so each fails on its own.
  run_gloo(2, [](Communicator& comm, const std::string& dev) {
    // A bad argument aborts the communicator (gloo.h): first let every rank finish connecting.
    comm.barrier({.timeout = kTimeout})->wait();
    Tensor u8 = Tensor::zeros({4}, DType::kUInt8, dev);
    EXPECT_THROW(comm.all_reduce(u8, u8), InvalidArgumentError);
  });
}

// A store answering garbage is not believed: the records and peers decode to nothing.
TEST(GlooTest, WireFormsRoundTripAndRefuseGarbage) {
  using namespace gloo_detail;
  const FailureRecord r{FailureKind::kTimeout, 42, 3, {0, 2}, "rank 3 timed out\nsecond line"};
  const auto back = decode_failure(encode_failure(r));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->kind, FailureKind::kTimeout);
  EXPECT_EQ(back->sequence, 42u);
  EXPECT_EQ(back->rank, 3);
  EXPECT_EQ(back->missing, r.missing);
  EXPECT_EQ(back->text, r.text);
  EXPECT_TRUE(decode_failure("abort 0 1 -\nx").has_value());
  for (const char* bad :
       {"", "timeout", "timeout 1\nx", "nope 1 2 -\nx", "lost x 2 -\nx", "lost 1 -2 -\nx", "abort 1 2 3 4\nx",
        "abort 1 2\nx", "abort 1 2 1,\nx", "abort 1 2 ,1\nx", "abort 1 2 1,-3\nx"})
    EXPECT_FALSE(decode_failure(bad).has_value()) << bad;
  const Peer p = decode_peer(encode_peer({"node7", 4242, ""}));
  EXPECT_EQ(p.to_string(1), "rank 1 (host node7, pid 4242)");
  for (const char* bad : {"", "\n1", "node7\n", "node7\nabc", "node7\n-1", "node7"})
    EXPECT_EQ(decode_peer(bad).host, "unknown") << bad;
}

}  // namespace
}  // namespace chorus::collective
