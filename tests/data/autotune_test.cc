// data/autotune.cc: kAutotune's tuners measure, not guess. The tuners with a fake clock (exact
// answers), then map(kAutotune) and prefetch(kAutotune) reacting to a slow producer or consumer.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tests/data/data_test_util.h"
#include <chorus/data/autotune_internal.h>
#include <chorus/data/dataset.h>

namespace chorus::data {
namespace {

using internal::ParallelismTuner;
using internal::PrefetchTuner;
using namespace std::chrono_literals;

struct FakeClock {
  double now = 100;
  internal::AutotuneClock fn() {
    return [this] { return now; };
  }
};

// The consumer spends `between` seconds outside next(), each call takes `call` seconds.
void feed(ParallelismTuner& t, FakeClock& clock, double call, double between, int rounds) {
  for (int i = 0; i < rounds; ++i) {
    t.consumer_enter();
    t.record_call(call);
    clock.now += 0.5;  // waiting inside next() must not count
    t.consumer_leave();
    clock.now += between;
  }
}

TEST(ParallelismTuner, CallsInFlightFollowTheMeasuredRates) {
  FakeClock clock;
  ParallelismTuner t(8, clock.fn());
  EXPECT_EQ(t.parallelism(), 1u) << "before any measurement";
  feed(t, clock, 0.010, 0.002, 40);  // 10 ms calls, 2 ms of consumer work: 5 in flight
  EXPECT_EQ(t.parallelism(), 5u);
  feed(t, clock, 0.001, 0.010, 60);  // the consumer became the slow side: 1
  EXPECT_EQ(t.parallelism(), 1u);
  feed(t, clock, 0.050, 0.001, 60);  // 50 wanted, clamped to the maximum
  EXPECT_EQ(t.parallelism(), 8u);
  feed(t, clock, 0.003, 0.0, 60);  // a consumer that does nothing: the maximum
  EXPECT_EQ(t.parallelism(), 8u);
}

TEST(PrefetchTuner, DoublesWhenTheConsumerFindsTheBufferEmpty) {
  PrefetchTuner t(16);
  EXPECT_EQ(t.buffer_limit(), 1u);
  t.on_request(0, true);  // upswing: an empty buffer at the start is expected
  EXPECT_EQ(t.buffer_limit(), 1u);
  t.on_request(1, true);  // seen full: downswing
  t.on_request(0, true);  // seen empty: double
  EXPECT_EQ(t.buffer_limit(), 2u);
  t.on_request(0, true);  // upswing again: no change until seen full
  EXPECT_EQ(t.buffer_limit(), 2u);
  t.on_request(2, true);
  t.on_request(1, true);
  EXPECT_EQ(t.buffer_limit(), 2u);
  t.on_request(0, false);  // empty because the input ended: no growth
  EXPECT_EQ(t.buffer_limit(), 2u);
  for (int i = 0; i < 10; ++i) {
    t.on_request(t.buffer_limit(), true);
    t.on_request(0, true);
  }
  EXPECT_EQ(t.buffer_limit(), 16u) << "clamped to the maximum";
}

// Counts calls in flight and their maximum.
struct Concurrency {
  std::atomic<int> now{0}, peak{0};
  void enter() {
    const int n = ++now;
    int p = peak.load();
    while (n > p && !peak.compare_exchange_weak(p, n)) {
    }
  }
  void leave() { --now; }
};

TEST(AutotuneMap, SlowCallsAndAFastConsumerGetParallelCalls) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one hardware thread: the tuner's maximum is 1";
  auto c = std::make_shared<Concurrency>();
  auto ds = Dataset::range(60).map(
      [c](const Element& e) {
        c->enter();
        std::this_thread::sleep_for(3ms);
        c->leave();
        return e;
      },
      kAutotune);
  EXPECT_EQ(testing::values(ds), testing::iota(0, 60));
  EXPECT_GE(c->peak.load(), 2) << "the tuner never allowed a second call in flight";
}

TEST(AutotuneMap, FastCallsAndASlowConsumerStayAtOneCall) {
  auto c = std::make_shared<Concurrency>();
  auto ds = Dataset::range(40).map(
      [c](const Element& e) {
        c->enter();
        c->leave();
        return e;
      },
      kAutotune);
  auto it = ds.make_iterator();
  std::int64_t n = 0;
  while (auto e = it.next()) {
    EXPECT_EQ((*e)[0].item<std::int64_t>(), n++);
    std::this_thread::sleep_for(2ms);  // the consumer's own work
  }
  EXPECT_EQ(n, 40);
  EXPECT_EQ(c->peak.load(), 1) << "a hardware-threads constant would have run calls side by side";
}

TEST(AutotunePrefetch, ABurstyConsumerDeepensTheBuffer) {
  // The producer takes 1 ms per element; the consumer drains quickly, then pauses. After a few
  // bursts the tuner has doubled the buffer, so the producer runs several elements ahead during
  // a pause (a constant prefetch(1) stays within 2: one buffered, one in production).
  std::atomic<std::int64_t> produced{0};
  auto ds = Dataset::range(200)
                .map([&produced](const Element& e) {
                  std::this_thread::sleep_for(1ms);
                  ++produced;
                  return e;
                })
                .prefetch(kAutotune);
  auto it = ds.make_iterator();
  std::int64_t consumed = 0, ahead = 0;
  for (int burst = 0; burst < 12; ++burst) {
    for (int i = 0; i < 10 && it.next(); ++i) ++consumed;
    std::this_thread::sleep_for(30ms);
    ahead = std::max(ahead, produced.load() - consumed);
  }
  // A loaded machine may starve the producer through every 30 ms pause: then wait, up to a
  // generous deadline, for the deepened buffer to fill (a constant prefetch(1) never gets there).
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (ahead < 4 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(1ms);
    ahead = std::max(ahead, produced.load() - consumed);
  }
  while (it.next()) ++consumed;
  EXPECT_EQ(consumed, 200);
  EXPECT_GE(ahead, 4) << "the prefetch buffer never grew";
  EXPECT_LE(ahead, kAutotunePrefetchMax + 1);
}

}  // namespace
}  // namespace chorus::data
