// The Gloo backend's collectives (gloo.h, "Execution"): after the front door validated a call,
// drain the tensors' streams, compare fingerprints with every peer (validation on), stage buffers
// where Gloo needs it (16-bit reductions in float32, overlapping buffers, reduce_scatter's whole
// sum) and run Gloo's algorithm with the time left until the call's deadline. How a call fails is
// gloo_failure.cc's. Internal to the Gloo backend (gloo_internal.h).
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/reduce.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>
#include <cstring>

#include <chorus/collective/deadline.h>
#include <chorus/collective/gloo/gloo_internal.h>
#include <chorus/collective/work.h>
#include <chorus/core/error.h>
#include <chorus/core/logging.h>

namespace chorus::collective::gloo_detail {

using internal::str_cat;

namespace {

// Gloo's own algorithms use slot prefixes 0x01..0x08 (gloo/types.h): the fingerprints use another.
constexpr std::uint8_t kFingerprintSlotPrefix = 0x40;
// Gloo takes 0 ms as "no timeout": a call past its deadline still gets 1 ms (and then times out).
constexpr milliseconds kMinWait{1};
// Longer waits are clamped so that steady_clock arithmetic inside Gloo cannot overflow.
constexpr milliseconds kMaxWait{std::chrono::hours(24 * 365)};

using Func = std::function<void(void*, const void*, const void*, std::size_t)>;

bool is_16bit(DType dt) { return dt == DType::kFloat16 || dt == DType::kBFloat16; }

// fn(T{}) for the C++ type of `dt` (the dtypes Gloo reduces: 16-bit floats are staged first).
template <typename Fn>
void with_type(DType dt, Fn&& fn) {
  switch (dt) {
    case DType::kFloat32: fn(float{}); return;
    case DType::kFloat64: fn(double{}); return;
    case DType::kInt32: fn(std::int32_t{}); return;
    case DType::kInt64: fn(std::int64_t{}); return;
    default: break;
  }
  CHORUS_ENFORCE(false, "gloo: no reduction for ", dtype_name(dt));
}

// c[i] = f(a[i], b[i]); c may be a or b (each element is read before it is written).
template <typename T, typename F>
Func elementwise(F f) {
  return [f](void* c, const void* a, const void* b, std::size_t n) {
    auto* out = static_cast<T*>(c);
    const auto* x = static_cast<const T*>(a);
    const auto* y = static_cast<const T*>(b);
    for (std::size_t i = 0; i < n; ++i) out[i] = f(x[i], y[i]);
  };
}

// Integers wrap on overflow (as MPI's do) instead of being undefined: the arithmetic is unsigned.
template <typename T>
T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <typename T>
T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

template <typename T>
Func reduce_function(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean: return elementwise<T>([](T a, T b) { return wrap_add(a, b); });
    case ReduceOp::kProd: return elementwise<T>([](T a, T b) { return wrap_mul(a, b); });
    case ReduceOp::kMin: return elementwise<T>([](T a, T b) { return std::min(a, b); });
    case ReduceOp::kMax: return elementwise<T>([](T a, T b) { return std::max(a, b); });
  }
  return nullptr;
}

// MEAN's second half, in place: integers truncate toward zero (C++ division), as host_reduce does.
void divide(void* data, DType dt, std::size_t n, int k) {
  with_type(dt, [&](auto zero) {
    using T = decltype(zero);
    auto* p = static_cast<T*>(data);
    for (std::size_t i = 0; i < n; ++i) p[i] /= static_cast<T>(k);
  });
}

bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

std::uint32_t tag_of(const Call& call) { return static_cast<std::uint32_t>(call.fp.sequence); }

// A float32 copy of `t` (16-bit reductions), or a byte copy of it (other staging).
std::vector<float> to_float32(const Tensor& t) {
  std::vector<float> f(static_cast<std::size_t>(t.num_elements()));
  convert(t.data(), t.dtype(), f.data(), DType::kFloat32, f.size());
  return f;
}
std::vector<unsigned char> bytes_of(const void* p, std::size_t n) {
  std::vector<unsigned char> v(n);
  if (n > 0) std::memcpy(v.data(), p, n);
  return v;
}

}  // namespace

void bury(std::vector<std::shared_ptr<void>> remains) {
  static auto* graveyard = new std::pair<std::mutex, std::vector<std::shared_ptr<void>>>;  // never freed
  std::lock_guard<std::mutex> lock(graveyard->first);
  for (auto& r : remains) graveyard->second.push_back(std::move(r));
}

milliseconds Call::left() const {
  const auto now = Clock::now();
  if (now >= deadline) return kMinWait;
  // Rounded up: Gloo must not give up before the deadline (fail_call tells timeouts by the clock).
  const auto left = std::chrono::ceil<milliseconds>(deadline - now);
  return std::clamp(left, kMinWait, kMaxWait);
}

GlooCommunicator::GlooCommunicator(collective::Store& store, std::string prefix,
                                   std::shared_ptr<::gloo::Context> context, std::vector<Peer> peers, bool validate,
                                   bool busy_poll)
    : store_(store),
      prefix_(std::move(prefix)),
      context_(std::move(context)),
      peers_(std::move(peers)),
      validate_(validate),
      poller_(busy_poll && context_->size > 1 ? std::make_unique<BusyPoller>() : nullptr),
      rank_(context_->rank),
      size_(context_->size) {
  connections_ = find_connections(*context_);
  for (int r = 0; r < size_; ++r)
    peers_[static_cast<std::size_t>(r)].address = connections_[static_cast<std::size_t>(r)].peer_address();
}

GlooCommunicator::~GlooCommunicator() = default;

std::string GlooCommunicator::prefix() const { return str_cat("gloo[", prefix_, "]: "); }

void GlooCommunicator::check_device(const Tensor& t, const CollectiveCall& call, const char* role) const {
  check_on_host(t, call, role,
                "the Gloo backend moves host memory of CPU devices (GPU tensors go through the NCCL backend)");
}

void GlooCommunicator::all_reduce_raw(const Call& call, DType dt, const void* in, void* out, std::size_t n) {
  if (n == 0 || size_ == 1) {
    if (in != out && n > 0) std::memcpy(out, in, n * dtype_size(dt));
  } else {
    with_type(dt, [&](auto zero) {
      using T = decltype(zero);
      ::gloo::AllreduceOptions o(context_);
      if (in != out) o.setInput<T>(static_cast<T*>(const_cast<void*>(in)), n);
      o.setOutput<T>(static_cast<T*>(out), n);
      o.setReduceFunction(reduce_function<T>(call.op));
      o.setTag(tag_of(call));
      o.setTimeout(call.left());
      ::gloo::allreduce(o);
    });
  }
  if (call.op == ReduceOp::kMean) divide(out, dt, n, size_);
}

std::shared_ptr<Work> GlooCommunicator::do_all_reduce(const CollectiveCall& c, const Tensor& input,
                                                      const Tensor& output) {
  return run(c, {&input, &output}, [&](const Call& call) {
    const auto n = static_cast<std::size_t>(input.num_elements());
    if (is_16bit(input.dtype())) {
      std::vector<float> f = to_float32(input);
      all_reduce_raw(call, DType::kFloat32, f.data(), f.data(), n);
      convert(f.data(), DType::kFloat32, output.data(), output.dtype(), n);
      return;
    }
    std::vector<unsigned char> copy;
    const void* in = input.data();
    if (in != output.data() && overlaps(in, input.nbytes(), output.data(), output.nbytes())) {
      copy = bytes_of(in, input.nbytes());
      in = copy.data();
    }
    all_reduce_raw(call, input.dtype(), in, output.data(), n);
  });
}

std::shared_ptr<Work> GlooCommunicator::do_broadcast(const CollectiveCall& c, const Tensor& tensor) {
  return run(c, {&tensor}, [&](const Call& call) {
    if (tensor.nbytes() == 0 || size_ == 1) return;
    ::gloo::BroadcastOptions o(context_);
    o.setOutput<unsigned char>(static_cast<unsigned char*>(tensor.data()), tensor.nbytes());
    o.setRoot(call.root);
    o.setTag(tag_of(call));
    o.setTimeout(call.left());
    ::gloo::broadcast(o);
  });
}

std::shared_ptr<Work> GlooCommunicator::do_reduce(const CollectiveCall& c, const Tensor& input, const Tensor& output) {
  const bool is_root = rank_ == c.root;
  return run(c, {&input, is_root ? &output : nullptr}, [&](const Call& call) {
    const auto n = static_cast<std::size_t>(input.num_elements());
    if (n == 0) return;
    // Gloo's reduce writes a full-size output on every rank (its ring's scratch): the non-root
    // ranks and 16-bit dtypes reduce into a private buffer, which also frees input/output of overlaps.
    const bool stage =
        is_16bit(input.dtype()) || !is_root ||
        (input.data() != output.data() && overlaps(input.data(), input.nbytes(), output.data(), output.nbytes()));
    const DType wire = is_16bit(input.dtype()) ? DType::kFloat32 : input.dtype();
    std::vector<float> f;
    std::vector<unsigned char> scratch;
    void* buf = output.data();
    if (is_16bit(input.dtype())) {
      f = to_float32(input);
      buf = f.data();
    } else if (stage) {
      scratch = bytes_of(input.data(), input.nbytes());
      buf = scratch.data();
    }
    if (size_ > 1) {
      with_type(wire, [&](auto zero) {
        using T = decltype(zero);
        ::gloo::ReduceOptions o(context_);
        if (!stage && input.data() != output.data())
          o.setInput<T>(static_cast<T*>(const_cast<void*>(static_cast<const void*>(input.data()))), n);
        o.setOutput<T>(static_cast<T*>(buf), n);
        o.setRoot(call.root);
        o.setReduceFunction(reduce_function<T>(call.op));
        o.setTag(tag_of(call));
        o.setTimeout(call.left());
        ::gloo::reduce(o);
      });
    } else if (!stage && input.data() != output.data()) {
      std::memcpy(buf, input.data(), input.nbytes());
    }
    if (!is_root) return;
    if (call.op == ReduceOp::kMean) divide(buf, wire, n, size_);
    if (buf != output.data()) convert(buf, wire, output.data(), output.dtype(), n);
  });
}

std::shared_ptr<Work> GlooCommunicator::do_all_gather(const CollectiveCall& c, const Tensor& input,
                                                      const Tensor& output) {
  return run(c, {&input, &output}, [&](const Call& call) {
    const std::size_t block = input.nbytes();
    auto* out = static_cast<unsigned char*>(output.data());
    if (block == 0) return;
    if (size_ == 1) {
      if (input.data() != output.data()) std::memmove(out, input.data(), block);
      return;
    }
    ::gloo::AllgatherOptions o(context_);
    std::vector<unsigned char> copy;
    const void* in = input.data();
    if (in != out + block * static_cast<std::size_t>(rank_)) {  // not in place: Gloo copies it into block r
      if (overlaps(in, block, out, output.nbytes())) {
        copy = bytes_of(in, block);
        in = copy.data();
      }
      o.setInput<unsigned char>(static_cast<unsigned char*>(const_cast<void*>(in)), block);
    }
    o.setOutput<unsigned char>(out, output.nbytes());
    o.setTag(tag_of(call));
    o.setTimeout(call.left());
    ::gloo::allgather(o);
  });
}

// Gloo 0.5 has no reduce-scatter into equal blocks: all-reduce the whole input in a private buffer
// and keep this rank's block (gloo.h, "Execution").
std::shared_ptr<Work> GlooCommunicator::do_reduce_scatter(const CollectiveCall& c, const Tensor& input,
                                                          const Tensor& output) {
  return run(c, {&input, &output}, [&](const Call& call) {
    const auto m = static_cast<std::size_t>(output.num_elements());
    const auto total = static_cast<std::size_t>(input.num_elements());
    const auto off = m * static_cast<std::size_t>(rank_);
    if (is_16bit(input.dtype())) {
      std::vector<float> f = to_float32(input);
      all_reduce_raw(call, DType::kFloat32, f.data(), f.data(), total);
      convert(f.data() + off, DType::kFloat32, output.data(), output.dtype(), m);
      return;
    }
    std::vector<unsigned char> all = bytes_of(input.data(), input.nbytes());
    all_reduce_raw(call, input.dtype(), all.data(), all.data(), total);
    const std::size_t esize = dtype_size(input.dtype());
    if (m > 0) std::memcpy(output.data(), all.data() + off * esize, m * esize);
  });
}

std::shared_ptr<Work> GlooCommunicator::do_barrier(const CollectiveCall& c) {
  return run(c, {}, [&](const Call& call) {
    if (validate_ || size_ == 1) return;  // the fingerprint exchange completed: everyone has arrived
    ::gloo::BarrierOptions o(context_);
    o.setTag(tag_of(call));
    o.setTimeout(call.left());
    ::gloo::barrier(o);
  });
}

std::shared_ptr<Work> GlooCommunicator::run(const CollectiveCall& c, std::initializer_list<const Tensor*> tensors,
                                            const std::function<void(const Call&)>& body) {
  Call call{c, {}, {}};
  try {
    // Queued device work may still be producing the input or using the output.
    for (const Tensor* t : tensors)
      if (t != nullptr) t->device_context().stream().synchronize();
  } catch (const Error& e) {
    abort(str_cat(call.fp.to_string(), " could not start: ", e.message()));  // release the others
    throw;
  }
  check_usable(call.fp);
  call.start = Clock::now();
  call.deadline = deadline_after(call.start, call.timeout);
  std::string mismatch;
  const BusyPoller::Scope busy(poller_.get());
  try {
    if (validate_) mismatch = exchange_fingerprints(call);
    if (mismatch.empty()) body(call);
  } catch (const ::gloo::Exception& e) {
    fail_call(call, e.what(), {}, broken_peers());
  } catch (const Error&) {
    throw;  // already the communicator's verdict (fail_call), or a chorus error of the body
  } catch (const std::exception& e) {
    if (!failed_) abort(str_cat(call.fp.to_string(), " failed: ", e.what()));
    throw;
  }
  if (!mismatch.empty()) throw InvalidArgumentError(mismatch);  // the communicator stays usable
  Completed& done = history_[completed_++ % kFlightHistory];
  done.fp = call.fp;
  done.start = call.start;
  done.end = Clock::now();
  return std::make_shared<CompletedWork>(call.fp);
}

// One fingerprint to and from every peer (not a ring: a rank that does not come is then known by
// name). Every rank receives every fingerprint and reaches the same verdict ("" when all match).
std::string GlooCommunicator::exchange_fingerprints(const Call& call) {
  if (size_ == 1) return "";
  const auto n = static_cast<std::size_t>(size_);
  // On the heap: after a failure they go to abandoned_ (Gloo's event loop may still touch them).
  auto mine = std::make_shared<WireFingerprint>(to_wire(call, rank_));
  auto fps = std::make_shared<std::vector<WireFingerprint>>(n);
  std::vector<WireFingerprint>& all = *fps;
  all[static_cast<std::size_t>(rank_)] = *mine;
  std::vector<char> got(n, 0);
  got[static_cast<std::size_t>(rank_)] = 1;
  std::shared_ptr<::gloo::transport::UnboundBuffer> send = context_->createUnboundBuffer(mine.get(), sizeof *mine);
  std::shared_ptr<::gloo::transport::UnboundBuffer> recv =
      context_->createUnboundBuffer(all.data(), n * sizeof(WireFingerprint));
  const std::uint64_t slot = ::gloo::Slot::build(kFingerprintSlotPrefix, tag_of(call));
  try {
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      recv->recv(r, slot, static_cast<std::size_t>(r) * sizeof(WireFingerprint), sizeof(WireFingerprint));
      send->send(r, slot);
    }
    for (int i = 1; i < size_; ++i) {
      int src = -1;
      recv->waitRecv(&src, call.left());
      if (src >= 0 && src < size_) got[static_cast<std::size_t>(src)] = 1;
    }
    for (int i = 1; i < size_; ++i) send->waitSend(call.left());
  } catch (const ::gloo::Exception& e) {
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r)
      if (!got[static_cast<std::size_t>(r)]) missing.push_back(r);
    // Gloo's event loop may still signal these buffers (destroying one races with it, and Gloo
    // gives no way to wait for it): they and their memory are kept until the process exits.
    bury({send, recv, mine, fps});
    fail_call(call, e.what(), missing, broken_peers());
  }
  for (int r = 1; r < size_; ++r) {
    if (same_call(all[0], all[static_cast<std::size_t>(r)])) continue;
    return str_cat(prefix(), "participants called different collectives: rank 0 called ", describe(all[0]),
                   " but rank ", r, " called ", describe(all[static_cast<std::size_t>(r)]),
                   ". Every process must call the same collectives in the same order with the same shapes and "
                   "dtypes.");
  }
  return "";
}

}  // namespace chorus::collective::gloo_detail
