// Tensor: a typed, shaped view of reference-counted storage on one logical device.
//
//   chorus::Tensor a = chorus::Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});  // default placement
//   chorus::Tensor b = a.to("/GPU:1");                // copy to another device
//   float x = b.reshape({4}).to_vector<float>()[3];   // 4
//   std::cout << a;   // tf.Tensor([[1. 2.] [3. 4.]], shape=(2, 2), dtype=float32, device=...CPU:0)
//
// Storage comes from the device's allocator (its memory limit applies: ResourceExhaustedError on
// OOM) and is freed when the last Tensor referring to it dies. Copying a Tensor object shares the
// storage (like a tf.Tensor handle); `to()` and `clone()` copy the data.
//
// Execution: work on a device is enqueued on its stream (see core/stream.h) and may still be
// running when a call returns. On CPU devices, fills (full, zeros, ones), same-device copies
// (assign) and add_inplace run on the calling thread in stream order (Stream::execute_host, as
// CPU kernels do), so they have completed when the call returns. Everything that hands data to the host (to_vector,
// item, copy_to_host, printing) waits for it and rethrows any error the device work raised. Copies between two
// different devices return after the copy completed. Work on CPU devices keeps the storage it uses alive until it ran;
// on a GPU, storage freed while kernels are pending is only reused by later work on the same stream (each device has
// one stream), so order is preserved.
//
// Placement: creators take an optional device string; without one the op is placed by
// core/placement.h's rules (DeviceScope, then GPU if the op has a GPU kernel, then CPU).
//
// Thread-safety: a Tensor may be read from several threads; writing the same storage from
// several threads concurrently (Variable::assign) is ordered by the device stream.
//
// String tensors (dtype kString, TF's tf.string): each element is a std::string of arbitrary
// bytes, row-major, in host memory only.
//
//   Tensor s = Tensor::from_vector<std::string>({"ab", std::string("\0\xff", 2)}, {2});
//   Tensor e = Tensor::empty({3}, DType::kString);  // three empty strings
//   for (const std::string& v : s.strings()) ...   // zero-copy read (waits for pending work)
//   std::cout << Tensor::scalar("abc");             // tf.Tensor(b'abc', shape=(), dtype=string, ...)
//
// - Placement: always a CPU logical device. Without a device, string creators (Empty, Const,
//   Copy) are placed as ops without a GPU kernel (core/placement.h: a GPU DeviceScope soft-places
//   them on CPU:0, as TF places string ops on the host). An explicit GPU device (creators, to(),
//   empty_on) → InvalidArgumentError.
// - Storage: a Buffer of num_elements() std::string objects constructed in place (empty) and
//   destroyed with it. The device allocator — and so its memory limit and memory stats — counts
//   the objects (num_elements() * sizeof(std::string) = nbytes()); the heap bytes of strings
//   longer than the small-string buffer are ordinary process heap and are not counted.
// - Access: strings() / mutable_strings() / to_vector<std::string>() / item<std::string>().
//   data(), copy_to_host(), from_host() and every numeric reading (to_vector<float>, item<int>,
//   full/ones, add_inplace) throw InvalidArgumentError on strings: the elements are objects, not
//   bytes, so nothing may memcpy or reinterpret them. Ops check it centrally
//   (ops/internal.h common_device): a string input → InvalidArgumentError naming op and dtype.
// - to(), clone(), copy_from() and reshape() work between CPU logical devices; zeros(kString)
//   gives empty strings (as tf.zeros(dtype=tf.string)).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <chorus/core/dtype.h>
#include <chorus/core/error.h>
#include <chorus/core/runtime.h>
#include <chorus/core/shape.h>

namespace chorus {

// Device memory owned jointly by the Tensors that view it; returned to the allocator at the end.
class Buffer {
 public:
  Buffer(std::shared_ptr<DeviceContext> device, std::size_t bytes, std::string_view tag);
  // Storage of `count` std::string objects (string tensors), constructed empty in place and
  // destroyed before the bytes go back to the allocator. The device must be a CPU device
  // (InvalidArgumentError otherwise). bytes() is count * sizeof(std::string).
  struct Strings {
    std::size_t count = 0;
  };
  Buffer(std::shared_ptr<DeviceContext> device, Strings strings, std::string_view tag);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  // nullptr while released (below).
  void* data() const { return data_; }
  // Returns the storage to the allocator while Tensors still view it, and takes fresh storage of
  // the same size back (its contents unspecified; the address may differ): PyTorch FSDP's storage
  // resize to 0, for ZeRO stage 3's parameters gathered for one layer call, whose handles the
  // GradientTape keeps for the backward pass (distribute/parameter_gather.h). While released,
  // Tensor::data() on it throws FailedPreconditionError — never a dangling pointer. release()
  // first waits for work queued on a CPU device's stream (a GPU's stream-ordered allocator only
  // reuses the bytes for later work of the same stream, as when a Buffer dies); releasing a
  // released buffer, or restoring a live one, does nothing. restore() throws
  // ResourceExhaustedError when the device's memory limit refuses the bytes (still released).
  // Not thread-safe: the one thread that owns the tensors (a replica's) calls them. A string
  // buffer's elements are destroyed by release() and come back empty from restore().
  void release();
  void restore();
  bool released() const { return released_; }
  // Exchanges the storage of two live buffers of the same logical device and size, without
  // copying a byte: every Tensor viewing this buffer now sees `other`'s bytes and vice versa (for
  // a restore that read fresh values and hands them to a variable: core/variable.h assign_taking).
  // The address changes, as after release()/restore(). Waits first for work queued on a CPU
  // device's stream (it may use either storage); on a GPU, work already queued keeps the storage
  // it was given, which stays allocated until later work of the same stream (as when a Buffer
  // dies). Different devices or sizes, a string buffer with a byte buffer, or a released buffer →
  // InvalidArgumentError, nothing changed.
  void exchange(Buffer& other);
  // Write holds. An async checkpoint copies host values on a background thread after save()
  // returns (checkpoint/checkpoint.h); until a value's copy is taken its buffer is held, and every
  // in-place write first waits for the holds on it to end: Tensor::copy_from and add_inplace into
  // it, the fused optimizer kernels (ops/training.h), a collective's output (collective/
  // communicator.h waits before the call, so peers never write into a held output), exchange()
  // and release(). Reads never wait.
  // hold_writes() adds a hold, end_hold() ends one and wakes the writers once none is left.
  // await_writable() is what a writer calls: one atomic load when nothing is held (and one count,
  // below).
  void hold_writes() { holds_.fetch_add(1, std::memory_order_acq_rel); }
  void end_hold();
  void await_writable() const {
    writes_.fetch_add(1, std::memory_order_relaxed);
    if (holds_.load(std::memory_order_acquire) != 0) wait_for_holds();
  }
  // How many in-place writes were announced (await_writable calls, which every in-place writer
  // makes, listed above): a version of the contents for a host-side cache of them, which stays
  // valid while this count does (the optimizer's copy of its step counter, optimizer/optimizer.h).
  std::uint64_t writes() const { return writes_.load(std::memory_order_relaxed); }
  std::size_t bytes() const { return bytes_; }
  // True for the storage of a string tensor (std::string objects, not bytes).
  bool holds_strings() const { return holds_strings_; }
  DeviceContext& device() const { return *device_; }
  const std::shared_ptr<DeviceContext>& device_ptr() const { return device_; }

 private:
  void wait_for_holds() const;
  void construct_strings();
  void destroy_strings();

  std::shared_ptr<DeviceContext> device_;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  bool holds_strings_ = false;
  bool released_ = false;
  std::atomic<int> holds_{0};
  mutable std::atomic<std::uint64_t> writes_{0};
};

class Tensor {
 public:
  // An undefined tensor (defined() == false). Accessing its data throws FailedPreconditionError.
  Tensor() = default;

  // Uninitialized storage (contents unspecified; kString: empty strings). Op name "Empty".
  static Tensor empty(const Shape& shape, DType dtype = DType::kFloat32, std::string_view device = "");
  // Uninitialized storage on exactly `device`, bypassing placement (ops allocate outputs with it).
  static Tensor empty_on(std::shared_ptr<DeviceContext> device, const Shape& shape, DType dtype);
  // Every element = value converted to dtype (rules in core/dtype.h). Op name "Fill". kString →
  // InvalidArgumentError, except zeros(shape, kString): empty strings, as tf.zeros.
  static Tensor full(const Shape& shape, double value, DType dtype = DType::kFloat32, std::string_view device = "");
  static Tensor zeros(const Shape& shape, DType dtype = DType::kFloat32, std::string_view device = "");
  static Tensor ones(const Shape& shape, DType dtype = DType::kFloat32, std::string_view device = "");
  // Copies shape.num_elements() elements of `dtype` from host memory `data`. Op name "Const".
  // `data` may be freed when this returns. kString → InvalidArgumentError (use from_vector).
  static Tensor from_host(const void* data, const Shape& shape, DType dtype, std::string_view device = "");
  // From a vector; `shape` defaults to {values.size()}. A shape whose element count differs from
  // values.size() throws InvalidArgumentError. T = std::string makes a string tensor on a CPU device.
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape, std::string_view device = "");
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, std::string_view device = "") {
    return from_vector(values, Shape{static_cast<std::int64_t>(values.size())}, device);
  }
  template <typename T>
  static Tensor scalar(T value, std::string_view device = "") {
    if constexpr (std::is_same_v<T, std::string>)
      return from_strings({std::move(value)}, Shape{}, device);
    else
      return from_host(&value, Shape{}, dtype_of<T>(), device);
  }
  // A string scalar: scalar("abc") is scalar(std::string("abc")).
  static Tensor scalar(const char* value, std::string_view device = "") { return scalar(std::string(value), device); }

  bool defined() const { return buffer_ != nullptr; }
  bool is_string() const { return dtype_ == DType::kString; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  std::int64_t num_elements() const { return shape_.num_elements(); }
  std::size_t nbytes() const { return static_cast<std::size_t>(num_elements()) * dtype_size(dtype_); }
  const LogicalDevice& device() const;
  const std::string& device_name() const { return device().name; }
  DeviceContext& device_context() const;
  // Device pointer to the first element (host pointer for CPU devices). Work touching it must be
  // enqueued on device_context().stream(). A string tensor → InvalidArgumentError (strings()).
  void* data() const;
  // A string tensor's elements, row-major: waits for pending work on its device first, then
  // views the storage without copying (valid while a Tensor shares it). Not a string tensor →
  // InvalidArgumentError. mutable_strings() is for filling a fresh output (an op's, a decoder's);
  // it also waits for async-checkpoint holds (Buffer::await_writable). Neither is synchronized
  // with other threads writing the same storage.
  std::span<const std::string> strings() const;
  std::span<std::string> mutable_strings() const;
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }

  // Identity for GradientTape (ops/tape.h): every tensor an op or factory makes, and every
  // reshape, gets a fresh id; copies of a Tensor object share it. 0 for an undefined tensor.
  std::uint64_t id() const { return id_; }
  // True for the value of a trainable Variable: tapes watch these automatically, as in TF.
  bool is_trainable_variable() const { return trainable_variable_; }

  // A copy on `device` (any logical device; the same device gives a fresh copy). Op name "Copy".
  Tensor to(std::string_view device) const;
  Tensor clone() const { return to(device_name()); }
  // The same storage with another shape of equal element count (InvalidArgumentError otherwise).
  Tensor reshape(const Shape& shape) const;

  // Overwrites this tensor's elements with `src`'s (same shape and dtype, any device; else
  // InvalidArgumentError). Op name "Assign".
  void copy_from(const Tensor& src);
  // this += src elementwise (same shape and dtype, any device; bool → InvalidArgumentError).
  // Op name "AssignAdd".
  void add_inplace(const Tensor& src);

  // Waits for pending work, then copies the raw bytes to host memory `dst` (nbytes() bytes).
  // A string tensor → InvalidArgumentError.
  void copy_to_host(void* dst) const;
  // All elements converted to T, row-major. T = std::string reads a string tensor; a string
  // tensor read as a number, or a numeric one as std::string → InvalidArgumentError.
  template <typename T>
  std::vector<T> to_vector() const;
  // The single element, converted to T; InvalidArgumentError unless num_elements() == 1.
  template <typename T>
  T item() const;

  // NumPy/TF-style text; at most `max_elements` shown per tensor before eliding with "...".
  std::string to_string(std::int64_t max_elements = 1000) const;

 private:
  friend Tensor internal_mark_trainable_variable(Tensor t);
  Tensor(std::shared_ptr<Buffer> buffer, Shape shape, DType dtype);
  static Tensor allocate(std::shared_ptr<DeviceContext> device, const Shape& shape, DType dtype);
  static Tensor from_strings(std::vector<std::string> values, const Shape& shape, std::string_view device);
  void require_defined(const char* what) const;
  // InvalidArgumentError for reading a string tensor as numbers (wants_string false) or a numeric
  // tensor as strings (true), naming `what`.
  void require_string_access(const char* what, bool wants_string) const;

  std::shared_ptr<Buffer> buffer_;
  Shape shape_;
  DType dtype_ = DType::kFloat32;
  std::uint64_t id_ = 0;
  bool trainable_variable_ = false;
};

// For core/variable.cc: `t` flagged as a trainable variable's value (same storage and id).
Tensor internal_mark_trainable_variable(Tensor t);

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- template definitions ----

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, std::string_view device) {
  CHORUS_REQUIRE(static_cast<std::int64_t>(values.size()) == shape.num_elements(), InvalidArgumentError,
                 "from_vector: ", values.size(), " values do not fill shape ", shape.to_string(), " (",
                 shape.num_elements(), " elements)");
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<std::uint8_t> bytes(values.begin(), values.end());
    return from_host(bytes.data(), shape, DType::kBool, device);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return from_strings(values, shape, device);
  } else {
    return from_host(values.data(), shape, dtype_of<T>(), device);
  }
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  require_defined("to_vector");
  require_string_access("to_vector", std::is_same_v<T, std::string>);
  const auto n = static_cast<std::size_t>(num_elements());
  if constexpr (std::is_same_v<T, std::string>) {
    const std::span<const std::string> s = strings();
    return std::vector<std::string>(s.begin(), s.end());
  } else if constexpr (std::is_same_v<T, bool>) {
    std::vector<std::uint8_t> raw(nbytes());
    copy_to_host(raw.data());
    std::vector<std::uint8_t> tmp(n);
    convert(raw.data(), dtype_, tmp.data(), DType::kBool, n);
    return std::vector<bool>(tmp.begin(), tmp.end());
  } else {
    std::vector<std::uint8_t> raw(nbytes());
    copy_to_host(raw.data());
    std::vector<T> out(n);
    convert(raw.data(), dtype_, out.data(), dtype_of<T>(), n);
    return out;
  }
}

template <typename T>
T Tensor::item() const {
  require_defined("item");
  require_string_access("item", std::is_same_v<T, std::string>);
  CHORUS_REQUIRE(num_elements() == 1, InvalidArgumentError,
                 "item() needs a tensor of exactly one element; this one has shape ", shape_.to_string(), " (",
                 num_elements(), " elements)");
  return to_vector<T>()[0];
}

}  // namespace chorus
