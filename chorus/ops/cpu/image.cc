// Resize kernels (ops/cpu/image.h). The loops mirror ops/cuda/image.cu's element for element;
// only the work split differs (here: one (image, row) per OpenMP iteration).
#include <chorus/ops/cpu/image.h>

#include <cstring>
#include <type_traits>
#include <vector>

#include <chorus/core/error.h>
#include <chorus/ops/cpu/numeric.h>

namespace chorus::ops::cpu {
namespace {

using i64 = std::int64_t;

// Source values as TF's ResizeBilinear reads them: cast to float32.
template <typename T>
float to_float(T v) {
  return static_cast<float>(v);
}

// The accumulator of a gradient of dtype T: float64 for float64, else float32.
template <typename T>
using grad_acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Enough work per parallel iteration to be worth a thread.
constexpr i64 kParallelElements = 1 << 14;

std::vector<BilinearTap> taps(i64 out_size, i64 in_size, float scale) {
  std::vector<BilinearTap> t(static_cast<std::size_t>(out_size));
  for (i64 o = 0; o < out_size; ++o) t[static_cast<std::size_t>(o)] = bilinear_tap(o, in_size, scale);
  return t;
}

// One output row of a bilinear resize. kC > 0: the channel count known at compile time (1, 3, 4:
// grayscale, RGB, RGBA), so the channel loop unrolls; kC == 0: C at run time. The arithmetic is
// the same in both (TF's: top and bottom lerps, then the vertical one), so the values are too.
template <int kC, typename T>
void bilinear_row(const T* top, const T* bot, float* out, const BilinearTap* tx, i64 out_w, float ylerp, i64 C_rt) {
  const i64 C = kC > 0 ? kC : C_rt;
  for (i64 ox = 0; ox < out_w; ++ox) {
    const BilinearTap& t = tx[ox];
    const T* tl_p = top + t.lower * C;
    const T* tr_p = top + t.upper * C;
    const T* bl_p = bot + t.lower * C;
    const T* br_p = bot + t.upper * C;
    float* o = out + ox * C;
    for (i64 c = 0; c < C; ++c) {
      const float tl = to_float(tl_p[c]), tr = to_float(tr_p[c]);
      const float bl = to_float(bl_p[c]), br = to_float(br_p[c]);
      const float t_ = tl + (tr - tl) * t.lerp;
      const float b_ = bl + (br - bl) * t.lerp;
      o[c] = t_ + (b_ - t_) * ylerp;
    }
  }
}

template <typename T>
void bilinear_forward(const T* x, float* y, const ResizeGeometry& g) {
  const i64 C = g.channels, rows = g.batch * g.out_h;
  if (g.in_h == g.out_h && g.in_w == g.out_w) {  // TF's no-op resize: a cast (an Inf stays Inf)
    const i64 n = rows * g.out_w * C;
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
    for (i64 i = 0; i < n; ++i) y[i] = to_float(x[i]);
    return;
  }
  const std::vector<BilinearTap> tx = taps(g.out_w, g.in_w, g.scale_w);
  const auto row = C == 3   ? bilinear_row<3, T>
                   : C == 1 ? bilinear_row<1, T>
                   : C == 4 ? bilinear_row<4, T>
                            : bilinear_row<0, T>;
#pragma omp parallel for schedule(static) if (rows * g.out_w * C >= kParallelElements)
  for (i64 r = 0; r < rows; ++r) {
    const i64 b = r / g.out_h, oy = r % g.out_h;
    const BilinearTap ty = bilinear_tap(oy, g.in_h, g.scale_h);
    const T* top = x + (b * g.in_h + ty.lower) * g.in_w * C;
    const T* bot = x + (b * g.in_h + ty.upper) * g.in_w * C;
    row(top, bot, y + r * g.out_w * C, tx.data(), g.out_w, ty.lerp, C);
  }
}

template <typename T>
void bilinear_backward(const float* dy, T* dx, const ResizeGeometry& g) {
  using A = grad_acc_t<T>;
  const i64 C = g.channels, rows = g.batch * g.in_h;
  const std::vector<BilinearTap> tx = taps(g.out_w, g.in_w, g.scale_w);
  std::vector<i64> xb(static_cast<std::size_t>(g.in_w)), xe(static_cast<std::size_t>(g.in_w));
  for (i64 ix = 0; ix < g.in_w; ++ix)
    bilinear_readers(ix, g.out_w, g.in_w, g.scale_w, &xb[static_cast<std::size_t>(ix)],
                     &xe[static_cast<std::size_t>(ix)]);
#pragma omp parallel for schedule(static) if (g.batch * g.out_h * g.out_w * C >= kParallelElements)
  for (i64 r = 0; r < rows; ++r) {
    const i64 b = r / g.in_h, iy = r % g.in_h;
    std::vector<A> acc(static_cast<std::size_t>(g.in_w * C), A(0));
    i64 yb, ye;
    bilinear_readers(iy, g.out_h, g.in_h, g.scale_h, &yb, &ye);
    for (i64 oy = yb; oy < ye; ++oy) {
      float wy[2];
      const int ny = bilinear_weights(bilinear_tap(oy, g.in_h, g.scale_h), iy, wy);
      const float* grow = dy + (b * g.out_h + oy) * g.out_w * C;
      for (i64 ix = 0; ix < g.in_w; ++ix) {
        A* a = acc.data() + ix * C;
        for (i64 ox = xb[static_cast<std::size_t>(ix)]; ox < xe[static_cast<std::size_t>(ix)]; ++ox) {
          float wx[2];
          const int nx = bilinear_weights(tx[static_cast<std::size_t>(ox)], ix, wx);
          const float* gp = grow + ox * C;
          for (int ky = 0; ky < ny; ++ky)
            for (int kx = 0; kx < nx; ++kx)
              for (i64 c = 0; c < C; ++c) a[c] += static_cast<A>(gp[c] * wy[ky] * wx[kx]);
        }
      }
    }
    T* out = dx + r * g.in_w * C;
    for (i64 k = 0; k < g.in_w * C; ++k)
      out[k] = Num<T>::store(static_cast<typename Num<T>::C>(acc[static_cast<std::size_t>(k)]));
  }
}

template <typename E>
void nearest_forward(const E* x, E* y, const ResizeGeometry& g) {
  const i64 C = g.channels, rows = g.batch * g.out_h;
  std::vector<i64> sx(static_cast<std::size_t>(g.out_w));
  for (i64 o = 0; o < g.out_w; ++o) sx[static_cast<std::size_t>(o)] = nearest_source(o, g.in_w, g.scale_w);
#pragma omp parallel for schedule(static) if (rows * g.out_w * C >= kParallelElements)
  for (i64 r = 0; r < rows; ++r) {
    const i64 b = r / g.out_h, oy = r % g.out_h;
    const E* src = x + (b * g.in_h + nearest_source(oy, g.in_h, g.scale_h)) * g.in_w * C;
    E* out = y + r * g.out_w * C;
    for (i64 ox = 0; ox < g.out_w; ++ox)
      std::memcpy(out + ox * C, src + sx[static_cast<std::size_t>(ox)] * C, static_cast<std::size_t>(C) * sizeof(E));
  }
}

template <typename T>
void nearest_backward(const T* dy, T* dx, const ResizeGeometry& g) {
  using A = grad_acc_t<T>;
  const i64 C = g.channels, rows = g.batch * g.in_h;
  std::vector<i64> xb(static_cast<std::size_t>(g.in_w)), xe(static_cast<std::size_t>(g.in_w));
  for (i64 ix = 0; ix < g.in_w; ++ix)
    nearest_readers(ix, g.out_w, g.in_w, g.scale_w, &xb[static_cast<std::size_t>(ix)],
                    &xe[static_cast<std::size_t>(ix)]);
#pragma omp parallel for schedule(static) if (g.batch * g.out_h * g.out_w * C >= kParallelElements)
  for (i64 r = 0; r < rows; ++r) {
    const i64 b = r / g.in_h, iy = r % g.in_h;
    std::vector<A> acc(static_cast<std::size_t>(g.in_w * C), A(0));
    i64 yb, ye;
    nearest_readers(iy, g.out_h, g.in_h, g.scale_h, &yb, &ye);
    for (i64 oy = yb; oy < ye; ++oy) {
      const T* grow = dy + (b * g.out_h + oy) * g.out_w * C;
      for (i64 ix = 0; ix < g.in_w; ++ix) {
        A* a = acc.data() + ix * C;
        for (i64 ox = xb[static_cast<std::size_t>(ix)]; ox < xe[static_cast<std::size_t>(ix)]; ++ox)
          for (i64 c = 0; c < C; ++c) a[c] += static_cast<A>(Num<T>::load(grow[ox * C + c]));
      }
    }
    T* out = dx + r * g.in_w * C;
    for (i64 k = 0; k < g.in_w * C; ++k)
      out[k] = Num<T>::store(static_cast<typename Num<T>::C>(acc[static_cast<std::size_t>(k)]));
  }
}

}  // namespace

void resize_bilinear(DType dtype, const void* x, float* y, const ResizeGeometry& g) {
  CHORUS_REQUIRE(dtype != DType::kBool, InvalidArgumentError, "ResizeBilinear: unsupported dtype bool");
  dispatch_dtype(dtype, "ResizeBilinear", [&](auto v) {
    using T = decltype(v);
    if constexpr (!std::is_same_v<T, bool>) bilinear_forward(static_cast<const T*>(x), y, g);
  });
}

void resize_bilinear_grad(DType dtype, const float* dy, void* dx, const ResizeGeometry& g) {
  dispatch_float(dtype, "ResizeBilinearGrad", [&](auto v) {
    using T = decltype(v);
    bilinear_backward(dy, static_cast<T*>(dx), g);
  });
}

void resize_nearest(std::size_t elem_bytes, const void* x, void* y, const ResizeGeometry& g) {
  switch (elem_bytes) {
    case 1: return nearest_forward(static_cast<const std::uint8_t*>(x), static_cast<std::uint8_t*>(y), g);
    case 2: return nearest_forward(static_cast<const std::uint16_t*>(x), static_cast<std::uint16_t*>(y), g);
    case 4: return nearest_forward(static_cast<const std::uint32_t*>(x), static_cast<std::uint32_t*>(y), g);
    case 8: return nearest_forward(static_cast<const std::uint64_t*>(x), static_cast<std::uint64_t*>(y), g);
  }
  throw InvalidArgumentError(
      chorus::internal::str_cat("ResizeNearestNeighbor: element size ", elem_bytes, " is not 1, 2, 4 or 8"));
}

void resize_nearest_grad(DType dtype, const void* dy, void* dx, const ResizeGeometry& g) {
  dispatch_float(dtype, "ResizeNearestNeighborGrad", [&](auto v) {
    using T = decltype(v);
    nearest_backward(static_cast<const T*>(dy), static_cast<T*>(dx), g);
  });
}

}  // namespace chorus::ops::cpu
