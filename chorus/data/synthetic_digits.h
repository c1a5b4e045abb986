// synthetic_digits: a built-in, deterministic, learnable stand-in for MNIST (10 classes, 28×28×1
// float32 images in [0, 1], int32 labels), the default dataset when no data path is given.
//
//   auto ds = chorus::data::synthetic_digits(60000).shuffle(10000).batch(128);
//   auto raw = chorus::data::synthetic_digits_arrays(2000, /*seed=*/7);  // images [2000,28,28,1]
//
// How an image is drawn: the label's glyph from a 5×7 bitmap font is sampled bilinearly onto the
// 28×28 grid through a random affine map — a cell size of 2.3–3.0 px (glyphs ≈ 12–15 px wide, 16–21
// px tall) with the x and y scales varied independently by up to ±8%, a shear of up to ±0.25,
// a shift of up to ±2 px in each direction — then thresholded at a random level (stroke width
// ≈ 2–4 px, soft edges) and scaled to a random peak intensity in [0.75, 1]; finally each pixel gets
// noise with a standard deviation of 0.03–0.10 (a sum of four uniforms, ≈ Gaussian) and is clipped
// to [0, 1]. A small CNN separates the classes almost perfectly; a nearest-class-mean classifier on
// raw pixels does far better than chance but not perfectly (see tests/data/synthetic_digits_test.cc).
//
// Labels: every block of 10 consecutive elements (0–9, 10–19, ...) holds each class once, in a
// random order, so any prefix of a multiple of 10 elements is exactly balanced.
//
// Determinism: a pure function of (n, seed). All randomness comes from SplitMix64 streams keyed by
// (seed, element index) and the drawing is integer fixed-point arithmetic, so the bytes are the same
// on every machine and compiler, whatever the thread count; element i does not depend on n (the
// first k elements of synthetic_digits(n, s) are those of synthetic_digits(k, s)).
//
// Speed: rendered on min(hardware threads, 8) std::threads; 60,000 images take a fraction of a
// second on two cores (bench figure in docs/data.md). Tensors are created on the pipeline device
// (dataset.h). n < 0 → InvalidArgumentError.
#pragma once

#include <cstdint>

#include <chorus/data/dataset.h>
#include <chorus/data/mnist.h>

namespace chorus::data {

inline constexpr int kSyntheticDigitsSize = 28;
inline constexpr int kSyntheticDigitsClasses = 10;

// images [n, 28, 28, 1] float32, labels [n] int32.
DigitArrays synthetic_digits_arrays(std::int64_t n, std::uint64_t seed = 0);
// from_tensor_slices of the arrays: elements (image [28, 28, 1] float32, label int32 scalar).
Dataset synthetic_digits(std::int64_t n = 60000, std::uint64_t seed = 0);

}  // namespace chorus::data
