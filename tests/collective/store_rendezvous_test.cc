// The store rendezvous (collective/store/store_rendezvous.h): workers as threads of one process
// and as forked processes, over the TCP store that rank 0 serves or a shared file store; and the
// hostile cases — a duplicate rank, world sizes that disagree, a worker (or rank 0) that never
// comes, a restart attempt that must not see the previous one's keys.
#include <chorus/collective/store/store_rendezvous.h>

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

#include <functional>
#include <thread>

#include "tests/core/test_util.h"
#include <chorus/collective/store/file_store.h>
#include <chorus/collective/store/tcp_store.h>
#include <chorus/core/error.h>

namespace chorus::collective {
namespace {

using namespace std::chrono_literals;
using chorus::testing::TempDir;
using Clock = std::chrono::steady_clock;

int free_port() { return TcpStoreServer(0).port(); }

struct Outcome {
  std::optional<StoreRendezvous> result;
  std::string error;  // "" when it succeeded
  ErrorCode code{};
};

// Runs one rendezvous per options entry, each in its own thread; outcomes in the same order.
std::vector<Outcome> run_all(const std::vector<StoreRendezvousOptions>& all) {
  std::vector<Outcome> out(all.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < all.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        out[i].result = store_rendezvous(all[i]);
      } catch (const Error& e) {
        out[i].error = e.what();
        out[i].code = e.code();
      }
    });
  for (auto& t : threads) t.join();
  return out;
}

StoreRendezvousOptions options(int rank, int size, int port, std::chrono::milliseconds timeout = 10s) {
  StoreRendezvousOptions o;
  o.rank = rank;
  o.world_size = size;
  o.store_host = "127.0.0.1";
  o.store_port = port;
  o.timeout = timeout;
  o.address = "worker" + std::to_string(rank) + ":2222";
  return o;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(StoreRendezvousTest, ThreeWorkersOverTheTcpStoreOfRankZero) {
  const int port = free_port();
  // Rank 2 and 1 start first: they retry until rank 0 serves.
  auto out = run_all({options(2, 3, port), options(1, 3, port), options(0, 3, port)});
  for (const auto& o : out) ASSERT_TRUE(o.result) << o.error;
  for (int i = 0; i < 3; ++i) {
    const StoreRendezvous& r = *out[static_cast<std::size_t>(i)].result;
    EXPECT_EQ(r.size, 3);
    EXPECT_EQ(r.rank, 2 - i);
    ASSERT_EQ(r.workers.size(), 3u);
    for (int w = 0; w < 3; ++w) {
      EXPECT_EQ(r.workers[static_cast<std::size_t>(w)].rank, w);
      EXPECT_EQ(r.workers[static_cast<std::size_t>(w)].address, "worker" + std::to_string(w) + ":2222");
      EXPECT_EQ(r.workers[static_cast<std::size_t>(w)].pid, ::getpid());
    }
    EXPECT_EQ(r.server != nullptr, r.rank == 0);
  }
  // The stores are one store: what rank 1 sets, rank 2 reads (under this attempt's prefix).
  out[1].result->store->set("hello", "from 1");
  EXPECT_EQ(out[0].result->store->get("hello", 1s), "from 1");
  EXPECT_TRUE(contains(out[0].result->store->describe(), "attempt/0/"));
  // Goodbye: rank 0 (out[2]) returns only after the others left.
  EXPECT_THROW_WITH(out[2].result->leave(100ms), DeadlineExceededError, "for the other 2 workers", "; 0 did");
  out[0].result->leave(1s);
  std::thread last([&] {
    std::this_thread::sleep_for(100ms);
    out[1].result->leave(1s);
  });
  const auto start = Clock::now();
  out[2].result->leave(5s);
  EXPECT_GE(Clock::now() - start, 50ms);
  last.join();
}

// serve = false (an agent serves the store, TORCHELASTIC_USE_AGENT_STORE): rank 0 connects like
// the others, and the store outlives every worker's result, rank 0's included.
TEST(StoreRendezvousTest, RankZeroConnectsToAStoreServedByTheAgent) {
  auto agent = std::make_unique<TcpStoreServer>(0);
  std::vector<StoreRendezvousOptions> all;
  for (int r : {1, 0}) {
    all.push_back(options(r, 2, agent->port()));
    all.back().serve = false;
  }
  auto out = run_all(all);
  for (const auto& o : out) ASSERT_TRUE(o.result) << o.error;
  EXPECT_EQ(out[1].result->rank, 0);
  EXPECT_EQ(out[1].result->server, nullptr);
  out[1].result->store->set("from-rank-0", "x");
  out[1].result.reset();  // rank 0 is gone: the store is not
  EXPECT_EQ(out[0].result->store->get("from-rank-0", 1s), "x");
  // Without an agent nobody serves: rank 0 is named with the store's address after the timeout.
  StoreRendezvousOptions alone = options(0, 2, free_port(), 300ms);
  alone.serve = false;
  EXPECT_THROW(store_rendezvous(alone), Error);
}

TEST(StoreRendezvousTest, OneWorkerNeedsNoPort) {
  StoreRendezvousOptions o;
  o.timeout = 5s;
  const StoreRendezvous r = store_rendezvous(o);
  EXPECT_EQ(r.size, 1);
  ASSERT_NE(r.server, nullptr);
  r.store->set("k", "v");
  EXPECT_EQ(r.store->get("k", 0ms), "v");
}

TEST(StoreRendezvousTest, ADuplicateRankFailsOnBothClaimantsNamingBoth) {
  const int port = free_port();
  auto a = options(1, 3, port), b = options(1, 3, port);
  a.address = "first:1";
  b.address = "second:1";
  const auto start = Clock::now();
  auto out = run_all({options(0, 3, port), a, b});
  EXPECT_LT(Clock::now() - start, 8s);  // the error is published: nobody waits for the timeout
  for (const auto& o : out) {
    EXPECT_EQ(o.code, ErrorCode::kInvalidArgument) << o.error;
    EXPECT_TRUE(contains(o.error, "rank 1 was claimed twice")) << o.error;
    EXPECT_TRUE(contains(o.error, "first:1") && contains(o.error, "second:1")) << o.error;
  }
}

TEST(StoreRendezvousTest, WorldSizesThatDisagreeAreNamedOnBoth) {
  const int port = free_port();
  auto out = run_all({options(0, 2, port), options(1, 3, port)});
  for (const auto& o : out) {
    EXPECT_EQ(o.code, ErrorCode::kInvalidArgument) << o.error;
    EXPECT_TRUE(contains(o.error, "world size disagrees")) << o.error;
    EXPECT_TRUE(contains(o.error, "rank 0 says 2") && contains(o.error, "rank 1 says 3")) << o.error;
  }
  StoreRendezvousOptions tf = options(0, 3, port);
  tf.addresses = {"a:1", "b:1"};  // TF_CONFIG lists two workers
  EXPECT_THROW_WITH(store_rendezvous(tf), InvalidArgumentError, "world size is 3", "lists 2 workers");
  EXPECT_THROW_WITH(store_rendezvous(options(3, 3, port)), InvalidArgumentError, "rank 3 of world size 3");
}

TEST(StoreRendezvousTest, AWorkerThatNeverArrivesIsNamedWithItsAddressAfterTheTimeout) {
  const int port = free_port();
  std::vector<StoreRendezvousOptions> all = {options(0, 3, port, 600ms), options(1, 3, port, 600ms)};
  for (auto& o : all) o.addresses = {"w0:2222", "w1:2222", "w2:2222"};
  const auto start = Clock::now();
  auto out = run_all(all);
  EXPECT_GE(Clock::now() - start, 550ms);
  EXPECT_LT(Clock::now() - start, 5s);
  for (const auto& o : out) {
    EXPECT_EQ(o.code, ErrorCode::kDeadlineExceeded) << o.error;
    EXPECT_TRUE(contains(o.error, "rank 2 (w2:2222) did not arrive within 600 ms")) << o.error;
    EXPECT_FALSE(contains(o.error, "rank 1 (")) << o.error;
  }
}

TEST(StoreRendezvousTest, RankZeroThatNeverComesIsNamedWithTheStoreAddress) {
  const int port = free_port();
  auto o = options(1, 2, port, 400ms);
  o.addresses = {"chief:" + std::to_string(port), "w1:1"};
  EXPECT_THROW_WITH(store_rendezvous(o), DeadlineExceededError, "rank 0 (chief:", "did not arrive within 400 ms",
                    "127.0.0.1:" + std::to_string(port));
}

TEST(StoreRendezvousTest, ARestartAttemptDoesNotSeeThePreviousAttemptsKeys) {
  TempDir dir;
  auto shared = std::make_shared<FileStore>(dir.path());
  std::vector<StoreRendezvousOptions> first = {options(0, 2, 0), options(1, 2, 0)};
  for (auto& o : first) o.store = shared;
  for (const auto& o : run_all(first)) ASSERT_TRUE(o.result) << o.error;
  // Attempt 1 with rank 1 gone: attempt 0's registration of rank 1 must not count.
  auto again = options(0, 2, 0, 300ms);
  again.store = shared;
  again.attempt = "1";
  EXPECT_THROW_WITH(store_rendezvous(again), DeadlineExceededError, "rank 1 did not arrive", "attempt/1/");
  // The same attempt again does see them (a duplicate rank 0 now).
  auto same = options(0, 2, 0, 2s);
  same.store = shared;
  EXPECT_THROW_WITH(store_rendezvous(same), InvalidArgumentError, "rank 0 was claimed twice");
}

TEST(StoreRendezvousTest, ForkedProcessesRendezvousOverTcp) {
  const int port = free_port();
  constexpr int kSize = 3;
  std::vector<pid_t> pids;
  for (int rank = 1; rank < kSize; ++rank) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 1;
      try {
        const StoreRendezvous r = store_rendezvous(options(rank, kSize, port));
        r.store->add("done", 1);
        rc = (r.size == kSize && r.workers.size() == kSize && r.workers[0].pid == ::getppid()) ? 0 : 2;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
        rc = 3;
      }
      ::_exit(rc);
    }
    pids.push_back(pid);
  }
  struct Reaper {  // the children are reaped on every way out
    std::vector<pid_t>& pids;
    ~Reaper() {
      for (const pid_t pid : pids) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    }
  } reaper{pids};
  // Rank 0 (with its server thread) starts after the forks: see tcp_store_test's fork test.
  const StoreRendezvous r = store_rendezvous(options(0, kSize, port));
  EXPECT_EQ(r.workers.size(), static_cast<std::size_t>(kSize));
  while (!pids.empty()) {
    int status = 0;
    ASSERT_EQ(::waitpid(pids.back(), &status, 0), pids.back());
    pids.pop_back();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  EXPECT_EQ(r.store->get("done", 1s), std::to_string(kSize - 1));
  EXPECT_NE(r.workers[1].pid, r.workers[2].pid);
}

TEST(StoreRendezvousTest, WorkerRecordsRoundTripAndGarbageIsDataLoss) {
  const RendezvousWorker w{.rank = 2, .host = "node7", .pid = 4242, .address = "10.0.0.2:2222"};
  int size = 0;
  const RendezvousWorker back = internal::parse_worker(internal::format_worker(w, 5), "k", &size);
  EXPECT_EQ(back.rank, 2);
  EXPECT_EQ(back.host, "node7");
  EXPECT_EQ(back.pid, 4242);
  EXPECT_EQ(back.address, "10.0.0.2:2222");
  EXPECT_EQ(size, 5);
  for (const std::string bad : {"", "rank=x\n", "rank=1\nsize=2\nhost=h\npid=-3\naddress=a\n",
                                "rank=1\nsize=2\nhost=h\npid=3\naddress=a\nextra", "garbage"})
    EXPECT_THROW_WITH(internal::parse_worker(bad, "attempt/0/rdzv/rank/1/1", &size), DataLossError,
                      "attempt/0/rdzv/rank/1/1");
}

}  // namespace
}  // namespace chorus::collective
