// Weight initializers (tf.keras.initializers), as functions of (shape, dtype) → Tensor.
//
//   auto init = initializers::glorot_uniform(/*seed=*/42);   // the same values for the same seed
//   Tensor w = init(Shape{784, 64}, DType::kFloat32);
//
// Seeded initializers draw from chorus's stateless Philox ops (ops/random.h), so a seed gives the
// same weights on every device, replica and machine; unseeded ones draw from the global generator
// (ops::set_seed makes a whole program reproducible). Fans follow Keras: a [in, out] matrix has
// fan_in = in, fan_out = out; a [kh, kw, in, out] filter multiplies both by kh·kw.
// Tensors are created on the default device (placement rules); layers create their variables
// from them, and a strategy copies them to every replica (identical initial values).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <chorus/core/tensor.h>

namespace chorus::initializers {

using Initializer = std::function<Tensor(const Shape& shape, DType dtype)>;

// U(-limit, limit), limit = sqrt(6 / (fan_in + fan_out)) — Keras's default for kernels.
Initializer glorot_uniform(std::optional<std::uint64_t> seed = std::nullopt);
// N(0, stddev) truncated at ±2·stddev, stddev = sqrt(2 / (fan_in + fan_out)) / 0.87962566103423978
// (Keras's correction: the truncated draw's std is 0.8796… of the untruncated one).
Initializer glorot_normal(std::optional<std::uint64_t> seed = std::nullopt);
// Truncated normal (±2σ), stddev = sqrt(2 / fan_in) / 0.87962566103423978 (Keras's correction
// for the truncation), for ReLU networks.
Initializer he_normal(std::optional<std::uint64_t> seed = std::nullopt);
// U(-limit, limit), limit = sqrt(6 / fan_in) (Keras's he_uniform).
Initializer he_uniform(std::optional<std::uint64_t> seed = std::nullopt);
// N(mean, stddev) with values beyond 2·stddev of the mean redrawn (tf.keras.initializers.
// TruncatedNormal: no variance correction here, the std of the draws is ≈ 0.88·stddev).
// stddev must be > 0 (InvalidArgumentError).
Initializer truncated_normal(double mean = 0.0, double stddev = 0.05, std::optional<std::uint64_t> seed = std::nullopt);
Initializer random_uniform(double minval = -0.05, double maxval = 0.05,
                           std::optional<std::uint64_t> seed = std::nullopt);
Initializer zeros();
Initializer ones();
Initializer constant(double value);

// What a built-in initializer is, in Keras's terms: its class and arguments, which
// model/serialization.h writes as Keras does ({"class_name": "GlorotUniform", "config": {"seed": null}}).
// The factories above return initializers that carry it; describe() gives it back, or nullopt for
// any other function (a lambda of your own: a model holding one cannot be written as JSON).
struct InitializerSpec {
  // "GlorotUniform", "GlorotNormal", "HeNormal", "HeUniform", "TruncatedNormal", "RandomUniform",
  // "Zeros", "Ones", "Constant"
  std::string class_name;
  std::optional<std::uint64_t> seed;  // all but Zeros, Ones, Constant
  double minval = 0, maxval = 0;      // RandomUniform
  double mean = 0, stddev = 0;        // TruncatedNormal
  double value = 0;                   // Constant
};
std::optional<InitializerSpec> describe(const Initializer& init);

// (fan_in, fan_out) of a weight shape, Keras's rule.
std::pair<double, double> compute_fans(const Shape& shape);

}  // namespace chorus::initializers
