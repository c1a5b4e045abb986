// Dropout (tf.nn.dropout): each element is kept with probability 1 - rate and scaled by
// 1 / (1 - rate), else zeroed; the gradient uses the same mask.
//
//   Tensor y = ops::dropout(x, 0.5, generator);          // a Generator (ops/random.h) per replica
//   Tensor z = ops::dropout(x, 0.5, {{1, 2}});           // stateless: the same mask for the same seed
//
// The mask comes from the counter-based generator of ops/random.h, so a seed gives the same mask
// on every device and replica. rate in [0, 1) (else InvalidArgumentError); rate 0 returns x.
// x must be floating. Keras's Dropout layer calls this only in training.
#pragma once

#include <array>
#include <cstdint>

#include <chorus/core/tensor.h>
#include <chorus/ops/random.h>

namespace chorus::ops {

Tensor dropout(const Tensor& x, double rate, Generator& generator);
Tensor dropout(const Tensor& x, double rate, std::array<std::int64_t, 2> seed);
// Draws from the global generator (ops::set_seed makes it reproducible).
Tensor dropout(const Tensor& x, double rate);

}  // namespace chorus::ops
