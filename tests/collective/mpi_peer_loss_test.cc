// A dead process in seconds, not at the collective timeout: run by run_mpi_peer_loss.cmake under
// `mpirun --enable-recovery -np 3` (Open MPI then lets the survivors run on after a death).
//
//   rank 2 leaves gracefully right after a barrier: it destroys its communicator (its peer monitor
//          says goodbye) and stays alive a while — that must NOT be taken for a death;
//   rank 1 is SIGKILLed 1.5 s after the barrier;
//   rank 0 waits in an all_reduce with the default timeout (300 s): it must throw UnavailableError
//          naming rank 1 and its host, after the kill (so not because of rank 2's goodbye) and
//          within 10 s of it; then it returns normally (MPI_Finalize must not hang either).
// Rank 0 prints "[rank 0] PASS ..." or "[rank 0] FAIL: why"; the script checks for PASS.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "collective/mpi.h"
#include "collective/peer_monitor.h"
#include "core/error.h"
#include "core/tensor.h"

namespace cx = chorus;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kKillAfter = std::chrono::milliseconds(1500);

int rank0(cx::collective::Communicator& comm, Clock::time_point after_barrier) {
  cx::Tensor t = cx::Tensor::full({1000}, 1.0f);
  try {
    comm.all_reduce(t, t)->wait();  // the default timeout: 300 s
    std::printf("[rank 0] FAIL: the all_reduce completed although rank 1 died\n");
    return 1;
  } catch (const cx::UnavailableError& e) {
    const double after = std::chrono::duration<double>(Clock::now() - after_barrier).count();
    const double kill_at = std::chrono::duration<double>(kKillAfter).count();
    const std::string what = e.what();
    const std::string host = cx::collective::local_host_name();
    std::string why;
    if (what.find("rank 1 (host " + host) == std::string::npos) why += " the error does not name rank 1 and its host;";
    if (what.find("rank 2 (host") != std::string::npos) why += " rank 2's graceful exit was reported as a loss;";
    if (after < kill_at - 0.2) why += " it came before the kill (rank 2's goodbye taken for a death?);";
    if (after > kill_at + 10) why += " it came more than 10 s after the kill;";
    std::printf("[rank 0] %s UnavailableError %.2f s after the barrier (kill at %.1f s): %s\n",
                why.empty() ? "PASS" : ("FAIL:" + why).c_str(), after, kill_at, e.what());
    return why.empty() ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("[rank 0] FAIL: not an UnavailableError: %s\n", e.what());
    return 1;
  }
}

}  // namespace

int main() {
  int rc = 0;
  {
    cx::collective::MpiEnvironment mpi;
    const int rank = mpi.world_rank();
    if (mpi.world_size() != 3) {
      std::printf("[rank %d] FAIL: run with -np 3\n", rank);
      return 2;
    }
    auto comm = cx::collective::make_mpi_communicator();
    cx::Tensor t = cx::Tensor::full({4}, 1.0f);
    comm->all_reduce(t, t)->wait();
    comm->barrier()->wait();
    const auto after_barrier = Clock::now();
    if (rank == 2) {
      comm.reset();  // the graceful exit: the communicator (and its peer monitor) closes, goodbye sent
      std::printf("[rank 2] left gracefully\n");
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::seconds(4));
      std::_Exit(0);  // rank 1 is dead by now: MPI_Finalize is not for this rank to try
    }
    if (rank == 1) {
      std::this_thread::sleep_for(kKillAfter);
      std::printf("[rank 1] killing myself (SIGKILL)\n");
      std::fflush(stdout);
      raise(SIGKILL);
    }
    rc = rank0(*comm, after_barrier);
    std::fflush(stdout);
  }  // rank 0: the failed communicator is kept, MPI_Finalize runs with rank 1 gone
  std::printf("[rank 0] finalized\n");
  return rc;
}
