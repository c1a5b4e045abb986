#include <chorus/distribute/worker_transport.h>

#include <algorithm>
#include <chrono>

#include <chorus/collective/gloo/gloo.h>
#include <chorus/collective/nccl/nccl_mpi.h>
#include <chorus/collective/nccl/nccl_store.h>
#include <chorus/collective/store/prefix_store.h>
#include <chorus/core/env.h>
#include <chorus/core/error.h>
#include <chorus/core/logging.h>
#include <chorus/core/strings.h>

#if defined(CHORUS_WITH_MPI)
#include <mpi.h>

#include <chorus/collective/mpi/mpi.h>
#endif

namespace chorus::distribute {

using chorus::internal::str_cat;
using std::chrono::milliseconds;

namespace {

// goodbye() waits for the other workers in slices this long, looking for a recorded failure
// between them.
constexpr milliseconds kGoodbyeSlice{200};

bool is_loopback(const std::string& host) { return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0; }

// "10.0.0.2:2222" → "10.0.0.2"; "[fe80::1]:2222" → "fe80::1".
std::string host_part(const std::string& address) {
  const auto colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

// Processes in MPI_COMM_WORLD (MPI initialized): 1 for a program started without mpirun (a singleton).
int mpi_world_size() {
  int size = 1;
#if defined(CHORUS_WITH_MPI)
  MPI_Comm_size(MPI_COMM_WORLD, &size);
#endif
  return size;
}

// The address Gloo binds to and advertises (see the header, "Communicators").
std::string gloo_hostname(const ClusterResolver& r) {
  if (const auto ifname = env::get("GLOO_SOCKET_IFNAME"); ifname && !ifname->empty())
    return collective::interface_address(ifname->substr(0, ifname->find(',')));
  const std::vector<std::string> addresses = r.worker_addresses();
  const auto index = static_cast<std::size_t>(r.worker_index());
  if (index < addresses.size()) return host_part(addresses[index]);
  if (r.store_address() && is_loopback(r.store_address()->host)) return "127.0.0.1";
  return "";  // this host's name (gloo.h)
}

}  // namespace

WorkerTransportChoice choose_worker_transport(const ClusterResolver& r, bool gpu) {
  if (internal::mpi_initialized() && mpi_world_size() > 1)
    return {true, gpu ? "NCCL between processes (unique id over MPI)" : "MPI between processes"};
  CHORUS_REQUIRE(r.store_address().has_value(), FailedPreconditionError,
                 "MultiWorkerMirroredStrategy: ", r.num_workers(), " workers (", r.to_string(),
                 ") and no way to reach them: MPI is not initialized in this process and the cluster names no "
                 "rendezvous store. Under mpirun/chorus-run, create a chorus::collective::MpiEnvironment before the "
                 "strategy (and destroy it after); without MPI, start the workers with TF_CONFIG or torchrun's "
                 "MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE (docs/multi_worker.md, \"Without MPI\")");
  const std::string at = r.store_address()->to_string();
  // Gloo carries the worker communicator even for GPU replicas (the start-up exchange, checks,
  // reduce/gather of host values).
  CHORUS_REQUIRE(collective::gloo_available(), UnavailableError, "MultiWorkerMirroredStrategy: ", r.num_workers(),
                 " workers without MPI (", r.source(), ", store at ", at,
                 ") talk over Gloo, which this build of chorus lacks: install libgloo-dev (scripts/install-deps.sh) "
                 "and rebuild chorus (cmake then reports 'Gloo ... found'), or start the job with mpirun/chorus-run "
                 "and a collective::MpiEnvironment");
  return {false, gpu ? str_cat("NCCL between processes (unique id over the store at ", at, ")")
                     : str_cat("Gloo between processes (store at ", at, ")")};
}

WorkerTransport::WorkerTransport(WorkerTransportChoice choice, const ClusterResolver& r, milliseconds timeout)
    : choice_(std::move(choice)), timeout_(timeout) {
  if (choice_.mpi) return;
  const collective::StoreRendezvousOptions o = store_rendezvous_options(r, timeout);
  rdzv_ = std::make_unique<collective::StoreRendezvous>(collective::store_rendezvous(o));
  CHORUS_REQUIRE(rdzv_->rank == r.worker_index() && rdzv_->size == r.num_workers(), InternalError,
                 "MultiWorkerMirroredStrategy: the rendezvous made this worker rank ", rdzv_->rank, " of ", rdzv_->size,
                 " but its resolver says ", r.to_string());
  // The rendezvous's store and keys ("attempt/<attempt>/"); once connected its client gives up
  // reconnecting after seconds (tcp_store.h), so a dead rank 0 is learnt at once.
  store_ = rdzv_->store;
  gloo_hostname_ = gloo_hostname(r);
}

WorkerTransport::~WorkerTransport() {
  if (!rdzv_) return;
  try {
    // After a failure the others may be gone (rank 0 need not wait for them), or rank 0 may be
    // (the rendezvous's client would retry reaching it for the whole timeout): nobody leaves.
    if (!failure_recorded()) rdzv_->leave(timeout_);
  } catch (const std::exception& e) {
    CHORUS_LOG(WARNING) << "MultiWorkerMirroredStrategy: leaving the rendezvous store: " << e.what();
  }
}

std::unique_ptr<collective::Communicator> WorkerTransport::make_worker_communicator() {
  if (choice_.mpi) {
#if defined(CHORUS_WITH_MPI)
    return collective::make_mpi_communicator({.validate = true, .timeout = timeout_});
#else
    throw InternalError("MultiWorkerMirroredStrategy: MPI is initialized in a build without MPI");
#endif
  }
  gloo_prefixes_.push_back("gloo/worker");
  return collective::make_gloo_communicator(
      *store_, rdzv_->rank, rdzv_->size,
      {.prefix = gloo_prefixes_.back(), .hostname = gloo_hostname_, .validate = true, .timeout = timeout_});
}

std::unique_ptr<collective::Communicator> WorkerTransport::make_cross_communicator(const std::string& gpu_device) {
  const int n = generation_++;
  if (choice_.mpi) {
    if (!gpu_device.empty())
      return collective::make_nccl_communicator(gpu_device, {.validate = true, .timeout = timeout_});
#if defined(CHORUS_WITH_MPI)
    return collective::make_mpi_communicator({.validate = true, .timeout = timeout_});
#else
    throw InternalError("MultiWorkerMirroredStrategy: MPI is initialized in a build without MPI");
#endif
  }
  if (!gpu_device.empty()) {
    // Validation off: each validated NCCL call would leave `size` keys in the store (nccl_store.h).
    auto keys = std::make_shared<collective::PrefixStore>(str_cat("nccl/cross/", n), store_);
    return collective::make_nccl_communicator(gpu_device, keys, rdzv_->rank, rdzv_->size,
                                              {.validate = false, .timeout = timeout_});
  }
  gloo_prefixes_.push_back(str_cat("gloo/cross/", n));
  return collective::make_gloo_communicator(
      *store_, rdzv_->rank, rdzv_->size,
      {.prefix = gloo_prefixes_.back(), .hostname = gloo_hostname_, .validate = true, .timeout = timeout_});
}

bool WorkerTransport::failure_recorded() noexcept {
  try {
    // The failure counter, not "failure/1": a communicator adds to the counter, then writes its
    // record under the number it got, so the first record can still be missing while a second
    // one is written (two ranks seeing the same lost peer).
    for (const std::string& prefix : gloo_prefixes_) failed_ = failed_ || store_->check({prefix + "/failures"});
  } catch (const std::exception&) {
    failed_ = true;  // the store is gone: rank 0 is
  }
  return failed_;
}

void WorkerTransport::goodbye() noexcept {
  if (!rdzv_ || failure_recorded()) return;
  try {
    store_->set(str_cat("bye/", rdzv_->rank), "");
    std::vector<std::string> all;
    for (int r = 0; r < rdzv_->size; ++r) all.push_back(str_cat("bye/", r));
    // In slices, looking for a failure between them: a peer that records one after this worker
    // began to wait skips its own goodbye, and waiting out the whole timeout for it would hang the
    // job's end (seen: 60 s, once in a few hundred runs of AKilledWorkerIsNamedWithinTenSeconds).
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (;;) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
      try {
        store_->wait(all, std::clamp(left, milliseconds(1), kGoodbyeSlice));
        return;
      } catch (const DeadlineExceededError& e) {
        if (failure_recorded()) return;  // that peer's goodbye will not come
        if (std::chrono::steady_clock::now() >= deadline)
          throw DeadlineExceededError(str_cat(e.what(), " (the last wait; ", timeout_.count(), " ms in all)"));
      }
    }
  } catch (const std::exception& e) {
    CHORUS_LOG(WARNING) << "MultiWorkerMirroredStrategy: closing: not every worker reached the end: " << e.what();
  }
}

}  // namespace chorus::distribute
