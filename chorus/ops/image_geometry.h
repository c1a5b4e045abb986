// What the resize kernels (ops/cpu/image.cc, ops/cuda/image.cu) are handed, and the per-index
// rules they share: which source pixels an output pixel reads, with which weight, and — for the
// backward passes, which gather instead of scattering — which output pixels read a source pixel.
// One header for host and device (nvcc includes it, C++17), so the CPU and the GPU pick every
// index and weight with the same float operations (ops/cuda/image.cu is compiled with
// --fmad=false, so no multiply-add is fused there either: the two agree bit for bit).
//
// The rules are TensorFlow's kernels with half_pixel_centers=True, align_corners=False (what
// tf.image.resize runs in TF 2):
//   scale = float(in_size) / float(out_size)                              (CalculateResizeScale)
//   bilinear, output index o: in = (float(o) + 0.5f) * scale - 0.5f        (HalfPixelScaler)
//     lower = max(int64(floor(in)), 0), upper = min(int64(ceil(in)), in_size - 1),
//     lerp = in - floor(in)   (at the borders lower == upper: the edge pixel, whatever lerp is)
//   nearest, output index o: src = max(min(int64(floor((float(o) + 0.5f) * scale)), in_size - 1), 0)
//                                                                          (HalfPixelScalerForNN)
// lower, upper and src are non-decreasing in o, so the outputs that read source index i form one
// range [begin, end), found by bisection (first_output).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define CHORUS_IMAGE_HD __host__ __device__ __forceinline__
#else
#define CHORUS_IMAGE_HD inline
#endif

namespace chorus::ops {

// A batch of NHWC images resized from in_h x in_w to out_h x out_w (all > 0, batch and channels
// >= 0), contiguous, row-major.
struct ResizeGeometry {
  std::int64_t batch = 0, in_h = 0, in_w = 0, out_h = 0, out_w = 0, channels = 0;
  float scale_h = 1, scale_w = 1;  // resize_scale(in, out) per axis
};

CHORUS_IMAGE_HD float resize_scale(std::int64_t in_size, std::int64_t out_size) {
  return static_cast<float>(in_size) / static_cast<float>(out_size);
}

// The two source indices of bilinear output index o and the weight of the upper one.
struct BilinearTap {
  std::int64_t lower, upper;
  float lerp;
};

CHORUS_IMAGE_HD BilinearTap bilinear_tap(std::int64_t o, std::int64_t in_size, float scale) {
  const float in = (static_cast<float>(o) + 0.5f) * scale - 0.5f;
  const float in_f = floorf(in);
  BilinearTap t;
  t.lower = static_cast<std::int64_t>(in_f) > 0 ? static_cast<std::int64_t>(in_f) : 0;
  const std::int64_t up = static_cast<std::int64_t>(ceilf(in));
  t.upper = up < in_size - 1 ? up : in_size - 1;
  t.lerp = in - in_f;
  return t;
}

CHORUS_IMAGE_HD std::int64_t nearest_source(std::int64_t o, std::int64_t in_size, float scale) {
  std::int64_t s = static_cast<std::int64_t>(floorf((static_cast<float>(o) + 0.5f) * scale));
  if (s > in_size - 1) s = in_size - 1;
  return s > 0 ? s : 0;
}

// The smallest o in [0, out_size) whose key(o) > threshold (key non-decreasing), out_size if none.
// kind 0: bilinear upper, 1: bilinear lower, 2: nearest source.
CHORUS_IMAGE_HD std::int64_t first_output(int kind, std::int64_t threshold, std::int64_t out_size, std::int64_t in_size,
                                          float scale) {
  std::int64_t lo = 0, hi = out_size;
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    std::int64_t key;
    if (kind == 2) {
      key = nearest_source(mid, in_size, scale);
    } else {
      const BilinearTap t = bilinear_tap(mid, in_size, scale);
      key = kind == 0 ? t.upper : t.lower;
    }
    if (key > threshold)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

// The outputs [begin, end) whose bilinear taps include source index i (upper >= i and lower <= i).
CHORUS_IMAGE_HD void bilinear_readers(std::int64_t i, std::int64_t out_size, std::int64_t in_size, float scale,
                                      std::int64_t* begin, std::int64_t* end) {
  *begin = first_output(0, i - 1, out_size, in_size, scale);
  *end = first_output(1, i, out_size, in_size, scale);
}

// The outputs [begin, end) whose nearest source is i.
CHORUS_IMAGE_HD void nearest_readers(std::int64_t i, std::int64_t out_size, std::int64_t in_size, float scale,
                                     std::int64_t* begin, std::int64_t* end) {
  *begin = first_output(2, i - 1, out_size, in_size, scale);
  *end = first_output(2, i, out_size, in_size, scale);
}

// The weight with which bilinear output o's tap t reads source index i, added per tap as TF's
// ResizeBilinearGrad does: (1 - lerp) if lower == i, lerp if upper == i; *n is how many of the
// two taps read i (0, 1 or 2 — 2 at a border, where lower == upper), w[0..n) their weights.
CHORUS_IMAGE_HD int bilinear_weights(const BilinearTap& t, std::int64_t i, float* w) {
  int n = 0;
  if (t.lower == i) w[n++] = 1.0f - t.lerp;
  if (t.upper == i) w[n++] = t.lerp;
  return n;
}

}  // namespace chorus::ops
