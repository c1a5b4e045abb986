#include <chorus/optimizer/clipping.h>

#include <cmath>

#include <chorus/core/error.h>
#include <chorus/ops/elementwise.h>
#include <chorus/ops/reduction.h>

namespace chorus::optimizers {

namespace {

void require_clip_norm(double clip_norm, const char* what) {
  CHORUS_REQUIRE(std::isfinite(clip_norm) && clip_norm > 0.0, InvalidArgumentError, what,
                 ": clip_norm must be a finite number > 0, got ", clip_norm);
}

}  // namespace

// Σ g² over all elements, accumulated in float64 (a float64 scalar on g's device).
Tensor sum_of_squares(const Tensor& g) { return ops::reduce_sum(ops::square(ops::cast(g, DType::kFloat64))); }

Tensor clip_by_norm(const Tensor& gradient, double clip_norm) {
  require_clip_norm(clip_norm, "clip_by_norm");
  if (!gradient.defined()) return gradient;
  return clip_by_norm(gradient, clip_norm, ops::sqrt(sum_of_squares(gradient)));
}

Tensor clip_by_norm(const Tensor& gradient, double clip_norm, const Tensor& norm_in) {
  require_clip_norm(clip_norm, "clip_by_norm");
  if (!gradient.defined()) return gradient;
  const Tensor norm = norm_in.device_name() == gradient.device_name() ? norm_in : norm_in.to(gradient.device_name());
  // c / max(‖g‖, c): exactly 1 when ‖g‖ <= c (a zero gradient included).
  const Tensor factor =
      ops::div(ops::scalar_like(norm, clip_norm), ops::maximum(norm, ops::scalar_like(norm, clip_norm)));
  return ops::mul(gradient, ops::cast(factor, gradient.dtype()));
}

Tensor global_norm(const std::vector<Tensor>& gradients) {
  Tensor total;
  for (const Tensor& g : gradients) {
    if (!g.defined()) continue;
    Tensor s = sum_of_squares(g);
    if (!total.defined()) {
      total = s;
    } else {
      if (s.device_name() != total.device_name()) s = s.to(total.device_name());
      total = ops::add(total, s);
    }
  }
  if (!total.defined()) return Tensor::scalar<double>(0.0);
  return ops::sqrt(total);
}

std::vector<Tensor> clip_by_global_norm(const std::vector<Tensor>& gradients, double clip_norm) {
  require_clip_norm(clip_norm, "clip_by_global_norm");
  return clip_by_global_norm(gradients, clip_norm, global_norm(gradients));
}

std::vector<Tensor> clip_by_global_norm(const std::vector<Tensor>& gradients, double clip_norm, const Tensor& norm) {
  require_clip_norm(clip_norm, "clip_by_global_norm");
  // Keras: clip · min(1/norm, 1/clip) + (norm − norm). 1/0 = inf, so a zero norm scales by 1; an
  // inf or NaN norm makes the scale NaN.
  Tensor scale = ops::mul(ops::scalar_like(norm, clip_norm),
                          ops::minimum(ops::reciprocal(norm), ops::scalar_like(norm, 1.0 / clip_norm)));
  scale = ops::add(scale, ops::sub(norm, norm));
  std::vector<Tensor> out;
  out.reserve(gradients.size());
  for (const Tensor& g : gradients) {
    if (!g.defined()) {
      out.push_back(g);
      continue;
    }
    Tensor s = scale.device_name() == g.device_name() ? scale : scale.to(g.device_name());
    out.push_back(ops::mul(g, ops::cast(s, g.dtype())));
  }
  return out;
}

Tensor clip_by_value(const Tensor& gradient, double clip_value_min, double clip_value_max) {
  CHORUS_REQUIRE(clip_value_min <= clip_value_max, InvalidArgumentError, "clip_by_value: clip_value_min (",
                 clip_value_min, ") must be <= clip_value_max (", clip_value_max, ")");
  if (!gradient.defined()) return gradient;
  return ops::minimum(ops::maximum(gradient, ops::scalar_like(gradient, clip_value_min)),
                      ops::scalar_like(gradient, clip_value_max));
}

}  // namespace chorus::optimizers
