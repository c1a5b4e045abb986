// The TCP store (collective/store/tcp_store.h) between threads of one process and between forked
// processes: store.h's contract, blocking get/wait that a set from elsewhere completes, timeouts,
// concurrent add, many clients, a server that is not there yet, and port 0.
#include <chorus/collective/store/tcp_store.h>

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

#include <atomic>
#include <thread>

#include "tests/core/test_util.h"
#include <chorus/core/error.h>

namespace chorus::collective {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TcpStore client(const TcpStoreServer& server, std::chrono::milliseconds timeout = 10s) {
  return TcpStore("127.0.0.1", server.port(), {.connect_timeout = timeout, .timeout = timeout});
}

TEST(TcpStoreTest, SetGetAddCheckAndDescribe) {
  TcpStoreServer server(0);
  ASSERT_GT(server.port(), 0);
  TcpStore s = client(server);
  EXPECT_EQ(s.describe(), "tcp store 127.0.0.1:" + std::to_string(server.port()));
  s.set("a", std::string("\0bytes\xff", 7));
  EXPECT_EQ(s.get("a", 1s), std::string("\0bytes\xff", 7));
  s.set("a", "");  // replaced, and empty values are values
  EXPECT_EQ(s.get("a", 1s), "");
  EXPECT_EQ(s.add("n", 5), 5);
  EXPECT_EQ(s.add("n", -7), -2);
  EXPECT_EQ(s.get("n", 1s), "-2");
  EXPECT_TRUE(s.check({"a", "n"}));
  EXPECT_FALSE(s.check({"a", "missing"}));
  EXPECT_TRUE(s.check({}));
  s.wait({"a", "n"}, 1s);
  const std::string big(1 << 20, 'v');
  s.set("big", big);
  EXPECT_EQ(s.get("big", 1s), big);
}

TEST(TcpStoreTest, AddOnANonIntegerValueNamesTheKey) {
  TcpStoreServer server(0);
  TcpStore s = client(server);
  s.set("word", "hello");
  EXPECT_THROW_WITH(s.add("word", 1), InvalidArgumentError, "\"word\"", "not a decimal integer");
  s.set("max", std::to_string(INT64_MAX));
  EXPECT_THROW_WITH(s.add("max", 1), InvalidArgumentError, "overflows");
  EXPECT_EQ(s.add("fresh", 1), 1);  // the connection is still good
}

TEST(TcpStoreTest, KeysAndValuesOutOfLimitsAreRejectedByTheClient) {
  TcpStoreServer server(0);
  TcpStore s = client(server);
  EXPECT_THROW(s.set("", "v"), InvalidArgumentError);
  EXPECT_THROW(s.get(std::string(Store::kMaxKeyBytes + 1, 'k'), 1s), InvalidArgumentError);
  EXPECT_THROW(s.set("k", std::string(Store::kMaxValueBytes + 1, 'v')), InvalidArgumentError);
  s.set(std::string(Store::kMaxKeyBytes, 'k'), "longest key");
  EXPECT_EQ(s.get(std::string(Store::kMaxKeyBytes, 'k'), 1s), "longest key");
}

TEST(TcpStoreTest, GetBlocksUntilAnotherThreadSetsTheKey) {
  TcpStoreServer server(0);
  TcpStore s = client(server);
  std::thread setter([&] {
    std::this_thread::sleep_for(200ms);
    s.set("late", "here");  // the same client object: its get must not hold up this set
  });
  const auto start = Clock::now();
  EXPECT_EQ(s.get("late", 10s), "here");
  EXPECT_GE(Clock::now() - start, 150ms);
  EXPECT_LT(Clock::now() - start, 5s);
  setter.join();
}

TEST(TcpStoreTest, GetAndWaitTimeOutNamingTheMissingKeysWithinTheirTimeout) {
  TcpStoreServer server(0);
  TcpStore s = client(server);
  s.set("there", "1");
  auto start = Clock::now();
  EXPECT_THROW_WITH(s.get("never", 300ms), DeadlineExceededError, "\"never\"", "127.0.0.1:");
  EXPECT_GE(Clock::now() - start, 250ms);
  EXPECT_LT(Clock::now() - start, 2s);
  start = Clock::now();
  try {
    s.wait({"there", "gone1", "gone2"}, 300ms);
    ADD_FAILURE() << "wait did not time out";
  } catch (const DeadlineExceededError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("\"gone1\""), std::string::npos) << m;
    EXPECT_NE(m.find("\"gone2\""), std::string::npos) << m;
    EXPECT_EQ(m.find("\"there\""), std::string::npos) << m;  // only the missing ones
  }
  EXPECT_LT(Clock::now() - start, 2s);
  EXPECT_THROW(s.get("never", 0ms), DeadlineExceededError);
  EXPECT_EQ(s.get("there", 0ms), "1");
}

TEST(TcpStoreTest, ConcurrentAddsFromManyClientsAreAtomic) {
  TcpStoreServer server(0);
  constexpr int kThreads = 8, kAdds = 200;
  std::vector<std::thread> threads;
  std::atomic<int> max_seen{0};
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      TcpStore s = client(server);
      for (int i = 0; i < kAdds; ++i) {
        const auto v = static_cast<int>(s.add("counter", 1));
        int m = max_seen.load();
        while (v > m && !max_seen.compare_exchange_weak(m, v)) {
        }
      }
    });
  for (auto& t : threads) t.join();
  TcpStore s = client(server);
  EXPECT_EQ(s.get("counter", 1s), std::to_string(kThreads * kAdds));
  EXPECT_EQ(max_seen.load(), kThreads * kAdds);
}

TEST(TcpStoreTest, WaitersOnManyConnectionsAreAllReleasedByOneSet) {
  TcpStoreServer server(0);
  constexpr int kWaiters = 16;
  std::atomic<int> released{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kWaiters; ++t)
    threads.emplace_back([&] {
      TcpStore s = client(server);
      s.wait({"go"}, 10s);
      ++released;
    });
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(released.load(), 0);
  client(server).set("go", "");
  for (auto& t : threads) t.join();
  EXPECT_EQ(released.load(), kWaiters);
}

TEST(TcpStoreTest, AClientStartedBeforeItsServerRetriesUntilItIsThere) {
  // Find a free port, release it, and start the server there a little later.
  int port = 0;
  { port = TcpStoreServer(0).port(); }
  TcpStore s("127.0.0.1", port, {.connect_timeout = 10s, .timeout = 10s});
  std::unique_ptr<TcpStoreServer> server;
  std::thread later([&] {
    std::this_thread::sleep_for(300ms);
    server = std::make_unique<TcpStoreServer>(port);
  });
  const auto start = Clock::now();
  s.set("k", "v");  // retried while refused
  later.join();
  EXPECT_GE(Clock::now() - start, 200ms);
  EXPECT_EQ(s.get("k", 1s), "v");
}

// A server that was reached and is gone (its rank died): the client tries again for
// reconnect_timeout, not connect_timeout, and names the store.
TEST(TcpStoreTest, AServerThatIsGoneIsNamedWithinTheReconnectTimeout) {
  auto server = std::make_unique<TcpStoreServer>(0);
  TcpStore s("127.0.0.1", server->port(), {.connect_timeout = 60s, .reconnect_timeout = 300ms, .timeout = 60s});
  s.set("k", "v");
  server.reset();
  const auto start = Clock::now();
  EXPECT_THROW(s.set("k", "w"), UnavailableError);  // the pooled connection is closed
  EXPECT_THROW(s.get("k", 1s), UnavailableError);   // a new one is refused for 300 ms
  EXPECT_LT(Clock::now() - start, 5s);
}

TEST(TcpStoreTest, ForkedProcessesMeetThroughTheStore) {
  // Fork before any thread runs (the server's comes after): a child of a multi-threaded process may
  // deadlock in malloc (ASan's allocator does), and the children retry until the server is there.
  int port = 0;
  { port = TcpStoreServer(0).port(); }  // a free port; its thread is joined again
  constexpr int kChildren = 3;
  std::vector<pid_t> pids;
  for (int c = 0; c < kChildren; ++c) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 1;
      try {
        TcpStore s("127.0.0.1", port, {.connect_timeout = 20s, .timeout = 20s});
        const auto n = s.add("arrived", 1);
        s.set("child/" + std::to_string(c), std::to_string(::getpid()));
        s.wait({"go"}, 20s);
        rc = (n >= 1 && n <= kChildren && s.get("go", 1s) == "now") ? 0 : 2;
      } catch (...) {
        rc = 3;
      }
      ::_exit(rc);
    }
    pids.push_back(pid);
  }
  // Reaps the children on every way out (a failed expectation must not leave them behind).
  struct Reaper {
    std::vector<pid_t>& pids;
    ~Reaper() {
      for (const pid_t pid : pids) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    }
  } reaper{pids};
  TcpStoreServer server(port);
  TcpStore s = client(server);
  s.wait({"child/0", "child/1", "child/2"}, 20s);
  EXPECT_EQ(s.get("arrived", 1s), std::to_string(kChildren));
  s.set("go", "now");
  while (!pids.empty()) {
    int status = 0;
    ASSERT_EQ(::waitpid(pids.back(), &status, 0), pids.back());
    pids.pop_back();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
}

TEST(TcpStoreTest, BindingATakenPortIsUnavailableNamingIt) {
  TcpStoreServer first(0);
  EXPECT_THROW_WITH(TcpStoreServer(first.port()), UnavailableError, std::to_string(first.port()));
}

}  // namespace
}  // namespace chorus::collective
