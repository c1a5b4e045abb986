// Shared plumbing of the cuDNN wrappers (ops/cuda/cudnn.cc, ops/cuda/cudnn_conv.cc): the
// per-device handle, RAII descriptors, stream-ordered scratch memory, and layout helpers.
// Private to ops/cuda; host C++20; only with CHORUS_WITH_CUDNN.
#pragma once

#ifdef CHORUS_WITH_CUDNN

// cuDNN 9 marks the legacy (descriptor) API deprecated; chorus uses it on purpose (see
// ops/cuda/libraries.h), so its warnings are silenced in the files that include this header.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#include <cudnn.h>

#include <array>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string_view>

#include <chorus/core/cuda/check.h>
#include <chorus/core/dtype.h>
#include <chorus/core/error.h>
#include <chorus/core/runtime.h>
#include <chorus/ops/cuda/check.h>
#include <chorus/ops/strided.h>

namespace chorus::ops::cuda::cudnn {

// Holds the device's cuDNN handle for one operation: locks its mutex (calls on one handle are
// serialized), makes the device's GPU current (restored on destruction) and binds the handle to
// the device's stream. The handle is created at the first lease of a device and lives for the
// process (see cudnn.cc).
class HandleLease {
 public:
  explicit HandleLease(DeviceContext& dev);
  cudnnHandle_t get() const { return handle_; }
  HandleLease(const HandleLease&) = delete;
  HandleLease& operator=(const HandleLease&) = delete;

 private:
  std::unique_lock<std::mutex> lock_;
  gpu::internal::DeviceGuard guard_;
  cudnnHandle_t handle_ = nullptr;
};

// RAII cuDNN descriptor.
template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class Descriptor {
 public:
  Descriptor() { CHORUS_CUDNN_CHECK(Create(&d_)); }
  ~Descriptor() { (void)Destroy(d_); }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  T get() const { return d_; }

 private:
  T d_ = nullptr;
};
using TensorDesc = Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc =
    Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;
using PoolDesc = Descriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor>;
using ActivationDesc =
    Descriptor<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor, cudnnDestroyActivationDescriptor>;

// Device memory from dev.allocator() (so the device's memory limit applies:
// ResourceExhaustedError), returned when the Scratch goes out of scope, i.e. right after the
// work using it was *enqueued*. That is safe by core's rule (core/tensor.h): GPU memory freed
// while kernels are pending is only reused by later work on the same stream, and every logical
// device has exactly one stream, so the reuse is ordered after this work.
class Scratch {
 public:
  Scratch() = default;
  Scratch(DeviceContext& dev, std::size_t bytes, std::string_view tag) : allocator_(&dev.allocator()), bytes_(bytes) {
    ptr_ = allocator_->allocate(bytes, tag);
  }
  ~Scratch() { release(); }
  Scratch(Scratch&& o) noexcept : allocator_(o.allocator_), ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  Scratch& operator=(Scratch&& o) noexcept {
    if (this != &o) {
      release();
      allocator_ = o.allocator_;
      ptr_ = o.ptr_;
      bytes_ = o.bytes_;
      o.ptr_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  void* get() const { return ptr_; }
  std::size_t size() const { return bytes_; }

 private:
  void release() noexcept {
    if (ptr_ != nullptr) {
      try {
        allocator_->deallocate(ptr_);
      } catch (...) {  // a foreign pointer cannot happen here; never throw from a destructor
      }
      ptr_ = nullptr;
    }
  }
  Allocator* allocator_ = nullptr;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// cuDNN's data type for chorus's float32/float64/float16/bfloat16; anything else →
// InvalidArgumentError naming `op`.
inline cudnnDataType_t data_type(DType dtype, const char* op) {
  switch (dtype) {
    case DType::kFloat32: return CUDNN_DATA_FLOAT;
    case DType::kFloat64: return CUDNN_DATA_DOUBLE;
    case DType::kFloat16: return CUDNN_DATA_HALF;
    case DType::kBFloat16: return CUDNN_DATA_BFLOAT16;
    default: break;
  }
  throw InvalidArgumentError(::chorus::internal::str_cat(op, " on GPU: dtype ", dtype_name(dtype),
                                                         " is not supported by chorus's cuDNN path (float32, float64, "
                                                         "float16, bfloat16)"));
}

// The type a convolution accumulates in: double for float64, float for everything else (16-bit
// data with float accumulation is cuDNN's PSEUDO_HALF / PSEUDO_BFLOAT16 configuration, the one
// with tensor-core engines and the accuracy TF and PyTorch use).
inline cudnnDataType_t compute_type(DType dtype) {
  return dtype == DType::kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
}

inline bool is_16bit(DType dtype) { return dtype == DType::kFloat16 || dtype == DType::kBFloat16; }

// alpha = 1, beta = 0 in the type cuDNN wants for `dtype` (double for double data, else float).
struct Blend {
  explicit Blend(DType dtype) : is_double(dtype == DType::kFloat64) {}
  const void* one() const { return is_double ? static_cast<const void*>(&d1) : &f1; }
  const void* zero() const { return is_double ? static_cast<const void*>(&d0) : &f0; }
  bool is_double;
  float f1 = 1.0f, f0 = 0.0f;
  double d1 = 1.0, d0 = 0.0;
};

inline int to_int(std::int64_t v, const char* op, const char* what) {
  CHORUS_REQUIRE(v >= 0 && v <= INT_MAX, InvalidArgumentError, op, ": ", what, " = ", v,
                 " is outside cuDNN's int range [0, ", INT_MAX, "]");
  return static_cast<int>(v);
}

// Memory layout of a 4-D activation cuDNN sees.
enum class Layout { kNHWC, kNCHW };

// Element strides of an activation [n, h, w, c] (indices in that order) stored in `layout`.
inline std::array<std::int64_t, 4> strides_of(Layout layout, std::int64_t h, std::int64_t w, std::int64_t c) {
  if (layout == Layout::kNHWC) return {h * w * c, w * c, c, 1};
  return {c * h * w, w, 1, h * w};
}

// Copies a 4-D index space dims[0..3] from src (strides s, element offset s_off) to dst.
void copy4(DeviceContext& dev, DType dtype, const std::array<std::int64_t, 4>& dims,
           const std::array<std::int64_t, 4>& s, std::int64_t s_off, const void* src,
           const std::array<std::int64_t, 4>& d, std::int64_t d_off, void* dst);

// Fills `count` elements of `dtype` with the bit pattern `bits`.
void fill(DeviceContext& dev, DType dtype, void* dst, std::int64_t count, std::uint64_t bits);

// 4-D tensor descriptor of [n, c, h, w] (cuDNN's argument order) in `layout`.
void set_tensor(const TensorDesc& desc, Layout layout, cudnnDataType_t type, std::int64_t n, std::int64_t c,
                std::int64_t h, std::int64_t w, const char* op);

}  // namespace chorus::ops::cuda::cudnn

#endif  // CHORUS_WITH_CUDNN
