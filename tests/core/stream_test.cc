#include <chorus/core/stream.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <chorus/core/error.h>

namespace chorus {
namespace {

TEST(CpuStreamTest, RunsWorkInEnqueueOrderOnOneThread) {
  auto s = make_cpu_stream("test");
  std::vector<int> order;
  std::thread::id worker;
  for (int i = 0; i < 100; ++i)
    s->enqueue_host([&, i] {
      if (i == 0) worker = std::this_thread::get_id();
      EXPECT_EQ(worker, std::this_thread::get_id());
      order.push_back(i);
    });
  s->synchronize();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  EXPECT_NE(worker, std::this_thread::get_id());
  EXPECT_EQ(s->native_handle(), nullptr);
  EXPECT_EQ(s->gpu_ordinal(), -1);
}

TEST(CpuStreamTest, EventCompletesAfterPrecedingWork) {
  auto s = make_cpu_stream("test");
  std::atomic<bool> release{false};
  std::atomic<int> done{0};
  s->enqueue_host([&] {
    while (!release) std::this_thread::yield();
    done = 1;
  });
  auto e = s->record_event();
  EXPECT_FALSE(e->query());
  release = true;
  e->synchronize();
  EXPECT_TRUE(e->query());
  EXPECT_EQ(done, 1);
}

TEST(CpuStreamTest, WaitEventOrdersTwoStreams) {
  // Stream b must not run its work before stream a's slow work, which it waits for by event.
  auto a = make_cpu_stream("a");
  auto b = make_cpu_stream("b");
  std::atomic<int> value{0};
  a->enqueue_host([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    value = 1;
  });
  b->wait_event(a->record_event());
  int seen = -1;
  b->enqueue_host([&] { seen = value; });
  b->synchronize();
  EXPECT_EQ(seen, 1);
}

TEST(CpuStreamTest, ErrorSkipsLaterWorkButNotEventsThenClears) {
  auto s = make_cpu_stream("test");
  int ran = 0;
  s->enqueue_host([] { throw InvalidArgumentError("bad kernel input"); });
  s->enqueue_host([&] { ++ran; });  // skipped: it would read garbage
  auto e = s->record_event();
  e->synchronize();  // completes despite the error: no hang
  try {
    s->synchronize();
    FAIL() << "synchronize did not rethrow";
  } catch (const InvalidArgumentError& err) {
    EXPECT_NE(std::string(err.what()).find("bad kernel input"), std::string::npos);
  }
  EXPECT_EQ(ran, 0);
  s->enqueue_host([&] { ++ran; });  // the error was reported: the stream works again
  s->synchronize();
  EXPECT_EQ(ran, 1);
}

TEST(CpuStreamTest, DestructionDrainsQueuedWork) {
  std::atomic<int> count{0};
  {
    auto s = make_cpu_stream("test");
    for (int i = 0; i < 10; ++i) s->enqueue_host([&] { ++count; });
  }
  EXPECT_EQ(count, 10);
}

TEST(CpuStreamTest, ManyProducers) {
  auto s = make_cpu_stream("test");
  std::atomic<int> count{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) s->enqueue_host([&] { ++count; });
    });
  for (auto& t : threads) t.join();
  s->synchronize();
  EXPECT_EQ(count, 4000);
}

TEST(CpuStreamTest, NullEventIsRejected) {
  auto s = make_cpu_stream("test");
  EXPECT_THROW(s->wait_event(nullptr), InvalidArgumentError);
}

}  // namespace
}  // namespace chorus

namespace chorus {
namespace {

TEST(CpuStreamTest, WaitingForItselfFromItsOwnWorkIsAnErrorNotAHang) {
  auto s = make_cpu_stream("self");
  bool refused = false;
  s->enqueue_host([&] {
    try {
      s->synchronize();
    } catch (const FailedPreconditionError&) {
      refused = true;
    }
  });
  s->synchronize();
  EXPECT_TRUE(refused);
}

}  // namespace
}  // namespace chorus

namespace chorus {
namespace {

TEST(CpuStreamExecuteHost, RunsOnTheCallerAfterPendingWork) {
  auto stream = make_cpu_stream("stream of test");
  std::thread::id ran_on;
  stream->execute_host([&] { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, std::this_thread::get_id());  // idle: no hand-off
  EXPECT_THROW(stream->execute_host([] { throw InvalidArgumentError("inline failure"); }), InvalidArgumentError);

  std::atomic<bool> release{false};
  std::vector<int> order;
  stream->enqueue_host([&] {
    while (!release.load()) std::this_thread::yield();
    order.push_back(1);
  });
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    release = true;
  });
  stream->execute_host([&] {  // busy: waits for the queued task, then runs here
    ran_on = std::this_thread::get_id();
    order.push_back(2);
  });
  releaser.join();
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  // Inside the stream's own work it runs at once (no self-wait).
  bool nested = false;
  stream->enqueue_host([&] { stream->execute_host([&] { nested = true; }); });
  stream->synchronize();
  EXPECT_TRUE(nested);
}

}  // namespace
}  // namespace chorus
