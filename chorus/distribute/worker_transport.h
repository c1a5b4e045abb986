// How the workers of a MultiWorkerMirroredStrategy reach each other: "MPI or store".
//
//   MPI    the process runs under mpirun and MPI is initialized (a collective::MpiEnvironment
//          lives) with more than one process: the worker communicator and CPU replicas'
//          cross-process reduction are MPI communicators, GPU replicas use NCCL with its unique id
//          over MPI. Nothing is served.
//   store  otherwise — also when MPI was initialized by a program started without mpirun (a
//          singleton: MPI_COMM_WORLD of one process), so that one program runs both ways. The
//          workers, known from TF_CONFIG or torchrun's variables (distribute/cluster_resolver.h),
//          meet through collective::store_rendezvous — rank 0 serves a TCP store at the
//          resolver's store_address() (the chief's TF_CONFIG address, or MASTER_ADDR:MASTER_PORT)
//          and every worker registers there — then build their communicators on that store: Gloo
//          (collective/gloo/gloo.h) for the worker communicator and for CPU replicas, NCCL over
//          the store (collective/nccl/nccl_store.h) for GPU replicas.
//
//   auto choice = choose_worker_transport(resolver, /*gpu=*/false);  // no I/O: for the plan
//   WorkerTransport t(choice, resolver, timeout);                    // store: the rendezvous
//   auto worker = t.make_worker_communicator();                      // once
//   auto cross = t.make_cross_communicator("");                      // each (re)creation
//
// Communicators. Each make_* call is collective (every worker calls it, in the same order). On the
// store each communicator gets keys of its own: "gloo/worker" for the worker communicator, then
// "gloo/cross/<n>" (CPU: Gloo's prefix) or "nccl/cross/<n>" (GPU: a PrefixStore) for the n-th
// cross communicator of this transport, so that communicators re-created after a failure
// (Strategy::make_communicators after a failed step) never read the keys of the ones they replace.
// Every worker must therefore create them the same number of times (the strategy does: every
// worker rebuilds after the same failure).
// Gloo binds to the address of the interface GLOO_SOCKET_IFNAME names (PyTorch's variable; the
// first of a comma-separated list; its IPv4 address, else its IPv6 one), else to the host part of
// this worker's TF_CONFIG address; under torchrun to 127.0.0.1 when MASTER_ADDR is a loopback
// address (every worker is on this host), else to this host's name (as Gloo and PyTorch do: the
// name must resolve to an address the other workers can reach — set GLOO_SOCKET_IFNAME where it
// does not). An interface that does not exist or has no address → InvalidArgumentError naming
// this host's interfaces.
//
// Lifetime. The transport owns the rendezvous (and on rank 0 the store's server): every
// communicator it made must be destroyed before it (they write failures to the store). goodbye()
// is a barrier through the store, for before the communicators close, so that no worker closes its
// connections under a peer still in its last collective; the destructor then calls the
// rendezvous's leave(), so that rank 0 serves the store until every worker is done with it. Both
// are bounded by the timeout and never throw (a failure is logged); once a Gloo communicator of
// this transport recorded a failure in the store (a lost peer, a timeout, an abort), or the store
// is gone (rank 0 died), neither waits and nobody calls leave() — also when the failure is recorded
// while goodbye() already waits (it looks between 200 ms slices).
//
// Errors (at choose_worker_transport, before any I/O): the store path in a build without Gloo →
// UnavailableError saying to install libgloo-dev and rebuild, or to start the job with mpirun;
// several workers under an MPI launcher whose program did not initialize MPI (no store address) →
// FailedPreconditionError saying to create a collective::MpiEnvironment; MPI initialized but the
// build has no MPI cannot happen. The rendezvous's own errors (collective/store/store_rendezvous.h:
// a worker that never arrives → DeadlineExceededError naming it; a rank claimed twice, world sizes
// that disagree → InvalidArgumentError) come from the constructor.
//
// Thread-safety: one thread (the strategy's program thread) uses a transport.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <chorus/collective/communicator.h>
#include <chorus/collective/store/store_rendezvous.h>
#include <chorus/distribute/cluster_resolver.h>

namespace chorus::distribute {

struct WorkerTransportChoice {
  bool mpi = false;
  // For cross_device_ops().reason and logs: "MPI between processes", "NCCL between processes
  // (unique id over MPI)", "Gloo between processes (store at 10.0.0.1:29500)", "NCCL between
  // processes (unique id over the store at 10.0.0.1:29500)".
  std::string description;
};

// MPI when it is initialized with several processes, else the store (see above). `gpu`: the replicas are GPUs. Call it
// with more than one worker only.
WorkerTransportChoice choose_worker_transport(const ClusterResolver& resolver, bool gpu);

class WorkerTransport {
 public:
  // Store: blocks in the rendezvous until every worker arrived or `timeout` (see above).
  WorkerTransport(WorkerTransportChoice choice, const ClusterResolver& resolver, std::chrono::milliseconds timeout);
  ~WorkerTransport();
  WorkerTransport(const WorkerTransport&) = delete;
  WorkerTransport& operator=(const WorkerTransport&) = delete;

  bool uses_mpi() const { return choice_.mpi; }
  // One participant per worker (rank = worker index), host tensors, validated, `timeout`.
  std::unique_ptr<collective::Communicator> make_worker_communicator();
  // The cross-process communicator of the replicas: `gpu_device` empty → host tensors (MPI or
  // Gloo), else NCCL on that GPU (over MPI or the store). A fresh one at every call.
  std::unique_ptr<collective::Communicator> make_cross_communicator(const std::string& gpu_device);
  // The barrier before the communicators close (see "Lifetime"); store only, never throws.
  void goodbye() noexcept;

 private:
  bool failure_recorded() noexcept;  // a Gloo communicator of this transport wrote a failure

  WorkerTransportChoice choice_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<collective::StoreRendezvous> rdzv_;  // store only
  // rdzv_->store: the communicators' keys ("attempt/<attempt>/").
  std::shared_ptr<collective::Store> store_;
  bool failed_ = false;  // failure_recorded() said so once
  std::string gloo_hostname_;
  std::vector<std::string> gloo_prefixes_;  // the rendezvous store's keys of every Gloo communicator made
  int generation_ = 0;                      // cross communicators made so far
};

}  // namespace chorus::distribute
