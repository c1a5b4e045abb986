// Gloo backend: one participant per process (or per thread, in tests), CPU (host) tensors, moved
// over Gloo's TCP transport. The processes need no MPI: they meet through a Store
// (collective/store/store.h; a TCP store served by the chief, or a file store on a shared disk),
// as PyTorch's Gloo process group meets through c10d's TCPStore.
//
//   std::unique_ptr<Store> store = ...;                         // every process: the same store
//   auto comm = chorus::collective::make_gloo_communicator(*store, rank, world_size);
//   comm->all_reduce(grads, grads, {.op = ReduceOp::kMean})->wait();
//
// Semantics are communicator.h's: every process calls the same collectives in the same order.
// When to choose it: between processes without MPI (Kubernetes, torchrun-style launches, workers
// that start on their own). Under mpirun the MPI backend is as fast or faster (docs/collectives.md
// has the numbers); GPU tensors go through NCCL.
//
// Creation. make_gloo_communicator is collective over `size` processes: each one publishes its host
// and pid under "<prefix>/peer/<rank>", waits (options.timeout) until every rank did, then Gloo
// connects a full mesh of TCP connections (its addresses under "<prefix>/<rank>"), and each rank
// marks "<prefix>/connected/<rank>" and waits until every rank did (so no rank uses, or shuts down,
// a connection while another is still connecting). A rank that does not arrive or connect in time →
// DeadlineExceededError on the others naming the missing ranks and the store.
// The store must outlive the communicator (failures are written to it, see "Failure").
// Two communicators on one store need two prefixes (a prefix is used once).
//
// Execution. A call checks its arguments (the front door), drains the tensors' device streams,
// exchanges fingerprints with every other rank (validate on: one small message to and from each
// peer, which is also the barrier), then runs Gloo's algorithm and returns completed Work:
//   - all_reduce: gloo::allreduce (ring); reduce: gloo::reduce (non-root ranks reduce into a
//     scratch copy); broadcast: gloo::broadcast; all_gather: gloo::allgather; reduce_scatter: an
//     all_reduce of the whole input into a scratch buffer, of which rank r keeps block r (Gloo 0.5
//     has no reduce-scatter with equal blocks; PyTorch's Gloo group does the same), so it moves the
//     bytes of an all_reduce; barrier: the fingerprint exchange, or gloo::barrier without validation.
//   - float32/64, int32/64 reduce in their own type; MEAN is a sum, then a division by size()
//     (integers truncate toward zero). float16/bfloat16 reductions go through float32 copies
//     (summed in float32, rounded once: twice the 16-bit bytes on the wire); broadcast and
//     all_gather move 16-bit data as it is.
//   - in place (output is input) needs no copy; an output that overlaps the input otherwise gets
//     a private copy of the input.
//   - GPU tensors: InvalidArgumentError (use the NCCL backend).
// With validate = false no fingerprints travel: a mismatch is then undefined (wrong results, a Gloo
// error or a timeout), as with MPI.
//
// Failure. Nothing waits forever: every wait ends at the call's deadline (its options' timeout).
//   - mismatch: every rank sees every fingerprint and raises the same InvalidArgumentError naming
//     both calls; the communicator stays usable.
//   - timeout: a rank whose peers did not all send their fingerprint in time raises
//     DeadlineExceededError naming the missing ranks (host, pid), the call and this rank's last
//     completed calls; the ranks waiting with it raise DeadlineExceededError with the same cause.
//     A timeout in the data phase (every rank had arrived): each rank that times out marks itself
//     in the store and waits up to a second for the others' marks; the ranks with none are named
//     (a host cut off from the network, a process stuck outside the collective), and a rank that
//     cannot reach the store says it is probably the one cut off. When every rank timed out in
//     the call, none is named (a deadlock; with validate=false, different collectives).
//   - abort(reason), or a bad argument on one rank: AbortedError on every rank naming it and the reason,
//     at once for those waiting (also the local one, when abort() comes from another thread),
//     at the next call for the others.
//   - a dead process (SIGKILL, crash, lost host whose kernel resets the connection): its TCP
//     connections close, and every rank raises UnavailableError naming it, its host, pid and
//     address ("rank 1 (host node7, pid 4242, [10.0.0.2]:40123): connection closed by peer"),
//     within about a second, whatever the timeout.
//   How the ranks agree on the cause: the rank that sees a failure first writes it to the store
//   ("<prefix>/failures" counts them, "<prefix>/failure/<n>" holds each) and then closes its
//   connections; a rank whose connection closes reads the first failure from the store (waiting up
//   to a second for it) and raises that. After any failure the communicator is unusable: every later
//   call raises AbortedError (UnavailableError after a lost peer). A flight record
//   (collective/flight_record.h) is written on a timeout or a lost peer when
//   CHORUS_FLIGHT_RECORD_DIR is set.
//
// Threads. Each communicator is used by one thread at a time (communicator.h); abort() may come from
// any thread. Each communicator has its own Gloo TCP device, which runs one event-loop thread, and
// (busy_poll on, size > 1) one BusyPoller thread that spins while a call runs.
//
// Signals. Gloo writes to its sockets without MSG_NOSIGNAL, so a write to a peer that closed its
// connection raises SIGPIPE, which by default ends the process. The first make_gloo_communicator
// therefore sets SIGPIPE to SIG_IGN when it is at SIG_DFL (logged once; Python does the same for
// PyTorch's Gloo): the write then fails with EPIPE and the collective raises the error above. A
// handler the program installed itself is left alone.
//
// Without Gloo (chorus built without libgloo-dev, or -DCHORUS_ENABLE_GLOO=OFF), gloo_available()
// is false and make_gloo_communicator throws UnavailableError saying so.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <chorus/collective/communicator.h>
#include <chorus/collective/store/store.h>

namespace chorus::collective {

struct GlooCommunicatorOptions {
  // The store's keys of this communicator start with "<prefix>/"; a prefix is used by one
  // communicator (make a new one with a new prefix, e.g. "gloo/1").
  std::string prefix = "gloo";
  // The address this rank's TCP device binds to and advertises to its peers: a host name or an IP
  // address of this host ("127.0.0.1" for tests on one host). Empty: this host's name, as resolved
  // by the system (as Gloo does); set it where the name resolves to an address peers cannot reach.
  std::string hostname;
  // Compare fingerprints across ranks before every collective (see "Execution").
  bool validate = true;
  // Keep a CPU of this process busy while a collective waits (collective/busy_poll.h: a thread that
  // spins, yielding, during each call and 2 ms after it, as MPI's and NCCL's waits spin). Off, each
  // message of a call waits for an idle CPU to wake: about a millisecond per message on a virtual
  // machine (docs/benchmarks.md). CHORUS_BUSY_POLL=0 turns it off for every Gloo communicator.
  bool busy_poll = true;
  // For creating the communicator: the wait for every rank to arrive and the TCP connections.
  // Collectives take their own timeouts.
  std::chrono::milliseconds timeout = default_timeout();
};

// Whether this chorus was built with Gloo.
bool gloo_available();

// The numeric address of network interface `name` (IPv4 first, else IPv6): what
// GLOO_SOCKET_IFNAME=<name> makes a Gloo rank bind to and advertise (pass it as
// GlooCommunicatorOptions::hostname; MultiWorkerMirroredStrategy does). Built with or without Gloo.
// InvalidArgumentError naming the interfaces that have addresses when `name` has none or does not
// exist; UnavailableError when the interfaces cannot be listed.
std::string interface_address(const std::string& name);

// The communicator of rank `rank` of `size` (0 <= rank < size), meeting the others through
// `store` (kept by reference: it must outlive the communicator). Collective: all `size` ranks call
// it with the same prefix. backend() is "gloo".
// Throws InvalidArgumentError for a bad rank, size or prefix; DeadlineExceededError when a rank does
// not arrive in time (naming it); UnavailableError when a peer cannot be connected (naming it and
// its address), when the store fails, or when chorus was built without Gloo.
std::unique_ptr<Communicator> make_gloo_communicator(Store& store, int rank, int size,
                                                     const GlooCommunicatorOptions& options = {});

}  // namespace chorus::collective
