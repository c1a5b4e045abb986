// Helpers of the op layer (ops/*.cc); not part of the public API.
//
// Every op follows one pattern: check its inputs (defined, one device, allowed dtypes, shapes),
// allocate outputs on the inputs' device, launch the CPU or GPU kernel on that device's stream,
// record itself on the active GradientTapes, return. Errors raised by the checks are thrown by the
// op call. A CPU kernel runs on the calling thread, after any work queued before it on the
// device's stream (Stream::execute_host), so errors it raises (integer division by zero, an
// out-of-range index) are thrown by the op call too. GPU kernels are enqueued; their errors
// surface at the next read of the data (Tensor::to_vector, item, ...), as in TF.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string_view>
#include <type_traits>
#include <vector>

#include <chorus/core/dtype.h>
#include <chorus/core/error.h>
#include <chorus/core/runtime.h>
#include <chorus/core/shape.h>
#include <chorus/core/tensor.h>
#include <chorus/ops/strided.h>

#if CHORUS_WITH_CUDA
#define CHORUS_IF_CUDA(...) __VA_ARGS__
#else
#define CHORUS_IF_CUDA(...) ::chorus::ops::internal::no_cuda()
#endif

namespace chorus::ops::internal {

using Inputs = std::initializer_list<std::reference_wrapper<const Tensor>>;

[[noreturn]] void no_cuda();

// The device all `inputs` live on. An undefined input, or inputs on different devices →
// InvalidArgumentError naming the op and every input's device (TF copies silently; chorus asks
// the user to move data explicitly with Tensor::to, so that no hidden copy costs a step).
// A string input → InvalidArgumentError naming the op (no op here reads std::string elements;
// string tensors are for data pipelines and checkpoints: core/tensor.h "String tensors").
// Logs the placement when config::set_log_device_placement(true).
std::shared_ptr<DeviceContext> common_device(std::string_view op, Inputs inputs);
// The device of a single input (same checks).
inline std::shared_ptr<DeviceContext> device_of(std::string_view op, const Tensor& t) { return common_device(op, {t}); }

// InvalidArgumentError unless t.dtype() is one of `allowed`: "<op>: <what> has dtype int32; allowed: float32, float64".
void require_dtype(std::string_view op, const Tensor& t, std::initializer_list<DType> allowed,
                   std::string_view what = "x");
void require_float(std::string_view op, const Tensor& t, std::string_view what = "x");
void require_same_dtype(std::string_view op, const Tensor& a, const Tensor& b);
void require_rank(std::string_view op, const Tensor& t, int rank, std::string_view what = "x");

// Runs a CPU kernel in the device's stream order on the calling thread (Stream::execute_host),
// with the device's intra-op thread share (LogicalDevice::intra_op_threads) as the calling
// thread's OpenMP thread count. `fn` runs before run_cpu returns, so it may capture by reference;
// it is called through a reference, never copied (no allocation per op).
void run_cpu_ref(DeviceContext& dev, void (*call)(void*), void* fn);
template <typename Fn>
void run_cpu(DeviceContext& dev, Fn&& fn) {
  run_cpu_ref(
      dev, [](void* f) { (*static_cast<std::remove_reference_t<Fn>*>(f))(); }, &fn);
}

// Outputs: uninitialized / zero-filled tensors on `dev`. dtype string → InvalidArgumentError.
Tensor output(const std::shared_ptr<DeviceContext>& dev, const Shape& shape, DType dtype);
Tensor zeros_on(const std::shared_ptr<DeviceContext>& dev, const Shape& shape, DType dtype);

// NumPy broadcasting of two shapes; incompatible → InvalidArgumentError
// "<op>: Incompatible shapes: (2, 3) vs. (4,)".
Shape broadcast_shape(std::string_view op, const Shape& a, const Shape& b);
// The layout that walks `out` with each operand broadcast into it (operands right-aligned,
// stride 0 on size-1 dims), adjacent dims merged where every operand is contiguous across them.
// More than kMaxRank dims after merging → InvalidArgumentError.
StridedLayout broadcast_layout(std::string_view op, const Shape& out, std::initializer_list<const Shape*> operands);
// A copy layout: walk `dims`; source element at src_offset + sum i_d*src_strides[d], destination
// at dst_offset + sum i_d*dst_strides[d]. Dims merged where both are contiguous.
CopyLayout copy_layout(std::string_view op, const std::vector<std::int64_t>& dims,
                       const std::vector<std::int64_t>& src_strides, std::int64_t src_offset,
                       const std::vector<std::int64_t>& dst_strides, std::int64_t dst_offset);
// Row-major strides of `shape` in elements.
std::vector<std::int64_t> contiguous_strides(const Shape& shape);

// Axis in [-rank, rank) → [0, rank); else InvalidArgumentError naming op, axis and rank.
int normalize_axis(std::string_view op, int axis, int rank);

// Element count as int64 / product of dims in [begin, end).
std::int64_t product(const std::vector<std::int64_t>& dims, std::size_t begin, std::size_t end);

}  // namespace chorus::ops::internal
