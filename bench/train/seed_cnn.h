// The seed workload of the training benchmarks (bench_train, bench_overlap): the seed CNN of
// examples/mnist_mirrored.cc compiled with Adam 1e-3, and 8 distinct global batches of synthetic
// digits, batched once and cached, so that the input pipeline costs little per step.
// Header-only, for the bench programs.
#pragma once

#include <chorus/chorus.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace chorus::bench {

inline constexpr std::int64_t kSeedGlobalBatch = 128;

// Built in `strategy`'s scope.
inline std::unique_ptr<model::Sequential> seed_cnn(distribute::Strategy& strategy) {
  auto scope = strategy.scope();
  namespace L = layers;
  auto model = std::make_unique<model::Sequential>(std::vector<L::LayerPtr>{
      L::Conv2D(32, 3, "relu"), L::MaxPooling2D(2), L::Conv2D(64, 3, "relu"), L::MaxPooling2D(2),
      L::Conv2D(64, 3, "relu"), L::Flatten(), L::Dense(64, "relu"), L::Dense(10)});
  model->compile(std::make_shared<optimizers::Adam>(1e-3),
                 std::make_shared<losses::SparseCategoricalCrossentropy>(/*from_logits=*/true));
  return model;
}

inline data::Dataset seed_training_data() {
  return data::synthetic_digits(8 * kSeedGlobalBatch, /*seed=*/1)
      .batch(kSeedGlobalBatch, /*drop_remainder=*/true)
      .cache()
      .repeat()
      .prefetch(data::kAutotune);
}

}  // namespace chorus::bench
