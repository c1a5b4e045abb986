#include <chorus/ops/training.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <chorus/ops/cpu/clones.h>
#include <chorus/ops/internal.h>

namespace chorus::ops {
namespace {

// One statement per op of the unfused sequence, each rounded to T: the build does not contract
// a*b+c into fma (no -ffast-math, no FMA in the targets below), so this matches the ops bitwise.
// Every input is read before any output is written.
template <typename T>
inline void adam_element(T* w, T* m, T* v, const T* g, std::int64_t i, T alpha, T one_minus_beta_1, T one_minus_beta_2,
                         T epsilon) {
  const T gi = g[i], m0 = m[i], v0 = v[i], w0 = w[i];
  const T mi = static_cast<T>(m0 + static_cast<T>(static_cast<T>(gi - m0) * one_minus_beta_1));
  const T vi = static_cast<T>(v0 + static_cast<T>(static_cast<T>(static_cast<T>(gi * gi) - v0) * one_minus_beta_2));
  const T num = static_cast<T>(mi * alpha);
  const T den = static_cast<T>(static_cast<T>(std::sqrt(vi)) + epsilon);
  m[i] = mi;
  v[i] = vi;
  w[i] = static_cast<T>(w0 - static_cast<T>(num / den));
}

// The update of a large model is bound by sqrt and division when scalar (~10 cycles a
// parameter): blocks of 16 with a fixed trip count, over storage that does not alias (checked by
// the caller), are vectorized (this file is built with -fno-math-errno, so std::sqrt is a plain
// vsqrtps; SIMD sqrt and division round exactly as the scalar ones), and compiled for AVX2 and
// the baseline (CHORUS_CPU_CLONES_NO_FMA: nothing is contracted; under TSan the baseline loop).

template <typename T>
CHORUS_CPU_CLONES_NO_FMA void adam_blocks(T* __restrict w, T* __restrict m, T* __restrict v, const T* __restrict g,
                                          std::int64_t n, T alpha, T b1, T b2, T e) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (std::int64_t j = 0; j < 16; ++j) adam_element(w, m, v, g, i + j, alpha, b1, b2, e);
  for (; i < n; ++i) adam_element(w, m, v, g, i, alpha, b1, b2, e);
}

// g may share storage with a slot or with w (then the element loop, which reads before writing).
template <typename T>
void adam_loop(T* w, T* m, T* v, const T* g, std::int64_t n, T alpha, T b1, T b2, T e) {
  if (g == w || g == m || g == v || w == m || w == v || m == v) {
    for (std::int64_t i = 0; i < n; ++i) adam_element(w, m, v, g, i, alpha, b1, b2, e);
    return;
  }
  adam_blocks(w, m, v, g, n, alpha, b1, b2, e);
}

template <typename T>
void run_adam(DeviceContext& dev, const Tensor& w, const Tensor& m, const Tensor& v, const Tensor& g, double alpha,
              double beta_1, double beta_2, double epsilon) {
  const std::int64_t n = w.num_elements();
  // The scalars as ops::scalar_like makes them: the double value converted to T.
  const T a = static_cast<T>(alpha), b1 = static_cast<T>(1.0 - beta_1), b2 = static_cast<T>(1.0 - beta_2),
          e = static_cast<T>(epsilon);
  internal::run_cpu(dev, [&] {
    // Split over the device's OpenMP threads (set by run_cpu): each element's update is
    // independent, so the result is the same bits for any split.
    constexpr std::int64_t kGrain = 1 << 16;
    const std::int64_t chunks = (n + kGrain - 1) / kGrain;
    auto* wp = static_cast<T*>(w.data());
    auto* mp = static_cast<T*>(m.data());
    auto* vp = static_cast<T*>(v.data());
    const auto* gp = static_cast<const T*>(g.data());
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (std::int64_t c = 0; c < chunks; ++c) {
      const std::int64_t b = c * kGrain, len = std::min(n, b + kGrain) - b;
      adam_loop(wp + b, mp + b, vp + b, gp + b, len, a, b1, b2, e);
    }
  });
}

}  // namespace

bool apply_adam(Tensor& w, Tensor& m, Tensor& v, const Tensor& g, double alpha, double beta_1, double beta_2,
                double epsilon) {
  if (!w.defined() || !m.defined() || !v.defined() || !g.defined()) return false;
  const DType dt = w.dtype();
  if (dt != DType::kFloat32 && dt != DType::kFloat64) return false;
  if (m.dtype() != dt || v.dtype() != dt || g.dtype() != dt) return false;
  if (!(m.shape() == w.shape()) || !(v.shape() == w.shape()) || !(g.shape() == w.shape())) return false;
  DeviceContext& dev = w.device_context();
  if (dev.is_gpu() || &m.device_context() != &dev || &v.device_context() != &dev || &g.device_context() != &dev)
    return false;
  if (w.num_elements() == 0) return true;
  for (const Tensor* t : {&w, &m, &v}) t->buffer()->await_writable();  // an async checkpoint's copy first
  if (dt == DType::kFloat32)
    run_adam<float>(dev, w, m, v, g, alpha, beta_1, beta_2, epsilon);
  else
    run_adam<double>(dev, w, m, v, g, alpha, beta_1, beta_2, epsilon);
  return true;
}

}  // namespace chorus::ops
