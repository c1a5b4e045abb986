// Collectives: one Communicator interface for every backend. The backends: shared memory between
// replica threads (shared_memory.h), reduction to one device (reference.h), virtual GPUs sharing
// one physical GPU (virtual_gpu.h), NCCL in one process and across processes (nccl/), MPI between
// processes (mpi/, with the peer monitor of peer_monitor/), and hierarchical (hierarchical.h).
//
// SPMD contract. A communicator connects `size()` participants ("ranks": replica threads in one
// process, or processes). Every participant calls the same collectives in the same order, each on
// its own Communicator object (the one of its rank). Each call gets the next sequence number;
// before any data moves, the participants compare fingerprints (op, dtype, shape, root, reduce op,
// sequence number) and a mismatch raises InvalidArgumentError in every participant, naming the
// ranks and both fingerprints — never a wrong sum and never a hang.
//
// Buffers. Inputs and outputs are Tensors on the participant's own device. A call is in-place
// when `output` shares storage with `input` (same data pointer); that is always allowed. For
// all_gather and reduce_scatter (size > 1) input and output differ in size, and a chorus Tensor
// always views its whole buffer, so they cannot share storage (NCCL's offset form of in-place,
// sendbuff == recvbuff + rank * count, has no Tensor spelling). Shapes:
//   all_reduce      input [*], output same shape            every rank gets op(inputs)
//   broadcast       tensor [*] on every rank                 root's tensor is copied to all
//   reduce          input [*], output same shape            only root's output is written
//   all_gather      input [n, ...], output [size*n, ...]    rank r's input lands in block r
//   reduce_scatter  input [size*n, ...], output [n, ...]    rank r gets block r of op(inputs)
//   barrier         —                                        returns when all have arrived
// dtypes: float32, float64, float16, bfloat16, int32, int64. 16-bit floats are reduced in float32
// and rounded once by the shared-memory, reference, virtual-GPU and MPI backends; hierarchical
// rounds once per level; NCCL sums in the 16-bit type at every hop (distribute/
// communication_options.h states the resulting error bounds). MEAN divides the sum by size() (integer division for
// integer dtypes).
//
// Blocking and streams. Each call returns a Work handle. The shared-memory and reference backends
// wait for pending work on the participant's device stream, do the collective on the calling
// thread and return completed Work; device backends (virtual GPU, NCCL) enqueue on the device
// stream and return Work that completes with it. Work::wait() rethrows the collective's error.
//
// Failure. Every blocking step honours the options' timeout: a participant that does not arrive
// in time raises DeadlineExceededError in the others, naming the missing ranks, the collective,
// its sequence number and the last collectives each rank completed. A participant that fails (or
// calls abort()) wakes all others with AbortedError naming it and its reason. After a timeout or
// abort the communicator is unusable: every later call raises AbortedError at once (create a new
// one), so a late participant never waits for partners that are gone. Backends that span
// processes may also notice a dead process without waiting for the clock (the MPI backend: an
// UnavailableError naming the lost rank and its host, collective/mpi/mpi.h).
//
// Thread-safety: each Communicator object is used by one thread at a time (its participant);
// abort() may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <chorus/core/stream.h>
#include <chorus/core/tensor.h>

namespace chorus::collective {

enum class ReduceOp { kSum, kMean, kMin, kMax, kProd };
std::string_view reduce_op_name(ReduceOp op);  // "sum", "mean", ...

// The built-in default timeout: 5 minutes (long first steps, slow checkpoint saves); lower it in
// tests and when a hang must be noticed fast.
inline constexpr std::chrono::milliseconds kDefaultTimeout{5 * 60 * 1000};

// The default of every options struct below (and of Work::wait): CHORUS_COLLECTIVE_TIMEOUT in
// seconds when set (core/env.h; chorus-run --collective-timeout sets it on every rank), else
// kDefaultTimeout. Read when an options struct is made. A badly set variable ("0", "abc", "-5")
// throws InvalidArgumentError naming the variable — from the first options struct made.
// Thread-safe (the environment is only read).
std::chrono::milliseconds default_timeout();

struct AllReduceOptions {
  ReduceOp op = ReduceOp::kSum;
  std::chrono::milliseconds timeout = default_timeout();
  // GPU backends (virtual GPU, in-process NCCL): enqueue on the device's side stream
  // (core/runtime.h's DeviceContext::side_stream) instead of its stream, so that the collective
  // runs beside the compute enqueued there. The caller orders the inputs before it on the side
  // stream (side_stream().wait_event(...)) and later work after it with the Work's event(); the
  // backend adds no wait on the device's stream. Host backends ignore it.
  bool side_stream = false;
};
struct BroadcastOptions {
  int root = 0;
  std::chrono::milliseconds timeout = default_timeout();
};
struct ReduceOptions {
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  std::chrono::milliseconds timeout = default_timeout();
};
struct AllGatherOptions {
  std::chrono::milliseconds timeout = default_timeout();
};
struct ReduceScatterOptions {
  ReduceOp op = ReduceOp::kSum;
  std::chrono::milliseconds timeout = default_timeout();
};
struct BarrierOptions {
  std::chrono::milliseconds timeout = default_timeout();
};

// Waiting without spinning. An MPI collective whose peers have not arrived polls MPI_Test in a
// spin for 0.5 ms before it sleeps 20 µs between polls, which is cheapest when the waiting thread
// would otherwise idle. While a PassiveWaitScope is alive on a thread, that thread's MPI waits
// sleep between polls from the first — for a background communication thread whose cores are busy
// computing (distribute/comm_worker.h), where the spin would take a core from the compute
// (bench_overlap: 2 processes on 2 cores, 0.91 of the step rate with the spin, 0.97 without). The
// shared-memory rendezvous keeps its 50 µs of pauses and yields: blocking at once measured slower
// there (0.94 against 1.00), the peer's thread usually arriving within them.
class PassiveWaitScope {
 public:
  PassiveWaitScope();
  ~PassiveWaitScope();
  PassiveWaitScope(const PassiveWaitScope&) = delete;
  PassiveWaitScope& operator=(const PassiveWaitScope&) = delete;

 private:
  bool saved_;
};
// True inside a PassiveWaitScope on the calling thread.
bool passive_wait();

// The handle of one collective call (PyTorch c10d's Work).
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective completed, at most `timeout` (DeadlineExceededError naming the
  // collective when it passes), then rethrows the collective's error if it had one.
  virtual void wait(std::chrono::milliseconds timeout) = 0;
  // wait(default_timeout()). A Work that is complete on return overrides it not to read the
  // environment (getenv was a tenth of the own time of a 4-byte shared-memory all_reduce).
  virtual void wait() { wait(default_timeout()); }
  // True once the collective completed (successfully or not). Non-blocking.
  virtual bool is_completed() const = 0;
  // "all_reduce #3 (float32(1024,), sum)"
  virtual const std::string& description() const = 0;
  // Device backends: the event that completes with the collective on its stream (to order later
  // work of another stream after it: Stream::wait_event); nullptr for host backends (complete on
  // return).
  virtual std::shared_ptr<Event> event() const { return nullptr; }
};

struct CollectiveCall;  // collective/call.h

// The front door and the backends' side of it. The six collectives are non-virtual: each numbers
// the call, validates every argument once (collective/call.h says what and in which order; a bad
// argument aborts the communicator and throws InvalidArgumentError) and then calls the backend's
// protected do_* method, which only moves bytes and meets its peers. A backend adds its own device
// rule through check_device (host memory only, this rank's GPU only, ...).
class Communicator {
 public:
  Communicator();
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "shared_memory", "reference", ...
  virtual std::string_view backend() const = 0;

  std::shared_ptr<Work> all_reduce(const Tensor& input, const Tensor& output, const AllReduceOptions& options = {});
  std::shared_ptr<Work> broadcast(const Tensor& tensor, const BroadcastOptions& options = {});
  std::shared_ptr<Work> reduce(const Tensor& input, const Tensor& output, const ReduceOptions& options = {});
  std::shared_ptr<Work> all_gather(const Tensor& input, const Tensor& output, const AllGatherOptions& options = {});
  std::shared_ptr<Work> reduce_scatter(const Tensor& input, const Tensor& output,
                                       const ReduceScatterOptions& options = {});
  std::shared_ptr<Work> barrier(const BarrierOptions& options = {});

  // Marks the communicator failed for every participant: those waiting in a collective, and every
  // later call, raise AbortedError naming this rank and `reason`. Idempotent; the first reason wins.
  virtual void abort(const std::string& reason) = 0;

 protected:
  // The backend's device rule for one tensor argument, called by the front door after it found
  // `t` defined and before it checks the dtype. Throws InvalidArgumentError (call.h has the
  // helpers check_on_host and check_on_device). The default accepts any device.
  virtual void check_device(const Tensor& t, const CollectiveCall& call, const char* role) const;

  // Data movement of a validated call (shapes, dtypes and root already checked; for reduce,
  // `output` is only meaningful on the root). Each returns the call's Work, never nullptr.
  // A backend overrides the collectives it implements. The default of each throws
  // UnimplementedError "<backend()>: <collective> is not implemented by this backend (<the call's
  // fingerprint>)" and leaves the communicator usable: every participant of a backend throws the
  // same, so none waits for another. A new collective therefore needs no change in every backend.
  virtual std::shared_ptr<Work> do_all_reduce(const CollectiveCall& call, const Tensor& input, const Tensor& output);
  virtual std::shared_ptr<Work> do_broadcast(const CollectiveCall& call, const Tensor& tensor);
  virtual std::shared_ptr<Work> do_reduce(const CollectiveCall& call, const Tensor& input, const Tensor& output);
  virtual std::shared_ptr<Work> do_all_gather(const CollectiveCall& call, const Tensor& input, const Tensor& output);
  virtual std::shared_ptr<Work> do_reduce_scatter(const CollectiveCall& call, const Tensor& input,
                                                  const Tensor& output);
  virtual std::shared_ptr<Work> do_barrier(const CollectiveCall& call);

 private:
  // Validates (kind-specific shape and root checks; every tensor through check_tensor), aborting
  // the communicator on a bad argument.
  void validate(const CollectiveCall& call, const Tensor* input, const Tensor* output);
  // Waits for write holds on `output` (an async checkpoint copying it; core/tensor.h).
  static void await_writable(const Tensor& output);
  void check_tensor(const Tensor& t, const CollectiveCall& call, const char* role) const;
  // The do_* defaults: throws UnimplementedError naming backend() and the collective.
  [[noreturn]] void unimplemented(const CollectiveCall& call) const;

  std::uint64_t sequence_ = 0;  // the next call's sequence number
  // The record of the call in progress, reused call after call (one thread at a time calls a
  // communicator): the backends see it only until their do_* returns.
  std::unique_ptr<CollectiveCall> call_;
};

}  // namespace chorus::collective
