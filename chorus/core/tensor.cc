#include <chorus/core/tensor.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>

#include <chorus/core/cuda/kernels.h>
#include <chorus/core/device_spec.h>
#include <chorus/core/gpu.h>
#include <chorus/core/logging.h>
#include <chorus/core/placement.h>
#include <chorus/core/timeline.h>

namespace chorus {
namespace {

using internal::str_cat;

// "Tensor float32(2, 3)": dtype_name and Shape::to_string, written without streams into a
// per-thread string that keeps its capacity (this runs for every op output; the allocator copies
// the tag before the next call on this thread).
std::string_view tag_for(const Shape& shape, DType dtype) {
  thread_local std::string tag;
  tag = "Tensor ";
  tag += dtype_name(dtype);
  tag += '(';
  char buf[24];
  const auto& dims = shape.dims();
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i) tag += ", ";
    tag.append(buf, std::to_chars(buf, buf + sizeof(buf), dims[i]).ptr);
  }
  if (dims.size() == 1) tag += ',';  // "(5,)", as Shape::to_string
  tag += ')';
  return tag;
}

// The bit pattern of `value` converted to `dtype`, in the low bytes of a uint64.
std::uint64_t pattern_of(double value, DType dtype) {
  std::uint64_t bits = 0;
  convert(&value, DType::kFloat64, &bits, dtype, 1);
  return bits;
}

template <typename T>
void add_loop(void* dst, const void* src, std::size_t n) {
  auto* d = static_cast<T*>(dst);
  const auto* s = static_cast<const T*>(src);
  for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<T>(d[i] + s[i]);
}
template <typename H>
void add_loop_16(void* dst, const void* src, std::size_t n) {
  auto* d = static_cast<H*>(dst);
  const auto* s = static_cast<const H*>(src);
  for (std::size_t i = 0; i < n; ++i) d[i] = H(static_cast<float>(d[i]) + static_cast<float>(s[i]));
}
void add_host(DType dtype, void* dst, const void* src, std::size_t n) {
  switch (dtype) {
    case DType::kFloat32: return add_loop<float>(dst, src, n);
    case DType::kFloat64: return add_loop<double>(dst, src, n);
    case DType::kInt32: return add_loop<std::int32_t>(dst, src, n);
    case DType::kInt64: return add_loop<std::int64_t>(dst, src, n);
    case DType::kUInt8: return add_loop<std::uint8_t>(dst, src, n);
    case DType::kUInt16: return add_loop<std::uint16_t>(dst, src, n);
    case DType::kFloat16: return add_loop_16<float16>(dst, src, n);
    case DType::kBFloat16: return add_loop_16<bfloat16>(dst, src, n);
    case DType::kBool:
    case DType::kString: break;
  }
  throw InvalidArgumentError(str_cat("assign_add is not defined for ", dtype, " tensors: use assign"));
}

// The device for string op `op` (Empty, Const, Copy): a CPU device. An explicit GPU request is an
// error; otherwise the op is placed as one without a GPU kernel (a GPU DeviceScope soft-places it
// on the host, as TF places string ops).
std::shared_ptr<DeviceContext> place_strings(std::string_view op, std::string_view device) {
  if (!device.empty()) {
    const DeviceSpec spec = DeviceSpec::parse(device);
    CHORUS_REQUIRE(!spec.type || *spec.type != "GPU", InvalidArgumentError, op,
                   ": a string tensor cannot be placed on '", device,
                   "': string tensors live in host memory (use a CPU device such as \"/CPU:0\")");
  }
  return place_op(op, device, /*has_gpu_kernel=*/false);
}

// Copies the std::string elements of `src` into `dst` (both host buffers of `n` strings): in
// stream order of dst's device, after src's device finished its pending work.
void copy_strings(const std::shared_ptr<Buffer>& src, const std::shared_ptr<Buffer>& dst, std::size_t n) {
  if (n == 0 || src == dst) return;
  CHORUS_REQUIRE(!src->released() && !dst->released(), FailedPreconditionError,
                 "copy of string elements from or into tensor storage that was released");
  DeviceContext& s = src->device();
  DeviceContext& d = dst->device();
  if (&s != &d) s.stream().synchronize();  // the source's pending work (and its errors) first
  const auto* from = static_cast<const std::string*>(src->data());
  auto* to = static_cast<std::string*>(dst->data());
  auto copy = [&] { std::copy_n(from, n, to); };
  d.stream().execute_host([&copy] { copy(); });
}

// Copies `bytes` from `src` (on its device) into `dst` (on its device). Returns once the copy is
// complete when the devices differ; on one device the copy is enqueued on its stream. Both
// buffers are kept alive by the work that uses them.
void copy_buffers(const std::shared_ptr<Buffer>& src, const std::shared_ptr<Buffer>& dst, std::size_t bytes) {
  DeviceContext& s = src->device();
  DeviceContext& d = dst->device();
  if (bytes == 0 || src == dst) return;  // v.assign(v.value()): nothing to move (and memcpy onto itself is UB)
  CHORUS_REQUIRE(!src->released() && !dst->released(), FailedPreconditionError, "copy of ", bytes,
                 " bytes from or into tensor storage that was released (Buffer::release: a ZeRO stage-3 "
                 "parameter gathered for one layer call is freed after it)");
  if (&s == &d) {
    if (!s.is_gpu()) {
      // In stream order on the calling thread (after the queued work, without a hand-off to the
      // worker when the stream is idle), as CPU kernels run.
      auto copy = [&] { std::memcpy(dst->data(), src->data(), bytes); };
      s.stream().execute_host([&copy] { copy(); });  // one reference: no std::function allocation
    } else {
      gpu::memcpy_async(s.gpu_ordinal(), s.stream().native_handle(), dst->data(), src->data(), bytes,
                        gpu::CopyKind::kDeviceToDevice);
    }
    return;
  }
  if (!s.is_gpu() && !d.is_gpu()) {
    // Host to host across logical CPU devices: the source's pending work must finish (and its
    // errors surface here) before the destination stream copies; the caller waits for the copy.
    s.stream().synchronize();
    d.stream().enqueue_host([src, dst, bytes] { std::memcpy(dst->data(), src->data(), bytes); });
    d.stream().synchronize();
    return;
  }
  if (!s.is_gpu() && d.is_gpu()) {
    s.stream().synchronize();  // pending host work on the source must finish first
    gpu::memcpy_async(d.gpu_ordinal(), d.stream().native_handle(), dst->data(), src->data(), bytes,
                      gpu::CopyKind::kHostToDevice);
    d.stream().synchronize();
    return;
  }
  if (s.is_gpu() && !d.is_gpu()) {
    d.stream().synchronize();  // nothing on the destination's host stream may still use dst
    gpu::memcpy_async(s.gpu_ordinal(), s.stream().native_handle(), dst->data(), src->data(), bytes,
                      gpu::CopyKind::kDeviceToHost);
    s.stream().synchronize();
    return;
  }
  // GPU to GPU (two logical devices of one GPU, or two GPUs): the destination stream waits for the
  // source stream's pending work by event, then copies (peer copy across GPUs).
  d.stream().wait_event(s.stream().record_event());
  gpu::memcpy_async(d.gpu_ordinal(), d.stream().native_handle(), dst->data(), src->data(), bytes,
                    gpu::CopyKind::kDeviceToDevice, s.gpu_ordinal());
  d.stream().synchronize();
}

}  // namespace

Buffer::Buffer(std::shared_ptr<DeviceContext> device, std::size_t bytes, std::string_view tag)
    : device_(std::move(device)), bytes_(bytes) {
  data_ = device_->allocator().allocate(bytes, tag);
}

Buffer::Buffer(std::shared_ptr<DeviceContext> device, Strings strings, std::string_view tag)
    : device_(std::move(device)), bytes_(strings.count * sizeof(std::string)), holds_strings_(true) {
  CHORUS_REQUIRE(!device_->is_gpu(), InvalidArgumentError, "string tensor storage cannot live on ", device_->name(),
                 ": string tensors live in host memory (a CPU device)");
  data_ = device_->allocator().allocate(bytes_, tag);
  construct_strings();
}

void Buffer::construct_strings() {
  if (bytes_ > 0) std::uninitialized_value_construct_n(static_cast<std::string*>(data_), bytes_ / sizeof(std::string));
}

void Buffer::destroy_strings() {
  if (bytes_ > 0) std::destroy_n(static_cast<std::string*>(data_), bytes_ / sizeof(std::string));
}

Buffer::~Buffer() {
  if (holds_strings_ && !released_) destroy_strings();
  try {
    device_->allocator().deallocate(data_);
  } catch (const Error& e) {
    CHORUS_LOG(ERROR) << "freeing tensor storage on " << device_->name() << ": " << e.what();
  }
}

namespace {
// Writers waiting for a hold to end (rare: only while an async checkpoint copies) share one
// condition variable; end_hold() notifies it.
std::mutex g_hold_mu;
std::condition_variable g_hold_cv;
}  // namespace

void Buffer::end_hold() {
  {
    std::lock_guard<std::mutex> lock(g_hold_mu);  // a waiter checks and sleeps under it: no lost wake-up
    int holds = holds_.load(std::memory_order_acquire);
    do {
      CHORUS_ENFORCE(holds > 0, "Buffer::end_hold without a hold");
    } while (!holds_.compare_exchange_weak(holds, holds - 1, std::memory_order_acq_rel));
  }
  g_hold_cv.notify_all();
}

void Buffer::wait_for_holds() const {
  // On the timeline: a training thread waiting for an async checkpoint's copy of this buffer.
  timeline::Span span("checkpoint", "hold wait", timeline::enabled() ? str_cat("\"bytes\": ", bytes_) : std::string());
  std::unique_lock<std::mutex> lock(g_hold_mu);
  g_hold_cv.wait(lock, [&] { return holds_.load(std::memory_order_acquire) == 0; });
}

void Buffer::release() {
  if (released_) return;
  await_writable();
  if (!device_->is_gpu()) device_->stream().synchronize();  // queued host work may still use the bytes
  if (holds_strings_) destroy_strings();
  device_->allocator().deallocate(data_);
  data_ = nullptr;
  released_ = true;
}

void Buffer::restore() {
  if (!released_) return;
  data_ = device_->allocator().allocate(bytes_, "restored tensor storage");
  if (holds_strings_) construct_strings();
  released_ = false;
}

void Buffer::exchange(Buffer& other) {
  CHORUS_REQUIRE(device_ == other.device_ && bytes_ == other.bytes_ && holds_strings_ == other.holds_strings_ &&
                     !released_ && !other.released_,
                 InvalidArgumentError, "Buffer::exchange needs two live buffers of one device, size and kind; got ",
                 bytes_, " bytes", holds_strings_ ? " of strings" : "", " on ", device_->name(),
                 released_ ? " (released)" : "", " and ", other.bytes_, " bytes",
                 other.holds_strings_ ? " of strings" : "", " on ", other.device_->name(),
                 other.released_ ? " (released)" : "");
  await_writable();
  other.await_writable();
  if (!device_->is_gpu()) device_->stream().synchronize();
  std::swap(data_, other.data_);
}

Tensor::Tensor(std::shared_ptr<Buffer> buffer, Shape shape, DType dtype)
    : buffer_(std::move(buffer)), shape_(std::move(shape)), dtype_(dtype) {
  static std::atomic<std::uint64_t> next_id{1};
  id_ = next_id.fetch_add(1, std::memory_order_relaxed);
}

Tensor internal_mark_trainable_variable(Tensor t) {
  t.trainable_variable_ = true;
  return t;
}

Tensor Tensor::allocate(std::shared_ptr<DeviceContext> device, const Shape& shape, DType dtype) {
  if (dtype == DType::kString) {
    const Buffer::Strings strings{static_cast<std::size_t>(shape.num_elements())};
    return Tensor(std::make_shared<Buffer>(std::move(device), strings, tag_for(shape, dtype)), shape, dtype);
  }
  const std::size_t bytes = static_cast<std::size_t>(shape.num_elements()) * dtype_size(dtype);
  return Tensor(std::make_shared<Buffer>(std::move(device), bytes, tag_for(shape, dtype)), shape, dtype);
}

Tensor Tensor::empty_on(std::shared_ptr<DeviceContext> device, const Shape& shape, DType dtype) {
  CHORUS_REQUIRE(device != nullptr, InvalidArgumentError, "empty_on: no device");
  return allocate(std::move(device), shape, dtype);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, std::string_view device) {
  if (dtype == DType::kString) return allocate(place_strings("Empty", device), shape, dtype);
  return allocate(place_op("Empty", device), shape, dtype);
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, std::string_view device) {
  CHORUS_REQUIRE(dtype != DType::kString, InvalidArgumentError, "Fill: cannot fill a string tensor with the number ",
                 value, "; use from_vector<std::string> (or empty()/zeros(): empty strings)");
  Tensor t = allocate(place_op("Fill", device), shape, dtype);
  DeviceContext& ctx = t.device_context();
  const std::uint64_t pattern = pattern_of(value, dtype);
  const std::size_t n = static_cast<std::size_t>(t.num_elements());
  const std::size_t esize = dtype_size(dtype);
  if (ctx.is_gpu()) {
    gpu::fill_async(ctx.gpu_ordinal(), ctx.stream().native_handle(), t.data(), n, esize, pattern);
  } else {
    // Fresh storage: no queued work can touch it (as from_host), so fill it here, without a
    // hand-off to the stream's worker.
    auto* p = static_cast<unsigned char*>(t.data());
    for (std::size_t i = 0; i < n; ++i) std::memcpy(p + i * esize, &pattern, esize);  // little-endian low bytes
  }
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, std::string_view device) {
  if (dtype == DType::kString) return empty(shape, dtype, device);  // tf.zeros(dtype=tf.string): b''
  return full(shape, 0.0, dtype, device);
}
Tensor Tensor::ones(const Shape& shape, DType dtype, std::string_view device) {
  return full(shape, 1.0, dtype, device);
}

Tensor Tensor::from_host(const void* data, const Shape& shape, DType dtype, std::string_view device) {
  CHORUS_REQUIRE(dtype != DType::kString, InvalidArgumentError,
                 "from_host: a string tensor is not made from raw bytes; use from_vector<std::string>");
  Tensor t = allocate(place_op("Const", device), shape, dtype);
  const std::size_t bytes = t.nbytes();
  CHORUS_REQUIRE(data != nullptr || bytes == 0, InvalidArgumentError, "from_host: data is null for shape ",
                 shape.to_string());
  DeviceContext& ctx = t.device_context();
  if (bytes == 0) return t;
  if (ctx.is_gpu()) {
    if (shape.num_elements() == 1 && (bytes == 1 || bytes == 2 || bytes == 4 || bytes == 8)) {
      // One element (Tensor::scalar: the optimizer's step counter increment, loss scales): its
      // bits go into a fill kernel's arguments, so nothing waits for the stream (core/gpu.h
      // host_waits), as Tensor::full.
      std::uint64_t bits = 0;
      std::memcpy(&bits, data, bytes);
      gpu::fill_async(ctx.gpu_ordinal(), ctx.stream().native_handle(), t.data(), 1, bytes, bits);
      return t;
    }
    gpu::memcpy_async(ctx.gpu_ordinal(), ctx.stream().native_handle(), t.data(), data, bytes,
                      gpu::CopyKind::kHostToDevice);
    ctx.stream().synchronize();  // the caller may free `data` as soon as we return
  } else {
    std::memcpy(t.data(), data, bytes);  // fresh storage: no queued work can touch it
  }
  return t;
}

Tensor Tensor::from_strings(std::vector<std::string> values, const Shape& shape, std::string_view device) {
  CHORUS_REQUIRE(static_cast<std::int64_t>(values.size()) == shape.num_elements(), InvalidArgumentError,
                 "from_vector: ", values.size(), " strings do not fill shape ", shape.to_string(), " (",
                 shape.num_elements(), " elements)");
  Tensor t = allocate(place_strings("Const", device), shape, DType::kString);
  // Fresh storage: no queued work can touch it, so fill it here (as from_host).
  std::move(values.begin(), values.end(), static_cast<std::string*>(t.buffer_->data()));
  return t;
}

void Tensor::require_string_access(const char* what, bool wants_string) const {
  if (wants_string == (dtype_ == DType::kString)) return;
  if (wants_string)
    throw InvalidArgumentError(str_cat(what, "<std::string>: the tensor has dtype ", dtype_,
                                       ", not string (TF has no cast from numbers to strings either)"));
  throw InvalidArgumentError(str_cat(what, ": a string tensor of shape ", shape_.to_string(),
                                     " holds std::string elements, not numbers; read it with strings(), "
                                     "to_vector<std::string>() or item<std::string>()"));
}

std::span<const std::string> Tensor::strings() const {
  require_defined("strings");
  require_string_access("strings", true);
  device_context().stream().synchronize();  // rethrows errors of pending work
  CHORUS_REQUIRE(!buffer_->released(), FailedPreconditionError, "strings() of a tensor whose storage was released");
  return {static_cast<const std::string*>(buffer_->data()), static_cast<std::size_t>(num_elements())};
}

std::span<std::string> Tensor::mutable_strings() const {
  require_defined("mutable_strings");
  require_string_access("mutable_strings", true);
  buffer_->await_writable();
  device_context().stream().synchronize();
  CHORUS_REQUIRE(!buffer_->released(), FailedPreconditionError,
                 "mutable_strings() of a tensor whose storage was released");
  return {static_cast<std::string*>(buffer_->data()), static_cast<std::size_t>(num_elements())};
}

void Tensor::require_defined(const char* what) const {
  if (!buffer_) throw FailedPreconditionError(str_cat(what, "() called on an undefined (default-constructed) Tensor"));
}

const LogicalDevice& Tensor::device() const {
  require_defined("device");
  return buffer_->device().device();
}
DeviceContext& Tensor::device_context() const {
  require_defined("device_context");
  return buffer_->device();
}
void* Tensor::data() const {
  require_defined("data");
  CHORUS_REQUIRE(dtype_ != DType::kString, InvalidArgumentError, "data() of a string tensor of shape ",
                 shape_.to_string(),
                 ": its elements are std::string objects, not bytes; use strings() or mutable_strings()");
  if (buffer_->released())
    throw FailedPreconditionError(str_cat("data() of a ", dtype_name(dtype_), shape_.to_string(), " tensor on ",
                                          device_name(),
                                          " whose storage was released (Buffer::release: a ZeRO stage-3 parameter "
                                          "gathered for one layer call is freed after it; read the variable again)"));
  return buffer_->data();
}

Tensor Tensor::to(std::string_view device) const {
  require_defined("to");
  if (dtype_ == DType::kString) {
    Tensor out = allocate(place_strings("Copy", device), shape_, dtype_);
    copy_strings(buffer_, out.buffer_, static_cast<std::size_t>(num_elements()));
    return out;
  }
  Tensor out = allocate(place_op("Copy", device), shape_, dtype_);
  copy_buffers(buffer_, out.buffer_, nbytes());
  return out;
}

Tensor Tensor::reshape(const Shape& shape) const {
  require_defined("reshape");
  CHORUS_REQUIRE(shape.num_elements() == num_elements(), InvalidArgumentError,
                 "reshape: cannot reshape a tensor of shape ", shape_.to_string(), " (", num_elements(),
                 " elements) to ", shape.to_string(), " (", shape.num_elements(), " elements)");
  return Tensor(buffer_, shape, dtype_);
}

void Tensor::copy_from(const Tensor& src) {
  require_defined("copy_from");
  src.require_defined("copy_from");
  CHORUS_REQUIRE(src.shape_ == shape_ && src.dtype_ == dtype_, InvalidArgumentError, "assign: value of ",
                 dtype_name(src.dtype_), src.shape_.to_string(), " does not match the target's ", dtype_name(dtype_),
                 shape_.to_string());
  place_op("Assign", device_name());
  buffer_->await_writable();
  if (dtype_ == DType::kString)
    copy_strings(src.buffer_, buffer_, static_cast<std::size_t>(num_elements()));
  else
    copy_buffers(src.buffer_, buffer_, nbytes());
}

void Tensor::add_inplace(const Tensor& src) {
  require_defined("add_inplace");
  src.require_defined("add_inplace");
  CHORUS_REQUIRE(src.shape_ == shape_ && src.dtype_ == dtype_, InvalidArgumentError, "assign_add: value of ",
                 dtype_name(src.dtype_), src.shape_.to_string(), " does not match the target's ", dtype_name(dtype_),
                 shape_.to_string());
  CHORUS_REQUIRE(dtype_ != DType::kBool && dtype_ != DType::kString, InvalidArgumentError,
                 "assign_add is not defined for ", dtype_, " tensors: use assign");
  place_op("AssignAdd", device_name());
  buffer_->await_writable();
  // Bring the addend to this device first (a no-op share when it already lives here).
  Tensor local = &src.device_context() == &device_context() ? src : src.to(device_name());
  DeviceContext& ctx = device_context();
  const auto n = static_cast<std::size_t>(num_elements());
  if (ctx.is_gpu()) {
    gpu::add_inplace_async(ctx.gpu_ordinal(), ctx.stream().native_handle(), dtype_, data(), local.data(), n);
  } else {
    void* const dst = data();  // both checked: released storage throws here, not in the kernel
    const void* const src_data = local.data();
    auto add = [&] { add_host(dtype_, dst, src_data, n); };
    ctx.stream().execute_host([&add] { add(); });  // in stream order, on this thread
  }
}

void Tensor::copy_to_host(void* dst) const {
  require_defined("copy_to_host");
  require_string_access("copy_to_host", false);
  DeviceContext& ctx = device_context();
  const std::size_t bytes = nbytes();
  if (ctx.is_gpu()) {
    if (bytes > 0)
      gpu::memcpy_async(ctx.gpu_ordinal(), ctx.stream().native_handle(), dst, data(), bytes,
                        gpu::CopyKind::kDeviceToHost);
    ctx.stream().synchronize();
  } else {
    ctx.stream().synchronize();  // rethrows errors of pending work
    if (bytes > 0) std::memcpy(dst, data(), bytes);
  }
}

}  // namespace chorus
