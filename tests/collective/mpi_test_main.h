// The main() of GoogleTest binaries run under mpirun (tests/collective/mpi_test.cc,
// nccl_mpi_test.cc, tests/distribute/multi_worker_mpi_test.cc):
//
//   int main(int argc, char** argv) { return chorus::testing::run_tests_under_mpi(argc, argv); }
//
// MPI is initialized (collective::MpiEnvironment, MPI_THREAD_SERIALIZED) around the tests; rank 0
// prints GoogleTest's usual output, the other ranks print only their failures, prefixed with the
// rank; afterwards all ranks agree on the exit status (the worst of all), so mpirun's status says
// whether any rank failed. If even that agreement fails, the process leaves without MPI_Finalize
// (std::_Exit(1)) and mpirun ends the job with an error — never a hang in MPI_Finalize.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include <chorus/collective/mpi/mpi.h>
#include <chorus/core/config.h>
#include <chorus/core/tensor.h>

namespace chorus::testing {

// Prints a rank's failures (its default printer is removed).
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] [  FAILED  ] %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

 private:
  int rank_;
};

// `setup` runs after MPI_Init, before the tests (e.g. to configure logical devices).
inline int run_tests_under_mpi(int argc, char** argv, const std::function<void()>& setup = {}) {
  ::testing::InitGoogleTest(&argc, argv);
  int status = 1;
  {
    collective::MpiEnvironment mpi;  // MPI_Finalize at the end of this block
    if (setup) setup();
    if (mpi.world_rank() != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new RankFailurePrinter(mpi.world_rank()));
    }
    const int mine = RUN_ALL_TESTS();
    try {
      auto comm = collective::make_mpi_communicator({.timeout = std::chrono::seconds(60)});
      Tensor s = Tensor::scalar<std::int32_t>(mine, "/cpu:0");
      comm->all_reduce(s, s, {.op = collective::ReduceOp::kMax, .timeout = std::chrono::seconds(60)})->wait();
      status = s.item<std::int32_t>();
      if (status != 0 && mine == 0)
        std::fprintf(stderr, "[rank %d] passed here, but another rank failed\n", mpi.world_rank());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[rank %d] could not agree on the exit status: %s\n", mpi.world_rank(), e.what());
      std::fflush(nullptr);
      std::_Exit(1);
    }
  }
  return status;
}

// The same with `devices` logical CPU devices of `memory_limit_mb` each configured first (the
// MultiWorkerMirroredStrategy tests, with 1 or 2 devices per worker).
inline int run_tests_under_mpi_on_cpus(int argc, char** argv, int devices, std::int64_t memory_limit_mb) {
  return run_tests_under_mpi(argc, argv, [&] {
    config::set_logical_device_configuration(
        config::list_physical_devices("CPU")[0],
        std::vector<LogicalDeviceConfiguration>(static_cast<std::size_t>(devices),
                                                LogicalDeviceConfiguration{.memory_limit_mb = memory_limit_mb}));
  });
}

}  // namespace chorus::testing
