// Sharded checkpoints across separate mpirun jobs (docs/checkpoints.md "Sharded checkpoints").
//
// Resharding: a job of 2 workers (2 CPU devices each, ZeRO stage 3) saves; a job of 3 workers (1
// device each) restores it at stages 3 and 0 and saves it again as 3 data files; this process alone
// (no strategy) restores that one. The children are ShardedJobChild.* of sharded_checkpoint_mpi.cc.
//
// Crash safety: a job of 2 workers (`mpirun -np 2`, 2 CPU devices each, ZeRO stage 3: every worker writes its own
// data file) resumes from the latest checkpoint and saves in a loop; one rank — the chief or the
// other, in turn — kills itself with SIGKILL at a random moment, and mpirun ends the job. After
// every kill, latest_checkpoint() names a complete checkpoint (its index and every data file)
// that restores onto one process and holds exactly one saved state, and a manager resumes from it
// and saves the next one. The child is ShardedCrashChild.SaveLoop of sharded_checkpoint_mpi.cc.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include "tests/checkpoint/bundle_test_util.h"
#include <chorus/checkpoint/bundle.h>
#include <chorus/checkpoint/checkpoint_manager.h>

extern char** environ;

namespace chorus::train {
namespace {

struct State {
  Variable step = make_variable({.initial_value = Tensor::scalar<std::int64_t>(0), .name = "step", .trainable = false});
  Variable a = make_variable({.initial_value = Tensor::zeros({512, 1024}), .name = "a"});
  Variable b = make_variable({.initial_value = Tensor::zeros({1000, 333}), .name = "b"});
};

// Runs `np` processes of the child test `test` with the environment `env`; returns mpirun's wait
// status (killed after 120 s if it hangs).
int run_mpi_child(int np, const std::string& test, const std::vector<std::string>& env) {
#if defined(CHORUS_MPIEXEC) && defined(CHORUS_SHARDED_MPI_BIN)
  std::vector<std::string> args{CHORUS_MPIEXEC, "--oversubscribe"};
  if (::geteuid() == 0) args.push_back("--allow-run-as-root");
  for (const std::string& e : env) {
    args.push_back("-x");
    args.push_back(e);
  }
  for (const std::string& a :
       {std::string("-np"), std::to_string(np), std::string(CHORUS_SHARDED_MPI_BIN), "--gtest_filter=" + test})
    args.push_back(a);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (::posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return -1;
  int status = 0;
  for (int waited = 0; ::waitpid(pid, &status, WNOHANG) == 0; waited += 50) {
    if (waited > 120000) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ADD_FAILURE() << "the job hung after the kill";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return status;
#else
  (void)np, (void)test, (void)env;
  return -1;
#endif
}

// The crash drill's job: saves in a loop until `victim` kills itself after `delay_us`.
int run_job(const std::string& dir, int victim, int delay_us) {
  return run_mpi_child(2, "ShardedCrashChild.SaveLoop",
                       {"CHORUS_SHARDED_CRASH_DIR=" + dir, "CHORUS_SHARDED_CRASH_VICTIM=" + std::to_string(victim),
                        "CHORUS_SHARDED_CRASH_DELAY_US=" + std::to_string(delay_us)});
}

TEST(ShardedCheckpointJobs, ASaveOfTwoWorkersRestoresOntoThreeAndThreeOntoOne) {
#if !defined(CHORUS_MPIEXEC) || !defined(CHORUS_SHARDED_MPI_BIN)
  GTEST_SKIP() << "built without MPI";
#endif
  testing::TempDir dir;
  const std::vector<std::string> env{"CHORUS_SHARDED_JOB_DIR=" + dir.path()};
  // A child's gtest failure makes it exit 1, and mpirun with it.
  int status = run_mpi_child(2, "ShardedJobChild.Save", env);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the saving job (np 2) failed: " << status;
  EXPECT_TRUE(std::filesystem::exists(dir / "sharded.data-00001-of-00002"));
  status = run_mpi_child(3, "ShardedJobChild.Restore", env);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the restoring job (np 3) failed: " << status;
  EXPECT_TRUE(std::filesystem::exists(dir / "resharded.data-00002-of-00003"));
  // One process, no strategy: every value read from the slices of the 3 data files.
  const BundleReader gathered(dir / "gathered");
  const std::vector<std::string> names{"p0", "p1", "p2", "p3", "p4", "step"};
  std::vector<Variable> vars;
  std::vector<TrackableChild> children;
  for (const std::string& name : names) {
    const Tensor want = gathered.read(name + "/.ATTRIBUTES/VARIABLE_VALUE");
    vars.push_back(make_variable(
        {.initial_value = Tensor::zeros(want.shape(), want.dtype()), .name = name, .trainable = name != "step"}));
  }
  for (const Variable& v : vars) children.push_back({v.name(), TrackableRef(v)});
  Checkpoint(children).read(dir / "resharded").assert_consumed();
  for (std::size_t i = 0; i < names.size(); ++i) {
    const Tensor want = gathered.read(names[i] + "/.ATTRIBUTES/VARIABLE_VALUE");
    if (want.dtype() == DType::kInt64) {
      EXPECT_EQ(vars[i].value().to_vector<std::int64_t>(), want.to_vector<std::int64_t>()) << names[i];
    } else {
      EXPECT_EQ(vars[i].value().to_vector<float>(), want.to_vector<float>()) << names[i];
    }
  }
}

TEST(ShardedCheckpointCrash, AWorkerKilledMidSaveNeverLeavesABrokenLatestCheckpoint) {
#if !defined(CHORUS_MPIEXEC) || !defined(CHORUS_SHARDED_MPI_BIN)
  GTEST_SKIP() << "built without MPI";
#endif
  testing::TempDir dir;
  std::mt19937 rng(20261128);
  std::uniform_int_distribution<int> delay_us(100000, 1500000);
  int restored = 0, interrupted = 0;
  std::int64_t last = 0;
  constexpr int kTrials = 12;
  for (int trial = 0; trial < kTrials; ++trial) {
    const int status = run_job(dir.path(), trial % 2, delay_us(rng));
    ASSERT_NE(status, -1) << "cannot start mpirun";
    ASSERT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "trial " << trial << ": the job ended by itself";
    // A save cut short leaves temporary files or data files without an index (never an index).
    bool cut = false;
    for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
      const std::string name = e.path().filename().string();
      const auto data = name.find(".data-");
      cut = cut || name.find(".tempstate") != std::string::npos ||
            (data != std::string::npos && !bundle_exists((dir / name.substr(0, data))));
    }
    interrupted += cut ? 1 : 0;
    const auto latest = latest_checkpoint(dir.path());
    if (!latest) {
      ASSERT_EQ(last, 0) << "trial " << trial << ": a checkpoint existed before and none is found now";
      continue;
    }
    ASSERT_NO_THROW(verify_bundle(*latest)) << "trial " << trial << ": " << *latest;  // every data file, every CRC
    State s;  // one process, no strategy: each value read from the slices of both workers' files
    Checkpoint ckpt({{"step", s.step}, {"a", s.a}, {"b", s.b}});
    ASSERT_NO_THROW(ckpt.restore(*latest).assert_consumed()) << "trial " << trial << ": " << *latest;
    const std::int64_t n = s.step.value().item<std::int64_t>();
    EXPECT_EQ(*latest, dir / ("ckpt-" + std::to_string(n))) << "trial " << trial;
    EXPECT_GE(n, last) << "trial " << trial << ": went backwards";
    const auto a = s.a.read_value().to_vector<float>();
    const auto b = s.b.read_value().to_vector<float>();
    for (std::size_t i = 0; i < a.size(); i += 4099) ASSERT_EQ(a[i], static_cast<float>(n)) << "trial " << trial;
    for (std::size_t i = 0; i < b.size(); i += 4099) ASSERT_EQ(b[i], static_cast<float>(n)) << "trial " << trial;
    ASSERT_EQ(b.back(), static_cast<float>(n)) << "trial " << trial;
    {  // a manager resumes from it (no wedged directory) and saves the next state
      State t;
      Checkpoint resumed({{"step", t.step}, {"a", t.a}, {"b", t.b}});
      CheckpointManager manager(resumed, dir.path(), 2);
      ASSERT_TRUE(manager.restore_or_initialize().has_value()) << "trial " << trial;
      const std::int64_t m = t.step.value().item<std::int64_t>();
      EXPECT_GE(m, n) << "trial " << trial;
      t.step.assign(Tensor::scalar<std::int64_t>(m + 1));
      t.a.assign(Tensor::full({512, 1024}, static_cast<double>(m + 1)));
      t.b.assign(Tensor::full({1000, 333}, static_cast<double>(m + 1)));
      EXPECT_EQ(manager.save().value_or(""), dir / ("ckpt-" + std::to_string(m + 1))) << "trial " << trial;
      last = m + 1;
    }
    ++restored;
  }
  std::cout << restored << " of " << kTrials << " trials restored; " << interrupted
            << " kills cut a save short (files of an uncommitted checkpoint left); last state " << last << "\n";
  EXPECT_GE(restored, kTrials / 2) << "too few trials got as far as a first checkpoint to test anything";
}

}  // namespace
}  // namespace chorus::train
