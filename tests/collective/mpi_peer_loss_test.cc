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
//
// With the argument `notice`, rank 2 runs without a peer monitor (CHORUS_PEER_MONITOR=false, set
// before MPI starts) and waits in the same all_reduce: it cannot see the death itself and must
// learn it from rank 0's notice — UnavailableError naming rank 1, its host and "seen by rank 0"
// (how ranks that do not watch the dead one, beyond 64 processes, hear of it). It prints
// "[rank 2] PASS ..." too.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <chorus/collective/mpi/mpi.h>
#include <chorus/collective/peer_monitor/peer_monitor.h>
#include <chorus/core/error.h>
#include <chorus/core/host.h>
#include <chorus/core/tensor.h>

namespace cx = chorus;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kKillAfter = std::chrono::milliseconds(1500);

// Waits in an all_reduce that rank 1 never joins; checks the error. `seen_by_0`: the error must
// say that rank 0 saw the loss (a rank told by notice).
int survivor(int rank, cx::collective::Communicator& comm, Clock::time_point after_barrier, bool seen_by_0) {
  cx::Tensor t = cx::Tensor::full({1000}, 1.0f);
  try {
    comm.all_reduce(t, t)->wait();  // the default timeout: 300 s
    std::printf("[rank %d] FAIL: the all_reduce completed although rank 1 died\n", rank);
    return 1;
  } catch (const cx::UnavailableError& e) {
    const double after = std::chrono::duration<double>(Clock::now() - after_barrier).count();
    const double kill_at = std::chrono::duration<double>(kKillAfter).count();
    const std::string what = e.what();
    const std::string host = cx::host_name_or("unknown-host");
    std::string why;
    if (what.find("rank 1 (host " + host) == std::string::npos) why += " the error does not name rank 1 and its host;";
    if (what.find("rank 2 (host") != std::string::npos) why += " rank 2's graceful exit was reported as a loss;";
    if (after < kill_at - 0.2) why += " it came before the kill (rank 2's goodbye taken for a death?);";
    if (after > kill_at + 10) why += " it came more than 10 s after the kill;";
    if (seen_by_0 && what.find("seen by rank 0") == std::string::npos) why += " it does not say rank 0 saw it;";
    std::printf("[rank %d] %s UnavailableError %.2f s after the barrier (kill at %.1f s): %s\n", rank,
                why.empty() ? "PASS" : ("FAIL:" + why).c_str(), after, kill_at, e.what());
    return why.empty() ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("[rank %d] FAIL: not an UnavailableError: %s\n", rank, e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool notice = argc > 1 && std::string(argv[1]) == "notice";
  const char* launcher_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (notice && launcher_rank && std::string(launcher_rank) == "2") setenv("CHORUS_PEER_MONITOR", "false", 1);
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
    if (rank == 2 && notice) {
      rc = survivor(2, *comm, after_barrier, /*seen_by_0=*/true);
      std::fflush(stdout);
      std::_Exit(rc);  // a peer is dead; this rank has no monitor of its own to tell MPI_Finalize
    }
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
    rc = survivor(0, *comm, after_barrier, /*seen_by_0=*/false);
    std::fflush(stdout);
  }  // rank 0: the failed communicator is kept, MPI_Finalize runs with rank 1 gone
  std::printf("[rank 0] finalized\n");
  return rc;
}
