// MPI itself (mpi.h): MpiEnvironment (MPI_Init_thread / MPI_Finalize), the process-wide mutex
// every MPI call holds, and make_mpi_communicator, which duplicates MPI_COMM_WORLD and exchanges
// the peer monitors' addresses. The communicator is in mpi_communicator.cc and mpi_failure.cc,
// what travels between processes in mpi_channel.cc (mpi_internal.h lists them).
#include <chorus/collective/mpi/mpi.h>

#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI's extensions: MPIX_Query_cuda_support
#endif

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <chorus/collective/mpi/mpi_internal.h>
#include <chorus/core/env.h>
#include <chorus/core/error.h>
#include <chorus/core/logging.h>

namespace chorus::collective {
namespace mpi_detail {

std::mutex& mpi_mutex() {
  static std::mutex mu;
  return mu;
}

void check_mpi(int code, const char* expr, const char* file, int line) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = "unknown MPI error";
  int len = 0;
  MPI_Error_string(code, text, &len);
  const char* base = std::strrchr(file, '/');
  throw InternalError(internal::str_cat(base ? base + 1 : file, ":", line, ": ", expr, " failed: ", text,
                                        " (MPI error code ", code, ")"));
}

}  // namespace mpi_detail

using namespace mpi_detail;

namespace {

using internal::str_cat;

std::string thread_level_name(int level) {
  if (level == MPI_THREAD_SINGLE) return "MPI_THREAD_SINGLE";
  if (level == MPI_THREAD_FUNNELED) return "MPI_THREAD_FUNNELED";
  if (level == MPI_THREAD_SERIALIZED) return "MPI_THREAD_SERIALIZED";
  if (level == MPI_THREAD_MULTIPLE) return "MPI_THREAD_MULTIPLE";
  return str_cat("thread level ", level);
}

}  // namespace

MpiEnvironment::MpiEnvironment(MpiThreadLevel required) {
  const int want = required == MpiThreadLevel::kMultiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED;
  int initialized = 0, finalized = 0;
  CHORUS_MPI_CHECK(MPI_Finalized(&finalized));
  CHORUS_REQUIRE(!finalized, FailedPreconditionError,
                 "MpiEnvironment: MPI was already finalized in this process, and MPI cannot be initialized twice");
  CHORUS_MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) {
    CHORUS_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, want, &provided_));
    owns_ = true;
  } else {
    CHORUS_MPI_CHECK(MPI_Query_thread(&provided_));
  }
  if (provided_ < want) {
    if (owns_) {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      MPI_Finalize();
    }
    throw UnavailableError(str_cat("MPI provides ", thread_level_name(provided_), " but ", thread_level_name(want),
                                   " is required: chorus calls MPI from replica threads (serialized by a mutex)",
                                   required == MpiThreadLevel::kMultiple ? ", and this program asked for concurrent "
                                                                           "MPI calls from its own threads"
                                                                         : "",
                                   ". Use an MPI built with thread support (Open MPI: --enable-mpi-thread-multiple)."));
  }
  CHORUS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  CHORUS_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
}

MpiEnvironment::MpiEnvironment(MpiEnvironment&& other) noexcept
    : owns_(other.owns_), provided_(other.provided_), world_rank_(other.world_rank_), world_size_(other.world_size_) {
  other.owns_ = false;
}

MpiEnvironment::~MpiEnvironment() {
  if (!owns_) return;
  std::lock_guard<std::mutex> lock(mpi_mutex());
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (g_peer_lost) {
    CHORUS_LOG(WARNING) << "MPI_Finalize skipped: a peer process of this job was lost, and MPI_Finalize would wait "
                        << "for it forever";
    return;
  }
  // A communicator's creation gave up while MPI_Comm_idup was pending: MPI_Finalize would free the
  // half-made duplicate and crash (SIGSEGV in Open MPI's mca_pml_ob1_del_comm). Give the
  // duplication a few seconds to complete — it does when the other processes called it too — and
  // skip MPI_Finalize when it does not, as for a lost peer.
  if (g_unfinished_duplicate && !finish_unfinished_duplicates(kFinishDuplicatesWithin)) {
    CHORUS_LOG(WARNING) << "MPI_Finalize skipped: the creation of an MPI communicator was abandoned and its "
                        << "MPI_Comm_idup has not completed on every process within "
                        << kFinishDuplicatesWithin.count() / 1000.0
                        << " s; MPI_Finalize cannot free a half-made communicator";
    return;
  }
  if (!g_collective_timed_out && !g_unfinished_duplicate && !g_peer_left_failing) {
    if (const int rc = MPI_Finalize(); rc != MPI_SUCCESS) CHORUS_LOG(ERROR) << "MPI_Finalize failed with code " << rc;
    return;
  }
  // A collective timed out (or failed because a peer left with an error): MPI_Finalize may wait for
  // a rank on a host that cannot be reached. A
  // watchdog gives it kFinalizeAfterTimeout, then ends the process (exit status 1: a job whose
  // collective timed out has failed) instead of leaving it hanging in MPI.
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> wait_lock(mu);
    if (cv.wait_for(wait_lock, kFinalizeAfterTimeout, [&] { return done; })) return;
    CHORUS_LOG(ERROR)
        << "MPI_Finalize has not returned " << kFinalizeAfterTimeout.count()
        << " s after a collective timed out or failed (a rank on a host that cannot be reached?); exiting "
        << "without it, status 1";
    std::fflush(nullptr);
    std::_Exit(1);
  });
  const int rc = MPI_Finalize();
  {
    std::lock_guard<std::mutex> done_lock(mu);
    done = true;
  }
  cv.notify_all();
  watchdog.join();
  if (rc != MPI_SUCCESS) CHORUS_LOG(ERROR) << "MPI_Finalize failed with code " << rc;
}

std::string MpiEnvironment::thread_level() const { return thread_level_name(provided_); }

bool MpiEnvironment::launched_by_mpirun() {
  return env::get("OMPI_COMM_WORLD_SIZE").has_value() || env::get("PMI_SIZE").has_value();
}

bool mpi_cuda_aware() {
#if defined(MPIX_CUDA_AWARE_SUPPORT)
  // The header's MPIX_CUDA_AWARE_SUPPORT says how the headers were built; ask the library at run time.
  std::lock_guard<std::mutex> lock(mpi_mutex());
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized && MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

std::unique_ptr<Communicator> make_mpi_communicator(const MpiCommunicatorOptions& options) {
  int initialized = 0, finalized = 0, provided = 0;
  CHORUS_MPI_CHECK(MPI_Initialized(&initialized));
  CHORUS_MPI_CHECK(MPI_Finalized(&finalized));
  CHORUS_REQUIRE(initialized && !finalized, FailedPreconditionError, "make_mpi_communicator: MPI is ",
                 finalized ? "already finalized" : "not initialized",
                 ": create a chorus::collective::MpiEnvironment first, and keep it alive longer than every MPI "
                 "communicator");
  CHORUS_MPI_CHECK(MPI_Query_thread(&provided));
  CHORUS_REQUIRE(provided >= MPI_THREAD_SERIALIZED, UnavailableError,
                 "make_mpi_communicator: MPI was initialized "
                 "with ",
                 thread_level_name(provided),
                 "; chorus needs at least MPI_THREAD_SERIALIZED (it calls MPI "
                 "from replica threads): initialize MPI through chorus::collective::MpiEnvironment");
  // Every process creates its communicators in the same order, so this numbering agrees across
  // processes; notices carry it (a message for a freed communicator must not hit a new one).
  static std::atomic<std::uint64_t> created{0};
  const std::uint64_t id = ++created;
  auto ch = std::make_unique<Channel>();
  MPI_Request req = MPI_REQUEST_NULL;
  std::shared_ptr<PeerMonitor> monitor;
  std::vector<PeerAddress> peers;
  try {
    ch->duplicating = true;
    CHORUS_MPI_CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &ch->comm, &req));
    const auto deadline = deadline_after(Clock::now(), options.timeout);
    const auto wait_for = [&](const char* what) {
      const auto spin_until = Clock::now() + kSpin;
      while (!test_or_back_off(&req, spin_until)) {
        if (Clock::now() < deadline) continue;
        throw DeadlineExceededError(str_cat("make_mpi_communicator: mpi#", id,
                                            " (a duplicate of MPI_COMM_WORLD): ", what,
                                            " did not complete on every "
                                            "process within ",
                                            options.timeout.count(),
                                            " ms. Every process must create its MPI communicators in the "
                                            "same order; one is stuck, died, or created fewer."));
      }
    };
    wait_for("the duplication");
    ch->duplicating = false;
    CHORUS_MPI_CHECK(MPI_Comm_set_errhandler(ch->comm, MPI_ERRORS_RETURN));
    int rank = 0, size = 1;
    CHORUS_MPI_CHECK(MPI_Comm_rank(ch->comm, &rank));
    CHORUS_MPI_CHECK(MPI_Comm_size(ch->comm, &size));
    // Every process publishes where its peer monitor listens (port 0: none), so that the monitors
    // can connect; done at every creation, so it stays collective whatever each process has.
    if (size > 1) monitor = acquire_peer_monitor(rank);
    auto mine = std::make_shared<WireAddress>(to_wire(monitor.get(), rank));
    auto all = std::make_shared<std::vector<WireAddress>>(static_cast<std::size_t>(size));
    ch->keep.push_back(mine);  // MPI may use them until the exchange completes; tiny, kept for the
    ch->keep.push_back(all);   // communicator's life
    CHORUS_MPI_CHECK(MPI_Iallgather(mine.get(), sizeof(WireAddress), MPI_BYTE, all->data(), sizeof(WireAddress),
                                    MPI_BYTE, ch->comm, &req));
    wait_for("the exchange of peer-monitor addresses");
    for (const WireAddress& w : *all) peers.push_back(from_wire(w));
    if (monitor) monitor->watch(peers);
  } catch (...) {
    ch->abandoned.push_back(req);
    if (req == MPI_REQUEST_NULL) ch->duplicating = false;  // the idup itself failed: nothing half made
    // MpiEnvironment must not finalize over a half-made duplicate (issue 40), and a rank that never
    // came may be on a host cut off the network: its MPI_Finalize gets the watchdog.
    if (ch->duplicating) g_unfinished_duplicate = true;
    g_collective_timed_out = true;
    bury(std::move(ch));
    throw;
  }
  return std::make_unique<MpiCommunicator>(std::move(ch), id, options.validate, std::move(monitor), std::move(peers));
}

}  // namespace chorus::collective
