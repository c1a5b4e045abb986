#include <chorus/collective/rendezvous.h>

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <string>
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

TEST(RendezvousTest, TimeoutsRacingArrivalsNeverSplitAGroupOfThree) {
  // Ranks 0 and 1 give up after 1 ms, at about the moment rank 2 arrives; each arrival is a flag
  // of its own, read by every rank on its own. All three complete the phase, or all three fail.
  int all_ok = 0, all_failed = 0;
  for (int trial = 0; trial < 200; ++trial) {
    Rendezvous rv(3, "race3");
    std::atomic<int> ok{0}, failed{0};
    auto run = [&](int r, int delay_us, std::chrono::milliseconds timeout) {
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
      try {
        rv.arrive(r, fp(0), Slot{}, timeout);
        ++ok;
      } catch (const Error&) {
        ++failed;
      }
    };
    std::thread one(run, 1, 100 + (trial % 7) * 20, std::chrono::milliseconds(1));
    std::thread two(run, 2, 900 + (trial % 40) * 6, std::chrono::seconds(5));
    run(0, 0, std::chrono::milliseconds(1));
    one.join();
    two.join();
    ASSERT_TRUE(ok == 3 || failed == 3) << "trial " << trial << ": " << ok << " succeeded, " << failed << " failed";
    (ok == 3 ? all_ok : all_failed)++;
  }
  std::printf("timeout race of three: %d trials completed for all, %d failed for all\n", all_ok, all_failed);
}

TEST(RendezvousTest, ARankArrivingWhileAPeerWithdrawsFailsWithIt) {
  // Rank 0 gives up; rank 1 arrives after rank 0's last look at the flags, before rank 0 lowers its
  // own. Rank 1 then sees every flag raised, but must not complete a phase rank 0 is leaving.
  Rendezvous rv(2, "window");
  std::atomic<bool> in_window{false};
  rv.set_withdrawal_hook([&] {
    in_window = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // rank 1 arrives meanwhile
  });
  std::atomic<bool> late_failed{false};
  std::thread late([&] {
    while (!in_window) std::this_thread::yield();
    try {
      rv.arrive(1, fp(0), Slot{}, std::chrono::seconds(5));
    } catch (const DeadlineExceededError&) {
      late_failed = true;
    }
  });
  EXPECT_THROW(rv.arrive(0, fp(0), Slot{}, std::chrono::milliseconds(1)), DeadlineExceededError);
  late.join();
  EXPECT_TRUE(late_failed) << "rank 1 completed a phase rank 0 withdrew from";
}

TEST(RendezvousTest, DigestsTellFingerprintsApartFieldByField) {
  // Each field on its own makes a mismatch, and every rank throws the same message naming the first
  // rank that differs from rank 0; equal fingerprints pass.
  std::vector<std::function<void(Fingerprint&)>> changes = {
      [](Fingerprint& f) { f.op = "broadcast"; },
      [](Fingerprint& f) { f.sequence += 1; },
      [](Fingerprint& f) { f.dtype = DType::kFloat64; },
      [](Fingerprint& f) {
        f.shape = {2, 2};
      },
      [](Fingerprint& f) { f.shape = {5}; },
      [](Fingerprint& f) { f.root = 1; },
      [](Fingerprint& f) { f.reduce_op = 1; },
      [](Fingerprint& f) { f.op = "all_reducf"; },
  };
  const int k = 3;
  Rendezvous rv(k, "digest");
  std::uint64_t seq = 0;
  for (std::size_t c = 0; c < changes.size(); ++c) {
    std::vector<std::string> messages(k);
    std::vector<std::thread> threads;
    for (int r = 0; r < k; ++r)
      threads.emplace_back([&, r] {
        Fingerprint f = fp(seq);
        if (r == 2) changes[c](f);
        try {
          rv.arrive(r, f, Slot{}, std::chrono::seconds(30));
        } catch (const InvalidArgumentError& e) {
          messages[r] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    ++seq;
    EXPECT_NE(messages[0].find("but rank 2 called"), std::string::npos) << "change " << c << ": " << messages[0];
    for (int r = 1; r < k; ++r) EXPECT_EQ(messages[r], messages[0]) << "change " << c;
    threads.clear();
    for (int r = 0; r < k; ++r)
      threads.emplace_back([&, r] { rv.arrive(r, fp(seq), Slot{}, std::chrono::seconds(30)); });
    for (auto& t : threads) t.join();  // equal fingerprints: no throw, the group still works
    ++seq;
  }
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
