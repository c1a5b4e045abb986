// CheckpointManager: numbering, retention, the state file, recovery, intervals, the directory
// lock, restore_or_initialize with fallback; the state file's text format.
#include <chorus/checkpoint/checkpoint_manager.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <limits>

#include "tests/checkpoint/bundle_test_util.h"
#include "tests/core/test_util.h"
#include <chorus/checkpoint/bundle.h>
#include <chorus/checkpoint/checkpoint_state.h>
#include <chorus/core/env.h>
#include <chorus/core/runtime.h>

namespace chorus::train {
namespace {

using testing::TempDir;

class CheckpointManagerTest : public chorus::testing::CoreTest {};

Variable scalar_var(const std::string& name, std::int64_t v) {
  return make_variable({.initial_value = Tensor::scalar<std::int64_t>(v), .name = name, .trainable = false});
}
std::int64_t get(const Variable& v) { return v.value().item<std::int64_t>(); }

TEST_F(CheckpointManagerTest, KeepsTheNewestAndWritesTheStateFile) {
  TempDir dir;
  Variable x = scalar_var("x", 0);
  Checkpoint ckpt({{"x", x}});
  CheckpointManager m(ckpt, dir.path(), 2);
  EXPECT_FALSE(m.latest_checkpoint());
  for (int i = 1; i <= 3; ++i) {
    x.assign(Tensor::scalar<std::int64_t>(i * 10));
    EXPECT_EQ(m.save(), dir / ("ckpt-" + std::to_string(i)));
  }
  EXPECT_EQ(m.checkpoints(), (std::vector<std::string>{dir / "ckpt-2", dir / "ckpt-3"}));
  EXPECT_EQ(m.latest_checkpoint(), dir / "ckpt-3");
  EXPECT_FALSE(bundle_exists(dir / "ckpt-1"));
  EXPECT_FALSE(std::filesystem::exists(dir / "ckpt-1.data-00000-of-00001"));
  EXPECT_TRUE(bundle_exists(dir / "ckpt-2"));
  // TF's text format with relative paths.
  const std::string text = testing::slurp(dir / "checkpoint");
  EXPECT_NE(text.find("model_checkpoint_path: \"ckpt-3\"\n"), std::string::npos) << text;
  EXPECT_NE(text.find("all_model_checkpoint_paths: \"ckpt-2\"\nall_model_checkpoint_paths: \"ckpt-3\"\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("all_model_checkpoint_timestamps: "), std::string::npos);
  EXPECT_NE(text.find("last_preserved_timestamp: "), std::string::npos);
  EXPECT_EQ(latest_checkpoint(dir.path()), dir / "ckpt-3");
  // Explicit numbers.
  EXPECT_EQ(m.save(100), dir / "ckpt-100");
  EXPECT_EQ(get(ckpt.save_counter()), 4);  // counted anyway, as TF
}

TEST_F(CheckpointManagerTest, ANewManagerRecoversTheStateAndResumes) {
  TempDir dir;
  {
    Variable x = scalar_var("x", 5);
    Checkpoint ckpt({{"x", x}});
    CheckpointManager m(ckpt, dir.path(), 3);
    m.save();
    x.assign(Tensor::scalar<std::int64_t>(6));
    m.save();
  }
  Variable x = scalar_var("x", 0);
  Checkpoint ckpt({{"x", x}});
  CheckpointManager m(ckpt, dir.path(), 3);
  EXPECT_EQ(m.checkpoints(), (std::vector<std::string>{dir / "ckpt-1", dir / "ckpt-2"}));
  EXPECT_FALSE(m.restore_status());
  EXPECT_EQ(m.restore_or_initialize(), dir / "ckpt-2");
  EXPECT_EQ(get(x), 6);
  m.restore_status()->assert_consumed();
  EXPECT_EQ(m.save(), dir / "ckpt-3");  // the restored save_counter continues the numbering
}

TEST_F(CheckpointManagerTest, RestoreOrInitializeRunsInitFnWithoutCheckpoints) {
  TempDir dir;
  Variable x = scalar_var("x", 0);
  Checkpoint ckpt({{"x", x}});
  bool initialized = false;
  CheckpointManager m(ckpt, dir / "fresh", 1, {.init_fn = [&] { initialized = true; }});
  EXPECT_FALSE(m.restore_or_initialize());
  EXPECT_TRUE(initialized);
  EXPECT_TRUE(std::filesystem::is_directory(dir / "fresh"));
}

TEST_F(CheckpointManagerTest, ADamagedLatestFallsBackToThePreviousOne) {
  TempDir dir;
  Variable x = scalar_var("x", 1);
  Checkpoint ckpt({{"x", x}});
  {
    CheckpointManager m(ckpt, dir.path(), 5);
    m.save();
    x.assign(Tensor::scalar<std::int64_t>(2));
    m.save();
  }
  std::string bytes = testing::slurp(data_filename(dir / "ckpt-2"));
  bytes[0] ^= 1;
  testing::spit(data_filename(dir / "ckpt-2"), bytes);
  Variable y = scalar_var("x", 0);
  Checkpoint fresh({{"x", y}});
  CheckpointManager m(fresh, dir.path(), 5);
  chorus::testing::LogCapture logs;
  EXPECT_EQ(m.restore_or_initialize(), dir / "ckpt-1");
  EXPECT_EQ(get(y), 1);
  EXPECT_TRUE(logs.contains("is damaged"));
}

TEST_F(CheckpointManagerTest, OneManagerPerDirectory) {
  TempDir dir;
  Variable x = scalar_var("x", 1);
  Checkpoint ckpt({{"x", x}});
  {
    CheckpointManager first(ckpt, dir.path(), 1);
    EXPECT_THROW_WITH(CheckpointManager(ckpt, dir.path(), 1), FailedPreconditionError,
                      "another CheckpointManager is active in", dir.path(), std::to_string(::getpid()));
  }
  CheckpointManager again(ckpt, dir.path(), 1);  // released by the first's destructor
}

// A worker that only TF_CONFIG numbered, outside any strategy's scope: the worker index its
// MultiWorkerMirroredStrategy registered (env::process_rank) makes it a non-chief, which neither
// locks the directory nor writes files, so the chief's manager can own it.
TEST_F(CheckpointManagerTest, AWorkerWhoseRegisteredRankIsNotZeroIsNotTheChief) {
  if (env::launcher_rank()) GTEST_SKIP() << "run by a launcher (rank " << *env::launcher_rank() << ")";
  TempDir dir;
  Variable x = scalar_var("x", 1);
  Checkpoint ckpt({{"x", x}});
  EXPECT_TRUE(is_checkpoint_chief());
  CheckpointManager chief(ckpt, dir.path(), 1);
  env::set_process_rank(1);
  const bool worker_chief = is_checkpoint_chief();
  std::optional<CheckpointManager> worker;
  std::string error;
  try {
    worker.emplace(ckpt, dir.path(), 1);
    worker->save();
  } catch (const Error& e) {
    error = e.what();
  }
  env::set_process_rank(std::nullopt);
  EXPECT_FALSE(worker_chief);
  EXPECT_EQ(error, "");
  EXPECT_TRUE(worker->checkpoints().empty() || !std::filesystem::exists(worker->checkpoints().back() + ".index"));
  EXPECT_TRUE(is_checkpoint_chief());
  EXPECT_TRUE(chief.save());
  EXPECT_TRUE(std::filesystem::exists(chief.checkpoints().back() + ".index"));
}

TEST_F(CheckpointManagerTest, IntervalsFollowTheStepCounter) {
  TempDir dir;
  Variable step = scalar_var("step", 0);
  Checkpoint ckpt({{"step", step}});
  CheckpointManager m(ckpt, dir.path(), std::nullopt, {.step_counter = step, .checkpoint_interval = 10});
  EXPECT_TRUE(m.save());   // step 0: the first save
  EXPECT_FALSE(m.save());  // same step
  step.assign(Tensor::scalar<std::int64_t>(9));
  EXPECT_FALSE(m.save());                                       // below 0 + 10
  EXPECT_TRUE(m.save(std::nullopt, /*check_interval=*/false));  // forced (a new step)
  step.assign(Tensor::scalar<std::int64_t>(19));
  EXPECT_TRUE(m.save());                  // 9 + 10
  EXPECT_EQ(m.checkpoints().size(), 3u);  // max_to_keep nullopt: all kept
}

TEST_F(CheckpointManagerTest, KeepEveryNHoursPreservesSweptCheckpoints) {
  TempDir dir;
  Variable x = scalar_var("x", 1);
  Checkpoint ckpt({{"x", x}});
  // A tiny period: every checkpoint swept out of max_to_keep is old enough to be preserved.
  CheckpointManager m(ckpt, dir.path(), 1, {.keep_checkpoint_every_n_hours = 1e-12});
  m.save();
  m.save();
  m.save();
  EXPECT_EQ(m.checkpoints(), std::vector<std::string>{dir / "ckpt-3"});
  EXPECT_TRUE(bundle_exists(dir / "ckpt-1"));  // preserved on disk, no longer managed
  EXPECT_TRUE(bundle_exists(dir / "ckpt-2"));
}

TEST_F(CheckpointManagerTest, StrayTemporariesAreRemovedAtStart) {
  TempDir dir;
  testing::spit(dir / "ckpt-7.index.tempstate0123456789abcdef", "half a file");
  Variable x = scalar_var("x", 1);
  Checkpoint ckpt({{"x", x}});
  CheckpointManager m(ckpt, dir.path(), 1);
  EXPECT_FALSE(std::filesystem::exists(dir / "ckpt-7.index.tempstate0123456789abcdef"));
}

TEST_F(CheckpointManagerTest, AsyncSavesRecordTheStateWhenWritten) {
  TempDir dir;
  Variable x = scalar_var("x", 1);
  Checkpoint ckpt({{"x", x}});
  CheckpointManager m(ckpt, dir.path(), 2);
  for (int i = 0; i < 4; ++i) m.save(std::nullopt, true, {.async = true});
  m.sync();
  EXPECT_EQ(m.checkpoints(), (std::vector<std::string>{dir / "ckpt-3", dir / "ckpt-4"}));
  EXPECT_EQ(latest_checkpoint(dir.path()), dir / "ckpt-4");
  EXPECT_FALSE(bundle_exists(dir / "ckpt-2"));
}

TEST_F(CheckpointManagerTest, BadArgumentsAreRefused) {
  TempDir dir;
  Variable x = scalar_var("x", 1);
  Variable f = make_variable({.initial_value = Tensor::scalar<float>(1), .name = "f"});
  Checkpoint ckpt({{"x", x}});
  EXPECT_THROW_WITH(CheckpointManager(ckpt, dir.path(), 0), InvalidArgumentError, "max_to_keep must be positive");
  EXPECT_THROW_WITH(CheckpointManager(ckpt, dir.path(), 1, {.checkpoint_interval = 5}), InvalidArgumentError,
                    "checkpoint_interval needs a step_counter");
  EXPECT_THROW_WITH(CheckpointManager(ckpt, dir.path(), 1, {.step_counter = f, .checkpoint_interval = 5}),
                    InvalidArgumentError, "integer scalar");
  EXPECT_THROW_WITH(CheckpointManager(ckpt, dir.path(), 1, {.checkpoint_name = "a/b"}), InvalidArgumentError,
                    "plain file name");
}

TEST(CheckpointStateTest, TextFormatRoundTripAndTensorFlowsFiles) {
  // What TF 2 wrote (docs/formats.md B1), with an escaped quote added.
  const CheckpointState tf = parse_checkpoint_state(
      "model_checkpoint_path: \"ckpt-2\"\nall_model_checkpoint_paths: \"ckpt-2\"\n"
      "all_model_checkpoint_paths: \"we\\\"ird\\\\name\"\n",
      "checkpoint");
  EXPECT_EQ(tf.model_checkpoint_path, "ckpt-2");
  EXPECT_EQ(tf.all_model_checkpoint_paths, (std::vector<std::string>{"ckpt-2", "we\"ird\\name"}));
  EXPECT_TRUE(tf.all_model_checkpoint_timestamps.empty());

  CheckpointState s{"ckpt-3", {"ckpt-1", "ckpt-3"}, {1763712000.5, 1763712060.25}, 1763711999.0};
  const CheckpointState back = parse_checkpoint_state(checkpoint_state_to_text(s), "x");
  EXPECT_EQ(back.model_checkpoint_path, s.model_checkpoint_path);
  EXPECT_EQ(back.all_model_checkpoint_paths, s.all_model_checkpoint_paths);
  EXPECT_EQ(back.all_model_checkpoint_timestamps, s.all_model_checkpoint_timestamps);
  EXPECT_EQ(back.last_preserved_timestamp, s.last_preserved_timestamp);

  EXPECT_THROW_WITH(parse_checkpoint_state("model_checkpoint_path ckpt\n", "dir/checkpoint"), DataLossError,
                    "dir/checkpoint", "line 1");
  EXPECT_THROW_WITH(parse_checkpoint_state("last_preserved_timestamp: soon\n", "c"), DataLossError,
                    "expected a number");
  EXPECT_THROW_WITH(parse_checkpoint_state("model_checkpoint_path: \"open\n", "c"), DataLossError, "quoted string");

  // What the writer writes, the parser reads: a subnormal timestamp (strtod says ERANGE) round-trips
  // (libFuzzer, 2026-11-25); hexadecimal floats and overflow are refused.
  CheckpointState tiny{"ckpt-1", {"ckpt-1"}, {4.9406564584124654e-324}, 2.2250738585072014e-308 / 4};
  const CheckpointState tiny_back = parse_checkpoint_state(checkpoint_state_to_text(tiny), "x");
  EXPECT_EQ(tiny_back.all_model_checkpoint_timestamps, tiny.all_model_checkpoint_timestamps);
  EXPECT_EQ(tiny_back.last_preserved_timestamp, tiny.last_preserved_timestamp);
  EXPECT_THROW_WITH(parse_checkpoint_state("last_preserved_timestamp: 0x1p-1074\n", "c"), DataLossError,
                    "expected a number");
  EXPECT_THROW_WITH(parse_checkpoint_state("last_preserved_timestamp: 1e999\n", "c"), DataLossError,
                    "expected a number");
}

TEST(CheckpointStateTest, LatestCheckpointNeedsTheIndex) {
  TempDir dir;
  EXPECT_FALSE(latest_checkpoint(dir.path()));  // no state file
  write_checkpoint_state(dir.path(), {dir / "ckpt-1", {dir / "ckpt-1"}, {1.0}, 0.0});
  EXPECT_EQ(testing::slurp(dir / "checkpoint").substr(0, 31), "model_checkpoint_path: \"ckpt-1\"");
  EXPECT_FALSE(latest_checkpoint(dir.path()));  // the files are missing
  testing::spit(dir / "ckpt-1.index", "");
  EXPECT_EQ(latest_checkpoint(dir.path()), dir / "ckpt-1");
}

// Issue 39: a diverged model's checkpoint must not become the latest over a good one.
TEST_F(CheckpointManagerTest, NonFiniteValuesAreNotSavedUnlessAsked) {
  TempDir dir;
  Variable w = make_variable({.initial_value = Tensor::from_vector<float>({1, 2}), .name = "w"});
  Variable step = scalar_var("step", 0);
  Checkpoint ckpt({{"w", w}, {"step", step}});
  CheckpointManager m(ckpt, dir.path(), 3);
  EXPECT_EQ(m.save(), dir / "ckpt-1");
  w.assign(Tensor::from_vector<float>({1, std::numeric_limits<float>::infinity()}));
  const std::string msg = chorus::testing::message_of<FailedPreconditionError>([&] { m.save(); });
  EXPECT_NE(msg.find("'w/.ATTRIBUTES/VARIABLE_VALUE' holds NaN or Inf"), std::string::npos) << msg;
  EXPECT_NE(msg.find("allow_non_finite"), std::string::npos) << msg;
  EXPECT_EQ(m.latest_checkpoint(), dir / "ckpt-1");
  EXPECT_EQ(latest_checkpoint(dir.path()), dir / "ckpt-1");
  EXPECT_FALSE(bundle_exists(dir / "ckpt-2"));
  EXPECT_EQ(get(ckpt.save_counter()), 1) << "a refused save does not count";
  EXPECT_EQ(m.save(std::nullopt, true, {.allow_non_finite = true}), dir / "ckpt-2") << "asked: saved";
  // Checkpoint::write, TF's plain write, writes what it is given.
  EXPECT_EQ(ckpt.write(dir / "plain"), dir / "plain");
}

}  // namespace
}  // namespace chorus::train
