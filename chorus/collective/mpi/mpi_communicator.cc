// The MPI backend's collectives (mpi.h, "Execution"): after the front door validated a call,
// drain the tensors' streams, compare fingerprints over MPI_Iallgather (validation on), stage
// buffers where MPI needs it (16-bit reductions in float32, overlapping send and receive
// buffers), post the non-blocking MPI collective and poll it. How a wait fails is mpi_failure.cc's.
// Internal to the MPI backend (mpi_internal.h).
#include <algorithm>
#include <climits>
#include <cstring>
#include <thread>

#include <chorus/collective/host_reduce.h>
#include <chorus/collective/mpi/mpi_internal.h>
#include <chorus/collective/work.h>
#include <chorus/core/error.h>
#include <chorus/core/logging.h>
#include <chorus/core/tensor.h>

namespace chorus::collective::mpi_detail {

using internal::str_cat;

namespace {

// MPI counts are ints: elementwise collectives go in chunks of at most this many elements.
constexpr std::size_t kMaxCount = std::size_t{1} << 30;

MPI_Datatype wire_type(DType dt) {
  switch (dt) {
    case DType::kFloat32: return MPI_FLOAT;
    case DType::kFloat64: return MPI_DOUBLE;
    case DType::kInt32: return MPI_INT32_T;
    case DType::kInt64: return MPI_INT64_T;
    case DType::kFloat16:
    case DType::kBFloat16: return MPI_UINT16_T;  // moved as bits; reductions stage through float32
    default: break;
  }
  CHORUS_ENFORCE(false, "no MPI datatype for ", dtype_name(dt));
  return MPI_DATATYPE_NULL;
}

bool is_16bit(DType dt) { return dt == DType::kFloat16 || dt == DType::kBFloat16; }

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean: return MPI_SUM;
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kProd: return MPI_PROD;
  }
  return MPI_SUM;
}

// MEAN's second half, in place: integers truncate toward zero (C++ division), as host_reduce does.
void divide(void* data, DType dt, std::size_t n, int k) {
  auto go = [&](auto* p) {
    for (std::size_t i = 0; i < n; ++i) p[i] /= static_cast<std::remove_reference_t<decltype(*p)>>(k);
  };
  switch (dt) {
    case DType::kFloat32: go(static_cast<float*>(data)); break;
    case DType::kFloat64: go(static_cast<double*>(data)); break;
    case DType::kInt32: go(static_cast<std::int32_t*>(data)); break;
    case DType::kInt64: go(static_cast<std::int64_t*>(data)); break;
    default: CHORUS_ENFORCE(false, "divide: ", dtype_name(dt));
  }
}

// Calls fn(offset, count) over [0, n) in chunks MPI can count; at least once (n == 0 → (0, 0)),
// so every rank posts the same number of operations.
template <typename Fn>
void for_chunks(std::size_t n, Fn&& fn) {
  std::size_t off = 0;
  do {
    const std::size_t count = std::min(n - off, kMaxCount);
    fn(off, static_cast<int>(count));
    off += count;
  } while (off < n);
}

// `p` advanced by `bytes`, leaving MPI_IN_PLACE and nullptr (unused buffers) alone.
const void* at(const void* p, std::size_t bytes) {
  return p == MPI_IN_PLACE || p == nullptr ? p : static_cast<const char*>(p) + bytes;
}
void* at(void* p, std::size_t bytes) { return p == nullptr ? p : static_cast<char*>(p) + bytes; }

bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

// A private host copy of `t`'s bytes (MPI forbids overlapping send and receive buffers).
const void* copy_of(const Tensor& t, Keep* keep) {
  auto copy = std::make_shared<std::vector<unsigned char>>(t.nbytes());
  if (!copy->empty()) std::memcpy(copy->data(), t.data(), copy->size());
  keep->push_back(copy);
  return copy->data();
}

// The buffers of a reduction: 16-bit dtypes go through a float32 copy of the input reduced in
// place; the others use the tensors themselves (MPI_IN_PLACE when output is input, a private copy
// of the input when they overlap otherwise). `output` is nullptr where this rank receives nothing.
struct Reduction {
  const void* send;
  void* recv;
  DType wire;  // the dtype MPI sees
};
Reduction prepare(const Tensor& input, const Tensor* output, Keep* keep) {
  const DType dt = input.dtype();
  Reduction b{input.data(), output ? output->data() : nullptr, is_16bit(dt) ? DType::kFloat32 : dt};
  keep->push_back(input.buffer());
  if (output) keep->push_back(output->buffer());
  if (is_16bit(dt)) {
    auto staged = std::make_shared<std::vector<float>>(static_cast<std::size_t>(input.num_elements()));
    convert(input.data(), dt, staged->data(), DType::kFloat32, staged->size());
    keep->push_back(staged);
    b.send = output ? MPI_IN_PLACE : staged->data();
    if (output) b.recv = staged->data();
  } else if (output && b.send == b.recv) {
    b.send = MPI_IN_PLACE;  // for reduce_scatter: the whole input is read from recv, block 0 lands there
  } else if (output && overlaps(b.send, input.nbytes(), b.recv, output->nbytes())) {
    b.send = copy_of(input, keep);
  }
  return b;
}

// After the reduction of `n` elements: MEAN's division, then rounding 16-bit results once.
void finish(const Reduction& b, ReduceOp op, const Tensor& output, std::size_t n, int size) {
  if (op == ReduceOp::kMean) divide(b.recv, b.wire, n, size);
  if (b.wire != output.dtype()) convert(b.recv, DType::kFloat32, output.data(), output.dtype(), n);
}

}  // namespace

MpiCommunicator::MpiCommunicator(std::unique_ptr<Channel> channel, std::uint64_t id, bool validate,
                                 std::shared_ptr<PeerMonitor> monitor, std::vector<PeerAddress> peers)
    : ch_(std::move(channel)), id_(id), validate_(validate), monitor_(std::move(monitor)), peers_(std::move(peers)) {
  CHORUS_MPI_CHECK(MPI_Comm_rank(ch_->comm, &rank_));
  CHORUS_MPI_CHECK(MPI_Comm_size(ch_->comm, &size_));
  post_notice_receive();
}

MpiCommunicator::~MpiCommunicator() {
  // A loss seen after this rank's last collective still makes MPI_Finalize wait for the dead.
  if (monitor_ && monitor_->any_lost())
    for (const PeerLoss& loss : monitor_->losses()) (loss.error.empty() ? g_peer_lost : g_peer_left_failing) = true;
  int finalized = 1;
  MPI_Finalized(&finalized);  // thread-safe, also after MPI_Finalize
  if (finalized && !failed_) CHORUS_LOG(WARNING) << prefix() << "destroyed after MPI_Finalize; its handle is leaked";
  if (failed_ || finalized) {
    bury(std::move(ch_));
    return;
  }
  try {
    CHORUS_MPI_CHECK(MPI_Cancel(&ch_->incoming_request));
    CHORUS_MPI_CHECK(MPI_Wait(&ch_->incoming_request, MPI_STATUS_IGNORE));
    CHORUS_MPI_CHECK(MPI_Comm_free(&ch_->comm));
  } catch (const Error& e) {
    CHORUS_LOG(WARNING) << prefix() << "could not free the MPI communicator: " << e.what();
    bury(std::move(ch_));
  }
}

std::string MpiCommunicator::prefix() const { return str_cat("mpi#", id_, ": "); }

void MpiCommunicator::check_device(const Tensor& t, const CollectiveCall& call, const char* role) const {
  check_on_host(t, call, role,
                "the MPI backend moves host memory of CPU devices (GPU tensors go through the NCCL "
                "backend)");
  // all_gather's input and reduce_scatter's output are one block: MPI moves it with one int count.
  const bool block = (call.kind == CollectiveOp::kAllGather && std::string_view(role) == "input") ||
                     (call.kind == CollectiveOp::kReduceScatter && std::string_view(role) == "output");
  CHORUS_REQUIRE(!block || t.num_elements() <= INT_MAX, InvalidArgumentError, call.fp.op, ": a block of ",
                 t.num_elements(), " elements is more than MPI moves in one call (", INT_MAX, "); split the tensor");
}

std::shared_ptr<Work> MpiCommunicator::do_all_reduce(const CollectiveCall& c, const Tensor& input,
                                                     const Tensor& output) {
  if (is_16bit(input.dtype())) return all_reduce_16bit(c, input, output);
  return run(c, {&input, &output}, [&](const Call& call) {
    const auto n = static_cast<std::size_t>(input.num_elements());
    Keep keep;
    const Reduction b = prepare(input, &output, &keep);
    const std::size_t esize = dtype_size(b.wire);
    for_chunks(n, [&](std::size_t off, int count) {
      MPI_Request req = MPI_REQUEST_NULL;
      CHORUS_MPI_CHECK(MPI_Iallreduce(at(b.send, off * esize), at(b.recv, off * esize), count, wire_type(b.wire),
                                      mpi_op(call.op), ch_->comm, &req));
      wait(&req, call, keep);
    });
    finish(b, call.op, output, n, size_);
  });
}

// 16-bit all-reduce with 16 bits on the wire and float32 arithmetic (mpi.h, "Execution"): the
// elements are split into size() blocks; MPI_Ialltoallv hands rank r every rank's block r (16-bit),
// rank r reduces them with host_reduce (float32 accumulators, one rounding), and MPI_Iallgatherv
// returns the reduced blocks to every rank. Per rank that moves 2·(size−1)/size of the tensor's
// 16-bit bytes, as a ring all-reduce of 16-bit data would, with a single rounding per element.
// Chunks of kMaxCount elements keep every count and displacement an int.
std::shared_ptr<Work> MpiCommunicator::all_reduce_16bit(const CollectiveCall& c, const Tensor& input,
                                                        const Tensor& output) {
  return run(c, {&input, &output}, [&](const Call& call) {
    const DType dt = input.dtype();
    const std::size_t esize = dtype_size(dt);
    const auto n = static_cast<std::size_t>(input.num_elements());
    const auto p = static_cast<std::size_t>(size_);
    const auto me = static_cast<std::size_t>(rank_);
    Keep keep{input.buffer(), output.buffer()};
    // Each chunk is read (all-to-all) before the same elements of output are written (all-gather),
    // so in place needs no copy; an output overlapping the input elsewhere gets a private copy.
    const bool same = input.data() == output.data();
    const void* in = !same && overlaps(input.data(), input.nbytes(), output.data(), output.nbytes())
                         ? copy_of(input, &keep)
                         : input.data();
    auto gathered = std::make_shared<std::vector<unsigned char>>();  // size() blocks of this rank's part
    auto mine = std::make_shared<std::vector<unsigned char>>();      // this rank's reduced block
    keep.push_back(gathered);
    keep.push_back(mine);
    std::vector<int> counts(p), displs(p), recv_counts(p), recv_displs(p);
    for_chunks(n, [&](std::size_t off, int count) {
      const auto m = static_cast<std::size_t>(count);
      for (std::size_t r = 0; r < p; ++r) {  // block r: [r·m/p, (r+1)·m/p)
        displs[r] = static_cast<int>(r * m / p);
        counts[r] = static_cast<int>((r + 1) * m / p - r * m / p);
      }
      const auto part = static_cast<std::size_t>(counts[me]);
      gathered->resize(std::max<std::size_t>(1, p * part * esize));
      mine->resize(std::max<std::size_t>(1, part * esize));
      for (std::size_t r = 0; r < p; ++r) {
        recv_counts[r] = counts[me];
        recv_displs[r] = static_cast<int>(r * part);
      }
      MPI_Request req = MPI_REQUEST_NULL;
      CHORUS_MPI_CHECK(MPI_Ialltoallv(at(in, off * esize), counts.data(), displs.data(), MPI_UINT16_T, gathered->data(),
                                      recv_counts.data(), recv_displs.data(), MPI_UINT16_T, ch_->comm, &req));
      wait(&req, call, keep);
      std::vector<const void*> blocks(p);
      for (std::size_t r = 0; r < p; ++r) blocks[r] = gathered->data() + r * part * esize;
      void* dst = mine->data();
      reduce_range(dt, call.op, blocks.data(), size_, &dst, 1, 0, part, size_);
      CHORUS_MPI_CHECK(MPI_Iallgatherv(mine->data(), counts[me], MPI_UINT16_T, at(output.data(), off * esize),
                                       counts.data(), displs.data(), MPI_UINT16_T, ch_->comm, &req));
      wait(&req, call, keep);
    });
  });
}

std::shared_ptr<Work> MpiCommunicator::do_broadcast(const CollectiveCall& c, const Tensor& tensor) {
  return run(c, {&tensor}, [&](const Call& call) {
    const std::size_t esize = dtype_size(tensor.dtype());
    for_chunks(static_cast<std::size_t>(tensor.num_elements()), [&](std::size_t off, int count) {
      MPI_Request req = MPI_REQUEST_NULL;
      CHORUS_MPI_CHECK(
          MPI_Ibcast(at(tensor.data(), off * esize), count, wire_type(tensor.dtype()), call.root, ch_->comm, &req));
      wait(&req, call, {tensor.buffer()});
    });
  });
}

std::shared_ptr<Work> MpiCommunicator::do_reduce(const CollectiveCall& c, const Tensor& input, const Tensor& output) {
  const bool is_root = rank_ == c.root;
  return run(c, {&input, is_root ? &output : nullptr}, [&](const Call& call) {
    const auto n = static_cast<std::size_t>(input.num_elements());
    Keep keep;
    const Reduction b = prepare(input, is_root ? &output : nullptr, &keep);
    const std::size_t esize = dtype_size(b.wire);
    for_chunks(n, [&](std::size_t off, int count) {
      MPI_Request req = MPI_REQUEST_NULL;
      CHORUS_MPI_CHECK(MPI_Ireduce(at(b.send, off * esize), at(b.recv, off * esize), count, wire_type(b.wire),
                                   mpi_op(call.op), call.root, ch_->comm, &req));
      wait(&req, call, keep);
    });
    if (is_root) finish(b, call.op, output, n, size_);
  });
}

std::shared_ptr<Work> MpiCommunicator::do_all_gather(const CollectiveCall& c, const Tensor& input,
                                                     const Tensor& output) {
  return run(c, {&input, &output}, [&](const Call& call) {
    Keep keep{input.buffer(), output.buffer()};
    const void* send = input.data();
    if (send == at(output.data(), input.nbytes() * static_cast<std::size_t>(rank_)))
      send = MPI_IN_PLACE;
    else if (overlaps(send, input.nbytes(), output.data(), output.nbytes()))
      send = copy_of(input, &keep);
    const int count = static_cast<int>(input.num_elements());
    const MPI_Datatype type = wire_type(input.dtype());
    MPI_Request req = MPI_REQUEST_NULL;
    CHORUS_MPI_CHECK(MPI_Iallgather(send, count, type, output.data(), count, type, ch_->comm, &req));
    wait(&req, call, keep);
  });
}

std::shared_ptr<Work> MpiCommunicator::do_reduce_scatter(const CollectiveCall& c, const Tensor& input,
                                                         const Tensor& output) {
  return run(c, {&input, &output}, [&](const Call& call) {
    const auto m = static_cast<std::size_t>(output.num_elements());
    Keep keep;
    const Reduction b = prepare(input, &output, &keep);
    MPI_Request req = MPI_REQUEST_NULL;
    CHORUS_MPI_CHECK(MPI_Ireduce_scatter_block(b.send, b.recv, static_cast<int>(m), wire_type(b.wire), mpi_op(call.op),
                                               ch_->comm, &req));
    wait(&req, call, keep);
    finish(b, call.op, output, m, size_);
  });
}

std::shared_ptr<Work> MpiCommunicator::do_barrier(const CollectiveCall& c) {
  return run(c, {}, [&](const Call& call) {
    if (validate_) return;  // the fingerprint exchange completed: everyone has arrived
    MPI_Request req = MPI_REQUEST_NULL;
    CHORUS_MPI_CHECK(MPI_Ibarrier(ch_->comm, &req));
    wait(&req, call, {});
  });
}

std::shared_ptr<Work> MpiCommunicator::run(const CollectiveCall& c, std::initializer_list<const Tensor*> tensors,
                                           const std::function<void(const Call&)>& body) {
  Call call{c, {}, {}};
  try {
    // Queued device work may still be producing the input or using the output.
    for (const Tensor* t : tensors)
      if (t != nullptr) t->device_context().stream().synchronize();
  } catch (const Error& e) {
    // The others are (or will be) waiting for us: fail the communicator so they do not wait for a timeout.
    abort(str_cat(call.fp.to_string(), " could not start: ", e.message()));
    throw;
  }
  check_usable(call.fp);
  call.start = Clock::now();
  call.deadline = deadline_after(call.start, call.timeout);
  std::string mismatch;
  try {
    if (validate_) mismatch = exchange_fingerprints(call);
    if (mismatch.empty()) body(call);
  } catch (const std::exception& e) {
    if (!failed_) abort(str_cat(call.fp.to_string(), " failed: ", e.what()));  // not from wait(): tell the others
    throw;
  }
  if (!mismatch.empty()) throw InvalidArgumentError(mismatch);  // the communicator stays usable
  Completed& done = history_[completed_++ % kFlightHistory];
  done.fp = call.fp;
  done.start = call.start;
  done.end = Clock::now();
  return std::make_shared<CompletedWork>(call.fp);
}

// Every rank receives every fingerprint and reaches the same verdict ("" when all match), so all
// throw or none.
std::string MpiCommunicator::exchange_fingerprints(const Call& call) {
  auto mine = std::make_shared<WireFingerprint>(to_wire(call, rank_));
  auto all = std::make_shared<std::vector<WireFingerprint>>(static_cast<std::size_t>(size_));
  MPI_Request req = MPI_REQUEST_NULL;
  CHORUS_MPI_CHECK(MPI_Iallgather(mine.get(), sizeof(WireFingerprint), MPI_BYTE, all->data(), sizeof(WireFingerprint),
                                  MPI_BYTE, ch_->comm, &req));
  wait(&req, call, {mine, all});
  const auto& fps = *all;
  for (int r = 1; r < size_; ++r) {
    if (same_call(fps[0], fps[r])) continue;
    return str_cat(prefix(), "participants called different collectives: rank 0 called ", describe(fps[0]),
                   " but rank ", r, " called ", describe(fps[r]),
                   ". Every process must call the same collectives "
                   "in the same order with the same shapes and dtypes.");
  }
  return "";
}

// Polls `request` until it completes, the deadline passes, a notice arrives or abort() is called.
// On any failure the request and `keep` are abandoned to the Channel (MPI may still use them).
void MpiCommunicator::wait(MPI_Request* request, const Call& call, Keep keep) {
  // A passive waiter (communicator.h's PassiveWaitScope) sleeps between polls from the first.
  const auto spin_until = Clock::now() + (passive_wait() ? Clock::duration::zero() : kSpin);
  try {
    std::optional<Clock::time_point> loss_seen;  // when the peer monitor first reported a loss
    for (;;) {
      if (test_or_back_off(request, spin_until)) return;
      if (failed_) {  // abort() from another thread
        if (lost_) throw UnavailableError(str_cat(prefix(), call.fp.to_string(), " on rank ", rank_, ": ", failure()));
        throw AbortedError(str_cat(prefix(), call.fp.to_string(), " on rank ", rank_, " aborted: ", failure()));
      }
      if (std::optional<Notice> n = poll_notice()) {
        if (n->kind == kTimeoutNotice) time_out(call, n);
        if (n->kind == kLostNotice || n->kind == kLeftNotice) lost_elsewhere(call.fp, *n);
        fail(n->text);
        throw AbortedError(str_cat(prefix(), call.fp.to_string(), " on rank ", rank_, " aborted: ", n->text));
      }
      if (monitor_ && monitor_->any_lost()) {
        const auto now = Clock::now();
        if (!loss_seen)
          loss_seen = now;
        else if (now - *loss_seen >= kLossGrace)
          lose_peer(call.fp, now - call.start);
      }
      if (Clock::now() >= call.deadline) time_out(call, std::nullopt);
    }
  } catch (...) {  // an MPI error here leaves failed_ unset: run() then tells the others
    ch_->abandoned.push_back(*request);
    for (auto& k : keep) ch_->keep.push_back(std::move(k));
    throw;
  }
}

}  // namespace chorus::collective::mpi_detail
