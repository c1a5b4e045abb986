// chorus-train against a hostile or unlucky world (issue 22): a checkpoint of another model is
// refused instead of "resumed" into random weights, empty paths are refused, a diverging run
// stops at the first non-finite loss with the step named, and never saves its NaN weights over
// the last good checkpoint. Label: hostile. Each test failed on the code before.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include <future>

#include "tests/launch/tool_runner.h"
#include <chorus/checkpoint/checkpoint.h>
#include <chorus/checkpoint/checkpoint_manager.h>
#include <chorus/core/runtime.h>
#include <chorus/core/variable.h>
#include <chorus/launch/agent.h>

extern char** environ;

namespace chorus::launch {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::run_tool;

const std::string kTool = CHORUS_TRAIN_PATH;

struct ScratchDir {
  fs::path path = fs::temp_directory_path() / ("chorus_train_hostile_" + std::to_string(::getpid()) + "_" +
                                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
  ScratchDir() { fs::remove_all(path); }
  ~ScratchDir() { fs::remove_all(path); }
};

std::vector<std::string> train_args(const fs::path& ckpt, const char* model, const char* epochs) {
  return {
      kTool,    "--model", model,     "--strategy", "mirrored", "--virtual-devices", "2",           "--train",  "256",
      "--test", "64",      "--batch", "32",         "--quiet",  "--checkpoint-dir",  ckpt.string(), "--epochs", epochs};
}

TEST(ChorusTrainHostile, ACheckpointOfAnotherModelIsNotResumed) {
  ScratchDir dir;
  auto r = run_tool(train_args(dir.path, "mlp", "1"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  r = run_tool(train_args(dir.path, "cnn", "2"));  // the same directory, another model
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  // The shapes differ: refused by the restore itself (this already worked; kept as a regression test).
  EXPECT_THAT(r.err, HasSubstr("nothing was restored"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("Resumed")));
  EXPECT_TRUE(fs::exists(dir.path / "ckpt-1.index")) << "the other model's checkpoint is left alone";
  EXPECT_FALSE(fs::exists(dir.path / "ckpt-2.index"));
}

TEST(ChorusTrainHostile, ACheckpointWithForeignKeysIsNotResumed) {
  ScratchDir dir;
  {
    // Another program's object graph: one variable under keys chorus-train's model never uses.
    internal::reset_runtime_for_testing();
    Variable v = make_variable({.initial_value = Tensor::ones({3, 3}), .name = "w"});
    Variable step =
        make_variable({.initial_value = Tensor::scalar<std::int64_t>(5), .name = "step", .trainable = false});
    train::Checkpoint other({{"net", v}, {"step", step}});
    fs::create_directories(dir.path);
    other.save((dir.path / "ckpt").string());
    std::ofstream(dir.path / "checkpoint")
        << "model_checkpoint_path: \"ckpt-1\"\nall_model_checkpoint_paths: \"ckpt-1\"\n";
  }
  const auto r = run_tool(train_args(dir.path, "mlp", "1"));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("FAILED_PRECONDITION"));
  EXPECT_THAT(r.err, HasSubstr("not a checkpoint of this model"));
  EXPECT_THAT(r.err, HasSubstr("model/layer_with_weights-0/kernel"));  // the unmatched variables are listed
  EXPECT_THAT(r.err, HasSubstr("--no-resume"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("Resumed")));
}

// Issue 40: TF_CONFIG naming two workers, chorus-train started by hand: the refusal told a
// command-line user to "create a collective::MpiEnvironment". It must give the command instead.
// (Issue 46: a TF_CONFIG whose chief address has a port is a rendezvous: the workers meet there
// without mpirun. Addresses without ports name no store, so that job cannot start.)
TEST(ChorusTrainHostile, TfConfigWithoutMpirunSaysHowToStartTheWorkers) {
  std::vector<std::string> env = {
      R"(TF_CONFIG={"cluster": {"worker": ["hosta", "hostb"]}, "task": {"type": "worker", "index": 0}})"};
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    if (entry.rfind("TF_CONFIG=", 0) != 0 && entry.rfind("OMPI_", 0) != 0 && entry.rfind("PMI_", 0) != 0)
      env.push_back(entry);
  }
  const auto r = run_tool({kTool, "--strategy", "multi_worker", "--model", "mlp", "--epochs", "1", "--train", "64",
                           "--test", "32", "--quiet"},
                          env);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("FAILED_PRECONDITION: --strategy multi_worker: TF_CONFIG describes 2 workers, but this "
                               "process was not started by mpirun and the cluster names no rendezvous store"));
  EXPECT_THAT(r.err, HasSubstr("chorus-run --nproc-per-node 2 -- chorus-train --strategy multi_worker"));
  EXPECT_THAT(r.err, HasSubstr("chorus-run -np 2 -- ..."));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("MpiEnvironment"))) << "advice for a C++ programmer";
}

// Issue 46: two workers started by hand with nothing but a TF_CONFIG whose addresses have ports
// (no mpirun): they meet at the chief's port, train one model, and only the chief manages the
// checkpoint directory (both locked it, and the job hung, before the managers were made in the
// strategy's scope).
TEST(ChorusTrainHostile, TfConfigWorkersStartedByHandTrainOneModelAndTheChiefCheckpoints) {
  char tmpl[] = "/tmp/chorus-train-tfconfig-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const int port = free_local_port();
  auto worker = [&](int index) {
    std::vector<std::string> env = {R"(TF_CONFIG={"cluster": {"worker": ["127.0.0.1:)" + std::to_string(port) +
                                        R"(", "127.0.0.1:1"]}, "task": )" + R"({"type": "worker", "index": )" +
                                        std::to_string(index) + "}}",
                                    "CHORUS_COLLECTIVE_TIMEOUT=60"};
    for (char** e = environ; *e; ++e) {
      const std::string entry = *e;
      if (entry.rfind("TF_CONFIG=", 0) != 0 && entry.rfind("OMPI_", 0) != 0 && entry.rfind("PMI_", 0) != 0 &&
          entry.rfind("RANK=", 0) != 0 && entry.rfind("WORLD_SIZE=", 0) != 0 &&
          entry.rfind("CHORUS_COLLECTIVE_TIMEOUT=", 0) != 0)
        env.push_back(entry);
    }
    return run_tool({kTool, "--strategy", "multi_worker", "--model", "mlp", "--epochs", "1", "--train", "320", "--test",
                     "64", "--batch", "32", "--quiet", "--checkpoint-dir", dir},
                    env);
  };
  auto other = std::async(std::launch::async, worker, 1);
  const auto chief = worker(0);
  const auto second = other.get();
  EXPECT_EQ(chief.exit_code, 0) << chief.out << chief.err;
  EXPECT_EQ(second.exit_code, 0) << second.out << second.err;
  EXPECT_THAT(chief.out, HasSubstr("Strategy: MultiWorkerMirroredStrategy on 2 devices in 2 worker(s)"));
  EXPECT_THAT(chief.err + second.err, ::testing::Not(HasSubstr("another CheckpointManager is active")));
  EXPECT_TRUE(std::filesystem::exists(dir + "/ckpt-1.index"));
  std::filesystem::remove_all(dir);
}

TEST(ChorusTrainHostile, EmptyPathsAreRefused) {
  for (const char* flag : {"--checkpoint-dir", "--log-dir", "--data-dir"}) {
    const auto r = run_tool({kTool, "--model", "mlp", "--train", "64", "--test", "32", flag, ""});
    EXPECT_EQ(r.exit_code, 2) << flag << "\n" << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr(std::string(flag) + " is empty")) << r.err;
  }
}

TEST(ChorusTrainHostile, ADivergingRunStopsAtTheFirstNonFiniteLossAndKeepsTheGoodCheckpoint) {
  ScratchDir dir;
  auto r = run_tool(train_args(dir.path, "mlp", "1"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string good = [&] {
    std::ifstream f(dir.path / "ckpt-1.data-00000-of-00001", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }();
  // A learning rate of 1e30 makes the weights and the loss overflow within a few steps.
  auto args = train_args(dir.path, "mlp", "3");
  args.insert(args.end(), {"--learning-rate", "1e30", "--optimizer", "sgd"});
  r = run_tool(args);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  // Whichever comes first: the summed gradients' check before an update (naming the variable and
  // the optimizer's step, counted from the run's start) or the loss's at the batch's end.
  const bool by_gradient = r.err.find("holds NaN or Inf at step") != std::string::npos;
  const bool by_loss = r.err.find("TerminateOnNaN: the loss is") != std::string::npos;
  EXPECT_TRUE(by_gradient || by_loss) << r.err;
  if (by_gradient) {
    EXPECT_THAT(r.err, HasSubstr("the gradient of variable '"));
  }
  if (by_loss) {
    EXPECT_THAT(r.err, HasSubstr("at epoch 2, step"));  // numbered from the run's start
  }
  EXPECT_FALSE(fs::exists(dir.path / "ckpt-2.index")) << "no checkpoint of the diverged weights";
  std::ifstream f(dir.path / "ckpt-1.data-00000-of-00001", std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(f), {}), good);

  // With the guard off, training goes on, but ModelCheckpoint still never saves NaN weights.
  args.push_back("--no-terminate-on-nan");
  r = run_tool(args);
  EXPECT_FALSE(fs::exists(dir.path / "ckpt-2.index")) << r.out << r.err;
  EXPECT_FALSE(fs::exists(dir.path / "ckpt-3.index"));
  EXPECT_THAT(r.err, HasSubstr("not saved"));
  EXPECT_THAT(r.out, HasSubstr("held-out accuracy: 0,")) << "NaN predictions count as wrong, not as argmax 0";
}

// A crash between the epoch checkpoint and the backup of the same epoch's end leaves the backup
// behind the epoch checkpoints: restoring it would take the model back silently. chorus-train moves
// such a backup aside and resumes from the epoch checkpoints.
TEST(ChorusTrainHostile, ABackupOlderThanTheEpochCheckpointsIsMovedAsideNotRestored) {
  ScratchDir dir;
  auto r = run_tool(train_args(dir.path, "mlp", "1"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_TRUE(fs::exists(dir.path / "ckpt-1.index"));
  ASSERT_FALSE(fs::exists(dir.path / "backup" / "checkpoint")) << "a completed run deletes its backup";
  {
    // A backup of epoch 1, batch 3 (the epoch before ckpt-1's end).
    Variable epoch = make_variable({.initial_value = Tensor::scalar<std::int64_t>(0), .name = "e", .trainable = false});
    Variable batch = make_variable({.initial_value = Tensor::scalar<std::int64_t>(3), .name = "b", .trainable = false});
    train::Checkpoint stale({{"epoch", epoch}, {"batch", batch}});
    train::CheckpointManager manager(stale, (dir.path / "backup").string(), 1);
    manager.save();
  }
  r = run_tool(train_args(dir.path, "mlp", "2"));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("is older than the epoch checkpoints (1 epoch(s) done): moved to"));
  EXPECT_THAT(r.out, HasSubstr("Resumed from"));
  EXPECT_TRUE(fs::exists(dir.path / "ckpt-2.index")) << r.out;
  EXPECT_FALSE(fs::exists(dir.path / "ckpt-3.index")) << "the stale backup's epoch was trained again";
}

// Issue 40, 1: CHORUS_TIMELINE=/dev/full made /dev/full a 12 KB regular file (and as root,
// /dev/null would have been replaced). A FIFO stands in for the device: the same rename replaced it.
TEST(ChorusTrainHostile, ATimelinePathThatIsAFifoOrDeviceIsRefusedAndLeftAsItWas) {
  ScratchDir dir;
  fs::create_directories(dir.path);
  const fs::path fifo = dir.path / "trace.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  env.push_back("CHORUS_TIMELINE=" + fifo.string());
  const auto r = run_tool(
      {kTool, "--model", "mlp", "--epochs", "1", "--train", "64", "--test", "32", "--batch", "32", "--quiet"}, env);
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("CHORUS_TIMELINE"));
  EXPECT_THAT(r.err, HasSubstr("is a FIFO (named pipe), not a regular file"));
  EXPECT_TRUE(fs::is_fifo(fifo)) << "replaced by a regular file";
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator{}), 1) << "a temporary was left";
}

// Issue 40, 4: a kill between ckpt-3's commit and the state write left the state naming ckpt-2;
// every rerun resumed from ckpt-2, trained epoch 3 and failed: "this save would write 'ckpt-3'
// over an earlier one". Reproduced deterministically by taking ckpt-3's lines out of the state.
TEST(ChorusTrainHostile, ACheckpointTheStateFileDoesNotNameIsAdoptedAndTheRunGoesOn) {
  ScratchDir dir;
  auto r = run_tool(train_args(dir.path, "mlp", "3"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::string state, kept;
  {
    std::ifstream f(dir.path / "checkpoint");
    state.assign(std::istreambuf_iterator<char>(f), {});
  }
  std::istringstream lines(state);
  int timestamps = 0;
  for (std::string l; std::getline(lines, l);) {
    if (l.rfind("model_checkpoint_path", 0) == 0) {
      l = "model_checkpoint_path: \"ckpt-2\"";
    } else if (l.find("ckpt-3") != std::string::npos) {
      continue;
    } else if (l.rfind("all_model_checkpoint_timestamps", 0) == 0 && ++timestamps == 3) {
      continue;  // ckpt-3's, the last of three
    }
    kept += l + "\n";
  }
  {
    std::ofstream f(dir.path / "checkpoint", std::ios::trunc);
    f << kept;
  }
  r = run_tool(train_args(dir.path, "mlp", "5"));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("adopted"));
  EXPECT_THAT(r.out, HasSubstr("3 epoch(s) done, 2 to go"));
  EXPECT_TRUE(fs::exists(dir.path / "ckpt-5.index")) << r.out << r.err;
}

// Issue 39: a bit flipped in ckpt-2's data (an optimizer slot's bytes) gave DATA_LOSS from the
// first training step of every rerun: a preempted job under a restart policy never trained again.
TEST(ChorusTrainHostile, ADamagedNewestCheckpointIsMovedAsideAndTheRunGoesOnFromThePreviousOne) {
  ScratchDir dir;
  auto r = run_tool(train_args(dir.path, "mlp", "2"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const fs::path data = dir.path / "ckpt-2.data-00000-of-00001";
  std::string bytes;
  {
    std::ifstream f(data, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  ASSERT_GT(bytes.size(), 100u);
  bytes[bytes.size() / 2] ^= 1;
  {
    std::ofstream f(data, std::ios::binary | std::ios::trunc);
    f << bytes;
  }
  r = run_tool(train_args(dir.path, "mlp", "3"));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("Resumed from " + (dir.path / "ckpt-1").string()));
  EXPECT_THAT(r.err, HasSubstr("moved aside"));
  EXPECT_TRUE(fs::exists(dir.path / "ckpt-3.index")) << "the run did not go on";
  r = run_tool(train_args(dir.path, "mlp", "4"));  // and every later run
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("Resumed from " + (dir.path / "ckpt-3").string()));
}

// Issue 40, 5: --no-resume moved a user's backup/thesis.tex and ckpt-notes.txt, and a second
// process's --no-resume moved a running job's files (its in-flight temporary too) before it
// looked at the lock.
TEST(ChorusTrainHostile, NoResumeMovesOnlyTheManagersFilesAndNeverARunningJobs) {
  ScratchDir dir;
  auto r = run_tool(train_args(dir.path, "mlp", "1"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  fs::create_directories(dir.path / "backup");
  { std::ofstream(dir.path / "backup" / "thesis.tex") << "chapter 1"; }
  { std::ofstream(dir.path / "ckpt-notes.txt") << "lr 1e-3 was best"; }
  {
    // Another job holds the directory (its CheckpointManager's lock).
    Variable x = make_variable({.initial_value = Tensor::scalar<std::int64_t>(0), .name = "x", .trainable = false});
    train::Checkpoint other({{"x", x}});
    train::CheckpointManager running(other, dir.path.string(), 3);
    auto args = train_args(dir.path, "mlp", "1");
    args.push_back("--no-resume");
    r = run_tool(args);
    EXPECT_NE(r.exit_code, 0) << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr("another CheckpointManager is active"));
    EXPECT_TRUE(fs::exists(dir.path / "ckpt-1.index")) << "the running job's files were moved";
    for (const auto& e : fs::directory_iterator(dir.path))
      EXPECT_NE(e.path().filename().string().rfind("replaced-", 0), 0u) << "something was moved before the lock";
  }
  auto args = train_args(dir.path, "mlp", "1");
  args.push_back("--no-resume");
  r = run_tool(args);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("--no-resume: the earlier checkpoints of"));
  EXPECT_TRUE(fs::exists(dir.path / "backup" / "thesis.tex")) << "a user's file in backup/ was moved";
  EXPECT_TRUE(fs::exists(dir.path / "ckpt-notes.txt")) << "a user's file named ckpt-* was moved";
  EXPECT_TRUE(fs::exists(dir.path / "ckpt-1.index")) << "the fresh run's own checkpoint";
  int replaced = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) {
    if (e.path().filename().string().rfind("replaced-", 0) != 0) continue;
    ++replaced;
    EXPECT_TRUE(fs::exists(e.path() / "ckpt-1.index"));
    EXPECT_TRUE(fs::exists(e.path() / "checkpoint"));
    EXPECT_FALSE(fs::exists(e.path() / "ckpt-notes.txt"));
  }
  EXPECT_EQ(replaced, 1);
}

}  // namespace
}  // namespace chorus::launch
