#include <chorus/model/initializers.h>

#include <cmath>
#include <functional>

#include <chorus/core/error.h>
#include <chorus/ops/random.h>

namespace chorus::initializers {
namespace {

Tensor uniform(const Shape& shape, DType dtype, double lo, double hi, std::optional<std::uint64_t> seed) {
  ops::UniformOptions o;
  o.minval = lo;
  o.maxval = hi;
  o.dtype = dtype;
  if (seed) return ops::stateless_random_uniform(shape, {static_cast<std::int64_t>(*seed), 0}, o);
  return ops::random_uniform(shape, o);
}

Tensor truncated(const Shape& shape, DType dtype, double mean, double stddev, std::optional<std::uint64_t> seed) {
  ops::NormalOptions o;
  o.mean = mean;
  o.stddev = stddev;
  o.dtype = dtype;
  if (seed) return ops::stateless_truncated_normal(shape, {static_cast<std::int64_t>(*seed), 0}, o);
  return ops::truncated_normal(shape, o);
}

// Keras's VarianceScaling(distribution="truncated_normal") divides the std by the std of a unit
// normal truncated at ±2.
constexpr double kTruncatedStd = 0.87962566103423978;

// An initializer that remembers what it is (describe()): std::function keeps the callable's type,
// so target<Described>() finds it again.
struct Described {
  InitializerSpec spec;
  std::function<Tensor(const Shape&, DType)> fn;
  Tensor operator()(const Shape& shape, DType dtype) const { return fn(shape, dtype); }
};

Initializer described(InitializerSpec spec, std::function<Tensor(const Shape&, DType)> fn) {
  return Described{std::move(spec), std::move(fn)};
}

}  // namespace

std::optional<InitializerSpec> describe(const Initializer& init) {
  if (const Described* d = init.target<Described>()) return d->spec;
  return std::nullopt;
}

std::pair<double, double> compute_fans(const Shape& shape) {
  const auto& d = shape.dims();
  if (d.empty()) return {1, 1};
  if (d.size() == 1) return {static_cast<double>(d[0]), static_cast<double>(d[0])};
  double receptive = 1;
  for (std::size_t i = 0; i + 2 < d.size(); ++i) receptive *= static_cast<double>(d[i]);
  return {static_cast<double>(d[d.size() - 2]) * receptive, static_cast<double>(d.back()) * receptive};
}

Initializer glorot_uniform(std::optional<std::uint64_t> seed) {
  return described({.class_name = "GlorotUniform", .seed = seed}, [seed](const Shape& shape, DType dtype) {
    auto [in, out] = compute_fans(shape);
    const double limit = std::sqrt(6.0 / std::max(1.0, in + out));
    return uniform(shape, dtype, -limit, limit, seed);
  });
}

Initializer glorot_normal(std::optional<std::uint64_t> seed) {
  return described({.class_name = "GlorotNormal", .seed = seed}, [seed](const Shape& shape, DType dtype) {
    auto [in, out] = compute_fans(shape);
    const double stddev = std::sqrt(2.0 / std::max(1.0, in + out)) / kTruncatedStd;
    return truncated(shape, dtype, 0.0, stddev, seed);
  });
}

Initializer he_normal(std::optional<std::uint64_t> seed) {
  return described({.class_name = "HeNormal", .seed = seed}, [seed](const Shape& shape, DType dtype) {
    const double stddev = std::sqrt(2.0 / std::max(1.0, compute_fans(shape).first)) / kTruncatedStd;
    return truncated(shape, dtype, 0.0, stddev, seed);
  });
}

Initializer he_uniform(std::optional<std::uint64_t> seed) {
  return described({.class_name = "HeUniform", .seed = seed}, [seed](const Shape& shape, DType dtype) {
    const double limit = std::sqrt(6.0 / std::max(1.0, compute_fans(shape).first));
    return uniform(shape, dtype, -limit, limit, seed);
  });
}

Initializer truncated_normal(double mean, double stddev, std::optional<std::uint64_t> seed) {
  CHORUS_REQUIRE(stddev > 0, InvalidArgumentError, "truncated_normal initializer: stddev must be > 0, got ", stddev);
  return described({.class_name = "TruncatedNormal", .seed = seed, .mean = mean, .stddev = stddev},
                   [=](const Shape& shape, DType dtype) { return truncated(shape, dtype, mean, stddev, seed); });
}

Initializer random_uniform(double minval, double maxval, std::optional<std::uint64_t> seed) {
  CHORUS_REQUIRE(minval < maxval, InvalidArgumentError, "random_uniform initializer: minval ", minval,
                 " must be < maxval ", maxval);
  return described({.class_name = "RandomUniform", .seed = seed, .minval = minval, .maxval = maxval},
                   [=](const Shape& shape, DType dtype) { return uniform(shape, dtype, minval, maxval, seed); });
}

Initializer zeros() {
  return described({.class_name = "Zeros"},
                   [](const Shape& shape, DType dtype) { return Tensor::zeros(shape, dtype); });
}
Initializer ones() {
  return described({.class_name = "Ones"}, [](const Shape& shape, DType dtype) { return Tensor::ones(shape, dtype); });
}
Initializer constant(double value) {
  return described({.class_name = "Constant", .value = value},
                   [value](const Shape& shape, DType dtype) { return Tensor::full(shape, value, dtype); });
}

}  // namespace chorus::initializers
