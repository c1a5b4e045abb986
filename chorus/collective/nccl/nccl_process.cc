// NCCL across processes, whatever carries what the processes tell each other besides NCCL (the
// bootstrap, fingerprints, barrier, abort notices): MPI (nccl_mpi.cc) or a store (nccl_store.cc),
// behind nccl_side.h's NcclSide. The sequence and the semantics are nccl_mpi.h's.
#include <chorus/collective/nccl/nccl_side.h>

#include <chorus/core/error.h>

#if defined(CHORUS_WITH_NCCL)
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <chorus/collective/call.h>
#include <chorus/collective/deadline.h>
#include <chorus/collective/host_reduce.h>
#include <chorus/collective/nccl/nccl.h>
#include <chorus/collective/nccl/nccl_bootstrap.h>
#include <chorus/collective/nccl/nccl_check.h>
#include <chorus/collective/peer_monitor/peer_monitor.h>
#include <chorus/collective/work.h>
#include <chorus/core/cuda/check.h>
#include <chorus/core/gpu.h>
#include <chorus/core/host.h>
#include <chorus/core/logging.h>
#include <chorus/core/runtime.h>
#include <chorus/core/shape.h>
#include <chorus/core/strings.h>
#include <chorus/core/tensor.h>
#endif

namespace chorus::collective {

using internal::str_cat;

#if defined(CHORUS_WITH_NCCL)
using internal::join;
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Between polls of an event or of a non-blocking NCCL communicator's state.
constexpr auto kPoll = std::chrono::microseconds(50);
constexpr const char* kPrefix = "nccl: ";
// After the peer monitor reported a lost peer, how long a collective may still complete (its data
// may be in flight) before it fails; as the MPI backend's kLossGrace (mpi_internal.h).
constexpr milliseconds kLossGrace{250};

// ncclCommGetAsyncError's answer, or its own failure.
ncclResult_t nccl_state(ncclComm_t comm) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
  return r != ncclSuccess ? r : state;
}

// The chorus error NCCL's result maps to (nccl_check.h), as an exception object to throw later.
std::exception_ptr nccl_error(ncclResult_t r, const char* what, const char* file, int line) {
  try {
    throw_nccl_error(r, what, file, line);
  } catch (...) {
    return std::current_exception();
  }
}

std::string message_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    return err.message();
  } catch (const std::exception& err) {
    return err.what();
  }
}

void abort_nccl(ncclComm_t comm, int ordinal) noexcept {
  if (comm == nullptr) return;
  std::optional<gpu::internal::DeviceGuard> guard;
  try {
    guard.emplace(ordinal);
  } catch (const std::exception&) {  // NCCL switches to the communicator's device itself, too
  }
  if (const ncclResult_t r = ncclCommAbort(comm); r != ncclSuccess)
    CHORUS_LOG(WARNING) << kPrefix << "ncclCommAbort failed: " << ncclGetErrorString(r);
}

// The NCCL communicator of this process and the side channel beside it, shared with the Work
// handles (which may outlive the Communicator object).
struct Shared {
  std::mutex mu;              // every NCCL call on `comm` (NCCL communicators are not thread-safe) and the rest
  ncclComm_t comm = nullptr;  // null once aborted or destroyed
  int ordinal = 0;            // CUDA ordinal of the GPU
  bool failed = false;
  std::string failure;             // what later calls report
  std::unique_ptr<NcclSide> side;  // fingerprints, barrier, notices (MPI or a store); null once destroyed
  // The process's peer monitor (collective/mpi/mpi.h); null: a dead peer is noticed by the timeout only.
  std::shared_ptr<PeerMonitor> monitor;

  ~Shared() { abort_nccl(comm, ordinal); }  // only if the Communicator never took it over (comm is null then)

  // Aborts the NCCL communicator (kernels waiting for a peer quit) and tells the other processes
  // `notice` over the side channel. `reason` is what this process's later calls report. The first call wins.
  void fail(const std::string& reason, const std::string& notice) {
    std::lock_guard<std::mutex> lock(mu);
    if (failed) return;
    failed = true;
    failure = reason;
    CHORUS_LOG(ERROR) << kPrefix << reason;
    abort_nccl(comm, ordinal);
    comm = nullptr;
    if (side) side->abort(notice);  // thread-safe, never throws (nccl_side.h)
  }
};

// The waits' look at the peer monitor, as the MPI backend's (mpi_communicator.cc): once a peer
// process is lost (or left with an error) and `*since` (when this wait first saw it) is kLossGrace
// old, aborts NCCL, tells the other processes and throws UnavailableError naming the peer(s).
// Cheap when all is well: one atomic load.
void check_peers(Shared& shared, const std::string& what, int rank, std::optional<Clock::time_point>* since) {
  if (!shared.monitor || !shared.monitor->any_lost()) return;
  const auto now = Clock::now();
  if (!*since) *since = now;
  if (now - **since < kLossGrace) return;
  std::string who;
  for (const PeerLoss& loss : shared.monitor->losses()) who += (who.empty() ? "" : "; ") + loss.to_string();
  const std::string failure =
      str_cat(what, " on rank ", rank, " cannot complete: a peer process is lost or left with an error: ", who);
  shared.fail(failure + "; the NCCL communicator was aborted", failure);
  throw UnavailableError(str_cat(kPrefix, failure,
                                 ". The NCCL communicator was aborted (ncclCommAbort) and the other processes were "
                                 "told; this communicator is unusable now: exit non-zero and restart the job."));
}

// Completes with the stream's event recorded after the NCCL call (EventWork's wait, plus what an
// NCCL call needs: an asynchronous NCCL error or the timeout aborts the communicator, because a
// kernel waiting for a peer that never comes would otherwise spin on the GPU forever).
class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<Event> done, std::string description, std::shared_ptr<Shared> shared, int rank)
      : done_(std::move(done)), description_(std::move(description)), shared_(std::move(shared)), rank_(rank) {}

  using Work::wait;
  void wait(milliseconds timeout) override {
    const auto deadline = deadline_after(Clock::now(), timeout);
    std::optional<Clock::time_point> loss_seen;
    for (;;) {
      const bool done = done_->query();
      if (settled(done)) return;
      check_peers(*shared_, description_, rank_, &loss_seen);
      if (Clock::now() >= deadline) {
        const std::string what = str_cat(description_, " on rank ", rank_, " did not complete on the device within ",
                                         timeout.count(), " ms");
        shared_->fail(what + "; the NCCL communicator was aborted", what);
        throw DeadlineExceededError(str_cat(
            kPrefix, what,
            ": a process did not join it (stuck, died, or — without validation — called a different "
            "collective), or the device is overloaded. The NCCL communicator was aborted (ncclCommAbort) and the other "
            "processes were told; this communicator is unusable now."));
      }
      std::this_thread::sleep_for(kPoll);
    }
  }
  bool is_completed() const override {
    if (seen_complete_) return true;
    std::lock_guard<std::mutex> lock(shared_->mu);
    return shared_->failed || done_->query();  // an aborted collective is over, too
  }
  const std::string& description() const override { return description_; }

 private:
  // True when the collective completed while the communicator was healthy; throws when it failed.
  bool settled(bool done) {
    if (seen_complete_) return true;
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      if (shared_->failed)
        throw AbortedError(str_cat(kPrefix, description_, " on rank ", rank_, " aborted: ", shared_->failure,
                                   " (the collective may have stopped half-way: its output is not reliable)"));
      if (shared_->comm != nullptr)
        if (const ncclResult_t s = nccl_state(shared_->comm); s != ncclSuccess && s != ncclInProgress)
          error = nccl_error(s, "an NCCL collective (ncclCommGetAsyncError reported it)", __FILE__, __LINE__);
      if (!error && done) seen_complete_ = true;
    }
    if (error) {
      const std::string what = str_cat(description_, " failed on rank ", rank_, ": ", message_of(error));
      shared_->fail(what, what);
      std::rethrow_exception(error);
    }
    return done;
  }

  std::shared_ptr<Event> done_;
  std::string description_;
  std::shared_ptr<Shared> shared_;
  int rank_;
  mutable std::atomic<bool> seen_complete_{false};
};

class NcclProcessCommunicator final : public Communicator {
 public:
  NcclProcessCommunicator(std::shared_ptr<Shared> shared, std::shared_ptr<DeviceContext> device, bool validate,
                          milliseconds close_timeout)
      : shared_(std::move(shared)),
        device_(std::move(device)),
        rank_(shared_->side->rank()),
        size_(shared_->side->size()),
        backend_(shared_->side->backend()),
        validate_(validate),
        close_timeout_(close_timeout) {}

  ~NcclProcessCommunicator() override { close(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view backend() const override { return backend_; }

  void abort(const std::string& reason) override {
    shared_->fail(str_cat("rank ", rank_, " aborted the communicator: ", reason), reason);
  }

 private:
  using Launch = std::function<ncclResult_t(ncclComm_t, cudaStream_t)>;

  static std::size_t count(const Tensor& t) { return static_cast<std::size_t>(t.num_elements()); }

  void check_device(const Tensor& t, const CollectiveCall& call, const char* role) const override {
    check_on_device(t, *device_, rank_, call, role, "this process's NCCL device");
  }

  std::shared_ptr<Work> do_all_reduce(const CollectiveCall& o, const Tensor& in, const Tensor& out) override {
    return run(o, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(in.data(), out.data(), count(in), nccl_type(in.dtype()), nccl_op(o.op), c, s);
    });
  }

  std::shared_ptr<Work> do_broadcast(const CollectiveCall& o, const Tensor& t) override {
    return run(o, [&](ncclComm_t c, cudaStream_t s) {
      return ncclBroadcast(t.data(), t.data(), count(t), nccl_type(t.dtype()), o.root, c, s);
    });
  }

  std::shared_ptr<Work> do_reduce(const CollectiveCall& o, const Tensor& in, const Tensor& out) override {
    return run(o, [&](ncclComm_t c, cudaStream_t s) {
      return ncclReduce(in.data(), rank_ == o.root ? out.data() : nullptr, count(in), nccl_type(in.dtype()),
                        nccl_op(o.op), o.root, c, s);
    });
  }

  std::shared_ptr<Work> do_all_gather(const CollectiveCall& o, const Tensor& in, const Tensor& out) override {
    return run(o, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllGather(in.data(), out.data(), count(in), nccl_type(in.dtype()), c, s);
    });
  }

  std::shared_ptr<Work> do_reduce_scatter(const CollectiveCall& o, const Tensor& in, const Tensor& out) override {
    return run(o, [&](ncclComm_t c, cudaStream_t s) {
      return ncclReduceScatter(in.data(), out.data(), count(out), nccl_type(in.dtype()), nccl_op(o.op), c, s);
    });
  }

  std::shared_ptr<Work> do_barrier(const CollectiveCall& o) override {
    check_usable(o.fp);
    if (validate_) {
      exchange(o.fp, o.timeout);  // every process has arrived once it completes
    } else {
      try {
        shared_->side->barrier(o.timeout);
      } catch (const Error& e) {
        failed_over_side(o.fp, e);
      }
    }
    return std::make_shared<CompletedWork>(o.fp);
  }

  void check_usable(const Fingerprint& fp) const {
    std::lock_guard<std::mutex> lock(shared_->mu);
    if (shared_->failed)
      throw AbortedError(str_cat(kPrefix, fp.to_string(), " on rank ", rank_,
                                 " cannot run: the communicator is unusable: ", shared_->failure));
  }

  // Compare fingerprints over the side channel, enqueue the NCCL call on this device's stream.
  std::shared_ptr<Work> run(const CollectiveCall& call, const Launch& launch) {
    check_usable(call.fp);
    const auto deadline = deadline_after(Clock::now(), call.timeout);
    if (validate_) exchange(call.fp, call.timeout);
    return enqueue(call.fp, deadline, call.timeout, launch);
  }

  // All-gathers the fingerprints over the side channel; a mismatch throws InvalidArgumentError on
  // every process (all see the same fingerprints), and the communicator stays usable.
  void exchange(const Fingerprint& fp, milliseconds timeout) {
    std::vector<std::int64_t> all;
    try {
      all = shared_->side->all_gather(pack_fingerprint(fp, rank_), "fingerprints", timeout);
    } catch (const Error& e) {
      failed_over_side(fp, e);
    }
    if (std::string mismatch = compare_fingerprints(all, size_); !mismatch.empty())
      throw InvalidArgumentError(kPrefix + mismatch);
  }

  // The side channel's step of `fp` failed (timeout: its message names the missing ranks; abort
  // notice; its own error): abort NCCL here too, and throw the same kind of error with the call named.
  [[noreturn]] void failed_over_side(const Fingerprint& fp, const Error& e) {
    const std::string what =
        str_cat(fp.to_string(), " on rank ", rank_, ": before NCCL was called, ",
                shared_->side ? shared_->side->transport() : "the side channel", " reported: ", e.message());
    shared_->fail(what, what);  // the side channel has already told the others, or does now
    throw_error(e.code(), kPrefix + what);
  }

  std::shared_ptr<Work> enqueue(const Fingerprint& fp, Clock::time_point deadline, milliseconds timeout,
                                const Launch& launch) {
    gpu::internal::DeviceGuard guard(device_->gpu_ordinal());
    const auto stream = static_cast<cudaStream_t>(device_->stream().native_handle());
    ncclResult_t r;
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      if (shared_->failed)
        throw AbortedError(str_cat(kPrefix, fp.to_string(), " on rank ", rank_, " aborted: ", shared_->failure));
      r = launch(shared_->comm, stream);
    }
    // A non-blocking communicator may answer ncclInProgress (e.g. while the first collective sets up
    // its connections): the kernel is on the stream only once the state turns ncclSuccess, and the
    // communicator may not be used before. Poll without holding the lock, so abort() gets through.
    std::optional<Clock::time_point> loss_seen;
    while (r == ncclInProgress) {
      check_peers(*shared_, fp.to_string(), rank_, &loss_seen);
      if (Clock::now() >= deadline) {
        const std::string what =
            str_cat(fp.to_string(), " on rank ", rank_, ": NCCL did not finish enqueueing it within ", timeout.count(),
                    " ms (connection setup to a peer that does not answer?)");
        shared_->fail(what, what);
        throw DeadlineExceededError(str_cat(kPrefix, what, "; the NCCL communicator was aborted"));
      }
      std::this_thread::sleep_for(kPoll);
      std::lock_guard<std::mutex> lock(shared_->mu);
      if (shared_->failed)
        throw AbortedError(str_cat(kPrefix, fp.to_string(), " on rank ", rank_, " aborted: ", shared_->failure));
      r = nccl_state(shared_->comm);
    }
    if (r != ncclSuccess) {
      const std::exception_ptr error =
          nccl_error(r, str_cat(fp.to_string(), " (NCCL call)").c_str(), __FILE__, __LINE__);
      const std::string what = str_cat(fp.to_string(), " failed on rank ", rank_, ": ", message_of(error));
      shared_->fail(what, what);
      std::rethrow_exception(error);
    }
    return std::make_shared<NcclWork>(device_->stream().record_event(), fp.to_string(), shared_, rank_);
  }

  // Flushes and frees the NCCL communicator (aborting it when that fails or takes too long), then
  // frees the side channel. Work handles still alive then complete normally if the flush
  // succeeded (every kernel had finished), else raise AbortedError.
  void close() noexcept {
    std::unique_ptr<NcclSide> side;
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      if (ncclComm_t comm = shared_->comm) {
        shared_->comm = nullptr;
        if (!destroy_nccl(comm) && !shared_->failed) {
          shared_->failed = true;
          shared_->failure = "the communicator was destroyed while a collective was still running";
        }
      }
      side = std::move(shared_->side);
    }
  }  // `side` is freed here, outside the lock

  // True when the communicator was flushed (every kernel finished) and freed; false when it had to
  // be aborted.
  bool destroy_nccl(ncclComm_t comm) noexcept {
    ncclResult_t r = ncclInternalError;
    try {
      gpu::internal::DeviceGuard guard(shared_->ordinal);
      r = ncclCommFinalize(comm);  // non-blocking: ncclInProgress until the last kernels finished
      const auto deadline = deadline_after(Clock::now(), close_timeout_);
      while (r == ncclInProgress && Clock::now() < deadline) {
        std::this_thread::sleep_for(milliseconds(1));
        r = nccl_state(comm);
      }
    } catch (const std::exception& e) {
      CHORUS_LOG(WARNING) << kPrefix << "rank " << rank_ << ": " << e.what();
    }
    if (r == ncclSuccess) {
      if (const ncclResult_t d = ncclCommDestroy(comm); d != ncclSuccess && d != ncclInProgress)
        CHORUS_LOG(WARNING) << kPrefix << "rank " << rank_ << ": ncclCommDestroy failed: " << ncclGetErrorString(d);
      return true;
    }
    CHORUS_LOG(WARNING) << kPrefix << "rank " << rank_ << ": the NCCL communicator could not be flushed ("
                        << (r == ncclInProgress ? str_cat("still busy after ", close_timeout_.count(), " ms")
                                                : std::string(ncclGetErrorString(r)))
                        << "); aborting it";
    abort_nccl(comm, shared_->ordinal);
    return false;
  }

  std::shared_ptr<Shared> shared_;
  std::shared_ptr<DeviceContext> device_;
  const int rank_;
  const int size_;
  const std::string backend_;
  const bool validate_;
  const milliseconds close_timeout_;
};

// ---- creation ----------------------------------------------------------------------------------

// Rethrows `e` (from a side-channel step of the bootstrap) with the step named.
[[noreturn]] void rethrow_step(const Error& e, const NcclSide& side, const char* step) {
  throw_error(e.code(), str_cat("make_nccl_communicator on rank ", side.rank(), ": ", step, " over ", side.transport(),
                                " failed: ", e.message()));
}

// Step 4 of nccl_mpi.h: non-blocking ncclCommInitRankConfig, polled until `timeout`. Returns the
// communicator, or null with `*outcome` = the NCCL error (`*error` its mapped exception) or
// ncclInProgress when the timeout passed. A communicator that did not come up is aborted here.
ncclComm_t init_rank(const ncclUniqueId& id, int rank, int size, int ordinal, milliseconds timeout,
                     ncclResult_t* outcome, std::exception_ptr* error) {
  gpu::internal::DeviceGuard guard(ordinal);  // ncclCommInitRankConfig takes the current device
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // returns at once: a peer that never joins cannot block us past the timeout
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  const auto deadline = deadline_after(Clock::now(), timeout);
  while (r == ncclInProgress && comm != nullptr && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
    r = nccl_state(comm);
  }
  if (r == ncclSuccess && comm == nullptr) r = ncclInternalError;  // never seen; not trusted either
  *outcome = r;
  if (r == ncclSuccess) return comm;
  if (r != ncclInProgress) *error = nccl_error(r, "ncclCommInitRankConfig", __FILE__, __LINE__);
  abort_nccl(comm, ordinal);  // also ends NCCL's own bootstrap, which may be waiting for peers
  return nullptr;
}

// How initialization went on one process, as words: outcome, milliseconds, NUL-padded message.
constexpr int kOutcomeTextWords = 48;
std::vector<std::int64_t> pack_outcome(ncclResult_t outcome, std::int64_t took, const std::string& text) {
  std::vector<std::int64_t> w(2 + kOutcomeTextWords, 0);
  w[0] = static_cast<std::int64_t>(outcome);
  w[1] = took;
  std::memcpy(w.data() + 2, text.data(), std::min(text.size(), kOutcomeTextWords * sizeof(std::int64_t) - 1));
  return w;
}

// The NCCL unique id, made by rank 0 and broadcast over the side channel to all (a collective). A
// failure to make it aborts the side channel, so the other ranks raise at once instead of waiting.
ncclUniqueId share_unique_id(NcclSide& side, milliseconds timeout) {
  const int rank = side.rank();
  static_assert(sizeof(ncclUniqueId) % sizeof(std::int64_t) == 0);
  constexpr std::int64_t kIdWords = sizeof(ncclUniqueId) / sizeof(std::int64_t);
  ncclUniqueId id{};
  if (rank == 0) {
    if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
      const std::exception_ptr error = nccl_error(r, "ncclGetUniqueId", __FILE__, __LINE__);
      side.abort(str_cat("make_nccl_communicator: rank 0 could not create the NCCL unique id: ", message_of(error)));
      std::rethrow_exception(error);
    }
  }
  try {
    std::vector<std::int64_t> words(kIdWords);
    std::memcpy(words.data(), &id, sizeof(id));
    side.broadcast(words, timeout);
    std::memcpy(&id, words.data(), sizeof(id));
  } catch (const Error& e) {
    rethrow_step(e, side, "the broadcast of the NCCL unique id");
  }
  return id;
}

}  // namespace

std::unique_ptr<Communicator> create_nccl_communicator(const std::string& device, std::unique_ptr<NcclSide> side,
                                                       bool validate, milliseconds timeout,
                                                       std::shared_ptr<PeerMonitor> monitor) {
  const int rank = side->rank(), size = side->size();

  // 1. This process's GPU. A failure here is local: tell the others at once (they would wait in
  // the all-gather below until the timeout otherwise).
  std::shared_ptr<DeviceContext> ctx;
  GpuClaim mine;
  try {
    ctx = runtime::find(device);
    CHORUS_REQUIRE(ctx->is_gpu(), InvalidArgumentError, "make_nccl_communicator: ", ctx->name(),
                   " is not a GPU; NCCL moves GPU memory (host tensors across processes: make_mpi_communicator)");
    // No fallback name: two hosts that both read "unknown-host" would pass the one-GPU check below.
    const std::optional<std::string> host = host_name();
    CHORUS_REQUIRE(host, UnavailableError, "gethostname failed: ", errno ? std::strerror(errno) : "empty host name");
    mine = {.rank = rank,
            .host = *host,
            .pci_bus_id = gpu::device_properties(ctx->gpu_ordinal()).pci_bus_id,
            .device = ctx->name()};
  } catch (const Error& e) {
    side->abort(str_cat("make_nccl_communicator(\"", device, "\") failed on rank ", rank, ": ", e.message()));
    throw;
  }

  // 2. One GPU per process: checked on every process from the same gathered claims.
  std::vector<GpuClaim> claims;
  try {
    claims = exchange_gpu_claims(*side, mine, timeout);
  } catch (const Error& e) {
    rethrow_step(e, *side, "the exchange of GPU claims (host name, PCI bus id)");
  }
  check_distinct_gpus(claims, side->how_to_choose_gpus());

  // 3. The NCCL unique id, from rank 0 to all.
  const ncclUniqueId id = share_unique_id(*side, timeout);

  // 4. NCCL initialization, then the same verdict everywhere: all processes get a communicator or
  // all throw, so none is left with one whose peers are gone.
  ncclResult_t outcome = ncclSuccess;
  std::exception_ptr error;
  const auto start = Clock::now();
  ncclComm_t comm = nullptr;
  try {
    comm = init_rank(id, rank, size, ctx->gpu_ordinal(), timeout, &outcome, &error);
  } catch (const Error&) {  // CUDA could not switch to the device: still tell the others below
    outcome = ncclUnhandledCudaError;
    error = std::current_exception();
  }
  const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
  constexpr int kStride = 2 + kOutcomeTextWords;
  std::vector<std::int64_t> outcomes;
  try {
    outcomes = side->all_gather(pack_outcome(outcome, took, error ? message_of(error) : ""), "outcomes", timeout);
  } catch (const Error& e) {
    abort_nccl(comm, ctx->gpu_ordinal());
    rethrow_step(e, *side,
                 str_cat("after NCCL initialization (", outcome == ncclSuccess ? "done" : "failed", " here in ", took,
                         " ms), the exchange of how it went")
                     .c_str());
  }
  std::vector<int> late, failed, fine;
  for (int r = 0; r < size; ++r) {
    const auto o = static_cast<ncclResult_t>(outcomes[static_cast<std::size_t>(r) * kStride]);
    (o == ncclSuccess ? fine : o == ncclInProgress ? late : failed).push_back(r);
  }
  if (late.empty() && failed.empty()) {
    auto shared = std::make_shared<Shared>();
    shared->comm = comm;
    shared->ordinal = ctx->gpu_ordinal();
    shared->side = std::move(side);
    shared->monitor = std::move(monitor);
    CHORUS_LOG(INFO) << kPrefix << "rank " << rank << " of " << size << " on " << ctx->name() << " (GPU "
                     << mine.pci_bus_id << " on " << mine.host << "), NCCL " << nccl_version() << ", initialized in "
                     << took << " ms";
    return std::make_unique<NcclProcessCommunicator>(std::move(shared), std::move(ctx), validate, timeout);
  }
  abort_nccl(comm, ctx->gpu_ordinal());  // this one may have come up; it is useless without the others
  const std::string others = fine.empty() ? "" : str_cat(" (rank(s) [", join(fine), "] completed it)");
  const std::string slow =
      late.empty() ? ""
                   : str_cat("; it did not complete within ", timeout.count(), " ms on rank(s) [", join(late), "]");
  if (!failed.empty()) {  // the error class of the first failing rank's NCCL result (nccl_check.h)
    const std::int64_t* first = outcomes.data() + static_cast<std::size_t>(failed[0]) * kStride;
    const char* text = reinterpret_cast<const char*>(first + 2);
    const std::string peer(text, strnlen(text, kOutcomeTextWords * sizeof(std::int64_t)));
    ErrorCode code = ErrorCode::kInternal;
    try {
      std::rethrow_exception(nccl_error(static_cast<ncclResult_t>(first[0]), "", __FILE__, __LINE__));
    } catch (const Error& e) {
      code = e.code();
    }
    throw_error(code, str_cat("make_nccl_communicator on rank ", rank, ": NCCL initialization failed on rank(s) [",
                              join(failed), "] of ", size, others, slow, "; rank ", failed[0], ": ", peer,
                              ". The NCCL communicators were aborted."));
  }
  throw DeadlineExceededError(str_cat(
      "make_nccl_communicator on rank ", rank,
      ": NCCL initialization (ncclCommInitRankConfig) did not complete within ", timeout.count(), " ms on rank(s) [",
      join(late), "] of ", size, others,
      ". Every process must reach it and be able to connect to the others: check that no process is stuck or died, "
      "and the network NCCL picked (NCCL_SOCKET_IFNAME, firewalls; NCCL_DEBUG=INFO shows where it stopped). The NCCL "
      "communicators were aborted."));
}

#endif  // CHORUS_WITH_NCCL

}  // namespace chorus::collective
