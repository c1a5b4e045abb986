// MPI backend: one participant per process, processes started by mpirun, host (CPU-device) tensors.
//
//   int main() {
//     chorus::collective::MpiEnvironment mpi;                       // MPI_Init_thread ... MPI_Finalize
//     auto comm = chorus::collective::make_mpi_communicator();     // every process, same order
//     comm->all_reduce(grads, grads, {.op = ReduceOp::kMean})->wait();
//   }                                                              // comm dies before mpi
//
// Semantics are communicator.h's: every process calls the same collectives in the same order; rank
// and size are those of MPI_COMM_WORLD. Everything below is what MPI adds.
//
// Communicator. make_mpi_communicator() duplicates MPI_COMM_WORLD (MPI_Comm_idup, with the options'
// timeout), so chorus traffic never matches the program's own MPI messages, and sets
// MPI_ERRORS_RETURN on the duplicate: an MPI error becomes InternalError carrying MPI's error
// string, file and line, instead of killing the job. It then all-gathers the processes' peer-monitor
// addresses (see "Failure"). Creating one is itself collective over MPI_COMM_WORLD: every process
// must create its communicators in the same order.
//
// Execution. A call checks its arguments, drains the tensors' device streams, then (validation
// on) exchanges fingerprints with MPI_Iallgather and moves data with the non-blocking collective
// (MPI_Iallreduce, _Ibcast, _Ireduce, _Iallgather, _Ireduce_scatter_block; 16-bit all_reduce: see
// below; barrier is the fingerprint exchange itself, or MPI_Ibarrier without validation). The calling thread polls
// MPI_Test until the operation completes: for up to 0.5 ms it polls back to back, yielding the core
// between polls (sched_yield: a rank sharing its core with a peer or with the kernel's network
// work lets them run), then sleeps 20 µs between polls (Open MPI progresses only inside MPI calls,
// so longer sleeps slow large transfers). The call returns completed Work.
//   - float32/64 and int32/64 travel as MPI_FLOAT/DOUBLE/INT32_T/INT64_T with MPI's own ops
//     (MEAN is MPI_SUM, then a division by size(): integer division truncating toward zero).
//   - float16/bfloat16 have no MPI type (a user-defined MPI_Op on 16-bit data would round at every
//     pairwise step). all_reduce keeps 16 bits on the wire and reduces in float32: the elements are
//     split into size() blocks, MPI_Ialltoallv gives rank r every rank's block r, rank r reduces
//     them with float32 accumulators and rounds once, MPI_Iallgatherv returns the blocks — half the
//     bytes of a float32 all-reduce (what gradient compression, distribute/communication_options.h,
//     relies on). reduce and reduce_scatter convert to float32 staging buffers, reduce in float32
//     and round once (double the 16-bit bytes on the wire). broadcast and all_gather move 16-bit
//     data as MPI_UINT16_T.
//   - in-place: output.data() == input.data() maps to MPI_IN_PLACE; other overlaps are staged.
//   - GPU tensors: InvalidArgumentError (use the NCCL backend). Passing device pointers to a
//     CUDA-aware Open MPI is future work; mpi_cuda_aware() already reports whether it could.
//
// Validation (MpiCommunicatorOptions::validate, on by default) costs one small MPI_Iallgather
// per call: a mismatch (op, dtype, shape, root, reduce op, sequence number) raises
// InvalidArgumentError on every rank with the same message, and the communicator stays usable.
// Turned off, a mismatch is undefined behaviour inside MPI (wrong results, an MPI error or a
// timeout): turn it off only for code whose call sequence is known to be identical everywhere.
//
// Failure. Nothing waits forever: every wait honours the options' timeout. The processes share a
// small notice channel (point-to-point messages on the duplicate communicator, one tag):
//   - a rank whose timeout expires tells every other rank; those waiting in the same collective
//     also give up, and for a short grace period (≤ 200 ms) each collects who else was waiting.
//     DeadlineExceededError then names the collective, its sequence number, the rank(s) that did
//     not arrive (those that never answered: busy elsewhere, stuck or dead) and this rank's last
//     completed collectives;
//   - abort(reason), or a bad argument on one rank, tells every other rank: those waiting raise
//     AbortedError naming the rank and reason at once, the others at their next call;
//   - a process that dies (SIGKILL, a crash, a lost host) is noticed by the transport, not the
//     clock: every process runs one PeerMonitor (collective/peer_monitor/peer_monitor.h), whose address
//     (host, port, pid, token) make_mpi_communicator all-gathers over the new communicator; the
//     monitors keep a TCP connection to each other, and a connection that closes without a
//     goodbye (or stays silent for 30 s) marks that rank lost. A wait that sees a loss gives the
//     pending request 250 ms to complete (its data may be in flight), then raises UnavailableError
//     naming the lost rank, its host and pid ("rank 1 (host node7, pid 4242): its connection closed
//     without a goodbye ..."), and tells every other rank, which raise UnavailableError with the same
//     text — within a second of the death on a healthy network, whatever the timeout. A call made
//     after a loss fails at once the same way. A process that ends normally (its communicators
//     destroyed, or exit()) says goodbye: never reported as a death. Where the monitor cannot run
//     (no socket, CHORUS_PEER_MONITOR=false, a peer not reachable over TCP) a warning says so and the
//     timeout is what notices a death.
//   After any of these the communicator is unusable: every later call raises AbortedError at once
//   (UnavailableError after a loss).
//   chorus never calls MPI_Abort (it would kill the job at once, also processes that could save
//   a checkpoint). A process that cannot go on should exit non-zero: mpirun then ends the job.
//
// Resources of a failed communicator. MPI can neither cancel nor free a collective that a peer
// never joined, and a peer that joins late would still write into its buffers. So a communicator
// that failed is not freed: its MPI communicator, pending requests and the buffers they use
// (including the storage of tensors whose data phase timed out) are kept until the process exits.
// A healthy communicator frees its duplicate (MPI_Comm_free) when destroyed. MPI_Finalize with
// such leftovers works with Open MPI 4.1 (tested).
//
// Threads. MPI is only ever called by chorus under one process-wide mutex, held for single
// non-blocking calls and never across a wait, so two communicators can be polled from two replica
// threads, and abort() can come from any thread. That needs MPI_THREAD_SERIALIZED (the thread
// calling a collective is a replica thread, not the one that called MPI_Init, so FUNNELED is not
// enough). A program whose own threads call MPI concurrently with chorus needs
// MPI_THREAD_MULTIPLE: ask for it with MpiEnvironment(MpiThreadLevel::kMultiple).
// Each Communicator object is used by one thread at a time, as communicator.h says.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <chorus/collective/communicator.h>

namespace chorus::collective {

enum class MpiThreadLevel { kSerialized, kMultiple };

// RAII for MPI_Init_thread / MPI_Finalize.
//
// If MPI is not initialized yet, the constructor calls MPI_Init_thread requesting `required` and
// the destructor calls MPI_Finalize. If it is (the program or another MpiEnvironment did it), the
// constructor only checks the level (MPI_Query_thread) and the destructor does nothing.
// A provided level below `required` → UnavailableError naming both (MPI is finalized again if
// this object initialized it). MPI already finalized → FailedPreconditionError (MPI cannot be
// initialized twice in one process).
//
// MPI_Finalize waits for every process of the job to reach it. Destroy every MPI communicator
// before the MpiEnvironment (a communicator outliving MPI only logs and leaks its handle). Once a
// communicator of this process reported a lost peer (UnavailableError, see "Failure" above), the
// destructor skips MPI_Finalize (with a warning): it would wait for the dead process forever. Once
// a collective timed out (DeadlineExceededError), the rank it waited for may be alive or on a host
// cut off the network: MPI_Finalize runs, and if it has not returned 10 s later the process exits
// with status 1 (logged) rather than wait for TCP to give up, minutes later. The same holds once
// make_mpi_communicator failed; and if it gave up while its MPI_Comm_idup was pending, MPI_Finalize
// would free a half-made communicator and crash (Open MPI 4.1, SIGSEGV in mca_pml_ob1_del_comm;
// issue 40): the destructor first tests that duplication for up to 5 s — it completes when every
// process called it — and skips MPI_Finalize (with a warning) when it did not complete.
// Not thread-safe: construct and destroy it on the main thread, as MPI requires.
class MpiEnvironment {
 public:
  explicit MpiEnvironment(MpiThreadLevel required = MpiThreadLevel::kSerialized);
  ~MpiEnvironment();
  MpiEnvironment(const MpiEnvironment&) = delete;
  MpiEnvironment& operator=(const MpiEnvironment&) = delete;
  MpiEnvironment(MpiEnvironment&& other) noexcept;  // the moved-from object no longer finalizes
  MpiEnvironment& operator=(MpiEnvironment&&) = delete;

  // Rank and size in MPI_COMM_WORLD.
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // True if this object called MPI_Init_thread (and will call MPI_Finalize).
  bool owns_mpi() const { return owns_; }
  // The provided level: "MPI_THREAD_SERIALIZED", "MPI_THREAD_MULTIPLE", ...
  std::string thread_level() const;

  // True when the process was started by a launcher (Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE,
  // MPICH's and Slurm's PMI_SIZE), also with -n 1. Read through core/env.h. Does not touch MPI.
  static bool launched_by_mpirun();

 private:
  bool owns_ = false;
  int provided_ = 0;
  int world_rank_ = 0;
  int world_size_ = 1;
};

// Whether the MPI library can take GPU device pointers (Open MPI's MPIX_Query_cuda_support() where
// mpi-ext.h declares it; false for other MPIs and for Open MPI built without CUDA, like Debian's).
// Call it after MPI is initialized. chorus does not use it yet: GPU tensors are rejected.
bool mpi_cuda_aware();

class PeerMonitor;  // collective/peer_monitor/peer_monitor.h
// The peer monitor this process's MPI communicators share (started by the first of them); nullptr
// before, or when it is off (CHORUS_PEER_MONITOR=false) or could not start. For backends that wait
// beside MPI (nccl_mpi.cc): a wait that sees monitor->any_lost() fails instead of timing out.
std::shared_ptr<PeerMonitor> process_peer_monitor();

struct MpiCommunicatorOptions {
  // Compare fingerprints across processes before every collective (one small MPI_Iallgather).
  // The knob to turn it off for speed; see the header comment for what a mismatch does then.
  bool validate = true;
  // For creating the communicator (MPI_Comm_idup over MPI_COMM_WORLD): a process that does not
  // create its communicator in time → DeadlineExceededError. Collectives take their own timeouts.
  // Any value > 0 is taken here (tests use 1 ms); CHORUS_COLLECTIVE_TIMEOUT and the
  // --collective-timeout flags refuse values under env::kMinTimeoutSeconds (10 ms).
  std::chrono::milliseconds timeout = default_timeout();
};

// A communicator of all processes of MPI_COMM_WORLD (rank = world rank), over a duplicate of it.
// Collective: every process calls it, in the same order relative to its other communicators.
// Throws FailedPreconditionError if MPI is not initialized (create an MpiEnvironment first),
// UnavailableError if MPI's thread level is below MPI_THREAD_SERIALIZED, DeadlineExceededError
// as above. backend() is "mpi".
std::unique_ptr<Communicator> make_mpi_communicator(const MpiCommunicatorOptions& options = {});

}  // namespace chorus::collective
