// Sharded checkpoints across processes (docs/checkpoints.md "Sharded checkpoints"), run by CTest
// as `mpirun -np 2`, `-np 3` and `-np 4` (label mpi), with 1 and 2 CPU devices per worker:
//
//   - a ZeRO stage-3 save writes one data file per worker, `.data-<w>-of-<N>`; worker w's file
//     holds exactly its replicas' shards (its size is their bytes; the chief's adds the whole
//     values and the object graph), every full tensor reads back equal to a gather-to-chief save's
//     (SaveOptions::sharded = false), and it restores onto stage 0 and stage 2 with the other
//     device count (another replica count and layout), and onto one process (plain variables);
//   - TensorFlow reads its 3 data files (-np 3, tf_interop.py chorus-wrote-sharded on rank 0;
//     skipped without the interop Python);
//   - an async save writes the values of the call, committed by sync() (or by the manager's
//     destructor when nobody synced);
//   - a worker whose data file cannot be written (a directory planted at its name) fails the save
//     on every worker — its own error there, AbortedError naming it elsewhere — no index is
//     written, and the manager's previous checkpoint stays the latest, intact;
//   - a NaN in one worker's shard makes every worker refuse CheckpointManager::save alike.
// ShardedCrashChild.SaveLoop is the child of sharded_checkpoint_crash_test.cc's drill (skipped
// unless it sets CHORUS_SHARDED_CRASH_DIR); ShardedJobChild.Save and .Restore are the two jobs of
// its resharding test (skipped unless it sets CHORUS_SHARDED_JOB_DIR).
#include "tests/collective/mpi_test_main.h"

#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>

#include "tests/checkpoint/tf_interop_util.h"
#include "tests/core/interop_python.h"
#include <chorus/checkpoint/bundle.h>
#include <chorus/checkpoint/checkpoint.h>
#include <chorus/checkpoint/checkpoint_manager.h>
#include <chorus/core/distributed_variable.h>
#include <chorus/core/error.h>
#include <chorus/core/sharded_variable.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/distribute/multi_worker_mirrored_strategy.h>

namespace chorus::train {
namespace {

using distribute::MultiWorkerMirroredStrategy;

constexpr std::chrono::milliseconds kTimeout{60000};
constexpr int kCpuDevices = 2;
constexpr const char* kVar = "/.ATTRIBUTES/VARIABLE_VALUE";

MultiWorkerMirroredStrategy make_strategy(int k, int stage) {
  return MultiWorkerMirroredStrategy({.cpu_devices_per_worker = k, .timeout = kTimeout, .sharding = {.stage = stage}});
}

std::vector<std::string> local_cpus(int k) {
  std::vector<std::string> out;
  for (int i = 0; i < k; ++i) out.push_back("/cpu:" + std::to_string(i));
  return out;
}

const std::vector<Shape> kShapes{{5, 7}, {3, 4, 5}, {1}, {6}, {64, 130}};

// Parameters of kShapes (value `offset` + i·1000 + j) and a not-trainable mirrored step counter.
std::vector<Variable> make_params(distribute::Strategy& strategy, float offset) {
  std::vector<Variable> vars;
  auto scope = strategy.scope();
  for (std::size_t i = 0; i < kShapes.size(); ++i) {
    std::vector<float> v(static_cast<std::size_t>(kShapes[i].num_elements()));
    for (std::size_t j = 0; j < v.size(); ++j) v[j] = offset + static_cast<float>(i * 1000 + j);
    vars.push_back(
        make_variable({.initial_value = Tensor::from_vector(v, kShapes[i]), .name = "p" + std::to_string(i)}));
  }
  vars.push_back(make_variable({.initial_value = Tensor::scalar<std::int64_t>(7), .name = "step", .trainable = false}));
  return vars;
}

std::vector<TrackableChild> children_of(const std::vector<Variable>& vars) {
  std::vector<TrackableChild> out;
  for (const Variable& v : vars) out.push_back({v.name(), TrackableRef(v)});
  return out;
}

// Every parameter's whole value (a collective for a multi-worker sharded variable).
std::vector<std::vector<float>> values_of(const std::vector<Variable>& vars) {
  std::vector<std::vector<float>> out;
  for (std::size_t i = 0; i < kShapes.size(); ++i) {
    const DistributedVariable* d = as_distributed(vars[i]);
    out.push_back((d ? d->checkpoint_value() : vars[i].value()).to_vector<float>());
  }
  return out;
}

// A directory every rank names alike (rank 0's pid, broadcast).
std::string shared_dir(MultiWorkerMirroredStrategy& strategy, const std::string& what) {
  auto* comm = strategy.worker_communicator();
  Tensor pid = Tensor::from_vector<std::int64_t>({static_cast<std::int64_t>(::getpid())}, {1}, "/cpu:0");
  comm->broadcast(pid, {.root = 0, .timeout = kTimeout})->wait(kTimeout);
  const std::string dir = "/tmp/chorus_sharded_ckpt_" + std::to_string(pid.to_vector<std::int64_t>()[0]) + "_" + what;
  if (strategy.is_chief()) std::filesystem::create_directories(dir);
  comm->barrier({.timeout = kTimeout})->wait(kTimeout);
  return dir;
}

void remove_shared(MultiWorkerMirroredStrategy& strategy, const std::string& dir) {
  // Long: rank 0 may have run TensorFlow meanwhile (a minute and more on a loaded machine).
  constexpr std::chrono::milliseconds kLong{600000};
  strategy.worker_communicator()->barrier({.timeout = kLong})->wait(kLong);
  if (strategy.is_chief()) std::filesystem::remove_all(dir);
}

std::string data_file(const std::string& prefix, int w, int n) {
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, ".data-%05d-of-%05d", w, n);
  return prefix + suffix;
}

class ShardedMpi : public ::testing::TestWithParam<int> {};

TEST_P(ShardedMpi, EachWorkerWritesItsShardsAndTheCheckpointRestoresAnywhere) {
  const int k = GetParam();
  MultiWorkerMirroredStrategy strategy = make_strategy(k, 3);
  const int n = strategy.num_workers(), w = strategy.worker_index();
  const std::string dir = shared_dir(strategy, "layout_k" + std::to_string(k));
  const std::vector<Variable> vars = make_params(strategy, 0.5f);
  ASSERT_NE(as_sharded(vars[0]), nullptr);
  const auto want = values_of(vars);
  Checkpoint ckpt(children_of(vars));
  const std::string sharded = ckpt.write(dir + "/sharded");
  const std::string gathered = ckpt.write(dir + "/gathered", {.sharded = false});
  for (int i = 0; i < n; ++i) EXPECT_TRUE(std::filesystem::exists(data_file(sharded, i, n))) << i;
  EXPECT_TRUE(std::filesystem::exists(data_file(gathered, 0, 1)));
  // This worker's file: its replicas' shards, nothing else (the chief's holds the rest too).
  std::int64_t mine = 0;
  for (std::size_t i = 0; i < kShapes.size(); ++i) {
    const ShardLayout& l = as_sharded(vars[i])->layout();
    for (int r = 0; r < k; ++r) mine += l.length(strategy.worker_offset() + r) * 4;
  }
  const auto size = static_cast<std::int64_t>(std::filesystem::file_size(data_file(sharded, w, n)));
  if (w == 0) {
    EXPECT_GT(size, mine);
  } else {
    EXPECT_EQ(size, mine) << "worker " << w;
  }
  const BundleReader rs(sharded), rg(gathered);
  EXPECT_EQ(rs.keys(), rg.keys());
  for (std::size_t i = 0; i < kShapes.size(); ++i) {
    const std::string key = "p" + std::to_string(i) + kVar;
    EXPECT_EQ(rs.read(key).to_vector<float>(), want[i]) << key;
    EXPECT_EQ(rg.read(key).to_vector<float>(), want[i]) << key;
  }
  // Restores: the other device count at stages 0 and 2 (another layout), and one process alone.
  for (int stage : {0, 2}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    MultiWorkerMirroredStrategy target = make_strategy(3 - k, stage);
    const std::vector<Variable> p = make_params(target, -100.0f);
    Checkpoint(children_of(p)).read(sharded).assert_consumed();
    EXPECT_EQ(values_of(p), want);
  }
  {
    distribute::MirroredStrategy alone(local_cpus(k), {.sharding = {.stage = 3}});  // this process only
    const std::vector<Variable> p = make_params(alone, -100.0f);
    Checkpoint(children_of(p)).read(sharded).assert_consumed();
    EXPECT_EQ(values_of(p), want);
  }
  if (w == 0 && k == 2 && n == 3) {  // once per ctest run (-np 3): importing TF costs a while
    const std::string python = chorus::testing::find_interop_python("tensorflow").path;
    if (!python.empty()) {
      const std::string case_dir = dir + "/tf";
      std::vector<std::pair<std::string, Tensor>> expected;
      for (std::size_t i = 0; i < kShapes.size(); ++i)
        expected.emplace_back("p" + std::to_string(i) + kVar, Tensor::from_vector(want[i], kShapes[i], "/CPU:0"));
      expected.emplace_back(std::string("step") + kVar, Tensor::scalar<std::int64_t>(7, "/CPU:0"));
      testing::write_dump(case_dir + "/expected", expected);
      testing::write_text(case_dir + "/prefix", sharded);
      testing::write_text(case_dir + "/data_files", std::to_string(n));
      EXPECT_EQ(testing::run_tf_interop(python, "chorus-wrote-sharded " + testing::quoted(case_dir)), 0);
    } else {
      std::cout << "TensorFlow check skipped: no interop Python with tensorflow\n";
    }
  }
  remove_shared(strategy, dir);
}

TEST_P(ShardedMpi, AnAsyncSaveWritesTheValuesOfTheCall) {
  const int k = GetParam();
  MultiWorkerMirroredStrategy strategy = make_strategy(k, 3);
  const std::string dir = shared_dir(strategy, "async_k" + std::to_string(k));
  std::vector<Variable> vars = make_params(strategy, 1.0f);
  const auto want = values_of(vars);
  Checkpoint ckpt(children_of(vars));
  const std::string path = ckpt.write(dir + "/async", {.async = true});
  for (std::size_t i = 0; i < kShapes.size(); ++i) vars[i].assign(Tensor::zeros(kShapes[i]));
  ckpt.sync();  // the data files, then the exchange and the chief's index
  const BundleReader r(path);
  for (std::size_t i = 0; i < kShapes.size(); ++i)
    EXPECT_EQ(r.read("p" + std::to_string(i) + kVar).to_vector<float>(), want[i]) << i;
  {  // a manager that goes away with an async save not synced commits it (and names it latest)
    CheckpointManager manager(ckpt, dir + "/managed", 2);
    manager.save(std::nullopt, true, {.async = true});
  }
  strategy.worker_communicator()->barrier({.timeout = kTimeout})->wait(kTimeout);  // the chief's index is written
  EXPECT_EQ(latest_checkpoint(dir + "/managed").value_or(""), dir + "/managed/ckpt-1");
  EXPECT_NO_THROW(verify_bundle(dir + "/managed/ckpt-1"));
  remove_shared(strategy, dir);
}

TEST_P(ShardedMpi, AWorkerThatCannotWriteFailsTheSaveOnEveryWorkerAndTheLatestStays) {
  const int k = GetParam();
  MultiWorkerMirroredStrategy strategy = make_strategy(k, 3);
  const int n = strategy.num_workers(), w = strategy.worker_index();
  const std::string dir = shared_dir(strategy, "fail_k" + std::to_string(k));
  std::vector<Variable> vars = make_params(strategy, 2.0f);
  const auto want = values_of(vars);
  Checkpoint ckpt(children_of(vars));
  CheckpointManager manager(ckpt, dir, 3);
  ASSERT_EQ(manager.save().value_or(""), dir + "/ckpt-1");
  // The last worker's data file of ckpt-2 cannot be renamed into place.
  if (w == n - 1) std::filesystem::create_directories(data_file(dir + "/ckpt-2", n - 1, n));
  strategy.worker_communicator()->barrier({.timeout = kTimeout})->wait(kTimeout);
  for (std::size_t i = 0; i < kShapes.size(); ++i) vars[i].assign(Tensor::zeros(kShapes[i]));
  try {
    manager.save();
    ADD_FAILURE() << "the save succeeded";
  } catch (const FailedPreconditionError& e) {
    EXPECT_EQ(w, n - 1) << e.what();  // the worker whose write failed: its own error
  } catch (const AbortedError& e) {
    EXPECT_NE(w, n - 1) << e.what();
    EXPECT_NE(std::string(e.what()).find("worker " + std::to_string(n - 1) + " could not write its data file"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(bundle_exists(dir + "/ckpt-2"));
  EXPECT_EQ(latest_checkpoint(dir).value_or(""), dir + "/ckpt-1");
  const std::vector<Variable> p = make_params(strategy, -100.0f);
  Checkpoint(children_of(p)).read(dir + "/ckpt-1").expect_partial();  // (save_counter aside)
  EXPECT_EQ(values_of(p), want);
  remove_shared(strategy, dir);
}

TEST_P(ShardedMpi, ANonFiniteValueInOneWorkersShardIsRefusedByEveryWorker) {
  const int k = GetParam();
  MultiWorkerMirroredStrategy strategy = make_strategy(k, 3);
  const std::string dir = shared_dir(strategy, "nan_k" + std::to_string(k));
  std::vector<Variable> vars = make_params(strategy, 3.0f);
  // The last element of p4 lies in the last replica's shard, on the last worker.
  std::vector<float> v = values_of(vars)[4];
  v.back() = std::nanf("");
  vars[4].assign(Tensor::from_vector(v, kShapes[4]));
  Checkpoint ckpt(children_of(vars));
  CheckpointManager manager(ckpt, dir, 3);
  try {
    manager.save();
    ADD_FAILURE() << "saved a NaN";
  } catch (const FailedPreconditionError& e) {
    EXPECT_NE(std::string(e.what()).find("'p4/.ATTRIBUTES/VARIABLE_VALUE' holds NaN or Inf"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(latest_checkpoint(dir).has_value());
  remove_shared(strategy, dir);
}

INSTANTIATE_TEST_SUITE_P(LocalDevices, ShardedMpi, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& i) { return "k" + std::to_string(i.param); });

// ---- the crash drill's child (sharded_checkpoint_crash_test.cc) ----

// Every rank: resume from the latest checkpoint, then save states n = step + 1, + 2, ... (all of
// p0, p4 and the step hold n) until killed. The rank named by CHORUS_SHARDED_CRASH_VICTIM kills
// itself with SIGKILL after CHORUS_SHARDED_CRASH_DELAY_US microseconds (the job then dies).
TEST(ShardedCrashChild, SaveLoop) {
  const char* dir = std::getenv("CHORUS_SHARDED_CRASH_DIR");
  if (dir == nullptr) GTEST_SKIP() << "run by sharded_checkpoint_crash_test only";
  MultiWorkerMirroredStrategy strategy = make_strategy(2, 3);
  Variable step = make_variable({.initial_value = Tensor::scalar<std::int64_t>(0), .name = "step", .trainable = false});
  std::vector<Variable> vars;
  {
    auto scope = strategy.scope();
    vars.push_back(make_variable({.initial_value = Tensor::zeros({512, 1024}), .name = "a"}));  // 2 MiB
    vars.push_back(make_variable({.initial_value = Tensor::zeros({1000, 333}), .name = "b"}));
  }
  Checkpoint ckpt({{"step", step}, {"a", vars[0]}, {"b", vars[1]}});
  CheckpointManager manager(ckpt, dir, 2);
  manager.restore_or_initialize();
  if (std::atoi(std::getenv("CHORUS_SHARDED_CRASH_VICTIM")) == strategy.worker_index()) {
    const long delay = std::atol(std::getenv("CHORUS_SHARDED_CRASH_DELAY_US"));
    std::thread([delay] {
      std::this_thread::sleep_for(std::chrono::microseconds(delay));
      std::raise(SIGKILL);
    }).detach();
  }
  for (;;) {
    const std::int64_t next = step.value().item<std::int64_t>() + 1;
    step.assign(Tensor::scalar<std::int64_t>(next));
    vars[0].assign(Tensor::full({512, 1024}, static_cast<double>(next)));
    vars[1].assign(Tensor::full({1000, 333}, static_cast<double>(next)));
    manager.save();
  }
}

// ---- a save by one job restored by a job of another size (sharded_checkpoint_crash_test.cc) ----

// The job's directory, or "" (then the test skips: it only runs as a child).
std::string job_dir() {
  const char* dir = std::getenv("CHORUS_SHARDED_JOB_DIR");
  return dir == nullptr ? "" : dir;
}

// Writes <dir>/sharded (ZeRO stage 3, 2 devices per worker: one data file per worker of this job)
// and <dir>/gathered, the same values saved whole by the chief (SaveOptions::sharded = false).
TEST(ShardedJobChild, Save) {
  const std::string dir = job_dir();
  if (dir.empty()) GTEST_SKIP() << "run by sharded_checkpoint_crash_test only";
  MultiWorkerMirroredStrategy strategy = make_strategy(2, 3);
  const std::vector<Variable> vars = make_params(strategy, 3.25f);
  Checkpoint ckpt(children_of(vars));
  EXPECT_EQ(ckpt.write(dir + "/sharded"), dir + "/sharded");
  EXPECT_EQ(ckpt.write(dir + "/gathered", {.sharded = false}), dir + "/gathered");
}

// Restores <dir>/sharded with this job's workers (1 device each) at stages 3 and 0, compares every
// value with <dir>/gathered's, then writes <dir>/resharded from stage 3 (this job's data files).
TEST(ShardedJobChild, Restore) {
  const std::string dir = job_dir();
  if (dir.empty()) GTEST_SKIP() << "run by sharded_checkpoint_crash_test only";
  const BundleReader gathered(dir + "/gathered");
  std::vector<std::vector<float>> want;
  for (std::size_t i = 0; i < kShapes.size(); ++i)
    want.push_back(gathered.read("p" + std::to_string(i) + kVar).to_vector<float>());
  for (int stage : {0, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    MultiWorkerMirroredStrategy strategy = make_strategy(1, stage);
    const std::vector<Variable> p = make_params(strategy, -100.0f);
    Checkpoint ckpt(children_of(p));
    ckpt.read(dir + "/sharded").assert_consumed();
    EXPECT_EQ(values_of(p), want);
    EXPECT_EQ(p.back().value().item<std::int64_t>(), 7);
    if (stage == 3) {
      EXPECT_EQ(ckpt.write(dir + "/resharded"), dir + "/resharded");
    }
  }
}

}  // namespace
}  // namespace chorus::train

int main(int argc, char** argv) {
  return chorus::testing::run_tests_under_mpi_on_cpus(argc, argv, chorus::train::kCpuDevices, 256);
}
