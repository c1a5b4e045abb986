// The elementwise optimizer updates behind ops::apply_fused_update (ops/training.h), written once
// for the CPU kernels (ops/training.cc) and the CUDA kernel (ops/cuda/training.cu), so that both
// compute the same expression. Each is its optimizer's op sequence (optimizer/adam.cc, sgd.cc,
// rmsprop.cc, and the decoupled weight decay of optimizer.cc) element by element: one IEEE
// operation per op, each rounded to T, in the ops' order. Both files are compiled without
// contraction (no -ffast-math; the C++ files in ISO mode, -ffp-contract=off; training.cu with
// --fmad=false), so the results are bitwise those of the op sequence on the same device.
// Internal to ops/; C++17 (nvcc includes it).
#pragma once

#include <cmath>

#include <chorus/ops/kinds.h>

#if defined(__CUDACC__)
#define CHORUS_UPDATE_FN __host__ __device__ __forceinline__
#else
#define CHORUS_UPDATE_FN inline
#endif

namespace chorus::ops::update_rules {

// The host scalars converted to T, as ops::scalar_like converts them (the double value rounded to T).
template <typename T>
struct Scalars {
  T learning_rate;     // SGD, RMSprop
  T alpha;             // Adam: learning_rate · sqrt(1 − β2^t) / (1 − β1^t)
  T one_minus_beta_1;  // Adam
  T one_minus_beta_2;  // Adam
  T epsilon;           // Adam, RMSprop
  T momentum;          // SGD, RMSprop
  T rho;               // RMSprop
  T one_minus_rho;     // RMSprop
};

// The host's FusedScalars as T, as ops::scalar_like makes its scalars: each double rounded to T.
template <typename T>
CHORUS_UPDATE_FN Scalars<T> scalars_of(const FusedScalars& h) {
  return {static_cast<T>(h.learning_rate),
          static_cast<T>(h.alpha),
          static_cast<T>(h.one_minus_beta_1),
          static_cast<T>(h.one_minus_beta_2),
          static_cast<T>(h.epsilon),
          static_cast<T>(h.momentum),
          static_cast<T>(h.rho),
          static_cast<T>(h.one_minus_rho)};
}

// A scalar block (ops/training.h's write_fused_scalars: FusedScalars' fields in declaration order,
// then the decay, as doubles) as T: the same roundings as scalars_of, so the same bits.
template <typename T>
CHORUS_UPDATE_FN Scalars<T> scalars_of_block(const double* b) {
  return {static_cast<T>(b[0]), static_cast<T>(b[1]), static_cast<T>(b[2]), static_cast<T>(b[3]),
          static_cast<T>(b[4]), static_cast<T>(b[5]), static_cast<T>(b[6]), static_cast<T>(b[7])};
}
constexpr int kBlockDecay = 8;  // the block's index of the decay (weight_decay · lr)

// The decoupled weight decay applied before the update: w − w · decay (decay = weight_decay · lr).
template <typename T>
CHORUS_UPDATE_FN T decayed(T w, T decay) {
  return w - w * decay;
}

// Adam without AMSGrad: m ← m + (g − m)(1 − β1); v ← v + (g² − v)(1 − β2); w ← w − m·α / (√v + ε).
template <typename T>
CHORUS_UPDATE_FN void adam(T& w, T& m, T& v, T g, const Scalars<T>& s) {
  const T mi = m + (g - m) * s.one_minus_beta_1;
  const T vi = v + (g * g - v) * s.one_minus_beta_2;
  const T delta = (mi * s.alpha) / (std::sqrt(vi) + s.epsilon);
  m = mi;
  v = vi;
  w = w - delta;
}

// SGD: w ← w − g·lr; with momentum (m non-null) m ← m·μ − g·lr, then w ← w + m, or with Nesterov
// w ← w + (m·μ − g·lr).
template <typename T>
CHORUS_UPDATE_FN void sgd(T& w, T* m, T g, bool nesterov, const Scalars<T>& s) {
  const T lr_g = g * s.learning_rate;
  if (m == nullptr) {
    w = w - lr_g;
    return;
  }
  const T mi = *m * s.momentum - lr_g;
  *m = mi;
  w = nesterov ? w + (mi * s.momentum - lr_g) : w + mi;
}

// RMSprop: vel ← ρ·vel + (1 − ρ)·g²; centered (avg non-null): avg ← ρ·avg + (1 − ρ)·g and
// denominator (vel − avg²) + ε, else vel + ε; increment lr·g / √denominator; with momentum (mom
// non-null) mom ← μ·mom + increment and w ← w − mom, else w ← w − increment.
template <typename T>
CHORUS_UPDATE_FN void rmsprop(T& w, T& velocity, T* momentum, T* average, T g, const Scalars<T>& s) {
  const T vel = s.rho * velocity + s.one_minus_rho * (g * g);
  velocity = vel;
  T denominator;
  if (average != nullptr) {
    const T avg = s.rho * *average + s.one_minus_rho * g;
    *average = avg;
    denominator = (vel - avg * avg) + s.epsilon;
  } else {
    denominator = vel + s.epsilon;
  }
  const T increment = (s.learning_rate * g) / std::sqrt(denominator);
  if (momentum != nullptr) {
    const T mom = s.momentum * *momentum + increment;
    *momentum = mom;
    w = w - mom;
  } else {
    w = w - increment;
  }
}

}  // namespace chorus::ops::update_rules
