#include <chorus/ops/cpu/max_pool.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include <chorus/ops/cpu/clones.h>

namespace chorus::ops::cpu::max_pool {
namespace {

// Below this many input elements one thread does the pass.
constexpr std::int64_t kParallelElements = 1 << 15;
// Channels handled together: the running maximum and its tap live in local arrays of this many
// floats and int32s (same width, so the compare-and-select vectorizes), narrowed to bytes after.
constexpr std::int64_t kBlock = 64;

// The row functions are compiled for AVX-512, AVX2 and the baseline (clones.h): they only compare,
// select and add, so every clone gives the same bits.

// The taps of window (oh, ow) inside the input: kh in [kh0, kh1), kw in [kw0, kw1); ih0/iw0 is
// the input position of tap (0, 0).
struct Window {
  std::int64_t ih0, iw0, kh0, kh1, kw0, kw1;
  bool empty() const { return kh0 >= kh1 || kw0 >= kw1; }
};

Window window(const Conv2dGeometry& g, std::int64_t oh, std::int64_t ow) {
  const std::int64_t h0 = oh * g.stride_h - g.pad_top, w0 = ow * g.stride_w - g.pad_left;
  return Window{h0,
                w0,
                std::max<std::int64_t>(0, -h0),
                std::min(g.k_h, g.in_h - h0),
                std::max<std::int64_t>(0, -w0),
                std::min(g.k_w, g.in_w - w0)};
}

// Output row (n, oh): every window's maximum and (workspace not null) its tap.
CHORUS_CPU_CLONES void forward_row(const Conv2dGeometry& g, const float* x, float* y, std::uint8_t* workspace,
                                   std::int64_t n, std::int64_t oh) {
  const std::int64_t c = g.in_c;
  float best[kBlock];
  std::int32_t arg[kBlock];
  for (std::int64_t ow = 0; ow < g.out_w; ++ow) {
    const std::int64_t out = ((n * g.out_h + oh) * g.out_w + ow) * c;
    const Window w = window(g, oh, ow);
    if (w.empty()) {  // no tap inside (TF's SAME never makes one): y = 0, as the reference
      std::fill(y + out, y + out + c, 0.f);
      if (workspace != nullptr) std::fill(workspace + out, workspace + out + c, std::uint8_t{0});
      continue;
    }
    for (std::int64_t c0 = 0; c0 < c; c0 += kBlock) {
      const std::int64_t len = std::min(kBlock, c - c0);
      // TensorFlow's (and oneDNN's) rule: the maximum starts at the lowest float and the first tap,
      // and a tap wins when strictly greater — NaN never does, so NaN is skipped, and a window of
      // NaN and -inf gives -FLT_MAX with its gradient on the first tap (docs/ops.md).
      for (std::int64_t i = 0; i < len; ++i) {
        best[i] = std::numeric_limits<float>::lowest();
        arg[i] = static_cast<std::int32_t>(w.kh0 * g.k_w + w.kw0);
      }
      for (std::int64_t kh = w.kh0; kh < w.kh1; ++kh) {
        for (std::int64_t kw = w.kw0; kw < w.kw1; ++kw) {
          const float* xp = x + ((n * g.in_h + w.ih0 + kh) * g.in_w + w.iw0 + kw) * c + c0;
          const auto tap = static_cast<std::int32_t>(kh * g.k_w + kw);
          for (std::int64_t i = 0; i < len; ++i) {
            const bool more = xp[i] > best[i];  // strictly: ties keep the first maximum
            best[i] = more ? xp[i] : best[i];
            arg[i] = more ? tap : arg[i];
          }
        }
      }
      float* yp = y + out + c0;
      for (std::int64_t i = 0; i < len; ++i) yp[i] = best[i];
      if (workspace == nullptr) continue;
      std::uint8_t* wp = workspace + out + c0;
      for (std::int64_t i = 0; i < len; ++i) wp[i] = static_cast<std::uint8_t>(arg[i]);
    }
  }
}

// Image n's whole dx: zeroed, then each window's dy added at its maximum's tap.
CHORUS_CPU_CLONES void backward_image(const Conv2dGeometry& g, const float* dy, const std::uint8_t* workspace,
                                      float* dx, std::int64_t n) {
  const std::int64_t c = g.in_c;
  float* dxi = dx + n * g.in_h * g.in_w * c;
  std::fill(dxi, dxi + g.in_h * g.in_w * c, 0.f);
  std::int32_t arg[kBlock];
  for (std::int64_t oh = 0; oh < g.out_h; ++oh) {
    for (std::int64_t ow = 0; ow < g.out_w; ++ow) {
      const Window w = window(g, oh, ow);
      if (w.empty()) continue;
      const std::int64_t out = ((n * g.out_h + oh) * g.out_w + ow) * c;
      for (std::int64_t c0 = 0; c0 < c; c0 += kBlock) {
        const std::int64_t len = std::min(kBlock, c - c0);
        const float* dyp = dy + out + c0;
        for (std::int64_t i = 0; i < len; ++i) arg[i] = workspace[out + c0 + i];
        for (std::int64_t kh = w.kh0; kh < w.kh1; ++kh) {
          for (std::int64_t kw = w.kw0; kw < w.kw1; ++kw) {
            float* dxp = dxi + ((w.ih0 + kh) * g.in_w + w.iw0 + kw) * c + c0;
            const auto tap = static_cast<std::int32_t>(kh * g.k_w + kw);
            for (std::int64_t i = 0; i < len; ++i) dxp[i] += arg[i] == tap ? dyp[i] : 0.f;
          }
        }
      }
    }
  }
}

}  // namespace

bool fits(const Conv2dGeometry& g) { return g.k_h * g.k_w <= 255; }

std::size_t workspace_bytes(const Conv2dGeometry& g) { return static_cast<std::size_t>(g.output_elements()); }

void forward_training(const Conv2dGeometry& g, const float* x, float* y, std::uint8_t* workspace) {
  const std::int64_t rows = g.n * g.out_h;
#pragma omp parallel for schedule(static) if (g.input_elements() >= kParallelElements)
  for (std::int64_t row = 0; row < rows; ++row) forward_row(g, x, y, workspace, row / g.out_h, row % g.out_h);
}

void forward(const Conv2dGeometry& g, const float* x, float* y) { forward_training(g, x, y, nullptr); }

void backward(const Conv2dGeometry& g, const float* dy, const std::uint8_t* workspace, float* dx) {
  // One image per thread: overlapping windows add into the same dx, within one image only.
#pragma omp parallel for schedule(static) if (g.input_elements() >= kParallelElements)
  for (std::int64_t n = 0; n < g.n; ++n) backward_image(g, dy, workspace, dx, n);
}

}  // namespace chorus::ops::cpu::max_pool
