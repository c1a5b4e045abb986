// NCCL across processes: one process per GPU, processes started by mpirun, MPI for the bootstrap
// and the host-side checks, NCCL for the data (Horovod's and TF's MultiWorkerMirroredStrategy's
// NCCL path: the NCCL unique id travels over MPI).
//
//   int main() {
//     chorus::collective::MpiEnvironment mpi;
//     const int local = ...;                                   // e.g. OMPI_COMM_WORLD_LOCAL_RANK
//     auto comm = chorus::collective::make_nccl_communicator("/gpu:" + std::to_string(local));
//     comm->all_reduce(grad, grad, {.op = ReduceOp::kMean})->wait();   // grad on this process's GPU
//   }                                                          // comm dies before mpi
//
// Semantics are communicator.h's: every process calls the same collectives in the same order;
// rank and size are MPI_COMM_WORLD's. The collectives behave as the in-process NCCL group's
// (nccl.h): same dtypes, MEAN is ncclAvg, in-place when output and input share storage, the NCCL
// call is enqueued on the tensor's device stream (so it is ordered after the ops that produced
// the input) and the returned Work completes with it. backend() is "nccl_mpi".
//
// Creation (collective over MPI_COMM_WORLD; every process calls it, in the same order relative to
// its other communicators):
//   1. an MPI communicator is created (make_mpi_communicator) — it carries everything below;
//   2. each process looks up `device` (a logical GPU of this process) and all-gather (hostname,
//      PCI bus id of the physical GPU). Two processes on one host with one GPU → InvalidArgumentError
//      on every process naming both ranks and the GPU (NCCL would fail or hang on them). A process
//      whose lookup fails throws its own error and aborts the MPI communicator, so the others get
//      AbortedError naming it at once instead of waiting;
//   3. rank 0 calls ncclGetUniqueId and broadcasts the 128-byte id over MPI;
//   4. every process calls ncclCommInitRankConfig (non-blocking: config.blocking = 0) on its GPU and
//      polls ncclCommGetAsyncError until the options' timeout; then all processes all-gather how
//      it went and reach the same verdict: all get a communicator, or all throw —
//      DeadlineExceededError naming the rank(s) whose NCCL initialization did not finish (a process
//      that never reaches the exchange is named by the MPI communicator's timeout), or the mapped
//      NCCL error of the rank that failed. Every NCCL communicator is aborted then (ncclCommAbort).
// Each MPI step and the NCCL initialization take at most `timeout` each.
//
// A collective: the arguments are checked (a bad one aborts the communicator, as in the MPI
// backend, so the others do not wait); with validation on (default), the fingerprints are
// compared over MPI first — a mismatch raises InvalidArgumentError on every process and the
// communicator stays usable; a missing process raises DeadlineExceededError naming it (the MPI
// backend's message); then the NCCL call is enqueued. barrier() is that MPI exchange (MPI_Ibarrier
// without validation) and returns completed Work; it does not wait for the device.
// Without validation nothing is exchanged before the NCCL call: a mismatch is undefined behaviour
// inside NCCL (wrong results, an NCCL error or a hang that Work::wait's timeout ends).
//
// Work::wait(timeout) polls the stream's event and ncclCommGetAsyncError. An asynchronous NCCL
// error (e.g. ncclRemoteError: a peer died) or the timeout aborts the communicator (ncclCommAbort
// here, an abort notice to the others over MPI) and throws the mapped error / DeadlineExceededError.
// A Work whose communicator was aborted before it was seen complete throws AbortedError (its
// result may be partial).
//
// Failure. A timeout, an abort (abort() from any thread, or a notice from another process), an
// NCCL error: this process's NCCL communicator is aborted (ncclCommAbort, so no kernel of it waits
// forever), the others are told over the MPI communicator's notice channel, and every later call
// raises AbortedError at once. Another process learns it in its next collective or when it is
// waiting in the fingerprint exchange; one already inside an NCCL kernel is freed by NCCL noticing
// the abort (network transports report ncclRemoteError) or else by its own Work timeout.
//
// Errors: NCCL result codes map as in nccl.h (ncclInvalidArgument/ncclInvalidUsage →
// InvalidArgumentError; ncclSystemError/ncclRemoteError → UnavailableError; others →
// InternalError). Built without NCCL or without MPI → UnavailableError saying which is missing.
// MPI not initialized → FailedPreconditionError (create an MpiEnvironment first). `device` not a
// GPU of this process (also: no GPU at all) → InvalidArgumentError from the device lookup.
//
// Destruction: a healthy communicator flushes and frees its NCCL communicator (ncclCommFinalize,
// polled with the options' timeout, then ncclCommDestroy; ncclCommAbort if that fails or times out)
// and frees its MPI communicator. Destroy it before the MpiEnvironment.
//
// Thread-safety: communicator.h's (one thread per Communicator object; abort() from any thread).
// Work handles may be waited on from any thread and may outlive the communicator.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <chorus/collective/communicator.h>

namespace chorus::collective {

struct NcclMpiOptions {
  // Compare fingerprints across processes over MPI before every NCCL call (one small all-gather
  // of 128 bytes per process). Turn it off only for call sequences known to be identical
  // everywhere (see above for what a mismatch does then).
  bool validate = true;
  // For creation (each MPI step and the NCCL initialization) and for the flush at destruction.
  // Collectives take their own timeouts.
  std::chrono::milliseconds timeout = default_timeout();
};

// The communicator of this process's GPU `device` (a logical GPU: "/gpu:0", "GPU:1", ...) among all
// processes of MPI_COMM_WORLD. See the header comment for the sequence and its errors.
std::unique_ptr<Communicator> make_nccl_communicator(const std::string& device, const NcclMpiOptions& options = {});

}  // namespace chorus::collective
