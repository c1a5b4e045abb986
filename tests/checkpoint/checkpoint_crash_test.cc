// Crash safety: a child process resumes from the latest checkpoint and saves in a loop; it is
// killed with SIGKILL at random moments (60 times). After every kill, latest_checkpoint() must
// name a complete checkpoint that restores, and its values must be exactly one saved state.
//
// The child is this same binary (re-executed with a filter), so no fork of a threaded process.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>

#include "tests/checkpoint/bundle_test_util.h"
#include <chorus/checkpoint/bundle.h>
#include <chorus/checkpoint/checkpoint_manager.h>
#include <chorus/checkpoint/checkpoint_state.h>

extern char** environ;

namespace chorus::train {
namespace {

constexpr const char* kDirEnv = "CHORUS_CRASH_TEST_DIR";
constexpr std::int64_t kElements = 1 << 18;  // 1 MiB per variable: saves take a while

struct State {
  Variable step = make_variable({.initial_value = Tensor::scalar<std::int64_t>(0), .name = "step", .trainable = false});
  Variable a = make_variable({.initial_value = Tensor::zeros({kElements}), .name = "a"});
  Variable b = make_variable({.initial_value = Tensor::zeros({kElements}, DType::kFloat64), .name = "b"});
};

// State n: every element of a and b is n, and so is step; saved as ckpt-n by save() without a
// number (the save counter numbers it, as in chorus-train), so a directory the kill left
// inconsistent shows as a refused or misnumbered save.
std::string save_state(CheckpointManager& manager, State& s, std::int64_t n) {
  s.step.assign(Tensor::scalar<std::int64_t>(n));
  s.a.assign(Tensor::full({kElements}, static_cast<double>(n)));
  s.b.assign(Tensor::full({kElements}, static_cast<double>(n), DType::kFloat64));
  return manager.save().value_or("");
}

// The child: resume, then save states n = step + 1, + 2, ...
TEST(CrashChild, SaveLoop) {
  const char* dir = std::getenv(kDirEnv);
  if (dir == nullptr) GTEST_SKIP() << "run by CheckpointCrashTest only";
  State s;
  Checkpoint ckpt({{"step", s.step}, {"a", s.a}, {"b", s.b}});
  CheckpointManager manager(ckpt, dir, 2);
  manager.restore_or_initialize();
  for (;;) save_state(manager, s, s.step.value().item<std::int64_t>() + 1);
}

TEST(CheckpointCrashTest, SigkillAtRandomMomentsNeverLeavesABrokenLatestCheckpointNorAWedgedDirectory) {
  testing::TempDir dir;
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> delay_ms(30, 400);
  std::string self = "/proc/self/exe";
  char exe[4096];
  const ssize_t len = ::readlink(self.c_str(), exe, sizeof(exe) - 1);
  ASSERT_GT(len, 0);
  exe[len] = '\0';
  const std::string env_entry = std::string(kDirEnv) + "=" + dir.path();
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  envp.push_back(const_cast<char*>(env_entry.c_str()));
  envp.push_back(nullptr);
  std::string filter = "--gtest_filter=CrashChild.SaveLoop";
  char* argv[] = {exe, filter.data(), nullptr};

  int restored = 0;
  std::int64_t last = 0;
  for (int trial = 0; trial < 60; ++trial) {
    pid_t pid = 0;
    ASSERT_EQ(::posix_spawn(&pid, exe, nullptr, nullptr, argv, envp.data()), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "trial " << trial << ": the child exited by itself (status " << status << ")";

    // Every checkpoint the state file names is complete: the manager deletes only what the state
    // file no longer names.
    if (const auto state = read_checkpoint_state(dir.path())) {
      for (const std::string& p : state->all_model_checkpoint_paths) {
        const std::string path = !p.empty() && p[0] == '/' ? p : dir / p;
        EXPECT_TRUE(std::filesystem::exists(index_filename(path)) && std::filesystem::exists(data_filename(path)))
            << "trial " << trial << ": the state file names " << p << ", which is incomplete";
        EXPECT_NO_THROW(BundleReader{path}) << "trial " << trial << ": " << p;
      }
    }
    const auto latest = latest_checkpoint(dir.path());
    if (!latest) {
      ASSERT_EQ(last, 0) << "trial " << trial << ": a checkpoint existed before and none is found now";
      continue;
    }
    State s;
    Checkpoint ckpt({{"step", s.step}, {"a", s.a}, {"b", s.b}});
    ASSERT_NO_THROW(ckpt.restore(*latest).assert_consumed()) << "trial " << trial << ": " << *latest;
    const std::int64_t n = s.step.value().item<std::int64_t>();
    EXPECT_EQ(*latest, dir / ("ckpt-" + std::to_string(n))) << "trial " << trial;
    EXPECT_GE(n, last) << "trial " << trial << ": went backwards";
    const auto a = s.a.read_value().to_vector<float>();
    const auto b = s.b.read_value().to_vector<double>();
    for (std::int64_t i = 0; i < kElements; i += 4099) {
      ASSERT_EQ(a[static_cast<std::size_t>(i)], static_cast<float>(n)) << "trial " << trial << " element " << i;
      ASSERT_EQ(b[static_cast<std::size_t>(i)], static_cast<double>(n)) << "trial " << trial << " element " << i;
    }
    // And the next save happens, numbered after it (a kill between a save's commit and its state
    // write once wedged the directory: every rerun refused to save over the unrecorded one).
    {
      State t;
      Checkpoint resumed({{"step", t.step}, {"a", t.a}, {"b", t.b}});
      CheckpointManager manager(resumed, dir.path(), 2);
      const auto from = manager.restore_or_initialize();
      ASSERT_TRUE(from.has_value()) << "trial " << trial;
      const std::int64_t m = t.step.value().item<std::int64_t>();
      EXPECT_GE(m, n) << "trial " << trial << ": the manager resumed from an older checkpoint than the latest";
      std::string saved;
      ASSERT_NO_THROW(saved = save_state(manager, t, m + 1)) << "trial " << trial << ": resumed from " << *from;
      EXPECT_EQ(saved, dir / ("ckpt-" + std::to_string(m + 1))) << "trial " << trial;
      last = m + 1;
    }
    ++restored;
  }
  EXPECT_GE(restored, 40) << "too few trials got as far as a first checkpoint to test anything";
  RecordProperty("restored_trials", restored);
  RecordProperty("last_step", static_cast<int>(last));
}

}  // namespace
}  // namespace chorus::train
