// Shared by training_test.cc (CPU) and training_gpu_test.cc: ops::apply_fused_update (ops/training.h)
// against the op sequences it replaces (optimizer/adam.cc, sgd.cc, rmsprop.cc and the decoupled
// weight decay of optimizer.cc), run on the same device, for a group of variables of several sizes
// (a vectorised block loop and its tail, an empty variable, one large enough to be split over
// threads), with NaN, ±Inf, zeros and signed values among the elements. Equal means the same bits,
// or NaN on both sides (the payload of a NaN is not compared).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <chorus/ops/ops.h>
#include <chorus/ops/training.h>

namespace chorus::fused_testing {

struct Variant {
  std::string name;
  ops::FusedUpdate update;
  bool decay = false;
};

inline std::vector<Variant> variants() {
  std::vector<Variant> out;
  for (const bool decay : {false, true}) {
    const std::string d = decay ? "_decay" : "";
    ops::FusedUpdate adam;
    adam.rule = ops::FusedRule::kAdam;
    adam.scalars.alpha = 1e-3 * std::sqrt(1 - std::pow(0.999, 3)) / (1 - std::pow(0.9, 3));
    adam.scalars.one_minus_beta_1 = 1.0 - 0.9;
    adam.scalars.one_minus_beta_2 = 1.0 - 0.999;
    adam.scalars.epsilon = 1e-7;
    out.push_back({"adam" + d, adam, decay});
    for (const int kind : {0, 1, 2}) {  // plain, momentum, nesterov
      ops::FusedUpdate sgd;
      sgd.rule = ops::FusedRule::kSgd;
      sgd.scalars.learning_rate = 0.05;
      sgd.scalars.momentum = kind > 0 ? 0.9 : 0.0;
      sgd.momentum_slot = kind > 0;
      sgd.nesterov = kind == 2;
      out.push_back({std::string("sgd") + (kind == 1 ? "_momentum" : kind == 2 ? "_nesterov" : "") + d, sgd, decay});
    }
    for (const int kind : {0, 1, 2, 3}) {  // plain, momentum, centered, both
      ops::FusedUpdate rms;
      rms.rule = ops::FusedRule::kRMSprop;
      rms.scalars.learning_rate = 0.01;
      rms.scalars.rho = 0.9;
      rms.scalars.one_minus_rho = 1.0 - 0.9;
      rms.scalars.epsilon = 1e-7;
      rms.momentum_slot = kind == 1 || kind == 3;
      rms.scalars.momentum = rms.momentum_slot ? 0.5 : 0.0;
      rms.centered = kind >= 2;
      out.push_back({std::string("rmsprop") +
                         (kind == 1   ? "_momentum"
                          : kind == 2 ? "_centered"
                          : kind == 3 ? "_momentum_centered"
                                      : "") +
                         d,
                     rms, decay});
    }
  }
  return out;
}

inline std::size_t slot_count(const ops::FusedUpdate& u) {
  if (u.rule == ops::FusedRule::kAdam) return 2;
  if (u.rule == ops::FusedRule::kSgd) return u.momentum_slot ? 1 : 0;
  return 1 + (u.momentum_slot ? 1 : 0) + (u.centered ? 1 : 0);
}

// n values: a smooth signal around `offset`, with NaN, +Inf, −Inf and 0 sprinkled in (`specials`).
template <typename T>
std::vector<T> values(std::size_t n, double scale, double offset, bool specials, bool positive = false) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    double x = offset + scale * std::sin(0.37 * static_cast<double>(i) + 1.0);
    if (positive) x = std::abs(x) + 1e-6;
    v[i] = static_cast<T>(x);
  }
  if (specials)
    for (std::size_t i = 5; i < n; i += 97) {
      const T special[] = {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity(),
                           -std::numeric_limits<T>::infinity(), T(0)};
      v[i] = special[(i / 97) % 4];
    }
  return v;
}

// The op sequence of `u` on one variable (the optimizers' update_step, with the decay op first).
inline void op_sequence(const Variant& var, Tensor& w, std::vector<Tensor>& slots, const Tensor& g, double decay) {
  const ops::FusedUpdate& u = var.update;
  const ops::FusedScalars& s = u.scalars;
  if (var.decay) w.copy_from(ops::sub(w, ops::mul(w, ops::scalar_like(w, decay))));
  if (u.rule == ops::FusedRule::kAdam) {
    Tensor &m = slots[0], &v = slots[1];
    m.copy_from(ops::add(m, ops::mul(ops::sub(g, m), ops::scalar_like(g, s.one_minus_beta_1))));
    v.copy_from(ops::add(v, ops::mul(ops::sub(ops::square(g), v), ops::scalar_like(g, s.one_minus_beta_2))));
    w.copy_from(ops::sub(w, ops::div(ops::mul(m, ops::scalar_like(m, s.alpha)),
                                     ops::add(ops::sqrt(v), ops::scalar_like(m, s.epsilon)))));
    return;
  }
  if (u.rule == ops::FusedRule::kSgd) {
    const Tensor lr_g = ops::mul(g, ops::scalar_like(g, s.learning_rate));
    if (!u.momentum_slot) {
      w.copy_from(ops::sub(w, lr_g));
      return;
    }
    Tensor& m = slots[0];
    const Tensor mu = ops::scalar_like(m, s.momentum);
    m.copy_from(ops::sub(ops::mul(m, mu), lr_g));
    w.copy_from(u.nesterov ? ops::add(w, ops::sub(ops::mul(m, mu), lr_g)) : ops::add(w, m));
    return;
  }
  Tensor& velocity = slots[0];
  const Tensor rho = ops::scalar_like(g, s.rho), one_minus_rho = ops::scalar_like(g, s.one_minus_rho),
               eps = ops::scalar_like(g, s.epsilon);
  velocity.copy_from(ops::add(ops::mul(rho, velocity), ops::mul(one_minus_rho, ops::square(g))));
  Tensor denominator;
  if (u.centered) {
    Tensor& average = slots[u.momentum_slot ? 2 : 1];
    average.copy_from(ops::add(ops::mul(rho, average), ops::mul(one_minus_rho, g)));
    denominator = ops::add(ops::sub(velocity, ops::square(average)), eps);
  } else {
    denominator = ops::add(velocity, eps);
  }
  const Tensor increment = ops::div(ops::mul(ops::scalar_like(g, s.learning_rate), g), ops::sqrt(denominator));
  if (u.momentum_slot) {
    Tensor& momentum = slots[1];
    momentum.copy_from(ops::add(ops::mul(ops::scalar_like(g, s.momentum), momentum), increment));
    w.copy_from(ops::sub(w, momentum));
  } else {
    w.copy_from(ops::sub(w, increment));
  }
}

template <typename T>
void expect_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  const std::vector<T> a = got.to_vector<T>(), b = want.to_vector<T>();
  ASSERT_EQ(a.size(), b.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < a.size() && bad < 5; ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) {
      ++bad;
      ADD_FAILURE() << what << "[" << i << "]: fused " << a[i] << ", op sequence " << b[i];
    }
  }
}

// The variant's scalars scaled by `f` (a later step's learning rate or α).
inline Variant scaled(Variant v, double f) {
  v.update.scalars.learning_rate *= f;
  v.update.scalars.alpha *= f;
  return v;
}

// The group: element counts `sizes`; fused vs op sequence on `device`, for every variant. With
// `from_block`, the fused update reads its scalars and decay from a scalar block on the device
// (ops::write_fused_scalars; the by-value scalars and decays are NaN, to show they are ignored),
// and a second step with other scalars written into the same block follows the first.
template <typename T>
void check_all(const std::string& device, const std::vector<std::int64_t>& sizes, bool from_block = false) {
  const DType dtype = dtype_of<T>();
  const double decay = 1e-3 * 0.1;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const Variant& var : variants()) {
    std::vector<ops::FusedVariable> fused;
    std::vector<Tensor> ref_w, grads;
    std::vector<std::vector<Tensor>> ref_slots;
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      const auto n = static_cast<std::size_t>(sizes[k]);
      const Shape shape{sizes[k]};
      const bool specials = k % 2 == 0;
      const Tensor g = Tensor::from_vector<T>(values<T>(n, 0.5, -0.2, specials), shape, device);
      grads.push_back(g);
      const std::vector<T> w0 = values<T>(n, 1.0, 0.1, specials);
      ops::FusedVariable fv{Tensor::from_vector<T>(w0, shape, device), g, {}, var.decay, from_block ? nan : decay};
      ref_w.push_back(Tensor::from_vector<T>(w0, shape, device));
      ref_slots.emplace_back();
      for (std::size_t s = 0; s < slot_count(var.update); ++s) {
        // Second moments (Adam's v, RMSprop's velocity) are >= 0 as in training.
        const bool second = (var.update.rule == ops::FusedRule::kAdam && s == 1) ||
                            (var.update.rule == ops::FusedRule::kRMSprop && s == 0);
        const std::vector<T> s0 = values<T>(n, second ? 1e-4 : 0.01, second ? 2e-4 : 0.0, false, second);
        fv.slots.push_back(Tensor::from_vector<T>(s0, shape, device));
        ref_slots.back().push_back(Tensor::from_vector<T>(s0, shape, device));
      }
      fused.push_back(std::move(fv));
    }
    ops::FusedUpdate update = var.update;
    if (from_block) {
      update.scalars_on_device = Tensor::zeros(Shape{ops::kFusedScalarSlots}, DType::kFloat64, device);
      update.scalars = ops::FusedScalars{nan, nan, nan, nan, nan, nan, nan, nan};
    }
    const int steps = from_block ? 2 : 1;
    for (int step = 0; step < steps; ++step) {
      const Variant now = scaled(var, step == 0 ? 1.0 : 3.0);
      const double decay_now = decay * (step == 0 ? 1.0 : 3.0);
      if (from_block) ops::write_fused_scalars(update.scalars_on_device, now.update.scalars, decay_now);
      for (std::size_t k = 0; k < sizes.size(); ++k) op_sequence(now, ref_w[k], ref_slots[k], grads[k], decay_now);
      ASSERT_TRUE(ops::apply_fused_update(update, fused)) << var.name;
      for (std::size_t k = 0; k < sizes.size(); ++k) {
        const std::string what = var.name + " " + std::string(dtype_name(dtype)) + (from_block ? " block" : "") +
                                 " step " + std::to_string(step) + " variable " + std::to_string(k);
        expect_same_bits<T>(fused[k].weight, ref_w[k], what + " weight");
        for (std::size_t s = 0; s < ref_slots[k].size(); ++s)
          expect_same_bits<T>(fused[k].slots[s], ref_slots[k][s], what + " slot " + std::to_string(s));
      }
    }
  }
}

}  // namespace chorus::fused_testing
