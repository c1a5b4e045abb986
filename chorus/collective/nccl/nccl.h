// NCCL collectives between distinct physical GPUs of one process, one replica thread per GPU.
//
//   auto comms = chorus::collective::make_nccl_group({"/gpu:0", "/gpu:1", "/gpu:2", "/gpu:3"});
//   // replica thread r, tensors on /gpu:r:
//   comms[r]->all_reduce(grad, grad)->wait();
//
// One NCCL communicator per GPU (ncclCommInitAll), each driven by its replica thread. Before NCCL
// sees a call, the participants meet on the host (collective/rendezvous.h): fingerprints are
// compared and a missing participant times out with DeadlineExceededError naming it — so a
// mismatched or missing call never becomes a device-side NCCL hang. Then each rank enqueues the
// NCCL call on its device's stream and returns Work that completes with it.
//
// Errors: NCCL result codes map to chorus errors (ncclInvalidArgument/ncclInvalidUsage →
// InvalidArgumentError; ncclSystemError/ncclRemoteError → UnavailableError; others →
// InternalError), with NCCL's own error string and last-error text. After a timeout or abort the
// NCCL communicators are aborted (ncclCommAbort) so no kernel waits forever.
//
// Requirements: devices on distinct physical GPUs (two logical devices of one GPU → use
// make_virtual_gpu_group: NCCL itself would fail with "Duplicate GPU detected"). Without NCCL in
// the build, make_nccl_group throws UnavailableError. Across processes (one GPU per process, the
// unique id over MPI): make_nccl_communicator in nccl_mpi.h.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <chorus/collective/communicator.h>

namespace chorus::collective {

std::vector<std::unique_ptr<Communicator>> make_nccl_group(const std::vector<std::string>& devices,
                                                           const std::string& name = "nccl");

// The NCCL version this build links ("2.28.9"), or "" without NCCL.
std::string nccl_version();

}  // namespace chorus::collective
