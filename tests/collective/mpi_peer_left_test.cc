// A rank that left with an error is noticed at once, not at the collective timeout (issue 39,
// item 2). Run under `mpirun -np 2` and `-np 3` (tests/collective/CMakeLists.txt):
//
//   rank 1 throws outside any collective, records why (collective::set_process_failure, as
//          chorus-train and Model::fit do), destroys its communicator (its peer monitor's goodbye
//          carries the message) and ends normally through MPI_Finalize;
//   the others wait in an all_reduce with a 60 s timeout: they must raise UnavailableError within
//          10 s of the barrier, naming rank 1, its host, its pid and its message. Before the goodbye
//          carried an error they waited the whole 60 s (DeadlineExceededError): that is a FAIL.
// Each waiting rank prints "[rank R] PASS ..." or "[rank R] FAIL: why" and exits non-zero on FAIL.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
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

constexpr const char* kWhy = "bad batch at step 7: labels out of range (seen 12, valid 0..9)";

int waiter(int rank, cx::collective::Communicator& comm, Clock::time_point after_barrier, long rank1_pid) {
  cx::Tensor t = cx::Tensor::full({1000}, 1.0f);
  try {
    comm.all_reduce(t, t, {.timeout = std::chrono::seconds(60)})->wait();
    std::printf("[rank %d] FAIL: the all_reduce completed although rank 1 left\n", rank);
    return 1;
  } catch (const cx::UnavailableError& e) {
    const double after = std::chrono::duration<double>(Clock::now() - after_barrier).count();
    const std::string what = e.what();
    std::string why;
    if (what.find("rank 1 (host " + cx::host_name_or("unknown-host") + ", pid " + std::to_string(rank1_pid)) ==
        std::string::npos)
      why += " the error does not name rank 1, its host and its pid;";
    if (what.find(kWhy) == std::string::npos) why += " the error does not carry rank 1's message;";
    if (what.find("left with an error") == std::string::npos) why += " it does not say rank 1 left with an error;";
    if (after > 10) why += " it came more than 10 s after the barrier;";
    std::printf("[rank %d] %s UnavailableError %.2f s after the barrier: %s\n", rank,
                why.empty() ? "PASS" : ("FAIL:" + why).c_str(), after, e.what());
    return why.empty() ? 0 : 1;
  } catch (const std::exception& e) {
    const double after = std::chrono::duration<double>(Clock::now() - after_barrier).count();
    std::printf("[rank %d] FAIL: not an UnavailableError after %.2f s: %s\n", rank, after, e.what());
    return 1;
  }
}

}  // namespace

int main() {
  int rc = 0;
  {
    cx::collective::MpiEnvironment mpi;
    const int rank = mpi.world_rank();
    auto comm = cx::collective::make_mpi_communicator();
    // Everyone learns rank 1's pid, to check that the error names it.
    cx::Tensor pids = cx::Tensor::zeros({mpi.world_size()}, cx::DType::kInt64);
    cx::Tensor mine = cx::Tensor::full({1}, static_cast<double>(::getpid()), cx::DType::kInt64);
    comm->all_gather(mine, pids)->wait();
    const long rank1_pid = static_cast<long>(pids.to_vector<std::int64_t>()[1]);
    comm->barrier()->wait();
    const auto after_barrier = Clock::now();
    if (rank == 1) {
      // The monitors connect in the background: a goodbye can only reach a peer connected to. (A
      // process failing in its first milliseconds may leave before that; its peers then learn of
      // it from the timeout.) Wait up to 10 s for every connection.
      const auto monitor = cx::collective::process_peer_monitor();
      const auto until = Clock::now() + std::chrono::seconds(10);
      while (monitor && static_cast<int>(monitor->connected().size()) < mpi.world_size() - 1 && Clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      try {
        throw std::runtime_error(kWhy);  // the program's own failure, outside any collective
      } catch (const std::exception& e) {
        cx::collective::set_process_failure(e.what());
        comm.reset();  // the goodbye, with the message
        std::printf("[rank 1] left with an error: %s\n", e.what());
        std::fflush(stdout);
      }
      return 0;  // through MPI_Finalize: a clean exit of a failed program
    }
    rc = waiter(rank, *comm, after_barrier, rank1_pid);
    std::fflush(stdout);
  }
  return rc;
}
