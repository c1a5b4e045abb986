// data/parallel.cc: map with parallel calls (order, concurrency, errors) and prefetch (bounded
// buffer, error propagation, early destruction, joins), their iterator state, and a stress run
// for TSan.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tests/data/data_test_util.h"
#include <chorus/data/dataset.h>

namespace chorus::data {
namespace {

using testing::first_components;
using testing::iota;
using testing::values;
using V = std::vector<std::int64_t>;
using namespace std::chrono_literals;

std::int64_t value_of(const Element& e) { return e[0].item<std::int64_t>(); }

// Counts calls in flight and their maximum.
struct Concurrency {
  std::atomic<int> now{0}, peak{0}, calls{0};
  void enter() {
    ++calls;
    const int n = ++now;
    int p = peak.load();
    while (n > p && !peak.compare_exchange_weak(p, n)) {
    }
  }
  void leave() { --now; }
};

TEST(ParallelMap, KeepsTheInputOrderWithFourCalls) {
  auto c = std::make_shared<Concurrency>();
  // Early elements take longest, so calls finish in reverse order within each wave.
  auto ds = Dataset::range(24).map(
      [c](const Element& e) {
        c->enter();
        const std::int64_t v = value_of(e);
        std::this_thread::sleep_for(std::chrono::milliseconds(2 * (4 - v % 4)));
        c->leave();
        return Element{Tensor::scalar<std::int64_t>(v * v)};
      },
      4);
  V expected;
  for (std::int64_t i = 0; i < 24; ++i) expected.push_back(i * i);
  EXPECT_EQ(values(ds), expected);
  EXPECT_EQ(c->calls.load(), 24);
  EXPECT_GT(c->peak.load(), 1) << "no two calls ever overlapped";
  EXPECT_LE(c->peak.load(), 4);
  EXPECT_EQ(ds.cardinality(), 24);
  EXPECT_EQ(values(Dataset::range(10).map([](const Element& e) { return e; }, kAutotune)), iota(0, 10));
}

TEST(Map, ArgumentErrors) {
  auto id = [](const Element& e) { return e; };
  EXPECT_THROW_WITH(Dataset::range(3).map(id, 0), InvalidArgumentError, "num_parallel_calls", "got 0");
  EXPECT_THROW_WITH(Dataset::range(3).map(id, -2), InvalidArgumentError, "got -2");
  EXPECT_THROW_WITH(Dataset::range(3).map(MapFn()), InvalidArgumentError, "empty");
}

// An exception from fn surfaces at its element; the next call goes on with the next element.
void expect_error_in_order(std::int64_t parallel) {
  auto ds = Dataset::range(6).map(
      [](const Element& e) {
        if (value_of(e) == 2) throw InvalidArgumentError("element 2 is bad");
        return e;
      },
      parallel);
  auto it = ds.make_iterator();
  EXPECT_EQ(value_of(*it.next()), 0);
  EXPECT_EQ(value_of(*it.next()), 1);
  EXPECT_THROW_WITH(it.next(), InvalidArgumentError, "element 2 is bad");
  EXPECT_EQ(first_components(it), (V{3, 4, 5}));
}

TEST(Map, ErrorsSurfaceInOrderAndIterationContinues) {
  expect_error_in_order(1);
  expect_error_in_order(3);
}

TEST(ParallelMap, EarlyDestructionJoinsWorkers) {
  auto c = std::make_shared<Concurrency>();
  auto ds = Dataset::range(1000).map(
      [c](const Element& e) {
        c->enter();
        std::this_thread::sleep_for(1ms);
        c->leave();
        return e;
      },
      4);
  {
    auto it = ds.make_iterator();
    EXPECT_EQ(value_of(*it.next()), 0);
  }  // destroyed with calls in flight
  EXPECT_EQ(c->now.load(), 0);
  EXPECT_LE(c->calls.load(), 9);  // at most the first element plus two waves of 4
  { auto never_used = ds.make_iterator(); }
}

TEST(Prefetch, PassesElementsInOrder) {
  EXPECT_EQ(values(Dataset::range(50).prefetch(3)), iota(0, 50));
  EXPECT_EQ(values(Dataset::range(50).prefetch(kAutotune)), iota(0, 50));
  EXPECT_EQ(values(Dataset::range(5).prefetch(0)), iota(0, 5));
  EXPECT_EQ(values(Dataset::range(0).prefetch(2)), V{});
  EXPECT_EQ(values(Dataset::range(10).batch(4).prefetch(1).repeat(2)), [] {
    V v = iota(0, 10);
    v.insert(v.end(), v.begin(), v.end());
    return v;
  }());
  EXPECT_EQ(Dataset::range(7).prefetch(2).cardinality(), 7);
  EXPECT_THROW_WITH(Dataset::range(3).prefetch(-2), InvalidArgumentError, "buffer_size", "got -2");
}

TEST(Prefetch, TheBufferIsBounded) {
  auto c = std::make_shared<Concurrency>();
  auto ds = Dataset::range(1000).map([c](const Element& e) {
    c->enter();
    c->leave();
    return e;
  });
  auto it = ds.prefetch(3).make_iterator();
  EXPECT_EQ(value_of(*it.next()), 0);
  // It runs ahead: wait until it has (the consumed element and 3 buffered), however slow the
  // machine, then give it time to overrun, were it unbounded (a negative check: a fast machine
  // overruns sooner, a slow one can only hide an overrun, never invent one).
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (c->calls.load() < 4) {
    ASSERT_LT(std::chrono::steady_clock::now(), until) << "the producer did not run ahead within 30 s";
    std::this_thread::sleep_for(1ms);
  }
  std::this_thread::sleep_for(50ms);
  // The consumed element, 3 buffered and at most one being produced.
  EXPECT_LE(c->calls.load(), 5);
}

TEST(Prefetch, ProducerErrorsAreRethrownInOrder) {
  auto ds = Dataset::range(6)
                .map([](const Element& e) {
                  if (value_of(e) == 3) throw DataLossError("record 3 is corrupt");
                  return e;
                })
                .prefetch(2);
  auto it = ds.make_iterator();
  EXPECT_EQ(first_components(it, 3), (V{0, 1, 2}));
  EXPECT_THROW_WITH(it.next(), DataLossError, "record 3 is corrupt");
  EXPECT_EQ(first_components(it), (V{4, 5}));
  EXPECT_FALSE(it.next().has_value());
}

TEST(Prefetch, EarlyDestructionNeverHangs) {
  auto c = std::make_shared<Concurrency>();
  auto endless = Dataset::range(3).repeat().map([c](const Element& e) {
    c->enter();
    c->leave();
    return e;
  });
  const auto start = std::chrono::steady_clock::now();
  for (int round = 0; round < 20; ++round) {
    auto it = endless.prefetch(2).prefetch(2).make_iterator();  // two threads, stacked
    EXPECT_EQ(value_of(*it.next()), 0);
    if (round % 2 == 0) std::this_thread::sleep_for(1ms);  // sometimes with full buffers
  }
  { auto unused = endless.prefetch(4).make_iterator(); }  // the thread never started
  {
    auto slow = Dataset::range(100).map([](const Element& e) {
      std::this_thread::sleep_for(20ms);
      return e;
    });
    auto it = slow.prefetch(1).make_iterator();
    it.next();
  }  // destroyed while the producer is inside a slow call: waits for that call only
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(Prefetch, ManyIteratorsOnManyThreads) {
  auto ds = Dataset::range(200)
                .map(
                    [](const Element& e) {
                      return Element{e[0], Tensor::zeros({4})};
                    },
                    3)
                .prefetch(2)
                .batch(7)
                .prefetch(kAutotune);
  std::vector<std::thread> threads;
  std::vector<V> results(4);
  for (int t = 0; t < 4; ++t) threads.emplace_back([&, t] { results[static_cast<std::size_t>(t)] = values(ds); });
  for (auto& th : threads) th.join();
  for (const auto& r : results) EXPECT_EQ(r, iota(0, 200));
}

// ---- iterator state ----

void expect_resumes(const std::function<Dataset()>& build, std::int64_t before) {
  auto it = build().make_iterator();
  auto head = first_components(it, before);
  IteratorState state = it.save();
  auto rest = first_components(it);
  auto resumed = build().make_iterator();
  resumed.restore(state);
  EXPECT_EQ(first_components(resumed), rest) << "saved after " << before << " elements";
  V joined = head;
  joined.insert(joined.end(), rest.begin(), rest.end());
  EXPECT_EQ(joined, values(build()));
}

TEST(IteratorState, PrefetchAndParallelMapResumeExactly) {
  auto build = [] {
    return Dataset::range(30)
        .shuffle(6, 8)
        .map([](const Element& e) { return Element{e[0]}; }, 4)
        .prefetch(3)
        .batch(4)
        .prefetch(2)
        .repeat(2);
  };
  for (std::int64_t k : {0, 1, 5, 8, 9, 15}) expect_resumes(build, k);
}

TEST(IteratorState, BufferedErrorsAreSavedToo) {
  auto build = [] {
    return Dataset::range(8)
        .map(
            [](const Element& e) {
              if (value_of(e) == 4) throw InvalidArgumentError("four");
              return e;
            },
            3)
        .prefetch(3);
  };
  auto it = build().make_iterator();
  EXPECT_EQ(first_components(it, 3), (V{0, 1, 2}));
  std::this_thread::sleep_for(20ms);  // let the prefetch buffer hold the error
  IteratorState state = it.save();
  auto resumed = build().make_iterator();
  resumed.restore(state);
  EXPECT_EQ(value_of(*resumed.next()), 3);
  EXPECT_THROW_WITH(resumed.next(), InvalidArgumentError, "four");
  EXPECT_EQ(first_components(resumed), (V{5, 6, 7}));
  // The original continues unchanged after save().
  EXPECT_EQ(value_of(*it.next()), 3);
  EXPECT_THROW_WITH(it.next(), InvalidArgumentError, "four");
  EXPECT_EQ(first_components(it), (V{5, 6, 7}));
}

}  // namespace
}  // namespace chorus::data
