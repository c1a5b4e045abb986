// tf.image's crops, flips, dtype conversion and standardization (ops/image.h). Crops are slices,
// pads and flips strided copies (ops/cpu/loops.h, ops/cuda/kernels.h); the random ops draw their
// few numbers on the CPU (ops/random.h) and read them back, as TF's kernels read the offsets of a
// slice; convert_image_dtype and per_image_standardization are compositions of elementwise ops,
// written step by step as TF's Python composes them, so NaN, Inf and rounding follow TF's.
#include <chorus/ops/image.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include <chorus/ops/cpu/loops.h>
#include <chorus/ops/elementwise.h>
#include <chorus/ops/internal.h>
#include <chorus/ops/reduction.h>
#include <chorus/ops/shape_ops.h>
#include <chorus/ops/tape.h>
#if CHORUS_WITH_CUDA
#include <chorus/ops/cuda/kernels.h>
#endif

namespace chorus::ops::image {
namespace {

using chorus::internal::str_cat;
using internal::output;
using i64 = std::int64_t;

void require_image(const char* op, const Tensor& image) {
  internal::device_of(op, image);
  const int r = image.shape().rank();
  CHORUS_REQUIRE(r == 3 || r == 4, InvalidArgumentError, op, ": 'image' must have either 3 or 4 dimensions, got shape ",
                 image.shape().to_string());
}

// Height and width axes of a 3-D or 4-D image.
int h_axis(const Tensor& image) { return image.shape().rank() == 4 ? 1 : 0; }

// x reversed along `axis` (tf.reverse): one strided copy reading the axis backwards.
Tensor reverse_axis(const Tensor& x, int axis) {
  auto dev = internal::device_of("ReverseV2", x);
  Tensor y = output(dev, x.shape(), x.dtype());
  if (x.num_elements() > 0) {
    const auto& dims = x.shape().dims();
    std::vector<i64> src = internal::contiguous_strides(x.shape());
    const i64 off = (dims[static_cast<std::size_t>(axis)] - 1) * src[static_cast<std::size_t>(axis)];
    src[static_cast<std::size_t>(axis)] = -src[static_cast<std::size_t>(axis)];
    const CopyLayout layout =
        internal::copy_layout("ReverseV2", dims, src, off, internal::contiguous_strides(x.shape()), 0);
    const std::size_t es = dtype_size(x.dtype());
    if (dev->is_gpu()) {
      CHORUS_IF_CUDA(
          cuda::copy_strided(dev->gpu_ordinal(), dev->stream().native_handle(), es, layout, x.data(), y.data()));
    } else {
      internal::run_cpu(*dev, [&] { cpu::copy_strided(es, layout, x.data(), y.data()); });
    }
  }
  if (is_floating(x.dtype()) && internal::should_record({x})) {
    internal::record("ReverseV2", {x}, {y}, [axis](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
      return {gs[0].defined() ? reverse_axis(gs[0], axis) : Tensor()};
    });
  }
  return y;
}

// TF's _random_flip given the uniforms u (float32, host): [] for a 3-D image, [batch] for 4-D.
// `spatial` is 0 for up-down (height), 1 for left-right (width).
Tensor random_flip(const Tensor& image, int spatial, const Tensor& u) {
  const int axis = h_axis(image) + spatial;
  const std::vector<float> v = u.to_vector<float>();
  if (image.shape().rank() == 3) return v[0] < 0.5f ? reverse_axis(image, axis) : image;
  const i64 batch = image.shape().dims()[0];
  std::vector<float> flips(static_cast<std::size_t>(batch));
  for (i64 b = 0; b < batch; ++b) flips[static_cast<std::size_t>(b)] = std::nearbyint(v[static_cast<std::size_t>(b)]);
  Tensor f = Tensor::from_vector(flips, Shape{batch, 1, 1, 1}, image.device_name());
  if (image.dtype() != DType::kFloat32) f = cast(f, image.dtype());
  // flips * flipped + (1 - flips) * image, as TF writes it (NaN/Inf reach the other branch too).
  return add(mul(f, reverse_axis(image, axis)), mul(sub(scalar_like(f, 1.0), f), image));
}

Shape flip_draw_shape(const Tensor& image) {
  return image.shape().rank() == 3 ? Shape{} : Shape{image.shape().dims()[0]};
}

// Checks size against value's shape; returns value.shape - size + 1 (TF's `limit`).
std::vector<i64> crop_limits(const char* op, const Tensor& value, const std::vector<i64>& size) {
  internal::device_of(op, value);
  const auto& d = value.shape().dims();
  CHORUS_REQUIRE(size.size() == d.size(), InvalidArgumentError, op, ": size has ", size.size(),
                 " entries for value of shape ", value.shape().to_string(), " (one per dimension)");
  std::vector<i64> limit(d.size());
  for (std::size_t i = 0; i < d.size(); ++i) {
    CHORUS_REQUIRE(size[i] >= 0 && size[i] <= d[i], InvalidArgumentError, op, ": Need value.shape >= size >= 0, got ",
                   value.shape().to_string(), " and size[", i, "] = ", size[i]);
    limit[i] = d[i] - size[i] + 1;
  }
  return limit;
}

// slice(value, offsets % limit, size) with the offsets drawn as int32 in [0, 2^31 - 1).
Tensor crop_at(const Tensor& value, const std::vector<i64>& size, const std::vector<i64>& limit, const Tensor& draws) {
  const std::vector<std::int32_t> r = draws.to_vector<std::int32_t>();
  std::vector<i64> begin(size.size());
  for (std::size_t i = 0; i < size.size(); ++i) begin[i] = static_cast<i64>(r[i]) % limit[i];
  return slice(value, begin, size);
}

UniformOptions crop_draw() { return {.minval = 0, .maxval = 2147483647.0, .dtype = DType::kInt32, .device = "/CPU:0"}; }

}  // namespace

Tensor central_crop(const Tensor& image, double central_fraction) {
  require_image("central_crop", image);
  CHORUS_REQUIRE(central_fraction > 0.0 && central_fraction <= 1.0, InvalidArgumentError,
                 "central_crop: central_fraction must be within (0, 1], got ", central_fraction);
  if (central_fraction == 1.0) return image;
  const int h = h_axis(image);
  std::vector<i64> begin(static_cast<std::size_t>(image.shape().rank()), 0), size = image.shape().dims();
  for (int a = h; a < h + 2; ++a) {
    const double side = static_cast<double>(size[static_cast<std::size_t>(a)]);
    const i64 start = static_cast<i64>((side - side * central_fraction) / 2);
    begin[static_cast<std::size_t>(a)] = start;
    size[static_cast<std::size_t>(a)] -= 2 * start;
  }
  return slice(image, begin, size);
}

Tensor crop_to_bounding_box(const Tensor& image, i64 offset_height, i64 offset_width, i64 target_height,
                            i64 target_width) {
  const char* op = "crop_to_bounding_box";
  require_image(op, image);
  const int h = h_axis(image);
  const auto& d = image.shape().dims();
  CHORUS_REQUIRE(offset_width >= 0, InvalidArgumentError, op, ": offset_width must be >= 0, got ", offset_width);
  CHORUS_REQUIRE(offset_height >= 0, InvalidArgumentError, op, ": offset_height must be >= 0, got ", offset_height);
  CHORUS_REQUIRE(target_width > 0, InvalidArgumentError, op, ": target_width must be > 0, got ", target_width);
  CHORUS_REQUIRE(target_height > 0, InvalidArgumentError, op, ": target_height must be > 0, got ", target_height);
  CHORUS_REQUIRE(d[static_cast<std::size_t>(h + 1)] >= target_width + offset_width, InvalidArgumentError, op,
                 ": width must be >= target + offset (image ", image.shape().to_string(), ", target_width ",
                 target_width, ", offset_width ", offset_width, ")");
  CHORUS_REQUIRE(d[static_cast<std::size_t>(h)] >= target_height + offset_height, InvalidArgumentError, op,
                 ": height must be >= target + offset (image ", image.shape().to_string(), ", target_height ",
                 target_height, ", offset_height ", offset_height, ")");
  std::vector<i64> begin(d.size(), 0), size = d;
  begin[static_cast<std::size_t>(h)] = offset_height;
  begin[static_cast<std::size_t>(h + 1)] = offset_width;
  size[static_cast<std::size_t>(h)] = target_height;
  size[static_cast<std::size_t>(h + 1)] = target_width;
  return slice(image, begin, size);
}

Tensor pad_to_bounding_box(const Tensor& image, i64 offset_height, i64 offset_width, i64 target_height,
                           i64 target_width) {
  const char* op = "pad_to_bounding_box";
  require_image(op, image);
  const int h = h_axis(image);
  const auto& d = image.shape().dims();
  const i64 after_w = target_width - offset_width - d[static_cast<std::size_t>(h + 1)];
  const i64 after_h = target_height - offset_height - d[static_cast<std::size_t>(h)];
  CHORUS_REQUIRE(offset_height >= 0, InvalidArgumentError, op, ": offset_height must be >= 0, got ", offset_height);
  CHORUS_REQUIRE(offset_width >= 0, InvalidArgumentError, op, ": offset_width must be >= 0, got ", offset_width);
  CHORUS_REQUIRE(after_w >= 0, InvalidArgumentError, op, ": width must be <= target - offset (image ",
                 image.shape().to_string(), ", target_width ", target_width, ", offset_width ", offset_width, ")");
  CHORUS_REQUIRE(after_h >= 0, InvalidArgumentError, op, ": height must be <= target - offset (image ",
                 image.shape().to_string(), ", target_height ", target_height, ", offset_height ", offset_height, ")");
  std::vector<std::pair<i64, i64>> pads(d.size(), {0, 0});
  pads[static_cast<std::size_t>(h)] = {offset_height, after_h};
  pads[static_cast<std::size_t>(h + 1)] = {offset_width, after_w};
  return pad(image, pads);
}

Tensor flip_left_right(const Tensor& image) {
  require_image("flip_left_right", image);
  return reverse_axis(image, h_axis(image) + 1);
}

Tensor flip_up_down(const Tensor& image) {
  require_image("flip_up_down", image);
  return reverse_axis(image, h_axis(image));
}

Tensor stateless_random_flip_left_right(const Tensor& image, std::array<i64, 2> seed) {
  require_image("stateless_random_flip_left_right", image);
  return random_flip(image, 1, stateless_random_uniform(flip_draw_shape(image), seed, {.device = "/CPU:0"}));
}

Tensor stateless_random_flip_up_down(const Tensor& image, std::array<i64, 2> seed) {
  require_image("stateless_random_flip_up_down", image);
  return random_flip(image, 0, stateless_random_uniform(flip_draw_shape(image), seed, {.device = "/CPU:0"}));
}

Tensor random_flip_left_right(const Tensor& image, Generator& generator) {
  require_image("random_flip_left_right", image);
  return random_flip(image, 1, generator.uniform(flip_draw_shape(image), {.device = "/CPU:0"}));
}

Tensor random_flip_up_down(const Tensor& image, Generator& generator) {
  require_image("random_flip_up_down", image);
  return random_flip(image, 0, generator.uniform(flip_draw_shape(image), {.device = "/CPU:0"}));
}

Tensor stateless_random_crop(const Tensor& value, const std::vector<i64>& size, std::array<i64, 2> seed) {
  const std::vector<i64> limit = crop_limits("stateless_random_crop", value, size);
  const Shape draw{static_cast<i64>(size.size())};
  return crop_at(value, size, limit, stateless_random_uniform(draw, seed, crop_draw()));
}

Tensor random_crop(const Tensor& value, const std::vector<i64>& size, Generator& generator) {
  const std::vector<i64> limit = crop_limits("random_crop", value, size);
  const Shape draw{static_cast<i64>(size.size())};
  return crop_at(value, size, limit, generator.uniform(draw, crop_draw()));
}

Tensor per_image_standardization(const Tensor& image) {
  internal::device_of("per_image_standardization", image);
  const int r = image.shape().rank();
  CHORUS_REQUIRE(r >= 3, InvalidArgumentError,
                 "per_image_standardization: 'image' must be at least three-dimensional, got shape ",
                 image.shape().to_string());
  const auto& d = image.shape().dims();
  const i64 n = internal::product(d, d.size() - 3, d.size());
  const Tensor x = image.dtype() == DType::kFloat32 ? image : cast(image, DType::kFloat32);
  const Tensor mean = reduce_mean(x, {-1, -2, -3}, true);
  const Tensor centered = sub(x, mean);
  const Tensor variance = reduce_mean(square(centered), {-1, -2, -3}, true);
  const Tensor min_stddev = rsqrt(scalar_like(x, static_cast<double>(static_cast<float>(n))));
  // A constant image: the maximum picks min_stddev and sends sqrt a zero gradient, which TF's
  // SqrtGrad (and chorus's) turns into 0 although sqrt'(0) is infinite.
  const Tensor stddev = sqrt(variance);
  return div(centered, maximum(stddev, min_stddev));
}

}  // namespace chorus::ops::image
