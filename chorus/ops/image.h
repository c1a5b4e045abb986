// Image ops: TensorFlow 2's tf.image resize, crops, flips, dtype conversion and standardization,
// each with TF's gradient where TF has one.
//
//   namespace img = chorus::ops::image;
//   Tensor x = img::convert_image_dtype(decoded_uint8, DType::kFloat32);      // [h, w, c] in [0, 1]
//   Tensor y = img::resize(x, {224, 224});                                   // bilinear, float32
//   auto gen = chorus::ops::Generator::from_seed(7);
//   Tensor z = img::random_flip_left_right(img::random_crop(y, {200, 200, 3}, gen), gen);
//   Tensor s = img::stateless_random_flip_left_right(y, {1, 2});             // = TF's, bit for bit
//
// Images are NHWC: [batch, height, width, channels] or one image [height, width, channels]; a
// 3-D input gives a 3-D output. Every op returns a new tensor on the input's device (CPU or GPU).
//
// Semantics are TF 2.21's, including NaN and Inf (checked against TF in tests/ops/image_test.cc):
//   - resize: bilinear is ResizeBilinear(half_pixel_centers=True) — every source value cast to
//     float32, output float32 for every input dtype, lerps in float32 as TF writes them (so an Inf
//     beside a finite value gives NaN where TF's does); nearest is
//     ResizeNearestNeighbor(half_pixel_centers=True): src = min(floor((o + 0.5) * in / out), in - 1),
//     the output keeps the input's dtype and is a copy of source elements. The index and weight
//     rules are ops/image_geometry.h's. Results agree with TF's to float32 rounding (TF's own
//     kernels may fuse or reorder a multiply-add); the CPU and GPU kernels agree bit for bit.
//   - The random ops draw from Philox (ops/random.h): the stateless ones exactly as TF's
//     tf.image.stateless_* (same bits: stateless_random_uniform is TF's), the Generator ones from
//     a Generator whose state a checkpoint saves (GeneratorState): restored, it draws the same
//     crops and flips again.
//
// Gradients (recorded on the active GradientTapes, for floating inputs): resize → TF's
// ResizeBilinearGrad / ResizeNearestNeighborGrad, gathered (deterministic; accumulated in float32,
// float64 for float64, and rounded once); crops → pad of the gradient (slice's adjoint); flips →
// the same flip of the gradient; pad_to_bounding_box → slice; convert_image_dtype → a cast back
// (float → float only, as TF); per_image_standardization → through its composing ops, as TF.
//
// Errors (InvalidArgumentError, naming the op and the shapes/values; thrown by the call, nothing
// enqueued, no generator state consumed): rank not 3 or 4; a size, offset or fraction outside what
// the op accepts (as TF's messages say); dtype not accepted (bool everywhere; resize's gradient and
// convert_image_dtype need numeric dtypes). Placement errors as every op (ops/internal.h).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include <chorus/core/dtype.h>
#include <chorus/core/tensor.h>
#include <chorus/ops/random.h>

namespace chorus::ops::image {

// tf.image.ResizeMethod.BILINEAR ("bilinear") and NEAREST_NEIGHBOR ("nearest").
enum class ResizeMethod { kBilinear, kNearestNeighbor };

struct ResizeOptions {
  ResizeMethod method = ResizeMethod::kBilinear;
  // TF's preserve_aspect_ratio: scale both sides by min(new_h / h, new_w / w) (float32), each side
  // round(scale * side) (half to even), so the result fits in `size`.
  bool preserve_aspect_ratio = false;
};

// tf.image.resize(images, size, method, preserve_aspect_ratio) with antialias=False. size = {new
// height, new width}, both > 0; images of any numeric dtype (bilinear: output float32; nearest:
// the input's dtype), height and width > 0 (batch and channels may be 0: an empty result).
// As TF 2, an image already of the target size still goes through the op: bilinear casts it to
// float32 (TF's kernel copies then, without lerps, so an Inf stays Inf), nearest copies it.
Tensor resize(const Tensor& images, std::array<std::int64_t, 2> size, const ResizeOptions& options = {});

// tf.image.central_crop: the central `central_fraction` (in (0, 1]) of height and width; offsets
// int((side - side * fraction) / 2) in float64 arithmetic (TF's), size side - 2 * offset.
Tensor central_crop(const Tensor& image, double central_fraction);

// tf.image.crop_to_bounding_box: image[..., offset_h : offset_h + target_h, offset_w : offset_w +
// target_w, :]; offsets >= 0, targets > 0, offset + target <= side.
Tensor crop_to_bounding_box(const Tensor& image, std::int64_t offset_height, std::int64_t offset_width,
                            std::int64_t target_height, std::int64_t target_width);

// tf.image.pad_to_bounding_box: zeros around the image so that it sits at (offset_h, offset_w) of a
// target_h x target_w image; offsets >= 0, offset + side <= target.
Tensor pad_to_bounding_box(const Tensor& image, std::int64_t offset_height, std::int64_t offset_width,
                           std::int64_t target_height, std::int64_t target_width);

// tf.image.flip_left_right / flip_up_down (tf.reverse over width / height).
Tensor flip_left_right(const Tensor& image);
Tensor flip_up_down(const Tensor& image);

// tf.image.stateless_random_flip_left_right / _up_down. As TF: one uniform u per image from
// stateless_random_uniform(shape [] for 3-D, [batch] for 4-D, seed). A 3-D image is flipped when
// u < 0.5; a batch computes flips = round(u) (half to even: u > 0.5 flips) and returns
// flips * flipped + (1 - flips) * image in the image's dtype — so, as in TF, a NaN or Inf in a
// batched image also makes the mirrored position NaN (0 * Inf), and -0.0 becomes +0.0.
Tensor stateless_random_flip_left_right(const Tensor& image, std::array<std::int64_t, 2> seed);
Tensor stateless_random_flip_up_down(const Tensor& image, std::array<std::int64_t, 2> seed);
// The same rule with u drawn from `generator` (generator.uniform, float32, [] or [batch]).
Tensor random_flip_left_right(const Tensor& image, Generator& generator);
Tensor random_flip_up_down(const Tensor& image, Generator& generator);

// tf.image.stateless_random_crop(value, size, seed): a slice of shape `size` (one entry per
// dimension of value, each <= value's) at offset = stateless_random_uniform([rank], seed, int32,
// [0, 2^31 - 1)) % (value.shape - size + 1). Any dtype but bool.
Tensor stateless_random_crop(const Tensor& value, const std::vector<std::int64_t>& size,
                             std::array<std::int64_t, 2> seed);
// The same rule with the offsets drawn from `generator` (tf.image.random_crop's rule, on a
// checkpointable generator).
Tensor random_crop(const Tensor& value, const std::vector<std::int64_t>& size, Generator& generator);

// tf.image.convert_image_dtype(image, dtype, saturate) between uint8, int32, int64, float16,
// bfloat16, float32, float64, TF's rules step by step (each in the dtype TF computes it in):
//   same dtype: the image;  float → float: cast;
//   int → int: scaling down, floor-divide by (in_max + 1) / (out_max + 1), then cast (saturate:
//     clamp to the output's range first); scaling up, cast (saturate: clamp) then multiply by
//     (out_max + 1) / (in_max + 1) — in_max maps below out_max, but a round trip is exact;
//   int → float: cast, then multiply by 1 / in_max rounded to the output dtype;
//   float → int: multiply by out_max + 0.5 rounded to the input dtype, then (saturate) clamp to
//     the output's range as TF's saturate_cast nudges it (e.g. float32 → int32: [-2^31, 2^31 - 128]),
//     then cast.
// Out-of-range values without saturate: the cast follows core/dtype.h (nearest representable, NaN
// → 0); TF's CPU leaves these to the hardware (x86: wrap-around or the INT_MIN sentinel), TF's
// GPU to CUDA's rules, so no value is promised there. NaN → 0 with saturate too (TF's GPU; its
// x86 CPU gives INT_MIN for int32/int64). Gradient: float → float only.
Tensor convert_image_dtype(const Tensor& image, DType dtype, bool saturate = false);

// tf.image.per_image_standardization: (x - mean) / max(stddev, 1 / sqrt(N)) over each image's
// N = h * w * c values (population stddev), computed in float32 (the output is float32 for every
// input dtype, as TF). A NaN or Inf anywhere in an image makes that whole image NaN.
Tensor per_image_standardization(const Tensor& image);

}  // namespace chorus::ops::image
