// Resize kernels (ops/cpu/image.h). Each element's arithmetic mirrors ops/cuda/image.cu's, so the
// values are the same; the work split differs (here: runs of rows per OpenMP thread, and the
// bilinear forward pass lerps each source row once per run: see LerpedRows).
#include <chorus/ops/cpu/image.h>

#include <climits>
#include <cstring>
#include <type_traits>
#include <vector>

#include <omp.h>

#include <chorus/core/error.h>
#include <chorus/ops/cpu/clones.h>
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

// The bilinear forward pass in two steps with TF's arithmetic, so TF's values: a source row's
// horizontal lerps h[k] = l + (u - l) * xlerp (l, u: the row's float32 values at the column taps),
// then each output row = top + (bottom - top) * ylerp of two such rows. Each source row's lerps are
// computed once per run of output rows that reads it (a two-row cache), not once per output row
// that reads it, and every innermost loop runs over a whole row: the compiler vectorizes the
// vertical lerp and the cast of a source row to float32.
struct ColumnTaps {
  std::vector<std::int32_t> lower, upper;  // per output pixel: its taps' first value in the row (x · C)
  std::vector<float> lerp;
};

ColumnTaps column_taps(const ResizeGeometry& g) {
  const i64 C = g.channels;
  CHORUS_REQUIRE((g.in_w + 1) * C <= INT32_MAX, InvalidArgumentError, "ResizeBilinear: an input row of ", g.in_w, " x ",
                 C, " values is past the CPU kernel's 2^31 - 1");
  ColumnTaps t;
  t.lower.resize(static_cast<std::size_t>(g.out_w));
  t.upper.resize(static_cast<std::size_t>(g.out_w));
  t.lerp.resize(static_cast<std::size_t>(g.out_w));
  for (i64 ox = 0; ox < g.out_w; ++ox) {
    const BilinearTap tap = bilinear_tap(ox, g.in_w, g.scale_w);
    const auto k = static_cast<std::size_t>(ox);
    t.lower[k] = static_cast<std::int32_t>(tap.lower * C);
    t.upper[k] = static_cast<std::int32_t>(tap.upper * C);
    t.lerp[k] = tap.lerp;
  }
  return t;
}

// h[x·C + c] = l + (u - l) · w[x] with l = s[lo[x] + c], u = s[up[x] + c], for the n pixels of a row.
// kLanes == 4 (C = 3 or 4): four values per pixel in one vector (for C = 3 the fourth is the next
// pixel's first, overwritten by that pixel's store: `s` and `h` have one value of slack at the end).
// kLanes == 0: C at run time, one value at a time. Never an FMA (the values are TF's).
template <int kLanes>
CHORUS_CPU_CLONES_NO_FMA void lerp_columns(const float* __restrict s, const ColumnTaps& t, float* __restrict h, i64 n,
                                           i64 C) {
  const std::int32_t* lo = t.lower.data();
  const std::int32_t* up = t.upper.data();
  const float* w = t.lerp.data();
  for (i64 x = 0; x < n; ++x) {
    const float* l = s + lo[x];
    const float* u = s + up[x];
    float* o = h + x * C;
    if constexpr (kLanes == 4) {
      float v[4];
      for (int c = 0; c < 4; ++c) v[c] = l[c] + (u[c] - l[c]) * w[x];
      std::memcpy(o, v, sizeof v);
    } else {
      for (i64 c = 0; c < C; ++c) o[c] = l[c] + (u[c] - l[c]) * w[x];
    }
  }
}

// out[k] = top[k] + (bot[k] - top[k]) * w.
CHORUS_CPU_CLONES_NO_FMA void lerp_rows(const float* __restrict top, const float* __restrict bot, float w,
                                        float* __restrict out, i64 n) {
  for (i64 k = 0; k < n; ++k) out[k] = top[k] + (bot[k] - top[k]) * w;
}

// A thread's horizontally lerped source rows: two slots, keyed by source row (image × in_h + y).
template <typename T>
class LerpedRows {
 public:
  LerpedRows(const T* x, const ResizeGeometry& g, const ColumnTaps& taps)
      : x_(x), taps_(taps), C_(g.channels), out_w_(g.out_w), in_row_(g.in_w * C_), out_row_(g.out_w * C_) {
    src_.assign(static_cast<std::size_t>(in_row_ + 1), 0.0f);  // + 1: lerp_columns<4>'s slack
    for (auto& s : slot_) s.assign(static_cast<std::size_t>(out_row_ + 1), 0.0f);
  }
  // The lerped row `key`. The row returned last stays valid through this call: a miss evicts the
  // other slot.
  const float* get(i64 key) {
    for (int i = 0; i < 2; ++i)
      if (key_[i] == key) {
        last_ = i;
        return slot_[i].data();
      }
    const int i = 1 - last_;
    last_ = i;
    key_[i] = key;
    const T* in = x_ + key * in_row_;
    float* s = src_.data();
    for (i64 k = 0; k < in_row_; ++k) s[k] = to_float(in[k]);
    if (C_ == 3 || C_ == 4)
      lerp_columns<4>(s, taps_, slot_[i].data(), out_w_, C_);
    else
      lerp_columns<0>(s, taps_, slot_[i].data(), out_w_, C_);
    return slot_[i].data();
  }

 private:
  const T* x_;
  const ColumnTaps& taps_;
  i64 C_, out_w_, in_row_, out_row_;
  std::vector<float> src_;
  std::vector<float> slot_[2];
  i64 key_[2] = {-1, -1};
  int last_ = 1;
};

template <typename T>
void bilinear_forward(const T* x, float* y, const ResizeGeometry& g) {
  const i64 C = g.channels, rows = g.batch * g.out_h, n_out = g.out_w * C;
  if (g.in_h == g.out_h && g.in_w == g.out_w) {  // TF's no-op resize: a cast (an Inf stays Inf)
    const i64 n = rows * n_out;
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
    for (i64 i = 0; i < n; ++i) y[i] = to_float(x[i]);
    return;
  }
  const ColumnTaps taps = column_taps(g);
  // Each thread takes one contiguous run of output rows, so that its cache sees rows in order.
#pragma omp parallel if (rows * n_out >= kParallelElements)
  {
    const i64 threads = omp_get_num_threads(), me = omp_get_thread_num();
    const i64 begin = rows * me / threads, end = rows * (me + 1) / threads;
    LerpedRows<T> lerped(x, g, taps);
    for (i64 r = begin; r < end; ++r) {
      const i64 b = r / g.out_h, oy = r % g.out_h;
      const BilinearTap ty = bilinear_tap(oy, g.in_h, g.scale_h);
      const float* top = lerped.get(b * g.in_h + ty.lower);
      const float* bot = lerped.get(b * g.in_h + ty.upper);
      lerp_rows(top, bot, ty.lerp, y + r * n_out, n_out);
    }
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
