// A communicator whose creation times out must leave MPI in a state its teardown survives (issue
// 40): `CHORUS_COLLECTIVE_TIMEOUT=1e-9 chorus-run -np 2 -- chorus-train --strategy multi_worker ...`
// crashed 10 of 16 runs with SIGSEGV in mca_pml_ob1_del_comm, called by MPI_Finalize from
// ~MpiEnvironment, after make_mpi_communicator timed out with its MPI_Comm_idup still pending.
// Run by run_mpi_creation_timeout.cmake under `mpirun -np 2`, several times.
//
//   mode `late [MS]` (default, MS 300): rank 1 comes MS ms late, so rank 0's duplication is
//        certainly pending when its 1 ms timeout expires; rank 1's then times out too. How far
//        the duplication got by then (what crashed MPI_Finalize: a communicator registered but not
//        yet activated) depends on MS and on chance; the script varies MS.
//   mode `together`: both ranks create at once with a 1 ms timeout, as the chorus-train job did
//        (the duplication may or may not complete in time; either is fine).
// Each rank prints "[rank N] DEADLINE_EXCEEDED ..." (or "[rank N] created") and, once its
// MpiEnvironment is gone, "[rank N] past MpiEnvironment", and exits 0 (a non-zero exit would
// make mpirun kill the other rank before its own teardown is tested). The script requires no
// signal, exit status 0, and "past MpiEnvironment" from both ranks.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include <chorus/collective/mpi/mpi.h>
#include <chorus/core/error.h>

namespace cx = chorus;

int main(int argc, char** argv) {
  const bool together = argc > 1 && std::strcmp(argv[1], "together") == 0;
  const int late_ms = argc > 2 ? std::atoi(argv[2]) : 300;
  int rank = -1;
  {
    cx::collective::MpiEnvironment mpi;
    rank = mpi.world_rank();
    if (!together && rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(late_ms));
    try {
      auto comm = cx::collective::make_mpi_communicator({.validate = true, .timeout = std::chrono::milliseconds(1)});
      std::printf("[rank %d] created\n", rank);
    } catch (const cx::DeadlineExceededError& e) {
      std::printf("[rank %d] DEADLINE_EXCEEDED %s\n", rank, e.what());
    } catch (const cx::Error& e) {
      std::printf("[rank %d] FAIL: not a DeadlineExceededError: %s\n", rank, e.what());
      return 2;
    }
    std::fflush(stdout);
  }  // ~MpiEnvironment: MPI_Finalize, or skipped
  std::printf("[rank %d] past MpiEnvironment\n", rank);
  std::fflush(stdout);
  return 0;
}
