#include "ops/training.h"

#include <cmath>
#include <cstdint>

#include "ops/internal.h"

namespace chorus::ops {
namespace {

// One statement per op of the unfused sequence, each rounded to T: the build does not contract
// a*b+c into fma (no -ffast-math, no FMA in the baseline target), so this matches the ops bitwise.
template <typename T>
void adam_loop(T* w, T* m, T* v, const T* g, std::int64_t n, T alpha, T one_minus_beta_1, T one_minus_beta_2,
               T epsilon) {
  for (std::int64_t i = 0; i < n; ++i) {
    // Every input read before any output is written: g may share storage with a slot or w.
    const T gi = g[i], m0 = m[i], v0 = v[i], w0 = w[i];
    const T mi = static_cast<T>(m0 + static_cast<T>(static_cast<T>(gi - m0) * one_minus_beta_1));
    const T vi = static_cast<T>(v0 + static_cast<T>(static_cast<T>(static_cast<T>(gi * gi) - v0) * one_minus_beta_2));
    const T num = static_cast<T>(mi * alpha);
    const T den = static_cast<T>(static_cast<T>(std::sqrt(vi)) + epsilon);
    m[i] = mi;
    v[i] = vi;
    w[i] = static_cast<T>(w0 - static_cast<T>(num / den));
  }
}

template <typename T>
void run_adam(DeviceContext& dev, const Tensor& w, const Tensor& m, const Tensor& v, const Tensor& g, double alpha,
              double beta_1, double beta_2, double epsilon) {
  const std::int64_t n = w.num_elements();
  // The scalars as ops::scalar_like makes them: the double value converted to T.
  const T a = static_cast<T>(alpha), b1 = static_cast<T>(1.0 - beta_1), b2 = static_cast<T>(1.0 - beta_2),
          e = static_cast<T>(epsilon);
  internal::run_cpu(dev, [&] {
    adam_loop(static_cast<T*>(w.data()), static_cast<T*>(m.data()), static_cast<T*>(v.data()),
              static_cast<const T*>(g.data()), n, a, b1, b2, e);
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
  if (dt == DType::kFloat32)
    run_adam<float>(dev, w, m, v, g, alpha, beta_1, beta_2, epsilon);
  else
    run_adam<double>(dev, w, m, v, g, alpha, beta_1, beta_2, epsilon);
  return true;
}

}  // namespace chorus::ops
