// NCCL across processes without MPI: the processes met through a store (collective/store/,
// e.g. store_rendezvous.h from TF_CONFIG or torchrun's variables), and the store carries NCCL's
// bootstrap — c10d's ProcessGroupNCCL over a TCPStore.
//
//   auto rdzv = chorus::collective::store_rendezvous(
//       chorus::distribute::store_rendezvous_options(resolver, std::chrono::seconds(120)));
//   auto nccl_keys = std::make_shared<chorus::collective::PrefixStore>("nccl/main", rdzv.store);
//   auto comm = chorus::collective::make_nccl_communicator(
//       "/gpu:" + std::to_string(resolver.local_rank()), nccl_keys, rdzv.rank, rdzv.size);
//   comm->all_reduce(grad, grad, {.op = ReduceOp::kMean})->wait();
//
// Creation (every process calls it, with the same store, its rank and the same size):
//   1. each process looks up `device` and publishes its GpuClaim (host name, PCI bus id) in the
//      store; every process reads all claims and runs check_distinct_gpus — two processes on one
//      GPU → InvalidArgumentError on every process naming both ranks and the GPU. A process whose
//      lookup fails publishes an abort notice: the others raise AbortedError naming it at once;
//   2. rank 0 calls ncclGetUniqueId and publishes the 128-byte id; the others read it;
//   3. non-blocking ncclCommInitRankConfig, polled until the timeout, then one verdict for all
//      (nccl_mpi.h's step 4, with its errors), exchanged through the store.
// A process that never comes → DeadlineExceededError naming its rank after `timeout` (each step
// waits at most that long). The store's own errors (UnavailableError: its server went away;
// DataLossError) pass through with the step named.
//
// The communicator then behaves as nccl_mpi.h's (same collectives, Work, failure and abort rules),
// with these differences: backend() is "nccl_store"; validation (fingerprints compared before each
// collective) is off unless asked for, because each validated collective leaves `size` small keys
// in the store; barrier() and abort notices go through the store (an abort is seen by the others
// in their next barrier or validated collective, or by NCCL itself); there is no peer monitor, so a
// dead peer inside an NCCL kernel is found by ncclRemoteError or the Work's timeout.
//
// Keep the store alive (rank 0's rendezvous result holds the server) as long as the communicator;
// give each communicator a store of its own (a PrefixStore): the keys are "nccl/...".
//
// Built without NCCL → UnavailableError. `device` not a GPU of this process (no GPU at all) →
// InvalidArgumentError. rank/size out of range, null store → InvalidArgumentError.
//
// Thread-safety: communicator.h's (one thread per Communicator; abort() from any thread).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <chorus/collective/communicator.h>

namespace chorus::collective {

class Store;

struct NcclStoreOptions {
  // Compare fingerprints before every NCCL call over the store (see above: off by default).
  bool validate = false;
  // Each step of creation, and the flush at destruction.
  std::chrono::milliseconds timeout = default_timeout();
};

std::unique_ptr<Communicator> make_nccl_communicator(const std::string& device, std::shared_ptr<Store> store, int rank,
                                                     int size, const NcclStoreOptions& options = {});

}  // namespace chorus::collective
