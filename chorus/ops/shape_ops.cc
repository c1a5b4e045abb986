#include <chorus/ops/shape_ops.h>

#include <algorithm>
#include <numeric>

#include <chorus/ops/cpu/loops.h>
#include <chorus/ops/determinism.h>
#include <chorus/ops/elementwise.h>
#include <chorus/ops/internal.h>
#include <chorus/ops/reduction.h>
#include <chorus/ops/tape.h>
#if CHORUS_WITH_CUDA
#include <chorus/ops/cuda/kernels.h>
#endif

namespace chorus::ops {
namespace {

using chorus::internal::str_cat;
using internal::output;

// "(4, -1)": the user's numbers as given (not through Shape, which rejects negative dims).
std::string dims_str(const std::vector<std::int64_t>& v) {
  std::string s = "(";
  for (std::size_t i = 0; i < v.size(); ++i) s += str_cat(i ? ", " : "", v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}

// Enqueues a strided copy from src to dst (same device) over `dims`.
void copy_region(DeviceContext& dev, const char* op, const Tensor& src, const std::vector<std::int64_t>& dims,
                 const std::vector<std::int64_t>& src_strides, std::int64_t src_off, const Tensor& dst,
                 const std::vector<std::int64_t>& dst_strides, std::int64_t dst_off) {
  if (internal::product(dims, 0, dims.size()) == 0) return;
  const CopyLayout layout = internal::copy_layout(op, dims, src_strides, src_off, dst_strides, dst_off);
  const std::size_t es = dtype_size(src.dtype());
  if (dev.is_gpu()) {
    CHORUS_IF_CUDA(
        cuda::copy_strided(dev.gpu_ordinal(), dev.stream().native_handle(), es, layout, src.data(), dst.data()));
  } else {
    internal::run_cpu(dev, [&] { cpu::copy_strided(es, layout, src.data(), dst.data()); });
  }
}

}  // namespace

Tensor reshape(const Tensor& x, const std::vector<std::int64_t>& shape) {
  internal::device_of("Reshape", x);
  std::vector<std::int64_t> dims = shape;
  int infer = -1;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      CHORUS_REQUIRE(infer < 0, InvalidArgumentError, "Reshape: only one dimension may be -1, got ", dims_str(shape));
      infer = static_cast<int>(i);
    } else {
      CHORUS_REQUIRE(dims[i] >= 0, InvalidArgumentError, "Reshape: invalid dimension ", dims[i], " in ",
                     dims_str(shape));
      known *= dims[i];
    }
  }
  if (infer >= 0) {
    CHORUS_REQUIRE(known > 0 && x.num_elements() % known == 0, InvalidArgumentError,
                   "Reshape: cannot reshape a tensor of ", x.num_elements(), " elements (shape ", x.shape().to_string(),
                   ") to ", dims_str(shape));
    dims[static_cast<std::size_t>(infer)] = x.num_elements() / known;
  }
  Tensor y = x.reshape(Shape(dims));  // checks the element count
  if (is_floating(x.dtype()) && internal::should_record({x})) {
    const Shape in = x.shape();
    internal::record("Reshape", {x}, {y}, [in](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
      return {reshape(gs[0], in.dims())};
    });
  }
  return y;
}

Tensor transpose(const Tensor& x, const std::vector<int>& perm_in) {
  auto dev = internal::device_of("Transpose", x);
  const int r = x.shape().rank();
  std::vector<int> perm = perm_in;
  if (perm.empty())
    for (int i = r - 1; i >= 0; --i) perm.push_back(i);
  CHORUS_REQUIRE(static_cast<int>(perm.size()) == r, InvalidArgumentError, "Transpose: perm has ", perm.size(),
                 " entries for a tensor of rank ", r);
  std::vector<int> seen(static_cast<std::size_t>(r), 0);
  for (int p : perm) {
    // As TF: entries in [0, rank), each once (negative entries are not axes here).
    if (p >= 0 && p < r && !seen[static_cast<std::size_t>(p)]++) continue;
    std::string list;
    for (int q : perm) list += str_cat(list.empty() ? "" : ", ", q);
    throw InvalidArgumentError(str_cat("Transpose: perm [", list, "] is not a permutation of [0, ", r, ")"));
  }
  const auto in_strides = internal::contiguous_strides(x.shape());
  std::vector<std::int64_t> dims(static_cast<std::size_t>(r)), src_strides(static_cast<std::size_t>(r));
  for (int i = 0; i < r; ++i) {
    dims[static_cast<std::size_t>(i)] = x.shape().dims()[static_cast<std::size_t>(perm[static_cast<std::size_t>(i)])];
    src_strides[static_cast<std::size_t>(i)] = in_strides[static_cast<std::size_t>(perm[static_cast<std::size_t>(i)])];
  }
  Tensor y = output(dev, Shape(dims), x.dtype());
  copy_region(*dev, "Transpose", x, dims, src_strides, 0, y, internal::contiguous_strides(y.shape()), 0);
  if (is_floating(x.dtype()) && internal::should_record({x})) {
    std::vector<int> inverse(static_cast<std::size_t>(r));
    for (int i = 0; i < r; ++i) inverse[static_cast<std::size_t>(perm[static_cast<std::size_t>(i)])] = i;
    internal::record("Transpose", {x}, {y}, [inverse](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
      return {transpose(gs[0], inverse)};
    });
  }
  return y;
}

Tensor slice(const Tensor& x, const std::vector<std::int64_t>& begin, const std::vector<std::int64_t>& size_in) {
  auto dev = internal::device_of("Slice", x);
  const int r = x.shape().rank();
  CHORUS_REQUIRE(static_cast<int>(begin.size()) == r && static_cast<int>(size_in.size()) == r, InvalidArgumentError,
                 "Slice: begin and size need ", r, " entries for shape ", x.shape().to_string(), ", got ", begin.size(),
                 " and ", size_in.size());
  std::vector<std::int64_t> size = size_in;
  const auto& d = x.shape().dims();
  for (std::size_t i = 0; i < size.size(); ++i) {
    if (size[i] == -1) size[i] = d[i] - begin[i];
    CHORUS_REQUIRE(begin[i] >= 0 && size[i] >= 0 && begin[i] + size[i] <= d[i], InvalidArgumentError, "Slice: begin ",
                   dims_str(begin), " size ", dims_str(size_in), " is out of bounds for shape ", x.shape().to_string(),
                   " (dimension ", i, ")");
  }
  const auto strides = internal::contiguous_strides(x.shape());
  std::int64_t off = 0;
  for (std::size_t i = 0; i < begin.size(); ++i) off += begin[i] * strides[i];
  Tensor y = output(dev, Shape(size), x.dtype());
  copy_region(*dev, "Slice", x, size, strides, off, y, internal::contiguous_strides(y.shape()), 0);
  if (is_floating(x.dtype()) && internal::should_record({x})) {
    const Shape in = x.shape();
    internal::record("Slice", {x}, {y}, [in, begin, size](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
      std::vector<std::pair<std::int64_t, std::int64_t>> pads;
      for (std::size_t i = 0; i < begin.size(); ++i) pads.emplace_back(begin[i], in.dims()[i] - begin[i] - size[i]);
      return {pad(gs[0], pads)};
    });
  }
  return y;
}

Tensor pad(const Tensor& x, const std::vector<std::pair<std::int64_t, std::int64_t>>& paddings, double constant) {
  auto dev = internal::device_of("PadV2", x);
  const int r = x.shape().rank();
  CHORUS_REQUIRE(static_cast<int>(paddings.size()) == r, InvalidArgumentError, "PadV2: ", paddings.size(),
                 " padding pairs for a tensor of rank ", r);
  std::vector<std::int64_t> dims = x.shape().dims();
  for (std::size_t i = 0; i < dims.size(); ++i) {
    CHORUS_REQUIRE(paddings[i].first >= 0 && paddings[i].second >= 0, InvalidArgumentError,
                   "PadV2: paddings must be >= 0, dimension ", i, " has {", paddings[i].first, ", ", paddings[i].second,
                   "}");
    dims[i] += paddings[i].first + paddings[i].second;
  }
  Tensor y = Tensor::full(Shape(dims), constant, x.dtype(), dev->name());
  const auto dst_strides = internal::contiguous_strides(y.shape());
  std::int64_t off = 0;
  for (std::size_t i = 0; i < dims.size(); ++i) off += paddings[i].first * dst_strides[i];
  copy_region(*dev, "PadV2", x, x.shape().dims(), internal::contiguous_strides(x.shape()), 0, y, dst_strides, off);
  if (is_floating(x.dtype()) && internal::should_record({x})) {
    const Shape in = x.shape();
    internal::record("PadV2", {x}, {y}, [in, paddings](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
      std::vector<std::int64_t> begin;
      for (const auto& p : paddings) begin.push_back(p.first);
      return {slice(gs[0], begin, in.dims())};
    });
  }
  return y;
}

Tensor concat(const std::vector<Tensor>& xs, int axis) {
  CHORUS_REQUIRE(!xs.empty(), InvalidArgumentError, "ConcatV2: no tensors to concatenate");
  auto dev = internal::device_of("ConcatV2", xs[0]);
  const int r = xs[0].shape().rank();
  CHORUS_REQUIRE(r > 0, InvalidArgumentError, "ConcatV2: cannot concatenate scalars (use stack)");
  const int a = internal::normalize_axis("ConcatV2", axis, r);
  std::vector<std::int64_t> dims = xs[0].shape().dims();
  dims[static_cast<std::size_t>(a)] = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const Tensor& t = xs[i];
    internal::common_device("ConcatV2", {xs[0], t});
    internal::require_same_dtype("ConcatV2", xs[0], t);
    bool ok = t.shape().rank() == r;
    for (int d = 0; ok && d < r; ++d)
      ok = d == a || t.shape().dims()[static_cast<std::size_t>(d)] == xs[0].shape().dims()[static_cast<std::size_t>(d)];
    CHORUS_REQUIRE(ok, InvalidArgumentError, "ConcatV2: shapes ", xs[0].shape().to_string(), " and ",
                   t.shape().to_string(), " (input ", i, ") differ outside axis ", a);
    dims[static_cast<std::size_t>(a)] += t.shape().dims()[static_cast<std::size_t>(a)];
  }
  Tensor y = output(dev, Shape(dims), xs[0].dtype());
  const auto dst_strides = internal::contiguous_strides(y.shape());
  std::int64_t at = 0;
  std::vector<std::int64_t> sizes;
  for (const Tensor& t : xs) {
    copy_region(*dev, "ConcatV2", t, t.shape().dims(), internal::contiguous_strides(t.shape()), 0, y, dst_strides,
                at * dst_strides[static_cast<std::size_t>(a)]);
    sizes.push_back(t.shape().dims()[static_cast<std::size_t>(a)]);
    at += sizes.back();
  }
  if (is_floating(y.dtype()) && internal::should_record(xs)) {
    internal::record("ConcatV2", xs, {y}, [sizes, a](const std::vector<Tensor>& gs) { return split(gs[0], sizes, a); });
  }
  return y;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes_in, int axis) {
  internal::device_of("SplitV", x);
  const int r = x.shape().rank();
  const int a = internal::normalize_axis("SplitV", axis, r);
  const std::int64_t dim = x.shape().dims()[static_cast<std::size_t>(a)];
  std::vector<std::int64_t> sizes = sizes_in;
  std::int64_t known = 0;
  int infer = -1;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1 && infer < 0)
      infer = static_cast<int>(i);
    else {
      CHORUS_REQUIRE(sizes[i] >= 0, InvalidArgumentError, "SplitV: invalid size ", sizes[i]);
      known += sizes[i];
    }
  }
  if (infer >= 0) sizes[static_cast<std::size_t>(infer)] = dim - known;
  CHORUS_REQUIRE((infer < 0 ? known : dim) == dim && (infer < 0 || dim - known >= 0), InvalidArgumentError,
                 "SplitV: sizes ", dims_str(sizes_in), " do not add up to dimension ", a, " of shape ",
                 x.shape().to_string());
  std::vector<Tensor> out;
  std::vector<std::int64_t> begin(static_cast<std::size_t>(r), 0), size = x.shape().dims();
  for (std::int64_t s : sizes) {
    size[static_cast<std::size_t>(a)] = s;
    out.push_back(slice(x, begin, size));  // each slice records its own gradient
    begin[static_cast<std::size_t>(a)] += s;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, int num, int axis) {
  internal::device_of("Split", x);
  CHORUS_REQUIRE(num > 0, InvalidArgumentError, "Split: num must be > 0, got ", num);
  const int a = internal::normalize_axis("Split", axis, x.shape().rank());
  const std::int64_t dim = x.shape().dims()[static_cast<std::size_t>(a)];
  CHORUS_REQUIRE(dim % num == 0, InvalidArgumentError, "Split: dimension ", a, " of shape ", x.shape().to_string(),
                 " is not divisible into ", num, " parts");
  return split(x, std::vector<std::int64_t>(static_cast<std::size_t>(num), dim / num), a);
}

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  auto dev = internal::device_of("BroadcastTo", x);
  const Shape b = internal::broadcast_shape("BroadcastTo", x.shape(), shape);
  CHORUS_REQUIRE(b == shape, InvalidArgumentError, "BroadcastTo: cannot broadcast ", x.shape().to_string(), " to ",
                 shape.to_string());
  if (x.shape() == shape) return x;
  Tensor y = output(dev, shape, x.dtype());
  const StridedLayout bl = internal::broadcast_layout("BroadcastTo", shape, {&x.shape(), &shape});
  // Operand 1 (the output itself) is walked densely: use the broadcast layout as a copy layout.
  if (y.num_elements() > 0) {
    CopyLayout layout = bl;
    const std::size_t es = dtype_size(x.dtype());
    if (dev->is_gpu()) {
      CHORUS_IF_CUDA(
          cuda::copy_strided(dev->gpu_ordinal(), dev->stream().native_handle(), es, layout, x.data(), y.data()));
    } else {
      internal::run_cpu(*dev, [&] { cpu::copy_strided(es, layout, x.data(), y.data()); });
    }
  }
  if (is_floating(x.dtype()) && internal::should_record({x})) {
    const Shape in = x.shape();
    internal::record("BroadcastTo", {x}, {y},
                     [in](const std::vector<Tensor>& gs) -> std::vector<Tensor> { return {sum_to_shape(gs[0], in)}; });
  }
  return y;
}

Tensor expand_dims(const Tensor& x, int axis) {
  internal::device_of("ExpandDims", x);
  const int r = x.shape().rank();
  const int a = internal::normalize_axis("ExpandDims", axis, r + 1);
  std::vector<std::int64_t> dims = x.shape().dims();
  dims.insert(dims.begin() + a, 1);
  return reshape(x, dims);
}

Tensor squeeze(const Tensor& x, const std::vector<int>& axes) {
  internal::device_of("Squeeze", x);
  const int r = x.shape().rank();
  std::vector<bool> drop(static_cast<std::size_t>(r), false);
  for (int ax : axes) {
    const int a = internal::normalize_axis("Squeeze", ax, r);
    CHORUS_REQUIRE(x.shape().dims()[static_cast<std::size_t>(a)] == 1, InvalidArgumentError, "Squeeze: dimension ", a,
                   " of shape ", x.shape().to_string(), " is not 1");
    drop[static_cast<std::size_t>(a)] = true;
  }
  std::vector<std::int64_t> dims;
  for (int d = 0; d < r; ++d) {
    const auto n = x.shape().dims()[static_cast<std::size_t>(d)];
    if (axes.empty() ? n != 1 : !drop[static_cast<std::size_t>(d)]) dims.push_back(n);
  }
  return reshape(x, dims);
}

Tensor stack(const std::vector<Tensor>& xs, int axis) {
  CHORUS_REQUIRE(!xs.empty(), InvalidArgumentError, "Pack: no tensors to stack");
  const int a = internal::normalize_axis("Pack", axis, xs[0].shape().rank() + 1);
  std::vector<Tensor> expanded;
  for (const Tensor& t : xs) {
    CHORUS_REQUIRE(t.defined() && t.shape() == xs[0].shape(), InvalidArgumentError, "Pack: all tensors need shape ",
                   xs[0].shape().to_string());
    expanded.push_back(expand_dims(t, a));
  }
  return concat(expanded, a);
}

Tensor gather(const Tensor& params, const Tensor& indices, int axis) {
  auto dev = internal::common_device("GatherV2", {params, indices});
  internal::require_dtype("GatherV2", indices, {DType::kInt32, DType::kInt64}, "indices");
  const int r = params.shape().rank();
  CHORUS_REQUIRE(r >= 1, InvalidArgumentError, "GatherV2: params must have rank >= 1");
  const int a = internal::normalize_axis("GatherV2", axis, r);
  if (a != 0) {
    // Move the axis to the front, gather rows, move it back (each step records its gradient).
    std::vector<int> perm{a};
    for (int i = 0; i < r; ++i)
      if (i != a) perm.push_back(i);
    Tensor front = gather(transpose(params, perm), indices, 0);  // [idx..., others...]
    const int ir = indices.shape().rank();
    // Result dims now: indices dims, then params dims except a (in order). Wanted: params[:a],
    // indices dims, params[a+1:].
    std::vector<int> back;
    for (int i = 0; i < a; ++i) back.push_back(ir + i);
    for (int i = 0; i < ir; ++i) back.push_back(i);
    for (int i = a; i < r - 1; ++i) back.push_back(ir + i);
    return transpose(front, back);
  }
  const std::int64_t rows = params.shape().dims()[0];
  const std::int64_t inner = params.num_elements() / std::max<std::int64_t>(rows, 1);
  std::vector<std::int64_t> dims = indices.shape().dims();
  for (int i = 1; i < r; ++i) dims.push_back(params.shape().dims()[static_cast<std::size_t>(i)]);
  Tensor y = output(dev, Shape(dims), params.dtype());
  const std::int64_t n = indices.num_elements();
  if (y.num_elements() > 0 || (n > 0 && inner == 0)) {
    if (dev->is_gpu()) {
      CHORUS_IF_CUDA(cuda::gather(dev->gpu_ordinal(), dev->stream().native_handle(), params.dtype(), params.data(),
                                  rows, inner, indices.dtype(), indices.data(), n, y.data()));
    } else {
      internal::run_cpu(*dev, [&] {
        cpu::gather(params.dtype(), params.data(), rows, inner, indices.dtype(), indices.data(), n, y.data());
      });
    }
  }
  if (is_floating(params.dtype()) && internal::should_record({params})) {
    const Shape pshape = params.shape();
    internal::record("GatherV2", {params, indices}, {y},
                     [pshape, indices, rows, inner, n](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
                       const Tensor& g = gs[0];
                       auto gdev = g.buffer()->device_ptr();
                       Tensor dp = Tensor::zeros(pshape, g.dtype(), gdev->name());
                       if (n > 0 && inner > 0) {
                         if (gdev->is_gpu()) {
                           CHORUS_IF_CUDA(cuda::scatter_add(gdev->gpu_ordinal(), gdev->stream().native_handle(),
                                                            g.dtype(), g.data(), inner, indices.dtype(), indices.data(),
                                                            n, dp.data(), rows, op_determinism_enabled()));
                         } else {
                           internal::run_cpu(*gdev, [&] {
                             cpu::scatter_add(g.dtype(), g.data(), inner, indices.dtype(), indices.data(), n, dp.data(),
                                              rows);
                           });
                         }
                       }
                       return {dp, Tensor()};
                     });
  }
  return y;
}

Tensor one_hot(const Tensor& indices, std::int64_t depth, double on_value, double off_value, DType dtype) {
  auto dev = internal::device_of("OneHot", indices);
  internal::require_dtype("OneHot", indices, {DType::kInt32, DType::kInt64}, "indices");
  CHORUS_REQUIRE(depth >= 0, InvalidArgumentError, "OneHot: depth must be >= 0, got ", depth);
  std::vector<std::int64_t> dims = indices.shape().dims();
  dims.push_back(depth);
  Tensor y = output(dev, Shape(dims), dtype);
  const std::int64_t n = indices.num_elements();
  if (y.num_elements() > 0) {
    if (dev->is_gpu()) {
      CHORUS_IF_CUDA(cuda::one_hot(dev->gpu_ordinal(), dev->stream().native_handle(), dtype, indices.dtype(),
                                   indices.data(), n, depth, on_value, off_value, y.data()));
    } else {
      internal::run_cpu(
          *dev, [&] { cpu::one_hot(dtype, indices.dtype(), indices.data(), n, depth, on_value, off_value, y.data()); });
    }
  }
  return y;
}

}  // namespace chorus::ops
