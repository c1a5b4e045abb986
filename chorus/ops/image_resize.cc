// tf.image.resize (ops/image.h): validation, dispatch to the CPU / CUDA kernels, gradients.
#include <chorus/ops/image.h>

#include <cmath>
#include <string>
#include <vector>

#include <chorus/ops/cpu/image.h>
#include <chorus/ops/internal.h>
#include <chorus/ops/tape.h>
#if CHORUS_WITH_CUDA
#include <chorus/ops/cuda/image.h>
#endif

namespace chorus::ops::image {
namespace {

using internal::output;

const char* op_name(ResizeMethod m) {
  return m == ResizeMethod::kBilinear ? "ResizeBilinear" : "ResizeNearestNeighbor";
}

// The geometry of images [b, h, w, c] or [h, w, c] resized to out_h x out_w.
ResizeGeometry geometry(const Shape& in, std::int64_t out_h, std::int64_t out_w) {
  const auto& d = in.dims();
  const bool batched = d.size() == 4;
  ResizeGeometry g;
  g.batch = batched ? d[0] : 1;
  g.in_h = d[batched ? 1 : 0];
  g.in_w = d[batched ? 2 : 1];
  g.channels = d[batched ? 3 : 2];
  g.out_h = out_h;
  g.out_w = out_w;
  g.scale_h = resize_scale(g.in_h, out_h);
  g.scale_w = resize_scale(g.in_w, out_w);
  return g;
}

Shape resized_shape(const Shape& in, std::int64_t out_h, std::int64_t out_w) {
  std::vector<std::int64_t> d = in.dims();
  const std::size_t h = d.size() == 4 ? 1 : 0;
  d[h] = out_h;
  d[h + 1] = out_w;
  return Shape(d);
}

// TF's preserve_aspect_ratio size, in float32 as TF computes it.
std::array<std::int64_t, 2> aspect_size(const ResizeGeometry& g, std::array<std::int64_t, 2> size) {
  const float sh = static_cast<float>(size[0]) / static_cast<float>(g.in_h);
  const float sw = static_cast<float>(size[1]) / static_cast<float>(g.in_w);
  const float s = std::fmin(sh, sw);
  return {static_cast<std::int64_t>(std::nearbyint(s * static_cast<float>(g.in_h))),
          static_cast<std::int64_t>(std::nearbyint(s * static_cast<float>(g.in_w)))};
}

// The forward kernels: y = resize(x) with geometry g (y allocated by the caller).
void run_forward(ResizeMethod m, DeviceContext& dev, const Tensor& x, const Tensor& y, const ResizeGeometry& g) {
  if (y.num_elements() == 0) return;
  const bool bilinear = m == ResizeMethod::kBilinear;
  if (dev.is_gpu()) {
    CHORUS_IF_CUDA(bilinear ? cuda::resize_bilinear(dev.gpu_ordinal(), dev.stream().native_handle(), x.dtype(),
                                                    x.data(), static_cast<float*>(y.data()), g)
                            : cuda::resize_nearest(dev.gpu_ordinal(), dev.stream().native_handle(),
                                                   dtype_size(x.dtype()), x.data(), y.data(), g));
  } else {
    internal::run_cpu(dev, [&] {
      if (bilinear)
        cpu::resize_bilinear(x.dtype(), x.data(), static_cast<float*>(y.data()), g);
      else
        cpu::resize_nearest(dtype_size(x.dtype()), x.data(), y.data(), g);
    });
  }
}

Tensor forward(ResizeMethod m, const Tensor& x, std::int64_t out_h, std::int64_t out_w);

// dx (x's shape and dtype) of dy (y's shape; float32 for bilinear, x's dtype for nearest).
// Recorded with its own gradient: the backward is linear in dy, and its adjoint is the forward.
Tensor backward(ResizeMethod m, const Tensor& dy, const Shape& x_shape, DType x_dtype) {
  const char* name = m == ResizeMethod::kBilinear ? "ResizeBilinearGrad" : "ResizeNearestNeighborGrad";
  auto dev = internal::device_of(name, dy);
  const std::size_t h = x_shape.rank() == 4 ? 1 : 0;
  const ResizeGeometry g = geometry(x_shape, dy.shape().dims()[h], dy.shape().dims()[h + 1]);
  Tensor dx = output(dev, x_shape, x_dtype);
  if (dx.num_elements() > 0) {
    const bool bilinear = m == ResizeMethod::kBilinear;
    if (dev->is_gpu()) {
      CHORUS_IF_CUDA(bilinear ? cuda::resize_bilinear_grad(dev->gpu_ordinal(), dev->stream().native_handle(), x_dtype,
                                                           static_cast<const float*>(dy.data()), dx.data(), g)
                              : cuda::resize_nearest_grad(dev->gpu_ordinal(), dev->stream().native_handle(), x_dtype,
                                                          dy.data(), dx.data(), g));
    } else {
      internal::run_cpu(*dev, [&] {
        if (bilinear)
          cpu::resize_bilinear_grad(x_dtype, static_cast<const float*>(dy.data()), dx.data(), g);
        else
          cpu::resize_nearest_grad(x_dtype, dy.data(), dx.data(), g);
      });
    }
  }
  if (internal::should_record({dy})) {
    const std::int64_t oh = g.out_h, ow = g.out_w;
    internal::record(name, {dy}, {dx}, [m, oh, ow](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
      if (!gs[0].defined()) return {Tensor()};
      return {forward(m, gs[0], oh, ow)};
    });
  }
  return dx;
}

Tensor forward(ResizeMethod m, const Tensor& x, std::int64_t out_h, std::int64_t out_w) {
  const char* name = op_name(m);
  auto dev = internal::device_of(name, x);
  const ResizeGeometry g = geometry(x.shape(), out_h, out_w);
  const DType out_dtype = m == ResizeMethod::kBilinear ? DType::kFloat32 : x.dtype();
  Tensor y = output(dev, resized_shape(x.shape(), out_h, out_w), out_dtype);
  run_forward(m, *dev, x, y, g);
  if (is_floating(x.dtype()) && internal::should_record({x})) {
    const Shape xs = x.shape();
    const DType xd = x.dtype();
    internal::record(name, {x}, {y}, [m, xs, xd](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
      if (!gs[0].defined()) return {Tensor()};
      return {backward(m, gs[0], xs, xd)};
    });
  }
  return y;
}

}  // namespace

Tensor resize(const Tensor& images, std::array<std::int64_t, 2> size, const ResizeOptions& options) {
  const char* name = op_name(options.method);
  internal::device_of(name, images);
  const int rank = images.shape().rank();
  CHORUS_REQUIRE(rank == 3 || rank == 4, InvalidArgumentError, name,
                 ": 'images' must have either 3 or 4 dimensions, got shape ", images.shape().to_string());
  CHORUS_REQUIRE(images.dtype() != DType::kBool, InvalidArgumentError, name,
                 ": images must be numeric (uint8, int32, int64, float16, bfloat16, float32, float64), got bool");
  CHORUS_REQUIRE(size[0] > 0 && size[1] > 0, InvalidArgumentError, name,
                 ": output dimensions must be positive, got size (", size[0], ", ", size[1], ")");
  const ResizeGeometry g = geometry(images.shape(), size[0], size[1]);
  CHORUS_REQUIRE(g.in_h > 0 && g.in_w > 0, InvalidArgumentError, name,
                 ": input image must be of non-zero size, got shape ", images.shape().to_string());
  if (options.preserve_aspect_ratio) size = aspect_size(g, size);
  // A side may round to 0 under preserve_aspect_ratio (a very thin image): TF fails in the kernel.
  CHORUS_REQUIRE(size[0] > 0 && size[1] > 0, InvalidArgumentError, name, ": output dimensions must be positive, got (",
                 size[0], ", ", size[1], ") after preserve_aspect_ratio for shape ", images.shape().to_string());
  return forward(options.method, images, size[0], size[1]);
}

}  // namespace chorus::ops::image
