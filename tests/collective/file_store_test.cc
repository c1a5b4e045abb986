// The file store (collective/store/file_store.h) between threads and forked processes, its file
// format under damage, and the prefix view (prefix_store.h) over it.
#include <chorus/collective/store/file_store.h>

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "tests/core/test_util.h"
#include <chorus/collective/store/prefix_store.h>
#include <chorus/core/error.h>

namespace chorus::collective {
namespace {

using namespace std::chrono_literals;
using chorus::testing::TempDir;
using Clock = std::chrono::steady_clock;

TEST(FileStoreTest, ContractOnOneStore) {
  TempDir dir;
  FileStore s(dir.str("job/attempt0"));  // parents created
  EXPECT_EQ(s.describe(), "file store " + dir.str("job/attempt0"));
  s.set("rank/0", std::string("\0v\xff", 3));
  EXPECT_EQ(s.get("rank/0", 0ms), std::string("\0v\xff", 3));
  s.set("rank/0", "new");
  EXPECT_EQ(s.get("rank/0"), "new");
  EXPECT_EQ(s.add("n", 3), 3);
  EXPECT_EQ(s.add("n", -4), -1);
  EXPECT_TRUE(s.check({"rank/0", "n"}));
  EXPECT_FALSE(s.check({"n", "absent"}));
  s.set("word", "x");
  EXPECT_THROW_WITH(s.add("word", 1), InvalidArgumentError, "\"word\"");
  EXPECT_THROW(s.set("", "v"), InvalidArgumentError);
  EXPECT_THROW(s.get(std::string(Store::kMaxKeyBytes + 1, 'k'), 0ms), InvalidArgumentError);
}

TEST(FileStoreTest, GetWaitsForASetFromAnotherThreadAndTimesOutNamingKeys) {
  TempDir dir;
  FileStore s(dir.path());
  std::thread t([&] {
    std::this_thread::sleep_for(150ms);
    FileStore(dir.path()).set("late", "here");
  });
  EXPECT_EQ(s.get("late", 10s), "here");
  t.join();
  const auto start = Clock::now();
  EXPECT_THROW_WITH(s.wait({"late", "never"}, 200ms), DeadlineExceededError, "\"never\"", dir.path());
  EXPECT_GE(Clock::now() - start, 200ms);
  EXPECT_LT(Clock::now() - start, 2s);
}

TEST(FileStoreTest, AddIsAtomicAcrossThreadsAndProcesses) {
  TempDir dir;
  constexpr int kProcs = 3, kThreads = 3, kAdds = 50;
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 0;
      try {
        FileStore s(dir.path());
        for (int i = 0; i < kAdds; ++i) s.add("counter", 1);
      } catch (...) {
        rc = 1;
      }
      ::_exit(rc);
    }
    pids.push_back(pid);
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      FileStore s(dir.path());
      for (int i = 0; i < kAdds; ++i) s.add("counter", 1);
    });
  for (auto& t : threads) t.join();
  for (const pid_t pid : pids) {  // no early return above: every child is reaped here
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(FileStore(dir.path()).get("counter", 0ms), std::to_string((kProcs + kThreads) * kAdds));
}

TEST(FileStoreTest, DamagedOrForeignKeyFilesAreDataLossNamingTheFile) {
  TempDir dir;
  FileStore s(dir.path());
  s.set("k", "value");
  const std::string file = s.file_of("k");
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto write = [&](const std::string& b) { std::ofstream(file, std::ios::binary | std::ios::trunc) << b; };
  write(bytes.substr(0, 4));  // shorter than the header
  EXPECT_THROW_WITH(s.get("k", 0ms), DataLossError, file);
  write("not a store file at all");
  EXPECT_THROW_WITH(s.get("k", 0ms), DataLossError, file, "header");
  std::string other = bytes;
  other[9] = 'x';  // the stored key is not "k": a collision or damage
  write(other);
  EXPECT_THROW_WITH(s.get("k", 0ms), DataLossError, "does not hold key \"k\"");
  std::string long_key = bytes;
  long_key[5] = '\x7f';  // key length past the file
  write(long_key);
  EXPECT_THROW(s.get("k", 0ms), DataLossError);
  write(bytes);
  EXPECT_EQ(s.get("k", 0ms), "value");
}

TEST(FileStoreTest, AnUncreatableDirectoryIsUnavailable) {
  TempDir dir;
  std::ofstream(dir / "file") << "x";
  EXPECT_THROW_WITH(FileStore(dir.str("file/sub")), UnavailableError, dir.str("file/sub"));
}

TEST(PrefixStoreTest, KeysAreScopedAndErrorsNameTheFullKeys) {
  TempDir dir;
  auto base = std::make_shared<FileStore>(dir.path());
  PrefixStore a("attempt/0", base), b("attempt/1", base);
  a.set("rank/0", "old");
  EXPECT_FALSE(b.check({"rank/0"}));
  EXPECT_EQ(base->get("attempt/0/rank/0", 0ms), "old");
  EXPECT_EQ(a.add("n", 2), 2);
  EXPECT_EQ(b.add("n", 5), 5);
  EXPECT_THROW_WITH(b.get("rank/0", 50ms), DeadlineExceededError, "attempt/1/rank/0");
  EXPECT_THROW_WITH(b.wait({"x"}, 10ms), DeadlineExceededError, "attempt/1/x");
  EXPECT_EQ(b.describe(), "file store " + dir.path() + ", keys under attempt/1/");
  EXPECT_THROW(a.set("", "v"), InvalidArgumentError);
  EXPECT_THROW(PrefixStore("", base), InvalidArgumentError);
  EXPECT_THROW(PrefixStore("p", nullptr), InvalidArgumentError);
}

}  // namespace
}  // namespace chorus::collective
