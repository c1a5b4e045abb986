#include <chorus/collective/rendezvous.h>

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include <chorus/core/error.h>

namespace chorus::collective {
namespace {

Fingerprint fp(std::uint64_t seq, const char* op = "all_reduce") {
  Fingerprint f;
  f.op = op;
  f.sequence = seq;
  f.shape = {4};
  f.reduce_op = 0;
  return f;
}

TEST(RendezvousTest, PhasesReleaseTogetherManyTimes) {
  // Fast threads racing into the next phase must not be counted in the current one.
  const int k = 4;
  Rendezvous rv(k, "rv");
  std::atomic<int> in_phase{0};
  std::atomic<bool> bad{false};
  std::vector<std::thread> threads;
  for (int r = 0; r < k; ++r)
    threads.emplace_back([&, r] {
      for (int i = 0; i < 2000; ++i) {
        rv.arrive(r, fp(i), Slot{}, std::chrono::seconds(30));
        in_phase.fetch_add(1);
        rv.sync(r, fp(i), std::chrono::seconds(30));
        // Everyone incremented before anyone left the sync.
        if (in_phase.load() < k * (i + 1)) bad = true;
        rv.sync(r, fp(i), std::chrono::seconds(30));
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_FALSE(bad);
  EXPECT_EQ(in_phase.load(), k * 2000);
}

TEST(RendezvousTest, ATimeoutRacingTheLastArrivalNeverSplitsTheGroup) {
  // Rank 0's deadline expires at about the moment rank 1 arrives. Either the phase completes for
  // both, or it fails for both: a rank must never leave a phase the other went past (the other
  // would then write into buffers of a caller that already got an error).
  int both_ok = 0, both_failed = 0;
  for (int trial = 0; trial < 300; ++trial) {
    Rendezvous rv(2, "race");
    std::atomic<int> ok{0}, failed{0};
    std::thread late([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(900 + (trial % 40) * 5));
      try {
        rv.arrive(1, fp(0), Slot{}, std::chrono::seconds(5));
        ++ok;
      } catch (const Error&) {
        ++failed;
      }
    });
    try {
      rv.arrive(0, fp(0), Slot{}, std::chrono::milliseconds(1));
      ++ok;
    } catch (const Error&) {
      ++failed;
    }
    late.join();
    ASSERT_TRUE(ok == 2 || failed == 2) << "trial " << trial << ": " << ok << " succeeded, " << failed << " failed";
    (ok == 2 ? both_ok : both_failed)++;
  }
  std::printf("timeout race: %d trials completed for both, %d failed for both\n", both_ok, both_failed);
}

TEST(RendezvousTest, SizeOneNeverWaits) {
  Rendezvous rv(1, "solo");
  rv.arrive(0, fp(0), Slot{}, std::chrono::milliseconds(1));
  rv.sync(0, fp(0), std::chrono::milliseconds(1));
}

TEST(RendezvousTest, RejectsEmptyGroup) { EXPECT_THROW(Rendezvous(0, "x"), InvalidArgumentError); }

TEST(RendezvousTest, FingerprintText) {
  Fingerprint f = fp(3);
  f.shape = {2, 3};
  EXPECT_EQ(f.to_string(), "all_reduce #3 float32(2, 3) op=sum");
  Fingerprint b = fp(1, "broadcast");
  b.reduce_op = -1;
  b.root = 2;
  EXPECT_EQ(b.to_string(), "broadcast #1 float32(4,) root=2");
  EXPECT_EQ(fp(7, "barrier").to_string(), "barrier #7 op=sum");
}

}  // namespace
}  // namespace chorus::collective
