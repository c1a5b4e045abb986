#include <chorus/ops/reduction.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include <chorus/ops/cpu/loops.h>
#include <chorus/ops/elementwise.h>
#include <chorus/ops/finite.h>
#include <chorus/ops/internal.h>
#include <chorus/ops/shape_ops.h>
#include <chorus/ops/tape.h>
#if CHORUS_WITH_CUDA
#include <chorus/ops/cuda/kernels.h>
#endif

namespace chorus::ops {
namespace {

using internal::output;

// Sorted, unique, non-negative axes; duplicates → InvalidArgumentError.
std::vector<int> resolve_axes(const char* op, const Axes& axes, int rank) {
  std::vector<int> out;
  if (axes.all) {
    for (int i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (int a : axes.list) out.push_back(internal::normalize_axis(op, a, rank));
  std::sort(out.begin(), out.end());
  CHORUS_REQUIRE(std::adjacent_find(out.begin(), out.end()) == out.end(), InvalidArgumentError, op,
                 ": an axis is listed twice");
  return out;
}

Shape reduced_shape(const Shape& s, const std::vector<int>& axes, bool keepdims) {
  std::vector<std::int64_t> dims;
  for (int d = 0; d < s.rank(); ++d) {
    const bool reduced = std::binary_search(axes.begin(), axes.end(), d);
    if (!reduced)
      dims.push_back(s.dims()[static_cast<std::size_t>(d)]);
    else if (keepdims)
      dims.push_back(1);
  }
  return Shape(std::move(dims));
}

// x arranged as [outer, r, inner] with the reduced axes as r: either they already form one block,
// or x is transposed so that they do (kept axes first).
struct Plan {
  Tensor x;
  std::int64_t outer = 1, r = 1, inner = 1;
};
Plan plan(const Tensor& x, const std::vector<int>& axes) {
  const auto& d = x.shape().dims();
  const int rank = x.shape().rank();
  Plan p;
  bool block = axes.empty() || axes.back() - axes.front() + 1 == static_cast<int>(axes.size());
  if (axes.empty()) {
    p.x = x;
    p.outer = x.num_elements();
    return p;
  }
  if (block) {
    p.x = x;
    p.outer = internal::product(d, 0, static_cast<std::size_t>(axes.front()));
    p.r = internal::product(d, static_cast<std::size_t>(axes.front()), static_cast<std::size_t>(axes.back() + 1));
    p.inner = internal::product(d, static_cast<std::size_t>(axes.back() + 1), d.size());
    return p;
  }
  std::vector<int> perm;
  for (int i = 0; i < rank; ++i)
    if (!std::binary_search(axes.begin(), axes.end(), i)) perm.push_back(i);
  for (int a : axes) perm.push_back(a);
  {
    // The transpose is an implementation detail: not recorded (the caller records the reduction).
    p.x = transpose(stop_gradient(x), perm);
  }
  p.r = 1;
  for (int a : axes) p.r *= d[static_cast<std::size_t>(a)];
  p.outer = 1;
  for (int i = 0; i < rank; ++i)
    if (!std::binary_search(axes.begin(), axes.end(), i)) p.outer *= d[static_cast<std::size_t>(i)];
  return p;
}

#if CHORUS_WITH_CUDA
// The CUDA reduction, with the workspace its split path wants (a few KB for a bias gradient; the
// allocator is stream-ordered, so the workspace may be freed once the kernels are queued).
void reduce_on_gpu(const std::shared_ptr<DeviceContext>& dev, ReduceKind kind, const Tensor& in, Tensor& y,
                   const Plan& p) {
  const std::int64_t ws_bytes = cuda::reduce_workspace_bytes(p.outer, p.r, p.inner);
  Tensor ws = ws_bytes > 0 ? internal::output(dev, Shape({ws_bytes / 8}), DType::kInt64) : Tensor();
  cuda::reduce(dev->gpu_ordinal(), dev->stream().native_handle(), kind, in.dtype(), in.data(), y.data(), p.outer, p.r,
               p.inner, ws_bytes > 0 ? ws.data() : nullptr);
}
#endif

const char* kind_name(ReduceKind k) {
  switch (k) {
    case ReduceKind::kSum: return "Sum";
    case ReduceKind::kMean: return "Mean";
    case ReduceKind::kMax: return "Max";
    case ReduceKind::kMin: return "Min";
    case ReduceKind::kProd: return "Prod";
  }
  return "Reduce";
}

Tensor reduce(ReduceKind kind, const Tensor& x, const Axes& axes_in, bool keepdims) {
  const char* name = kind_name(kind);
  auto dev = internal::device_of(name, x);
  internal::require_dtype(name, x,
                          {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt32,
                           DType::kInt64, DType::kUInt8, DType::kUInt16});
  const std::vector<int> axes = resolve_axes(name, axes_in, x.shape().rank());
  const Shape out_shape = reduced_shape(x.shape(), axes, keepdims);
  Tensor y = output(dev, out_shape, x.dtype());
  Plan p = plan(x, axes);
  if (y.num_elements() > 0) {
    const Tensor in = p.x;
    if (kind == ReduceKind::kMean && p.r == 0) {
      y = Tensor::full(out_shape, std::nan(""), x.dtype(), dev->name());
    } else if (dev->is_gpu()) {
      CHORUS_IF_CUDA(reduce_on_gpu(dev, kind, in, y, p));
    } else {
      const auto outer = p.outer, r = p.r, inner = p.inner;
      internal::run_cpu(*dev, [&] { cpu::reduce(kind, in.dtype(), in.data(), y.data(), outer, r, inner); });
    }
  }
  if (is_floating(x.dtype()) && internal::should_record({x})) {
    const std::int64_t count = p.r;
    internal::record(name, {x}, {y}, [kind, x, y, axes, count](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
      const Shape keep = reduced_shape(x.shape(), axes, true);
      Tensor g = reshape(gs[0], keep.dims());
      switch (kind) {
        case ReduceKind::kSum: return {broadcast_to(g, x.shape())};
        case ReduceKind::kMean: return {broadcast_to(div(g, scalar_like(g, static_cast<double>(count))), x.shape())};
        case ReduceKind::kMax:
        case ReduceKind::kMin: {
          Tensor mask = cast(equal(x, reshape(y, keep.dims())), x.dtype());
          Tensor ties = reduce_sum(mask, Axes(std::vector<int>(axes.begin(), axes.end())), true);
          return {mul(mask, div(g, ties))};
        }
        case ReduceKind::kProd: break;
      }
      return {Tensor()};
    });
  }
  return y;
}

Tensor arg(bool min, const Tensor& x, int axis) {
  const char* name = min ? "ArgMin" : "ArgMax";
  auto dev = internal::device_of(name, x);
  internal::require_dtype(name, x,
                          {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt32,
                           DType::kInt64, DType::kUInt8, DType::kUInt16});
  const int a = internal::normalize_axis(name, axis, x.shape().rank());
  const auto& d = x.shape().dims();
  const std::int64_t r = d[static_cast<std::size_t>(a)];
  const Shape out_shape = reduced_shape(x.shape(), {a}, false);
  // An empty axis has no arg-max; only an empty result (nothing to write) is fine.
  CHORUS_REQUIRE(r > 0 || out_shape.num_elements() == 0, InvalidArgumentError, name, ": reduction axis ", axis,
                 " is empty in shape ", x.shape().to_string());
  Tensor y = output(dev, out_shape, DType::kInt64);
  if (y.num_elements() == 0 || r == 0) return y;
  const std::int64_t outer = internal::product(d, 0, static_cast<std::size_t>(a));
  const std::int64_t inner = internal::product(d, static_cast<std::size_t>(a) + 1, d.size());
  if (dev->is_gpu()) {
    CHORUS_IF_CUDA(cuda::argmax(dev->gpu_ordinal(), dev->stream().native_handle(), min, x.dtype(), x.data(),
                                static_cast<std::int64_t*>(y.data()), outer, r, inner));
  } else {
    internal::run_cpu(
        *dev, [&] { cpu::argmax(min, x.dtype(), x.data(), static_cast<std::int64_t*>(y.data()), outer, r, inner); });
  }
  return y;
}

}  // namespace

Tensor reduce_sum(const Tensor& x, const Axes& axes, bool keepdims) {
  return reduce(ReduceKind::kSum, x, axes, keepdims);
}
Tensor reduce_mean(const Tensor& x, const Axes& axes, bool keepdims) {
  return reduce(ReduceKind::kMean, x, axes, keepdims);
}
Tensor reduce_max(const Tensor& x, const Axes& axes, bool keepdims) {
  return reduce(ReduceKind::kMax, x, axes, keepdims);
}
Tensor reduce_min(const Tensor& x, const Axes& axes, bool keepdims) {
  return reduce(ReduceKind::kMin, x, axes, keepdims);
}
Tensor argmax(const Tensor& x, int axis) { return arg(false, x, axis); }
Tensor argmin(const Tensor& x, int axis) { return arg(true, x, axis); }

Tensor sum_to_shape(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const int gr = g.shape().rank(), sr = shape.rank();
  CHORUS_REQUIRE(gr >= sr, InvalidArgumentError, "sum_to_shape: cannot reduce ", g.shape().to_string(), " to ",
                 shape.to_string());
  std::vector<int> axes;
  for (int d = 0; d < gr; ++d) {
    const int sd = d - (gr - sr);
    if (sd < 0 ||
        (shape.dims()[static_cast<std::size_t>(sd)] == 1 && g.shape().dims()[static_cast<std::size_t>(d)] != 1))
      axes.push_back(d);
  }
  Tensor s = axes.empty() ? g : reduce_sum(g, Axes(axes), true);
  return reshape(s, shape.dims());
}

bool all_finite(const Tensor& x) {
  CHORUS_REQUIRE(x.defined(), InvalidArgumentError, "all_finite: the tensor is undefined");
  if (!is_floating(x.dtype()) || x.num_elements() == 0) return true;
  const Tensor probe = cast(reduce_sum(sub(x, x)), DType::kFloat64).to("/CPU:0");
  return std::isfinite(probe.item<double>());
}

bool all_finite(const std::vector<Tensor>& xs) {
  double sum = 0;
  std::optional<Tensor> total;  // on the first probed tensor's device, until a device changes
  for (const Tensor& x : xs) {
    if (!x.defined() || !is_floating(x.dtype()) || x.num_elements() == 0) continue;
    Tensor probe = cast(reduce_sum(sub(x, x)), DType::kFloat64);
    if (total && total->device_name() != probe.device_name()) {
      sum += total->to("/CPU:0").item<double>();
      total.reset();
    }
    total = total ? add(*total, probe) : probe;
  }
  if (total) sum += total->to("/CPU:0").item<double>();
  return std::isfinite(sum);
}

}  // namespace chorus::ops
