#include <chorus/ops/dropout.h>

#include <chorus/ops/elementwise.h>
#include <chorus/ops/internal.h>

namespace chorus::ops {
namespace {

void check(const Tensor& x, double rate) {
  internal::device_of("Dropout", x);
  internal::require_float("Dropout", x);
  CHORUS_REQUIRE(rate >= 0.0 && rate < 1.0, InvalidArgumentError, "Dropout: rate must be in [0, 1), got ", rate);
}

// y = x * mask / (1 - rate), mask = uniform >= rate; composed of recorded ops, so the gradient is
// g * mask / (1 - rate).
Tensor apply(const Tensor& x, double rate, const Tensor& uniform) {
  Tensor keep = cast(greater_equal(uniform, scalar_like(uniform, rate)), x.dtype());
  return mul(x, mul(keep, scalar_like(x, 1.0 / (1.0 - rate))));
}

UniformOptions on_device_of(const Tensor& x) {
  UniformOptions o;
  o.dtype = x.dtype() == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  o.device = x.device_name();
  return o;
}

}  // namespace

Tensor dropout(const Tensor& x, double rate, Generator& generator) {
  check(x, rate);
  if (rate == 0.0) return x;
  return apply(x, rate, cast(generator.uniform(x.shape(), on_device_of(x)), x.dtype()));
}

Tensor dropout(const Tensor& x, double rate, std::array<std::int64_t, 2> seed) {
  check(x, rate);
  if (rate == 0.0) return x;
  return apply(x, rate, cast(stateless_random_uniform(x.shape(), seed, on_device_of(x)), x.dtype()));
}

Tensor dropout(const Tensor& x, double rate) { return dropout(x, rate, global_generator()); }

}  // namespace chorus::ops
