// Internal to collective/: what the processes of a multi-process NCCL communicator tell each other
// besides NCCL — the bootstrap (GPU claims, the unique id, how initialization went), the
// fingerprints of validated collectives, the barrier and abort notices — over a "side channel":
// MPI (nccl_mpi.h, nccl_mpi.cc) or a store (nccl_store.h, below). The NCCL communicator itself
// (nccl_process.cc) is the same for both.
//
// The store side keeps its keys under "nccl/": step keys "nccl/<n>/<step>/<rank>" (n counts the
// exchanges of this side, the same on every process since all make the same calls) and the abort
// notice "nccl/abort". Every exchange leaves `size` small keys in the store (a fingerprint: 128
// bytes): use a store of this communicator's own (a PrefixStore) and keep validation for debugging
// when a job runs many steps. A waiting exchange looks for the abort notice every 100 ms.
//
// Errors of every side: DeadlineExceededError naming the ranks that did not take part within the
// timeout; AbortedError carrying another process's notice; the store's UnavailableError /
// DataLossError (a block of the wrong size from a rank → DataLossError naming it).
//
// Thread-safety: one thread at a time per side, but abort() from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <chorus/collective/gpu_claim.h>

namespace chorus::collective {

class Communicator;
class PeerMonitor;
class Store;

class NcclSide {
 public:
  virtual ~NcclSide() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;    // the communicator's backend(): "nccl_mpi", "nccl_store"
  virtual std::string transport() const = 0;  // for messages: "MPI", "tcp store 10.0.0.1:29500"
  // How each process gets its own GPU, for check_distinct_gpus's message.
  virtual std::string how_to_choose_gpus() const = 0;
  // All-gathers `words` (the same count on every process): rank r's words in block r. `step`
  // names the exchange (keys, messages).
  virtual std::vector<std::int64_t> all_gather(const std::vector<std::int64_t>& words, const char* step,
                                               std::chrono::milliseconds timeout) = 0;
  // Rank 0's `words` replace everyone's (the same count on every process).
  virtual void broadcast(std::vector<std::int64_t>& words, std::chrono::milliseconds timeout) = 0;
  virtual void barrier(std::chrono::milliseconds timeout) = 0;
  // Tells the other processes (their next or current exchange raises AbortedError with `notice`).
  // Never throws; any thread.
  virtual void abort(const std::string& notice) noexcept = 0;
};

// The side channel over `store` (see above) for process `rank` of `size`. InvalidArgumentError for
// rank/size out of range or a null store.
std::unique_ptr<NcclSide> make_store_side(std::shared_ptr<Store> store, int rank, int size);

// Each process's claim on its GPU, gathered over `side` (pack_claim/unpack_claim); rank r's at [r].
// The caller runs check_distinct_gpus on them (every process gets the same claims).
std::vector<GpuClaim> exchange_gpu_claims(NcclSide& side, const GpuClaim& mine, std::chrono::milliseconds timeout);

// The NCCL communicator of this process's GPU `device` over `side` (nccl_process.cc; builds with
// NCCL only): the sequence of nccl_mpi.h (claims and check_distinct_gpus, the unique id from rank 0,
// non-blocking initialization and one verdict for all), `validate` as NcclMpiOptions::validate,
// `timeout` for every step. `monitor`: the process's peer monitor, or null.
std::unique_ptr<Communicator> create_nccl_communicator(const std::string& device, std::unique_ptr<NcclSide> side,
                                                       bool validate, std::chrono::milliseconds timeout,
                                                       std::shared_ptr<PeerMonitor> monitor);

}  // namespace chorus::collective
