// CheckpointManager in a hostile directory (issue 22): a planted symlink is never followed, a state
// file that points outside the directory never gets a file deleted, a damaged newest checkpoint is
// moved aside (never deleted) and the previous one restored, and a lost state file never lets a
// fresh run overwrite the checkpoints on disk. Label: hostile. Each test failed on the code before.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "tests/checkpoint/bundle_test_util.h"
#include "tests/core/test_util.h"
#include <chorus/checkpoint/bundle.h>
#include <chorus/checkpoint/checkpoint_manager.h>
#include <chorus/checkpoint/checkpoint_state.h>
#include <chorus/core/error.h>
#include <chorus/core/file_io.h>

namespace chorus::train {
namespace {

namespace fs = std::filesystem;
using chorus::testing::message_of;
using testing::TempDir;

class CheckpointManagerHostileTest : public chorus::testing::CoreTest {};

Variable scalar_var(const std::string& name, std::int64_t v) {
  return make_variable({.initial_value = Tensor::scalar<std::int64_t>(v), .name = name, .trainable = false});
}
std::int64_t get(const Variable& v) { return v.value().item<std::int64_t>(); }

TEST_F(CheckpointManagerHostileTest, APlantedLockFileSymlinkIsNeverFollowed) {
  TempDir dir;
  const std::string victim = dir.str("victim.txt");
  testing::spit(victim, "precious");
  fs::create_directory(dir / "run");
  fs::create_symlink(victim, dir / "run/.chorus-manager.lock");
  Variable x = scalar_var("x", 1);
  Checkpoint ckpt({{"x", x}});
  const std::string msg = message_of<FailedPreconditionError>([&] { CheckpointManager m(ckpt, dir / "run", 2); });
  EXPECT_NE(msg.find(".chorus-manager.lock"), std::string::npos) << msg;
  EXPECT_NE(msg.find("symbolic link"), std::string::npos) << msg;
  EXPECT_EQ(testing::slurp(victim), "precious");  // not truncated, not written
}

TEST_F(CheckpointManagerHostileTest, ALockFileThatIsNotARegularFileIsRefused) {
  TempDir dir;
  fs::create_directory(dir / "run");
  ASSERT_EQ(::mkfifo((dir / "run/.chorus-manager.lock").c_str(), 0644), 0);
  Variable x = scalar_var("x", 1);
  Checkpoint ckpt({{"x", x}});
  const std::string msg = message_of<FailedPreconditionError>([&] { CheckpointManager m(ckpt, dir / "run", 2); });
  EXPECT_NE(msg.find("FIFO"), std::string::npos) << msg;
}

TEST_F(CheckpointManagerHostileTest, FilesOfAnotherUserAreNotWritten) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a file owned by another user";
  TempDir dir;
  fs::create_directory(dir / "run");
  const std::string lock = dir / "run/.chorus-manager.lock";
  testing::spit(lock, "12345");
  ASSERT_EQ(::chown(lock.c_str(), 65534, 65534), 0);
  Variable x = scalar_var("x", 1);
  Checkpoint ckpt({{"x", x}});
  const std::string msg = message_of<FailedPreconditionError>([&] { CheckpointManager m(ckpt, dir / "run", 2); });
  EXPECT_NE(msg.find("belongs to user id 65534"), std::string::npos) << msg;
  EXPECT_EQ(testing::slurp(lock), "12345");
}

TEST_F(CheckpointManagerHostileTest, AStateFilePointingOutsideNeverGetsAFileDeleted) {
  TempDir dir;
  fs::create_directory(dir / "victim");
  fs::create_directory(dir / "run");
  // A real bundle outside the directory, and one inside with a foreign name.
  {
    Variable v = scalar_var("v", 7);
    Checkpoint c({{"v", v}});
    c.write(dir / "victim/precious");
    c.write(dir / "run/other-1");
  }
  const double now = static_cast<double>(::time(nullptr));
  CheckpointState hostile;
  hostile.model_checkpoint_path = dir / "victim/precious";
  hostile.all_model_checkpoint_paths = {dir / "run/../victim/precious", dir / "run/other-1"};
  hostile.all_model_checkpoint_timestamps = {now - 5, now - 4};
  hostile.last_preserved_timestamp = now - 100;
  write_checkpoint_state(dir / "run", hostile);

  Variable x = scalar_var("x", 1);
  Checkpoint ckpt({{"x", x}});
  chorus::testing::LogCapture logs;
  CheckpointManager m(ckpt, dir / "run", 1);
  EXPECT_TRUE(logs.contains("never deleted")) << "the foreign entries are reported";
  EXPECT_FALSE(m.latest_checkpoint()) << "a latest outside the directory is not taken";
  for (int i = 0; i < 3; ++i) m.save();  // max_to_keep 1: retention runs on every save
  EXPECT_TRUE(bundle_exists(dir / "victim/precious"));
  EXPECT_TRUE(fs::exists(data_filename(dir / "victim/precious")));
  EXPECT_TRUE(bundle_exists(dir / "run/other-1"));
  EXPECT_EQ(m.checkpoints(), (std::vector<std::string>{dir / "run/ckpt-3"}));
}

TEST_F(CheckpointManagerHostileTest, ADamagedNewestIsMovedAsideAndThePreviousRestored) {
  TempDir dir;
  Variable x = scalar_var("x", 1);
  Checkpoint ckpt({{"x", x}});
  {
    CheckpointManager m(ckpt, dir.path(), 3);
    m.save();
    x.assign(Tensor::scalar<std::int64_t>(2));
    m.save();
  }
  std::string bytes = testing::slurp(data_filename(dir / "ckpt-2"));
  bytes[0] ^= 1;
  testing::spit(data_filename(dir / "ckpt-2"), bytes);
  for (int run = 0; run < 2; ++run) {  // every rerun resumes, not only the first
    Variable y = scalar_var("x", 0);
    Checkpoint fresh({{"x", y}});
    CheckpointManager m(fresh, dir.path(), 3);
    EXPECT_EQ(m.restore_or_initialize(), dir / "ckpt-1") << "run " << run;
    EXPECT_EQ(get(y), 1);
    EXPECT_EQ(m.latest_checkpoint(), dir / "ckpt-1");
    EXPECT_EQ(m.checkpoints(), (std::vector<std::string>{dir / "ckpt-1"}));
  }
  EXPECT_FALSE(bundle_exists(dir / "ckpt-2"));
  int aside = 0;
  for (const std::string& name : dir.list()) aside += name.rfind("ckpt-2.corrupt-", 0) == 0 ? 1 : 0;
  EXPECT_EQ(aside, 2) << "the damaged index and data file are kept under another name";
  EXPECT_EQ(latest_checkpoint(dir.path()), dir / "ckpt-1") << "the state file no longer names the damaged one";
}

// Issue 39: damage in a value restored only later (an optimizer slot, created by the first step)
// passed restore_or_initialize and raised DATA_LOSS in the middle of training, on every rerun.
TEST_F(CheckpointManagerHostileTest, DamageInAValueRestoredLaterFallsBackAtRestoreTime) {
  TempDir dir;
  {
    Variable x = scalar_var("x", 1), later = scalar_var("later", 10);
    Checkpoint ckpt({{"x", x}, {"later", later}});
    CheckpointManager m(ckpt, dir.path(), 3);
    m.save();
    x.assign(Tensor::scalar<std::int64_t>(2));
    later.assign(Tensor::scalar<std::int64_t>(20));
    m.save();
  }
  // Damage the bytes of "later" in ckpt-2 only.
  {
    BundleReader reader(dir / "ckpt-2");
    const BundleEntry e = reader.entry("later/.ATTRIBUTES/VARIABLE_VALUE");
    std::string bytes = testing::slurp(data_filename(dir / "ckpt-2"));
    bytes[static_cast<std::size_t>(e.offset)] ^= 1;
    testing::spit(data_filename(dir / "ckpt-2"), bytes);
  }
  {
    // strict_restore (TF's behaviour): the restore of x succeeds, nothing is checked or moved.
    Variable y = scalar_var("x", 0);
    Checkpoint fresh({{"x", y}});
    CheckpointManager m(fresh, dir.path(), 3, {.strict_restore = true});
    EXPECT_EQ(m.restore_or_initialize(), dir / "ckpt-2");
    EXPECT_TRUE(bundle_exists(dir / "ckpt-2"));
  }
  Variable y = scalar_var("x", 0);
  Checkpoint fresh({{"x", y}});  // "later" does not exist yet: its value would be restored on creation
  chorus::testing::LogCapture logs;
  CheckpointManager m(fresh, dir.path(), 3);
  EXPECT_EQ(m.restore_or_initialize(), dir / "ckpt-1");
  EXPECT_EQ(get(y), 1);
  EXPECT_FALSE(bundle_exists(dir / "ckpt-2"));
  int warnings = 0;
  for (const std::string& l : logs.lines()) warnings += l.find("ckpt-2") != std::string::npos ? 1 : 0;
  EXPECT_EQ(warnings, 1) << "one warning says it was damaged and moved aside";
  EXPECT_TRUE(logs.contains("moved aside"));
}

TEST_F(CheckpointManagerHostileTest, NoGoodCheckpointFailsWithoutDeletingAny) {
  TempDir dir;
  Variable x = scalar_var("x", 1);
  Checkpoint ckpt({{"x", x}});
  {
    CheckpointManager m(ckpt, dir.path(), 3);
    m.save();
  }
  std::string bytes = testing::slurp(data_filename(dir / "ckpt-1"));
  bytes[0] ^= 1;
  testing::spit(data_filename(dir / "ckpt-1"), bytes);
  Variable y = scalar_var("x", 0);
  Checkpoint fresh({{"x", y}});
  CheckpointManager m(fresh, dir.path(), 3);
  EXPECT_THROW(m.restore_or_initialize(), DataLossError);
  EXPECT_EQ(dir.list().size(), 4u) << "checkpoint, lock, and the damaged pair moved aside";
}

TEST_F(CheckpointManagerHostileTest, ALostStateFileIsRecoveredFromTheFilesOnDisk) {
  for (const bool empty : {false, true}) {
    TempDir dir;
    {
      Variable x = scalar_var("x", 0);
      Checkpoint ckpt({{"x", x}});
      CheckpointManager m(ckpt, dir.path(), 5);
      for (int i = 1; i <= 3; ++i) {
        x.assign(Tensor::scalar<std::int64_t>(i));
        m.save();
      }
    }
    if (empty)
      testing::spit(dir / "checkpoint", "");
    else
      fs::remove(dir / "checkpoint");
    Variable y = scalar_var("x", 0);
    Checkpoint ckpt({{"x", y}});
    CheckpointManager m(ckpt, dir.path(), 5);
    EXPECT_EQ(m.latest_checkpoint(), dir / "ckpt-3") << (empty ? "empty" : "deleted");
    EXPECT_EQ(m.restore_or_initialize(), dir / "ckpt-3");
    EXPECT_EQ(get(y), 3);
    EXPECT_EQ(m.save(), dir / "ckpt-4");
  }
}

TEST_F(CheckpointManagerHostileTest, AFreshRunNeverOverwritesEarlierCheckpoints) {
  TempDir dir;
  {
    Variable x = scalar_var("x", 5);
    Checkpoint ckpt({{"x", x}});
    CheckpointManager m(ckpt, dir.path(), 5);
    m.save();
    m.save();
  }
  const std::string before = testing::slurp(data_filename(dir / "ckpt-1"));
  Variable y = scalar_var("x", 0);
  Checkpoint ckpt({{"x", y}});
  CheckpointManager m(ckpt, dir.path(), 5);
  // No restore: the save counter is 0, so this save would be ckpt-1 again.
  const std::string msg = message_of<FailedPreconditionError>([&] { m.save(); });
  EXPECT_NE(msg.find("restore_or_initialize"), std::string::npos) << msg;
  EXPECT_EQ(testing::slurp(data_filename(dir / "ckpt-1")), before);
  EXPECT_EQ(get(ckpt.save_counter()), 0) << "a refused save does not count";
  EXPECT_EQ(m.save(7), dir / "ckpt-7") << "an explicit number is the caller's choice, as in TF";
}

// Issue 40, 4: a kill between a save's commit and its state write left ckpt-3 complete on disk
// with the state naming ckpt-2; every rerun resumed from ckpt-2 and then refused to save ckpt-3
// ("would write 'ckpt-3' over an earlier one"), for ever. Reproduced by dropping ckpt-3 from the
// state file, as the kill did.
CheckpointState state_without_the_newest(const TempDir& dir) {
  CheckpointState s = *read_checkpoint_state(dir.path());
  s.all_model_checkpoint_paths.pop_back();
  s.all_model_checkpoint_timestamps.pop_back();
  s.model_checkpoint_path = s.all_model_checkpoint_paths.back();
  return s;
}

void save_three(const TempDir& dir) {
  Variable x = scalar_var("x", 0);
  Checkpoint ckpt({{"x", x}});
  CheckpointManager m(ckpt, dir.path(), 5);
  for (int i = 1; i <= 3; ++i) {
    x.assign(Tensor::scalar<std::int64_t>(i));
    m.save();
  }
}

TEST_F(CheckpointManagerHostileTest, ACompleteCheckpointTheStateDoesNotNameIsAdoptedAndTheNextSaveHappens) {
  TempDir dir;
  save_three(dir);
  write_checkpoint_state(dir.path(), state_without_the_newest(dir));
  ASSERT_EQ(latest_checkpoint(dir.path()), dir / "ckpt-2");
  for (int run = 0; run < 2; ++run) {
    Variable y = scalar_var("x", 0);
    Checkpoint ckpt({{"x", y}});
    CheckpointManager m(ckpt, dir.path(), 5);
    EXPECT_EQ(m.restore_or_initialize(), dir / "ckpt-3") << "run " << run;
    EXPECT_EQ(get(y), 3);
    EXPECT_EQ(latest_checkpoint(dir.path()), dir / "ckpt-3") << "the state file now names it";
    if (run == 1) {
      EXPECT_EQ(m.save(), dir / "ckpt-4");
      EXPECT_EQ(m.checkpoints(),
                (std::vector<std::string>{dir / "ckpt-1", dir / "ckpt-2", dir / "ckpt-3", dir / "ckpt-4"}));
    }
  }
}

TEST_F(CheckpointManagerHostileTest, ADamagedCheckpointTheStateDoesNotNameIsMovedAsideAndTheNextSaveHappens) {
  TempDir dir;
  save_three(dir);
  write_checkpoint_state(dir.path(), state_without_the_newest(dir));
  std::string bytes = testing::slurp(data_filename(dir / "ckpt-3"));
  bytes[0] ^= 1;
  testing::spit(data_filename(dir / "ckpt-3"), bytes);
  Variable y = scalar_var("x", 0);
  Checkpoint ckpt({{"x", y}});
  CheckpointManager m(ckpt, dir.path(), 5);
  EXPECT_EQ(m.restore_or_initialize(), dir / "ckpt-2");
  EXPECT_EQ(get(y), 2);
  EXPECT_EQ(m.save(), dir / "ckpt-3") << "the number is free again: the damaged files were moved aside";
  int aside = 0;
  for (const std::string& name : dir.list()) aside += name.rfind("ckpt-3.corrupt-", 0) == 0 ? 1 : 0;
  EXPECT_EQ(aside, 2) << "kept under another name, never deleted";
}

TEST_F(CheckpointManagerHostileTest, AFifoOrDevicePlantedAtACheckpointsNameIsRefusedNotReplaced) {
  TempDir dir;
  Variable x = scalar_var("x", 1);
  Checkpoint ckpt({{"x", x}});
  CheckpointManager m(ckpt, dir.path(), 3);
  ASSERT_EQ(::mkfifo(index_filename(dir / "ckpt-1").c_str(), 0644), 0);
  const std::string msg = message_of<FailedPreconditionError>([&] { ckpt.write(dir / "ckpt-1"); });
  EXPECT_NE(msg.find("a FIFO"), std::string::npos) << msg;
  EXPECT_TRUE(fs::is_fifo(index_filename(dir / "ckpt-1")));
  for (const std::string& name : dir.list())
    EXPECT_EQ(name.find(".tempstate"), std::string::npos) << name << ": a temporary was left behind";
}

TEST_F(CheckpointManagerHostileTest, ReadersRefuseWhatIsNotARegularFile) {
  TempDir dir;
  ASSERT_EQ(::mkfifo(dir.str("fifo").c_str(), 0644), 0);
  fs::create_directory(dir / "d");
  std::string msg = message_of<InvalidArgumentError>([&] { io::File::open_for_read(dir.str("fifo")); });
  EXPECT_NE(msg.find("FIFO"), std::string::npos) << msg;
  msg = message_of<InvalidArgumentError>([&] { io::File::open_for_read(dir.str("d")); });
  EXPECT_NE(msg.find("a directory"), std::string::npos) << msg;
  msg = message_of<InvalidArgumentError>([&] { io::File::open_for_read("/dev/zero"); });
  EXPECT_NE(msg.find("character device"), std::string::npos) << msg;
  // A state file that is a FIFO: the manager reports it instead of blocking.
  fs::create_directory(dir / "run");
  ASSERT_EQ(::mkfifo((dir / "run/checkpoint").c_str(), 0644), 0);
  Variable x = scalar_var("x", 1);
  Checkpoint ckpt({{"x", x}});
  msg = message_of<InvalidArgumentError>([&] { CheckpointManager m(ckpt, dir / "run", 2); });
  EXPECT_NE(msg.find("checkpoint"), std::string::npos) << msg;
}

TEST_F(CheckpointManagerHostileTest, ReadsAreBoundedBeforeAnythingIsAllocated) {
  TempDir dir;
  // A sparse 8 GiB .index (no disk used) once made restore allocate 8.5 GB.
  Variable x = scalar_var("x", 1);
  Checkpoint ckpt({{"x", x}});
  const std::string prefix = ckpt.write(dir / "big");
  ASSERT_EQ(::truncate((prefix + ".index").c_str(), std::int64_t{8} << 30), 0);
  std::string msg = message_of<DataLossError>([&] { ckpt.restore(prefix); });
  EXPECT_NE(msg.find("big.index' is 8589934592 bytes"), std::string::npos) << msg;
  // A 20 MiB `checkpoint` state file.
  fs::create_directory(dir / "run");
  testing::spit(dir / "run/checkpoint", "");
  ASSERT_EQ(::truncate((dir / "run/checkpoint").c_str(), 20 << 20), 0);
  msg = message_of<DataLossError>([&] { CheckpointManager m(ckpt, dir / "run", 2); });
  EXPECT_NE(msg.find("run/checkpoint' is 20971520 bytes"), std::string::npos) << msg;
}

}  // namespace
}  // namespace chorus::train
