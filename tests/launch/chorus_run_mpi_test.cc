// chorus-run starting real Open MPI jobs on this machine (label mpi): the tiny MPI program
// mpi_probe, its exit status, and chorus-train under chorus-run.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "tests/launch/tool_runner.h"

extern char** environ;

namespace chorus::launch {
namespace {

using ::testing::HasSubstr;
using testing::run_tool;

// The environment of the test plus the variable the probe looks for (forwarded as CHORUS_*).
std::vector<std::string> probe_environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  env.emplace_back("CHORUS_LAUNCH_PROBE=forwarded");
  return env;
}

TEST(ChorusRunMpi, RunsTwoRanksThatCanTalk) {
  const auto r = run_tool({CHORUS_RUN_PATH, "-np", "2", "--", MPI_PROBE_PATH}, probe_environment());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("sum of ranks 1 over 2 processes; CHORUS_LAUNCH_PROBE forwarded to every rank"));
}

TEST(ChorusRunMpi, OversubscribesThreeRanksOnASmallMachine) {
  const auto r = run_tool({CHORUS_RUN_PATH, "-np", "3", "--oversubscribe", "--", MPI_PROBE_PATH}, probe_environment());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("sum of ranks 3 over 3 processes"));
}

TEST(ChorusRunMpi, ReturnsTheJobsExitStatus) {
  const auto r = run_tool({CHORUS_RUN_PATH, "-np", "2", "--", MPI_PROBE_PATH, "--exit-code", "3"}, probe_environment());
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
}

TEST(ChorusRunMpi, ChorusTrainUnderChorusRun) {
  const auto r = run_tool({CHORUS_RUN_PATH, "-np", "2", "--", CHORUS_TRAIN_PATH, "--model", "mlp", "--strategy",
                           "default", "--epochs", "1", "--train", "300", "--test", "100", "--batch", "32", "--quiet"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("warning: process 0 of a multi-process job"));
  EXPECT_THAT(r.out, HasSubstr("warning: process 1 of a multi-process job"));
}

TEST(ChorusRunMpi, ChorusTrainMultiWorkerTrainsOneModel) {
  // Two workers with one CPU device each: one model, gradients all-reduced over MPI; the chief prints.
  const auto r = run_tool({CHORUS_RUN_PATH,
                           "-np",
                           "2",
                           "--",
                           CHORUS_TRAIN_PATH,
                           "--model",
                           "mlp",
                           "--strategy",
                           "multi_worker",
                           "--epochs",
                           "1",
                           "--train",
                           "600",
                           "--test",
                           "200",
                           "--batch",
                           "32",
                           "--learning-rate",
                           "0.003",
                           "--min-accuracy",
                           "0.6",
                           "--quiet"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("Strategy: MultiWorkerMirroredStrategy on 2 devices in 2 worker(s)"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("warning: process")));
}

std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Issue 46: the same two-worker chorus-train job started torchrun style (chorus-run
// --nproc-per-node: no mpirun, the workers meet through the store and reduce over Gloo) and under
// mpirun ends with the same checkpoint, byte for byte.
TEST(ChorusRunMpi, ChorusTrainMultiWorkerWithoutMpiSavesTheCheckpointMpirunSaves) {
  char tmpl[] = "/tmp/chorus-run-nompi-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::filesystem::path dir = tmpl;
  const std::vector<std::string> train = {CHORUS_TRAIN_PATH,
                                          "--model",
                                          "mlp",
                                          "--strategy",
                                          "multi_worker",
                                          "--epochs",
                                          "1",
                                          "--train",
                                          "600",
                                          "--test",
                                          "200",
                                          "--batch",
                                          "32",
                                          "--learning-rate",
                                          "0.003",
                                          "--quiet",
                                          "--checkpoint-dir"};
  auto job = [&](std::vector<std::string> launcher, const std::string& name) {
    launcher.push_back("--");
    launcher.insert(launcher.end(), train.begin(), train.end());
    launcher.push_back((dir / name).string());
    const auto r = run_tool(launcher);
    EXPECT_EQ(r.exit_code, 0) << name << "\n" << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("Strategy: MultiWorkerMirroredStrategy on 2 devices in 2 worker(s)")) << name;
    return read_bytes(dir / name / "ckpt-1.data-00000-of-00001");
  };
  const std::string under_mpirun = job({CHORUS_RUN_PATH, "-np", "2"}, "mpirun");
  const std::string without_mpi = job({CHORUS_RUN_PATH, "--nproc-per-node", "2"}, "torchrun");
  EXPECT_GT(under_mpirun.size(), 10000u) << "the MLP's weights and Adam's slots";
  EXPECT_TRUE(under_mpirun == without_mpi)
      << "checkpoints differ (" << under_mpirun.size() << " vs " << without_mpi.size() << " bytes)";
  std::filesystem::remove_all(dir);
}

// Logs, not terminals: mpirun hands its ranks a pty even when its own output goes to a pipe or a
// file, so fit prints one line per epoch there (Keras's verbose=2), never "\r" redraws.
TEST(ChorusRunMpi, ChorusTrainsProgressIntoAPipeHasNoCarriageReturns) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (std::string(*e).rfind("CHORUS_PROGRESS=", 0) != 0 && std::string(*e).rfind("CI=", 0) != 0) env.emplace_back(*e);
  const auto r = run_tool({CHORUS_RUN_PATH, "-np", "2", "--", CHORUS_TRAIN_PATH, "--model", "mlp", "--strategy",
                           "multi_worker", "--epochs", "2", "--train", "600", "--test", "200", "--batch", "32"},
                          env);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find('\r'), std::string::npos) << r.out;
  EXPECT_THAT(r.out, HasSubstr("Epoch 1/2\n19/19 [=============================="));
  EXPECT_THAT(r.out, HasSubstr("Epoch 2/2\n19/19 [=============================="));
}

}  // namespace
}  // namespace chorus::launch
