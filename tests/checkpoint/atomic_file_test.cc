// write_file_atomically / read_file: contents, replacement, no temporaries left, typed errors,
// and a failed write leaving the old file as it was.
#include <chorus/checkpoint/atomic_file.h>

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>

#include "tests/checkpoint/bundle_test_util.h"
#include <chorus/core/error.h>

namespace chorus::train {
namespace {

using testing::TempDir;

TEST(AtomicFile, WriteReadReplace) {
  TempDir dir;
  const std::string path = dir / "checkpoint";
  write_file_atomically(path, "model_checkpoint_path: \"ckpt-1\"\n");
  EXPECT_EQ(read_file(path), "model_checkpoint_path: \"ckpt-1\"\n");
  const std::string binary("a\0b\xff\n", 5);
  write_file_atomically(path, binary);
  EXPECT_EQ(read_file(path), binary);
  write_file_atomically(path, "");
  EXPECT_EQ(read_file(path), "");
  const std::string big(3 << 20, 'z');
  write_file_atomically(path, big);
  EXPECT_EQ(read_file(path), big);
  EXPECT_EQ(dir.list(), std::vector<std::string>{"checkpoint"});  // no temporaries left
}

TEST(AtomicFile, Errors) {
  TempDir dir;
  EXPECT_THROW(read_file(dir / "missing"), NotFoundError);
  EXPECT_THROW(write_file_atomically(dir / "no/such/dir/file", "x"), NotFoundError);
  EXPECT_THROW(read_file(dir.path()), InvalidArgumentError);  // a directory is not a file to read
}

TEST(AtomicFile, FailedWriteLeavesTheOldFile) {
  TempDir dir;
  const std::string path = dir / "state";
  write_file_atomically(path, "old");
  ::signal(SIGXFSZ, SIG_IGN);
  rlimit old{}, r{};
  ::getrlimit(RLIMIT_FSIZE, &old);
  r = old;
  r.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &r), 0);
  EXPECT_THROW(write_file_atomically(path, std::string(100000, 'n')), ResourceExhaustedError);
  ::setrlimit(RLIMIT_FSIZE, &old);
  EXPECT_EQ(read_file(path), "old");
  EXPECT_EQ(dir.list(), std::vector<std::string>{"state"});
}

TEST(AtomicFile, Helpers) {
  EXPECT_EQ(directory_of("/a/b/c"), "/a/b");
  EXPECT_EQ(directory_of("c"), ".");
  EXPECT_EQ(directory_of("/c"), "/");
  const std::string t1 = temporary_filename("/d/x.index"), t2 = temporary_filename("/d/x.index");
  EXPECT_EQ(t1.rfind("/d/x.index.tempstate", 0), 0u);
  EXPECT_EQ(t1.size(), std::string("/d/x.index.tempstate").size() + 16);
  EXPECT_NE(t1, t2);
  TempDir dir;
  EXPECT_FALSE(remove_file_if_exists(dir / "nope"));
  testing::spit(dir / "yes", "1");
  EXPECT_TRUE(remove_file_if_exists(dir / "yes"));
}

}  // namespace
}  // namespace chorus::train
