// Crash safety of BundleWriter: nothing partial is ever visible under the prefix, failures clean
// up their temporaries, and the helpers that tidy a checkpoint directory.
//
// Failures are injected without root-sensitive tricks: RLIMIT_FSIZE (writes past it fail with
// EFBIG, also for root), a directory that vanishes, a directory where the index must go. Each
// TEST runs in its own process (gtest_discover_tests), so changing the rlimit is contained.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>

#include "tests/checkpoint/bundle_test_util.h"
#include <chorus/checkpoint/bundle.h>
#include <chorus/core/error.h>

namespace chorus::train {
namespace {

using testing::TempDir;

bool has_tempstate(const TempDir& dir) {
  for (const std::string& n : dir.list())
    if (n.find(".tempstate") != std::string::npos) return true;
  return false;
}

// Limits the size of files this process writes (EFBIG past it).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::signal(SIGXFSZ, SIG_IGN);  // else the process is killed instead of write() failing
    ::getrlimit(RLIMIT_FSIZE, &old_);
    rlimit r = old_;
    r.rlim_cur = bytes;
    EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &r), 0);
  }
  ~FileSizeLimit() { ::setrlimit(RLIMIT_FSIZE, &old_); }

 private:
  rlimit old_{};
};

TEST(BundleCrashSafety, UnfinishedWriterRemovesItsTemporaries) {
  TempDir dir;
  {
    BundleWriter w(dir / "ckpt-1");
    w.add("a", Tensor::zeros({1000}, DType::kFloat32, "/CPU:0"));
    w.add("b", Tensor::zeros({1 << 20}, DType::kFloat32, "/CPU:0"));  // written straight through
    EXPECT_TRUE(has_tempstate(dir));
  }
  EXPECT_TRUE(dir.list().empty());
  EXPECT_FALSE(bundle_exists(dir / "ckpt-1"));
}

TEST(BundleCrashSafety, FinishNeverShowsAnIndexBeforeItsData) {
  // After finish: exactly the two final files, nothing temporary.
  TempDir dir;
  BundleWriter w(dir / "ckpt-1");
  w.add("a", Tensor::ones({3}, DType::kFloat32, "/CPU:0"));
  EXPECT_FALSE(bundle_exists(dir / "ckpt-1"));
  w.finish();
  EXPECT_EQ(dir.list(), (std::vector<std::string>{"ckpt-1.data-00000-of-00001", "ckpt-1.index"}));
}

TEST(BundleCrashSafety, DiskFullDuringAddKeepsThePreviousBundle) {
  TempDir dir;
  const std::string prefix = dir / "ckpt-1";
  {
    BundleWriter w(prefix);
    w.add("a", Tensor::full({4}, 1.0, DType::kFloat32, "/CPU:0"));
    w.finish();
  }
  const std::string old_index = testing::slurp(index_filename(prefix));
  {
    FileSizeLimit limit(64 * 1024);
    BundleWriter w(prefix);
    // 4 MiB: written straight through, fails in add() with EFBIG.
    EXPECT_THROW(w.add("a", Tensor::zeros({1 << 20}, DType::kFloat32, "/CPU:0")), ResourceExhaustedError);
    EXPECT_THROW(w.finish(), FailedPreconditionError);  // the writer is spent
  }
  EXPECT_FALSE(has_tempstate(dir));
  EXPECT_EQ(testing::slurp(index_filename(prefix)), old_index);
  EXPECT_EQ(BundleReader(prefix).read("a").to_vector<float>(), (std::vector<float>{1, 1, 1, 1}));
}

TEST(BundleCrashSafety, DiskFullDuringFinishKeepsThePreviousBundle) {
  TempDir dir;
  const std::string prefix = dir / "ckpt-1";
  {
    BundleWriter w(prefix);
    w.add("a", Tensor::full({4}, 2.0, DType::kFloat32, "/CPU:0"));
    w.finish();
  }
  {
    FileSizeLimit limit(64 * 1024);
    BundleWriter w(prefix);
    // Small tensors are buffered: nothing reaches the disk before finish().
    for (int i = 0; i < 10; ++i) w.add("t" + std::to_string(i), Tensor::zeros({4096}, DType::kFloat32, "/CPU:0"));
    EXPECT_THROW(w.finish(), ResourceExhaustedError);
  }
  EXPECT_EQ(dir.list(), (std::vector<std::string>{"ckpt-1.data-00000-of-00001", "ckpt-1.index"}));
  EXPECT_EQ(BundleReader(prefix).read("a").to_vector<float>(), (std::vector<float>{2, 2, 2, 2}));
}

TEST(BundleCrashSafety, DirectoryVanishingBeforeFinish) {
  auto dir = std::make_unique<TempDir>();
  const std::string path = dir->path();
  const std::string prefix = *dir / "ckpt-1";
  BundleWriter w(prefix);
  w.add("a", Tensor::ones({3}, DType::kFloat32, "/CPU:0"));
  std::filesystem::remove_all(path);
  EXPECT_THROW(w.finish(), NotFoundError);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(bundle_exists(prefix));
}

TEST(BundleCrashSafety, IndexThatCannotBeReplacedLeavesNoPartialBundle) {
  TempDir dir;
  const std::string prefix = dir / "ckpt-1";
  // A non-empty directory where the index must go: the commit fails.
  std::filesystem::create_directories(index_filename(prefix) + "/x");
  BundleWriter w(prefix);
  w.add("a", Tensor::ones({3}, DType::kFloat32, "/CPU:0"));
  EXPECT_THROW(w.finish(), Error);
  EXPECT_EQ(dir.list(), std::vector<std::string>{"ckpt-1.index"});  // just the directory we made
  EXPECT_FALSE(bundle_exists(prefix));
}

TEST(BundleCrashSafety, RewritingAPrefixReplacesTheBundle) {
  TempDir dir;
  const std::string prefix = dir / "ckpt-1";
  for (float v : {1.f, 2.f}) {
    BundleWriter w(prefix);
    w.add("a", Tensor::full({2}, v, DType::kFloat32, "/CPU:0"));
    w.finish();
  }
  EXPECT_EQ(BundleReader(prefix).read("a").to_vector<float>(), (std::vector<float>{2, 2}));
  EXPECT_EQ(dir.list().size(), 2u);
}

TEST(BundleCrashSafety, RemoveStrayTemporaries) {
  TempDir dir;
  testing::spit(dir / "ckpt-1.index.tempstate0123456789abcdef", "x");
  testing::spit(dir / "ckpt-1.data-00000-of-00001.tempstate42", "x");
  testing::spit(dir / "checkpoint", "model_checkpoint_path: \"ckpt-0\"\n");
  testing::spit(dir / "ckpt-0.index", "x");
  EXPECT_EQ(remove_stray_temporaries(dir.path()), 2);
  EXPECT_EQ(dir.list(), (std::vector<std::string>{"checkpoint", "ckpt-0.index"}));
  EXPECT_EQ(remove_stray_temporaries(dir.path()), 0);
  EXPECT_THROW(remove_stray_temporaries(dir / "missing"), NotFoundError);
}

TEST(BundleCrashSafety, DeleteBundle) {
  TempDir dir;
  for (const char* name : {"ckpt-1", "ckpt-10"}) {
    BundleWriter w(dir / name);
    w.add("a", Tensor::ones({3}, DType::kFloat32, "/CPU:0"));
    w.finish();
  }
  testing::spit(dir / "ckpt-1.data-00001-of-00002", "x");  // another shard of the same bundle
  delete_bundle(dir / "ckpt-1");
  EXPECT_FALSE(bundle_exists(dir / "ckpt-1"));
  EXPECT_EQ(dir.list(), (std::vector<std::string>{"ckpt-10.data-00000-of-00001", "ckpt-10.index"}));
  delete_bundle(dir / "ckpt-1");  // missing files are not an error
  delete_bundle(dir / "nothing/ckpt-1");
  EXPECT_TRUE(bundle_exists(dir / "ckpt-10"));
}

TEST(BundleCrashSafety, SyncDirectory) {
  TempDir dir;
  EXPECT_NO_THROW(sync_directory(dir.path()));
  EXPECT_THROW(sync_directory(dir / "missing"), NotFoundError);
}

}  // namespace
}  // namespace chorus::train
