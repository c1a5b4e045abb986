// How the processes of a job find each other without MPI (torchrun's static rendezvous, TF's
// cluster from TF_CONFIG): rank 0 serves a TCP store (tcp_store.h) at an address every worker knows,
// every worker registers there, and each gets back its rank, the world size, a store to bootstrap a
// backend with (Gloo's pairs, NCCL's unique id) and who the others are.
//
//   auto r = chorus::distribute::ClusterResolver::from_environment();          // TF_CONFIG or torchrun
//   auto rdzv = chorus::collective::store_rendezvous(
//       chorus::distribute::store_rendezvous_options(r, std::chrono::seconds(120)));
//   // rdzv.rank, rdzv.size, rdzv.store (keys of this attempt), rdzv.workers[i].host ...
//
// Steps (every key under "attempt/<attempt>/", so a restarted job never reads its previous
// attempt's keys even when the store outlived it):
//   1. rank 0 starts a TcpStoreServer on `store_port` (unless `serve` is false: an agent serves it,
//      or `store` is given: a FileStore); every rank connects, retrying until `timeout`;
//   2. each worker registers: the n-th claim of rank r is stored as "rdzv/rank/r/n" (add() numbers
//      them) with its rank, world size, host, pid and address; rank 0 publishes its world size;
//   3. each waits until every rank 0..size-1 has a first claim, looking for a published error every
//      100 ms; then reads every worker's record.
// Errors (each raised on every worker that is there to see it, and always naming the ranks):
//   - a rank claimed twice → InvalidArgumentError naming both claimants (host, pid, address) on
//     both, and on the others;
//   - a world size that disagrees with rank 0's (or with `addresses`, TF_CONFIG's list) →
//     InvalidArgumentError naming both sizes and ranks;
//   - a worker that never arrives → DeadlineExceededError after `timeout`, naming the missing
//     rank(s) and, when `addresses` are known, their addresses; rank 0 missing (nobody serves the
//     store) is named the same way, with the store's host:port;
//   - options out of range (rank >= size, size < 1) → InvalidArgumentError.
// Rank 0 owns the server (`server` in the result): keep the result alive until every worker is done
// with the store; destroying it closes the store under the others. leave() is that goodbye: every
// worker calls it after its last use of the store, and rank 0's returns only when all others have
// called theirs (DeadlineExceededError naming how many left otherwise).
//
// Thread-safety: store_rendezvous may be called from any thread; the result's store is store.h's.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <chorus/collective/store/store.h>

namespace chorus::collective {

class TcpStoreServer;

struct StoreRendezvousOptions {
  int rank = 0;
  int world_size = 1;
  // Where rank 0 serves the store (every rank connects there; rank 0 through 127.0.0.1 when it
  // binds every address). Port 0 only makes sense with one worker or a given `store`.
  std::string store_host = "127.0.0.1";
  int store_port = 0;
  std::string bind_host = "0.0.0.0";  // rank 0's listening address
  // false: someone else serves the store at store_host:store_port and outlives the workers
  // (chorus-run's agent of node 0; torchrun's agent with TORCHELASTIC_USE_AGENT_STORE=True): rank 0
  // connects like the others, and its death does not take the store from them.
  bool serve = true;
  // Keys live under "attempt/<attempt>/" (e.g. torchrun's TORCHELASTIC_RESTART_COUNT).
  std::string attempt = "0";
  // Known addresses of workers 0..size-1 (TF_CONFIG), for messages; empty when unknown. When given,
  // their count must be world_size.
  std::vector<std::string> addresses;
  // What this worker publishes as its address ("" → addresses[rank] when known, else the host name).
  std::string address;
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // Use this store instead of serving or connecting to a TCP one (a FileStore on a shared path).
  std::shared_ptr<Store> store;
};

struct RendezvousWorker {
  int rank = 0;
  std::string host;
  long pid = 0;
  std::string address;
  std::string to_string() const;  // "rank 1 (pid 4242 on node7, address 10.0.0.2:2222)"
};

struct StoreRendezvous {
  int rank = 0;
  int size = 1;
  std::shared_ptr<Store> store;            // this attempt's keys ("attempt/<attempt>/...")
  std::vector<RendezvousWorker> workers;   // by rank
  std::shared_ptr<TcpStoreServer> server;  // rank 0 only (null elsewhere, or with a given store)

  // The last call on the store (see above). Rank 0 waits up to `timeout` for the others.
  void leave(std::chrono::milliseconds timeout);
};

// See the header comment. Blocks until every worker arrived or `timeout`.
StoreRendezvous store_rendezvous(const StoreRendezvousOptions& options);

namespace internal {
// A worker's record as stored ("rank=1\nsize=3\nhost=node7\npid=4242\naddress=...\n"), and back.
// parse: DataLossError naming `key` for anything else (a store shared with something that is not
// chorus, or garbage).
std::string format_worker(const RendezvousWorker& w, int world_size);
RendezvousWorker parse_worker(const std::string& text, const std::string& key, int* world_size);
}  // namespace internal

}  // namespace chorus::collective
