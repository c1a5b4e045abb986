#include "collective/mpi.h"

#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI's extensions: MPIX_Query_cuda_support
#endif

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <iterator>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <vector>

#include <unistd.h>

#include "collective/fingerprint.h"
#include "collective/host_reduce.h"
#include "collective/peer_monitor.h"
#include "collective/work.h"
#include "core/env.h"
#include "core/error.h"
#include "core/host.h"
#include "core/logging.h"
#include "core/tensor.h"

// Calls MPI under the process-wide mutex; an error code becomes InternalError with MPI's text.
#define CHORUS_MPI_CHECK(call)                                           \
  do {                                                                   \
    std::lock_guard<std::mutex> chorus_mpi_lock_(mpi_mutex());           \
    check_mpi((call), #call, __FILE__, __LINE__);                        \
  } while (0)

namespace chorus::collective {
namespace {

using internal::str_cat;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Polling: spin on MPI_Test first (measured: shorter spins made a 1 MB all-reduce ~1.7x slower than
// MPI_Iallreduce + MPI_Wait), then sleep between tests so a long wait does not take a whole core.
constexpr auto kSpin = std::chrono::microseconds(500);
constexpr auto kSleep = std::chrono::microseconds(20);
// After a timeout, how long a rank listens for the others' notices to learn who was waiting too.
constexpr milliseconds kGrace{200};
// After the peer monitor reported a lost peer, how long a pending request may still complete (its
// data may be in flight) before the collective fails.
constexpr milliseconds kLossGrace{250};
// MPI counts are ints: elementwise collectives go in chunks of at most this many elements.
constexpr std::size_t kMaxCount = std::size_t{1} << 30;
constexpr int kNoticeTag = 25448;  // any tag works: chorus owns the duplicated communicator

// Every MPI call chorus makes holds this mutex (see "Threads" in mpi.h); never held across a wait.
std::mutex& mpi_mutex() {
  static std::mutex mu;
  return mu;
}

void check_mpi(int code, const char* expr, const char* file, int line) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = "unknown MPI error";
  int len = 0;
  MPI_Error_string(code, text, &len);
  const char* base = std::strrchr(file, '/');
  throw InternalError(str_cat(base ? base + 1 : file, ":", line, ": ", expr, " failed: ", text, " (MPI error code ",
                              code, ")"));
}


std::string thread_level_name(int level) {
  if (level == MPI_THREAD_SINGLE) return "MPI_THREAD_SINGLE";
  if (level == MPI_THREAD_FUNNELED) return "MPI_THREAD_FUNNELED";
  if (level == MPI_THREAD_SERIALIZED) return "MPI_THREAD_SERIALIZED";
  if (level == MPI_THREAD_MULTIPLE) return "MPI_THREAD_MULTIPLE";
  return str_cat("thread level ", level);
}

enum class OpKind : std::int32_t { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kBarrier };
constexpr const char* kOpNames[] = {"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "barrier"};

// The Fingerprint as fixed-size bytes for MPI_Iallgather. Shapes of rank > 8 are compared through
// a hash of the dims past the 8th (messages then show the first 8).
constexpr int kWireDims = 8;
struct WireFingerprint {
  std::uint64_t sequence;
  std::int32_t op, dtype, root, reduce_op, rank, ndim;
  std::int64_t dims[kWireDims];
  std::uint64_t tail_hash;
};
static_assert(std::is_trivially_copyable_v<WireFingerprint> && sizeof(WireFingerprint) == 104);

WireFingerprint to_wire(OpKind kind, const Fingerprint& fp, int rank) {
  WireFingerprint w;
  std::memset(&w, 0, sizeof w);
  w.sequence = fp.sequence;
  w.op = static_cast<std::int32_t>(kind);
  w.dtype = static_cast<std::int32_t>(fp.dtype);
  w.root = fp.root;
  w.reduce_op = fp.reduce_op;
  w.rank = rank;
  w.ndim = static_cast<std::int32_t>(fp.shape.size());
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the dims that do not fit
  for (std::size_t i = 0; i < fp.shape.size(); ++i) {
    if (i < kWireDims) w.dims[i] = fp.shape[i];
    else h = (h ^ static_cast<std::uint64_t>(fp.shape[i])) * 1099511628211ull;
  }
  w.tail_hash = fp.shape.size() > kWireDims ? h : 0;
  return w;
}

bool same_call(const WireFingerprint& a, const WireFingerprint& b) {
  return a.sequence == b.sequence && a.op == b.op && a.dtype == b.dtype && a.root == b.root &&
         a.reduce_op == b.reduce_op && a.ndim == b.ndim && a.tail_hash == b.tail_hash &&
         std::equal(a.dims, a.dims + kWireDims, b.dims);
}

// For messages; tolerates garbage from a peer built from other sources.
std::string describe(const WireFingerprint& w) {
  const bool known = w.op >= 0 && w.op < static_cast<int>(std::size(kOpNames)) && w.dtype >= 0 &&
                     w.dtype < kNumDTypes && w.reduce_op >= -1 && w.reduce_op <= static_cast<int>(ReduceOp::kProd);
  if (!known)
    return str_cat("an unrecognised call (op ", w.op, ", dtype ", w.dtype, ", sequence ", w.sequence, ")");
  Fingerprint fp;
  fp.op = kOpNames[w.op];
  fp.sequence = w.sequence;
  fp.dtype = static_cast<DType>(w.dtype);
  fp.shape.assign(w.dims, w.dims + std::clamp(w.ndim, 0, kWireDims));
  fp.root = w.root;
  fp.reduce_op = w.reduce_op;
  return fp.to_string() + (w.ndim > kWireDims ? " (first 8 dims shown)" : "");
}

// What a failing rank tells the others, point-to-point on kNoticeTag.
enum NoticeKind : std::int32_t { kTimeoutNotice = 1, kAbortNotice = 2, kLostNotice = 3 };
struct Notice {
  std::uint64_t comm_id;   // which communicator (guards against a message meant for a freed one)
  std::uint64_t sequence;  // the collective the sender gave up in (timeouts)
  std::int32_t kind;
  std::int32_t rank;
  char text[488];
};
static_assert(std::is_trivially_copyable_v<Notice> && sizeof(Notice) == 512);

// Buffers an MPI operation reads or writes: kept alive until it completes, or forever after a
// failure (see "Resources of a failed communicator" in mpi.h).
using Keep = std::vector<std::shared_ptr<void>>;

// The MPI state of one communicator.
struct Channel {
  MPI_Comm comm = MPI_COMM_NULL;
  Notice incoming{};
  MPI_Request incoming_request = MPI_REQUEST_NULL;
  std::deque<Notice> outgoing;  // deque: addresses stay valid while MPI sends from them
  std::vector<MPI_Request> outgoing_requests;
  std::vector<MPI_Request> abandoned;  // operations a failure left pending
  Keep keep;                           // and their buffers
};

// A failed communicator's Channel is never destroyed: MPI may still complete its operations.
// Held through a static pointer, so leak checkers see it as reachable.
void bury(std::unique_ptr<Channel> channel) {
  static std::mutex mu;
  static auto* graveyard = new std::vector<std::unique_ptr<Channel>>;
  std::lock_guard<std::mutex> lock(mu);
  graveyard->push_back(std::move(channel));
}

// start + timeout, saturating (milliseconds::max() means "no deadline", not an overflow).
Clock::time_point deadline_after(Clock::time_point start, milliseconds timeout) {
  const auto room = std::chrono::duration_cast<milliseconds>(Clock::time_point::max() - start);
  return timeout >= room ? Clock::time_point::max() : start + timeout;
}

// One MPI_Test; if not done and the spin phase is over, sleeps a little.
bool test_or_back_off(MPI_Request* request, Clock::time_point spin_until) {
  int done = 0;
  CHORUS_MPI_CHECK(MPI_Test(request, &done, MPI_STATUS_IGNORE));
  if (!done && Clock::now() >= spin_until) std::this_thread::sleep_for(kSleep);
  return done != 0;
}

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

void check_same(const Tensor& a, const Tensor& b, const char* op) {
  CHORUS_REQUIRE(a.dtype() == b.dtype() && a.shape() == b.shape(), InvalidArgumentError, op, ": output ",
                 dtype_name(b.dtype()), b.shape().to_string(), " does not match input ", dtype_name(a.dtype()),
                 a.shape().to_string());
}

void check_root(int root, int size, const char* op) {
  CHORUS_REQUIRE(root >= 0 && root < size, InvalidArgumentError, op, ": root ", root, " is not a rank of this ", size,
                 "-process communicator (valid: 0..", size - 1, ")");
}

// --- the peer monitor (collective/peer_monitor.h): one per process, shared by its MPI communicators ---

// Set once this process knows that a peer process died: MPI_Finalize would wait for it forever.
std::atomic<bool> g_peer_lost{false};

struct MonitorSlot {
  std::mutex mu;
  std::weak_ptr<PeerMonitor> current;
};
MonitorSlot& monitor_slot() {
  static auto* slot = new MonitorSlot;  // never destroyed: the exit hook may run after static destructors
  return *slot;
}

// exit() (not _Exit, abort or a signal) is a graceful end: tell the peers, so they do not take it
// for a death while communicators are still alive (a program that never destroys them).
void goodbye_at_exit() {
  std::shared_ptr<PeerMonitor> monitor;
  {
    std::lock_guard<std::mutex> lock(monitor_slot().mu);
    monitor = monitor_slot().current.lock();
  }
  if (monitor) monitor->say_goodbye();
}

// The process's monitor, started on first use; nullptr when turned off (CHORUS_PEER_MONITOR=false)
// or when it cannot start (a warning; deaths are then noticed by the timeout only).
std::shared_ptr<PeerMonitor> acquire_peer_monitor(int rank) {
  if (!env::peer_monitor_enabled()) return nullptr;
  MonitorSlot& slot = monitor_slot();
  std::lock_guard<std::mutex> lock(slot.mu);
  if (auto monitor = slot.current.lock()) return monitor;
  try {
    auto monitor = std::make_shared<PeerMonitor>(rank);
    slot.current = monitor;
    static std::once_flag once;
    std::call_once(once, [] { std::atexit(goodbye_at_exit); });
    return monitor;
  } catch (const Error& e) {
    CHORUS_LOG(WARNING) << "rank " << rank << ": no peer monitor (" << e.what() << "); a dead process is noticed by "
                        << "the collective timeout only";
    return nullptr;
  }
}

// One process's PeerAddress as fixed-size bytes for MPI_Iallgather (port 0: no monitor there).
constexpr int kWireIps = 4;
struct WireAddress {
  std::int32_t rank, port;
  std::int64_t pid;
  std::uint64_t token;
  char host[64];
  char ips[kWireIps][16];
};
static_assert(std::is_trivially_copyable_v<WireAddress> && sizeof(WireAddress) == 152);

template <std::size_t N>
void copy_text(char (&to)[N], const std::string& from) {
  std::memset(to, 0, N);
  std::memcpy(to, from.data(), std::min(from.size(), N - 1));
}
template <std::size_t N>
std::string read_text(const char (&from)[N]) {
  return std::string(from, strnlen(from, N));
}

WireAddress to_wire(const PeerMonitor* monitor, int rank) {
  WireAddress w;
  std::memset(&w, 0, sizeof w);
  w.rank = rank;
  w.pid = static_cast<std::int64_t>(::getpid());
  copy_text(w.host, host_name_or("unknown-host"));
  if (!monitor) return w;
  const PeerAddress& a = monitor->address();
  w.port = a.port;
  w.token = a.token;
  for (std::size_t i = 0; i < a.ips.size() && i < kWireIps; ++i) copy_text(w.ips[i], a.ips[i]);
  return w;
}

PeerAddress from_wire(const WireAddress& w) {
  PeerAddress a;
  a.rank = w.rank;
  a.port = w.port;
  a.pid = w.pid;
  a.token = w.token;
  a.host = read_text(w.host);
  for (const auto& ip : w.ips)
    if (ip[0] != '\0') a.ips.push_back(read_text(ip));
  return a;
}

struct Call {
  OpKind kind;
  Fingerprint fp;
  milliseconds timeout;
  Clock::time_point start, deadline;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(std::unique_ptr<Channel> channel, std::uint64_t id, bool validate,
                  std::shared_ptr<PeerMonitor> monitor, std::vector<PeerAddress> peers)
      : ch_(std::move(channel)), id_(id), validate_(validate), monitor_(std::move(monitor)), peers_(std::move(peers)) {
    CHORUS_MPI_CHECK(MPI_Comm_rank(ch_->comm, &rank_));
    CHORUS_MPI_CHECK(MPI_Comm_size(ch_->comm, &size_));
    post_notice_receive();
  }

  ~MpiCommunicator() override {
    // A loss seen after this rank's last collective still makes MPI_Finalize wait for the dead.
    if (monitor_ && monitor_->any_lost()) g_peer_lost = true;
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

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view backend() const override { return "mpi"; }

  std::shared_ptr<Work> all_reduce(const Tensor& input, const Tensor& output, const AllReduceOptions& o) override {
    auto check = [&] { check_pair(input, output, "all_reduce", /*stacked=*/0); };
    return run(OpKind::kAllReduce, &input, static_cast<int>(o.op), -1, o.timeout, check, [&](const Call& call) {
      const auto n = static_cast<std::size_t>(input.num_elements());
      Keep keep;
      const Reduction b = prepare(input, &output, &keep);
      const std::size_t esize = dtype_size(b.wire);
      for_chunks(n, [&](std::size_t off, int count) {
        MPI_Request req = MPI_REQUEST_NULL;
        CHORUS_MPI_CHECK(MPI_Iallreduce(at(b.send, off * esize), at(b.recv, off * esize), count, wire_type(b.wire),
                                        mpi_op(o.op), ch_->comm, &req));
        wait(&req, call, keep);
      });
      finish(b, o.op, output, n, size_);
    });
  }

  std::shared_ptr<Work> broadcast(const Tensor& tensor, const BroadcastOptions& o) override {
    auto check = [&] {
      check_tensor(tensor, "broadcast", "");
      check_root(o.root, size_, "broadcast");
      drain(tensor);
    };
    return run(OpKind::kBroadcast, &tensor, -1, o.root, o.timeout, check, [&](const Call& call) {
      const std::size_t esize = dtype_size(tensor.dtype());
      for_chunks(static_cast<std::size_t>(tensor.num_elements()), [&](std::size_t off, int count) {
        MPI_Request req = MPI_REQUEST_NULL;
        CHORUS_MPI_CHECK(MPI_Ibcast(at(tensor.data(), off * esize), count, wire_type(tensor.dtype()), o.root,
                                    ch_->comm, &req));
        wait(&req, call, {tensor.buffer()});
      });
    });
  }

  std::shared_ptr<Work> reduce(const Tensor& input, const Tensor& output, const ReduceOptions& o) override {
    const bool is_root = rank_ == o.root;
    auto check = [&] {
      check_root(o.root, size_, "reduce");
      if (is_root) return check_pair(input, output, "reduce", 0);
      check_tensor(input, "reduce", "input");  // the output of a non-root is not used
      drain(input);
    };
    return run(OpKind::kReduce, &input, static_cast<int>(o.op), o.root, o.timeout, check, [&](const Call& call) {
      const auto n = static_cast<std::size_t>(input.num_elements());
      Keep keep;
      const Reduction b = prepare(input, is_root ? &output : nullptr, &keep);
      const std::size_t esize = dtype_size(b.wire);
      for_chunks(n, [&](std::size_t off, int count) {
        MPI_Request req = MPI_REQUEST_NULL;
        CHORUS_MPI_CHECK(MPI_Ireduce(at(b.send, off * esize), at(b.recv, off * esize), count, wire_type(b.wire),
                                     mpi_op(o.op), o.root, ch_->comm, &req));
        wait(&req, call, keep);
      });
      if (is_root) finish(b, o.op, output, n, size_);
    });
  }

  std::shared_ptr<Work> all_gather(const Tensor& input, const Tensor& output, const AllGatherOptions& o) override {
    auto check = [&] { check_pair(input, output, "all_gather", /*stacked=*/size_); };
    return run(OpKind::kAllGather, &input, -1, -1, o.timeout, check, [&](const Call& call) {
      Keep keep{input.buffer(), output.buffer()};
      const void* send = input.data();
      if (send == at(output.data(), input.nbytes() * static_cast<std::size_t>(rank_))) send = MPI_IN_PLACE;
      else if (overlaps(send, input.nbytes(), output.data(), output.nbytes())) send = copy_of(input, &keep);
      const int count = static_cast<int>(input.num_elements());
      const MPI_Datatype type = wire_type(input.dtype());
      MPI_Request req = MPI_REQUEST_NULL;
      CHORUS_MPI_CHECK(MPI_Iallgather(send, count, type, output.data(), count, type, ch_->comm, &req));
      wait(&req, call, keep);
    });
  }

  std::shared_ptr<Work> reduce_scatter(const Tensor& input, const Tensor& output, const ReduceScatterOptions& o) override {
    auto check = [&] { check_pair(output, input, "reduce_scatter", /*stacked=*/size_); };
    return run(OpKind::kReduceScatter, &input, static_cast<int>(o.op), -1, o.timeout, check, [&](const Call& call) {
      const auto m = static_cast<std::size_t>(output.num_elements());
      Keep keep;
      const Reduction b = prepare(input, &output, &keep);
      MPI_Request req = MPI_REQUEST_NULL;
      CHORUS_MPI_CHECK(MPI_Ireduce_scatter_block(b.send, b.recv, static_cast<int>(m), wire_type(b.wire),
                                                 mpi_op(o.op), ch_->comm, &req));
      wait(&req, call, keep);
      finish(b, o.op, output, m, size_);
    });
  }

  std::shared_ptr<Work> barrier(const BarrierOptions& o) override {
    return run(OpKind::kBarrier, nullptr, -1, -1, o.timeout, [] {}, [&](const Call& call) {
      if (validate_) return;  // the fingerprint exchange completed: everyone has arrived
      MPI_Request req = MPI_REQUEST_NULL;
      CHORUS_MPI_CHECK(MPI_Ibarrier(ch_->comm, &req));
      wait(&req, call, {});
    });
  }

  void abort(const std::string& reason) override {
    std::lock_guard<std::mutex> lock(state_mu_);
    if (failed_) return;
    failure_ = str_cat("rank ", rank_, " aborted the communicator: ", reason);
    failed_ = true;
    CHORUS_LOG(ERROR) << prefix() << failure_;
    send_notices_locked(kAbortNotice, 0, failure_);
  }

 private:
  std::string prefix() const { return str_cat("mpi#", id_, ": "); }

  void check_tensor(const Tensor& t, const char* op, const char* role) const {
    CHORUS_REQUIRE(t.defined(), InvalidArgumentError, op, ": the ", role, " tensor is undefined");
    CHORUS_REQUIRE(!t.device_context().is_gpu(), InvalidArgumentError, op, ": the ", role, " tensor is on ",
                   t.device_name(), "; the MPI backend moves host memory of CPU devices (GPU tensors go through the "
                   "NCCL backend)");
    check_collective_dtype(t.dtype(), op);
  }

  // Queued device work may still be producing the input or using the output.
  static void drain(const Tensor& t) { t.device_context().stream().synchronize(); }

  // Checks and drains `small` and `big`. stacked == 0: same dtype and shape. Otherwise `big` is
  // `stacked` blocks of `small` on axis 0 (all_gather: input, output; reduce_scatter: output, input).
  void check_pair(const Tensor& small, const Tensor& big, const char* op, int stacked) const {
    const bool flipped = std::string_view(op) == "reduce_scatter";  // `small` is the output
    check_tensor(small, op, flipped ? "output" : "input");
    check_tensor(big, op, flipped ? "input" : "output");
    if (stacked == 0) {
      check_same(small, big, op);
    } else {
      const auto& d = big.shape().dims();
      CHORUS_REQUIRE(!d.empty() && d[0] % stacked == 0, InvalidArgumentError, op, ": the ", flipped ? "input" : "output",
                     "'s first dimension must be a multiple of the communicator size ", stacked, ", got shape ",
                     big.shape().to_string());
      std::vector<std::int64_t> want = d;
      want[0] /= stacked;
      CHORUS_REQUIRE(small.dtype() == big.dtype() && small.shape() == Shape(want), InvalidArgumentError, op, ": ",
                     flipped ? "the output" : "the input", " must be ", dtype_name(big.dtype()), Shape(want).to_string(),
                     " (", stacked, " blocks of it make ", big.shape().to_string(), "), got ", dtype_name(small.dtype()),
                     small.shape().to_string());
      CHORUS_REQUIRE(small.num_elements() <= INT_MAX, InvalidArgumentError, op, ": a block of ", small.num_elements(),
                     " elements is more than MPI moves in one call (", INT_MAX, "); split the tensor");
    }
    drain(small);
    drain(big);
  }

  std::shared_ptr<Work> run(OpKind kind, const Tensor* input, int reduce_op, int root, milliseconds timeout,
                            const std::function<void()>& check, const std::function<void(const Call&)>& body) {
    const bool has_input = input != nullptr && input->defined();
    Call call{kind,
              {.op = kOpNames[static_cast<int>(kind)], .sequence = sequence_++,
               .dtype = has_input ? input->dtype() : DType::kFloat32,
               .shape = has_input ? input->shape().dims() : std::vector<std::int64_t>{}, .root = root,
               .reduce_op = reduce_op},
              timeout, {}, {}};
    try {
      check();  // first: this caller's own mistake is the most useful error, even if the others failed
    } catch (const Error& e) {
      // The others are (or will be) waiting for us: fail the communicator so they do not wait for a timeout.
      abort(str_cat(call.fp.to_string(), " had a bad argument: ", e.message()));
      throw;
    }
    check_usable(call.fp);
    call.start = Clock::now();
    call.deadline = deadline_after(call.start, timeout);
    std::string mismatch;
    try {
      if (validate_) mismatch = exchange_fingerprints(call);
      if (mismatch.empty()) body(call);
    } catch (const std::exception& e) {
      if (!failed_) abort(str_cat(call.fp.to_string(), " failed: ", e.what()));  // not from wait(): tell the others
      throw;
    }
    if (!mismatch.empty()) throw InvalidArgumentError(mismatch);  // the communicator stays usable
    history_.push_back(call.fp.to_string());
    if (history_.size() > 3) history_.pop_front();
    return std::make_shared<CompletedWork>(call.fp.to_string());
  }

  // Every rank receives every fingerprint and reaches the same verdict ("" when all match), so all
  // throw or none.
  std::string exchange_fingerprints(const Call& call) {
    auto mine = std::make_shared<WireFingerprint>(to_wire(call.kind, call.fp, rank_));
    auto all = std::make_shared<std::vector<WireFingerprint>>(static_cast<std::size_t>(size_));
    MPI_Request req = MPI_REQUEST_NULL;
    CHORUS_MPI_CHECK(MPI_Iallgather(mine.get(), sizeof(WireFingerprint), MPI_BYTE, all->data(),
                                    sizeof(WireFingerprint), MPI_BYTE, ch_->comm, &req));
    wait(&req, call, {mine, all});
    const auto& fps = *all;
    for (int r = 1; r < size_; ++r) {
      if (same_call(fps[0], fps[r])) continue;
      return str_cat(prefix(), "participants called different collectives: rank 0 called ", describe(fps[0]),
                     " but rank ", r, " called ", describe(fps[r]), ". Every process must call the same collectives "
                     "in the same order with the same shapes and dtypes.");
    }
    return "";
  }

  // Polls `request` until it completes, the deadline passes, a notice arrives or abort() is called.
  // On any failure the request and `keep` are abandoned to the Channel (MPI may still use them).
  void wait(MPI_Request* request, const Call& call, Keep keep) {
    const auto spin_until = Clock::now() + kSpin;
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
          if (n->kind == kLostNotice) lost_elsewhere(call.fp, *n);
          fail(n->text);
          throw AbortedError(str_cat(prefix(), call.fp.to_string(), " on rank ", rank_, " aborted: ", n->text));
        }
        if (monitor_ && monitor_->any_lost()) {
          const auto now = Clock::now();
          if (!loss_seen) loss_seen = now;
          else if (now - *loss_seen >= kLossGrace) lose_peer(call.fp, now - call.start);
        }
        if (Clock::now() >= call.deadline) time_out(call, std::nullopt);
      }
    } catch (...) {  // an MPI error here leaves failed_ unset: run() then tells the others
      ch_->abandoned.push_back(*request);
      for (auto& k : keep) ch_->keep.push_back(std::move(k));
      throw;
    }
  }

  // Gives up on `call`: tells the others, listens briefly for who else was waiting, throws.
  // `cause` is the notice of the rank that gave up first, if it was not this one.
  [[noreturn]] void time_out(const Call& call, const std::optional<Notice>& cause) {
    const auto waited = std::chrono::duration_cast<milliseconds>(Clock::now() - call.start).count();
    const std::uint64_t seq = call.fp.sequence;
    std::vector<char> waiting(static_cast<std::size_t>(size_), 0);
    waiting[rank_] = 1;
    if (cause && cause->sequence == seq) waiting[cause->rank] = 1;
    {
      std::lock_guard<std::mutex> lock(state_mu_);
      if (failed_)
        throw AbortedError(str_cat(prefix(), call.fp.to_string(), " on rank ", rank_, " aborted: ", failure_));
      failed_ = true;
      failure_ = str_cat("rank ", rank_, " timed out after ", waited, " ms in ", call.fp.to_string());
      send_notices_locked(kTimeoutNotice, seq, failure_);
    }
    // Ranks waiting in the same collective give up too when our notice reaches them, and say so.
    const auto grace_end = Clock::now() + std::min(call.timeout, kGrace);
    while (std::count(waiting.begin(), waiting.end(), 1) < size_ && Clock::now() < grace_end) {
      std::optional<Notice> n;
      try {
        n = poll_notice();
      } catch (const Error&) {
        break;
      }
      if (!n) std::this_thread::sleep_for(milliseconds(1));
      else if (n->kind == kTimeoutNotice && n->sequence == seq) waiting[n->rank] = 1;
    }
    std::string missing, present;
    for (int r = 0; r < size_; ++r) {
      std::string& list = waiting[r] ? present : missing;
      list += (list.empty() ? "" : ", ") + std::to_string(r);
    }
    std::string what = missing.empty()
        ? str_cat(" although every rank was waiting in it (with validate=false the ranks may have called different "
                  "collectives; or MPI itself is stuck)")
        : str_cat(" waiting for rank(s) [", missing, "] of ", size_, " (rank(s) [", present, "] were waiting in it)");
    std::string message = str_cat(call.fp.to_string(), " timed out after ", waited, " ms", what,
                                  cause ? str_cat("; first to give up: ", cause->text) : std::string(),
                                  ". Last completed collectives on rank ", rank_, ": ", history(),
                                  ". A process is stuck, died, or called a different sequence of collectives. This "
                                  "communicator is unusable now; a process that cannot continue should exit non-zero "
                                  "so that mpirun ends the job.");
    CHORUS_LOG(ERROR) << prefix() << message;
    {
      std::lock_guard<std::mutex> lock(state_mu_);
      failure_ = message;
    }
    throw DeadlineExceededError(prefix() + message);
  }

  void check_usable(const Fingerprint& fp) {
    if (!failed_) {
      if (std::optional<Notice> n = poll_notice()) {
        if (n->kind == kLostNotice) lost_elsewhere(fp, *n);
        fail(n->text);
      }
    }
    // A peer known dead cannot join this call: fail now, and tell the others.
    if (!failed_ && monitor_ && monitor_->any_lost()) lose_peer(fp, std::nullopt);
    if (failed_) {
      const std::string text = str_cat(prefix(), fp.to_string(), " on rank ", rank_,
                                       " cannot run: the communicator is unusable: ", failure());
      if (lost_) throw UnavailableError(text);
      throw AbortedError(text);
    }
  }

  // The host of `rank` as the address exchange told it, for messages.
  std::string host_of(int rank) const {
    const auto r = static_cast<std::size_t>(rank);
    if (rank >= 0 && r < peers_.size() && !peers_[r].host.empty()) return peers_[r].host;
    return "unknown";
  }

  // This rank's peer monitor saw a peer die: fail the communicator, tell every other rank (they may
  // not watch that peer themselves), throw UnavailableError naming the lost rank(s) and host(s).
  // `waited`: how long the call had been waiting; nullopt when it had not started.
  [[noreturn]] void lose_peer(const Fingerprint& fp, std::optional<Clock::duration> waited) {
    std::string who;
    std::vector<int> dead;
    for (PeerLoss loss : monitor_->losses()) {
      if (loss.host.empty()) loss.host = host_of(loss.rank);
      who += (who.empty() ? "" : "; ") + loss.to_string();
      dead.push_back(loss.rank);
    }
    const std::string notice = str_cat(who, " (seen by rank ", rank_, " on host ", host_of(rank_), ")");
    const std::string when =
        waited ? str_cat(" after waiting ", std::chrono::duration_cast<milliseconds>(*waited).count(), " ms")
               : std::string(" before it started");
    const std::string message = str_cat(
        fp.to_string(), " on rank ", rank_, " cannot complete: a peer process is lost: ", notice, when,
        ". The other ranks are told. This communicator is unusable now; a job that lost a process cannot go on: "
        "exit non-zero and restart it (from the last checkpoint).");
    {
      std::lock_guard<std::mutex> lock(state_mu_);
      if (!failed_) {
        failed_ = true;
        lost_ = true;
        failure_ = message;
        send_notices_locked(kLostNotice, fp.sequence, notice, dead);
      }
    }
    g_peer_lost = true;
    CHORUS_LOG(ERROR) << prefix() << message;
    throw UnavailableError(prefix() + message);
  }

  // Another rank told us that it saw a peer die.
  [[noreturn]] void lost_elsewhere(const Fingerprint& fp, const Notice& n) {
    const std::string message = str_cat(
        fp.to_string(), " on rank ", rank_, " cannot complete: a peer process is lost: ", n.text,
        ". This communicator is unusable now; a job that lost a process cannot go on: exit non-zero and restart it "
        "(from the last checkpoint).");
    {
      std::lock_guard<std::mutex> lock(state_mu_);
      if (!failed_) {
        failed_ = true;
        lost_ = true;
        failure_ = message;
      }
    }
    g_peer_lost = true;
    CHORUS_LOG(ERROR) << prefix() << message;
    throw UnavailableError(prefix() + message);
  }

  void post_notice_receive() {
    CHORUS_MPI_CHECK(MPI_Irecv(&ch_->incoming, sizeof(Notice), MPI_BYTE, MPI_ANY_SOURCE, kNoticeTag, ch_->comm,
                               &ch_->incoming_request));
  }

  // A notice from another rank of this communicator, if one arrived.
  std::optional<Notice> poll_notice() {
    int got = 0;
    CHORUS_MPI_CHECK(MPI_Test(&ch_->incoming_request, &got, MPI_STATUS_IGNORE));
    if (!got) return std::nullopt;
    Notice n = ch_->incoming;
    post_notice_receive();
    if (n.comm_id != id_ || n.rank < 0 || n.rank >= size_ || n.rank == rank_) {
      CHORUS_LOG(WARNING) << prefix() << "ignoring a notice meant for communicator " << n.comm_id << " from rank " << n.rank;
      return std::nullopt;
    }
    n.text[sizeof(n.text) - 1] = '\0';
    return n;
  }

  // One small Isend to every other rank; never waited for (the Channel keeps buffer and request).
  // `skip`: ranks known to be dead (nothing to tell them, and MPI may not like sending to them).
  void send_notices_locked(std::int32_t kind, std::uint64_t sequence, const std::string& text,
                           const std::vector<int>& skip = {}) {
    int finalized = 1;
    MPI_Finalized(&finalized);
    for (int r = 0; r < size_ && !finalized; ++r) {
      if (r == rank_ || std::find(skip.begin(), skip.end(), r) != skip.end()) continue;
      Notice& n = ch_->outgoing.emplace_back();
      n.comm_id = id_;
      n.sequence = sequence;
      n.kind = kind;
      n.rank = rank_;
      std::memcpy(n.text, text.data(), std::min(text.size(), sizeof(n.text) - 1));
      MPI_Request req = MPI_REQUEST_NULL;
      try {
        CHORUS_MPI_CHECK(MPI_Isend(&n, sizeof(Notice), MPI_BYTE, r, kNoticeTag, ch_->comm, &req));
      } catch (const Error& e) {
        CHORUS_LOG(WARNING) << prefix() << "could not tell rank " << r << ": " << e.what();
      }
      ch_->outgoing_requests.push_back(req);
    }
  }

  void fail(const std::string& failure) {
    std::lock_guard<std::mutex> lock(state_mu_);
    if (failed_) return;
    failure_ = failure;
    failed_ = true;
  }

  std::string failure() const {
    std::lock_guard<std::mutex> lock(state_mu_);
    return failure_;
  }

  std::string history() const {
    std::string s;
    for (const auto& h : history_) s += (s.empty() ? "" : ", ") + h;
    return s.empty() ? "none" : s;
  }

  std::unique_ptr<Channel> ch_;
  const std::uint64_t id_;
  const bool validate_;
  const std::shared_ptr<PeerMonitor> monitor_;  // nullptr: no monitor (deaths noticed by the timeout)
  const std::vector<PeerAddress> peers_;        // every rank's address as exchanged (hosts for messages)
  int rank_ = 0;
  int size_ = 1;
  std::uint64_t sequence_ = 0;
  std::deque<std::string> history_;  // this rank's last completed collectives
  mutable std::mutex state_mu_;      // failure_ and sending notices (abort() may come from any thread)
  std::atomic<bool> failed_{false};
  std::atomic<bool> lost_{false};  // failed because a peer process was lost (UnavailableError)
  std::string failure_;
};

}  // namespace

MpiEnvironment::MpiEnvironment(MpiThreadLevel required) {
  const int want = required == MpiThreadLevel::kMultiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED;
  int initialized = 0, finalized = 0;
  CHORUS_MPI_CHECK(MPI_Finalized(&finalized));
  CHORUS_REQUIRE(!finalized, FailedPreconditionError,
                 "MpiEnvironment: MPI was already finalized in this process, and MPI cannot be initialized twice");
  CHORUS_MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) {
    CHORUS_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, want, &provided_));
    owns_ = true;
  } else {
    CHORUS_MPI_CHECK(MPI_Query_thread(&provided_));
  }
  if (provided_ < want) {
    if (owns_) {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      MPI_Finalize();
    }
    throw UnavailableError(str_cat("MPI provides ", thread_level_name(provided_), " but ", thread_level_name(want),
                                   " is required: chorus calls MPI from replica threads (serialized by a mutex)",
                                   required == MpiThreadLevel::kMultiple ? ", and this program asked for concurrent "
                                   "MPI calls from its own threads" : "",
                                   ". Use an MPI built with thread support (Open MPI: --enable-mpi-thread-multiple)."));
  }
  CHORUS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  CHORUS_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
}

MpiEnvironment::MpiEnvironment(MpiEnvironment&& other) noexcept
    : owns_(other.owns_), provided_(other.provided_), world_rank_(other.world_rank_), world_size_(other.world_size_) {
  other.owns_ = false;
}

MpiEnvironment::~MpiEnvironment() {
  if (!owns_) return;
  std::lock_guard<std::mutex> lock(mpi_mutex());
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (g_peer_lost) {
    CHORUS_LOG(WARNING) << "MPI_Finalize skipped: a peer process of this job was lost, and MPI_Finalize would wait "
                        << "for it forever";
    return;
  }
  if (const int rc = MPI_Finalize(); rc != MPI_SUCCESS) CHORUS_LOG(ERROR) << "MPI_Finalize failed with code " << rc;
}

std::string MpiEnvironment::thread_level() const { return thread_level_name(provided_); }

bool MpiEnvironment::launched_by_mpirun() {
  return env::get("OMPI_COMM_WORLD_SIZE").has_value() || env::get("PMI_SIZE").has_value();
}

bool mpi_cuda_aware() {
#if defined(MPIX_CUDA_AWARE_SUPPORT)
  // The header's MPIX_CUDA_AWARE_SUPPORT says how the headers were built; ask the library at run time.
  std::lock_guard<std::mutex> lock(mpi_mutex());
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized && MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

std::unique_ptr<Communicator> make_mpi_communicator(const MpiCommunicatorOptions& options) {
  int initialized = 0, finalized = 0, provided = 0;
  CHORUS_MPI_CHECK(MPI_Initialized(&initialized));
  CHORUS_MPI_CHECK(MPI_Finalized(&finalized));
  CHORUS_REQUIRE(initialized && !finalized, FailedPreconditionError, "make_mpi_communicator: MPI is ",
                 finalized ? "already finalized" : "not initialized",
                 ": create a chorus::collective::MpiEnvironment first, and keep it alive longer than every MPI "
                 "communicator");
  CHORUS_MPI_CHECK(MPI_Query_thread(&provided));
  CHORUS_REQUIRE(provided >= MPI_THREAD_SERIALIZED, UnavailableError, "make_mpi_communicator: MPI was initialized "
                 "with ", thread_level_name(provided), "; chorus needs at least MPI_THREAD_SERIALIZED (it calls MPI "
                 "from replica threads): initialize MPI through chorus::collective::MpiEnvironment");
  // Every process creates its communicators in the same order, so this numbering agrees across
  // processes; notices carry it (a message for a freed communicator must not hit a new one).
  static std::atomic<std::uint64_t> created{0};
  const std::uint64_t id = ++created;
  auto ch = std::make_unique<Channel>();
  MPI_Request req = MPI_REQUEST_NULL;
  std::shared_ptr<PeerMonitor> monitor;
  std::vector<PeerAddress> peers;
  try {
    CHORUS_MPI_CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &ch->comm, &req));
    const auto deadline = deadline_after(Clock::now(), options.timeout);
    const auto wait_for = [&](const char* what) {
      const auto spin_until = Clock::now() + kSpin;
      while (!test_or_back_off(&req, spin_until)) {
        if (Clock::now() < deadline) continue;
        throw DeadlineExceededError(str_cat(
            "make_mpi_communicator: mpi#", id, " (a duplicate of MPI_COMM_WORLD): ", what, " did not complete on every "
            "process within ", options.timeout.count(), " ms. Every process must create its MPI communicators in the "
            "same order; one is stuck, died, or created fewer."));
      }
    };
    wait_for("the duplication");
    CHORUS_MPI_CHECK(MPI_Comm_set_errhandler(ch->comm, MPI_ERRORS_RETURN));
    int rank = 0, size = 1;
    CHORUS_MPI_CHECK(MPI_Comm_rank(ch->comm, &rank));
    CHORUS_MPI_CHECK(MPI_Comm_size(ch->comm, &size));
    // Every process publishes where its peer monitor listens (port 0: none), so that the monitors
    // can connect; done at every creation, so it stays collective whatever each process has.
    if (size > 1) monitor = acquire_peer_monitor(rank);
    auto mine = std::make_shared<WireAddress>(to_wire(monitor.get(), rank));
    auto all = std::make_shared<std::vector<WireAddress>>(static_cast<std::size_t>(size));
    ch->keep.push_back(mine);  // MPI may use them until the exchange completes; tiny, kept for the
    ch->keep.push_back(all);   // communicator's life
    CHORUS_MPI_CHECK(MPI_Iallgather(mine.get(), sizeof(WireAddress), MPI_BYTE, all->data(), sizeof(WireAddress),
                                    MPI_BYTE, ch->comm, &req));
    wait_for("the exchange of peer-monitor addresses");
    for (const WireAddress& w : *all) peers.push_back(from_wire(w));
    if (monitor) monitor->watch(peers);
  } catch (...) {
    ch->abandoned.push_back(req);
    bury(std::move(ch));
    throw;
  }
  return std::make_unique<MpiCommunicator>(std::move(ch), id, options.validate, std::move(monitor), std::move(peers));
}

}  // namespace chorus::collective
