// Rendering is integer fixed point on purpose: floating-point results could differ with FMA
// contraction or another libm, and the contract is identical bytes everywhere. Positions are in
// 1/256 px (Q8), glyph coordinates and intensities in 1/65536 (Q16); the only float operation is the
// final exact scaling of a Q16 intensity (an integer <= 65536) by 2^-16.
#include <chorus/data/synthetic_digits.h>

#include <algorithm>
#include <array>
#include <thread>
#include <vector>

#include <chorus/core/error.h>
#include <chorus/data/internal.h>

namespace chorus::data {
namespace {

constexpr int kSize = kSyntheticDigitsSize;
constexpr int kGlyphW = 5, kGlyphH = 7;

// The classic 5×7 font; bit 4 is the leftmost column.
constexpr std::array<std::array<std::uint8_t, kGlyphH>, 10> kFont = {{
    {0b01110, 0b10001, 0b10011, 0b10101, 0b11001, 0b10001, 0b01110},  // 0
    {0b00100, 0b01100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110},  // 1
    {0b01110, 0b10001, 0b00001, 0b00010, 0b00100, 0b01000, 0b11111},  // 2
    {0b11111, 0b00010, 0b00100, 0b00010, 0b00001, 0b10001, 0b01110},  // 3
    {0b00010, 0b00110, 0b01010, 0b10010, 0b11111, 0b00010, 0b00010},  // 4
    {0b11111, 0b10000, 0b11110, 0b00001, 0b00001, 0b10001, 0b01110},  // 5
    {0b00110, 0b01000, 0b10000, 0b11110, 0b10001, 0b10001, 0b01110},  // 6
    {0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b01000, 0b01000},  // 7
    {0b01110, 0b10001, 0b10001, 0b01110, 0b10001, 0b10001, 0b01110},  // 8
    {0b01110, 0b10001, 0b10001, 0b01111, 0b00001, 0b00010, 0b01100},  // 9
}};

// Glyphs as 0/1 cells with a zero border of 2 cells, so bilinear taps never need bounds checks
// once the coordinate is clamped into the padded box.
constexpr int kPad = 2, kPW = kGlyphW + 2 * kPad, kPH = kGlyphH + 2 * kPad;
using Padded = std::array<std::uint8_t, kPW * kPH>;

std::array<Padded, 10> padded_font() {
  std::array<Padded, 10> out{};
  for (int d = 0; d < 10; ++d)
    for (int r = 0; r < kGlyphH; ++r)
      for (int c = 0; c < kGlyphW; ++c) out[d][(r + kPad) * kPW + (c + kPad)] = (kFont[d][r] >> (kGlyphW - 1 - c)) & 1;
  return out;
}

// Independent streams: labels per block of 10, drawing parameters and noise per element.
std::uint64_t stream_key(std::uint64_t seed, std::uint64_t kind, std::uint64_t index) {
  using internal::splitmix64_mix;
  return splitmix64_mix(splitmix64_mix(seed ^ 0xC0FFEE5EEDull) ^ splitmix64_mix(kind * 0x100000001B3ull + index));
}

std::int64_t uniform_in(internal::SplitMix64& rng, std::int64_t lo, std::int64_t hi) {  // [lo, hi]
  return lo + static_cast<std::int64_t>(rng.uniform(static_cast<std::uint64_t>(hi - lo + 1)));
}

int label_of(std::uint64_t seed, std::int64_t i) {
  internal::SplitMix64 rng(stream_key(seed, 1, static_cast<std::uint64_t>(i / 10)));
  std::array<int, 10> perm;
  for (int k = 0; k < 10; ++k) perm[k] = k;
  for (int k = 9; k > 0; --k) std::swap(perm[k], perm[rng.uniform(static_cast<std::uint64_t>(k + 1))]);
  return perm[static_cast<std::size_t>(i % 10)];
}

// Bilinear sample of a padded glyph at glyph-space (u, v) in Q16 cell units (cell centres at +0.5).
std::int64_t sample(const Padded& g, std::int64_t u, std::int64_t v) {
  const std::int64_t gu = u - 32768 + kPad * 65536, gv = v - 32768 + kPad * 65536;
  const std::int64_t lo = 0, hi_u = (kPW - 1) * 65536 - 1, hi_v = (kPH - 1) * 65536 - 1;
  if (gu < lo || gv < lo || gu > hi_u || gv > hi_v) return 0;  // outside the padded box: blank
  const std::int64_t i0 = gu >> 16, j0 = gv >> 16, fu = gu & 0xFFFF, fv = gv & 0xFFFF;
  const std::uint8_t* p = g.data() + j0 * kPW + i0;
  const std::int64_t top = p[0] * (65536 - fu) + p[1] * fu;
  const std::int64_t bottom = p[kPW] * (65536 - fu) + p[kPW + 1] * fu;
  return (top * (65536 - fv) + bottom * fv) >> 16;
}

void render(const std::array<Padded, 10>& font, std::uint64_t seed, std::int64_t i, int label, float* out) {
  internal::SplitMix64 rng(stream_key(seed, 2, static_cast<std::uint64_t>(i)));
  const std::int64_t cell = uniform_in(rng, 589, 768);            // 2.3–3.0 px per cell, Q8
  const std::int64_t sx = cell * uniform_in(rng, 236, 276) >> 8;  // ±8% per axis
  const std::int64_t sy = cell * uniform_in(rng, 236, 276) >> 8;
  const std::int64_t inv_sx = (std::int64_t{1} << 24) / sx;  // glyph cells per px, Q16
  const std::int64_t inv_sy = (std::int64_t{1} << 24) / sy;
  const std::int64_t shear = uniform_in(rng, -64, 64);                                  // ±0.25, Q8
  const std::int64_t dx = uniform_in(rng, -512, 512), dy = uniform_in(rng, -512, 512);  // ±2 px, Q8
  const std::int64_t threshold = uniform_in(rng, 16384, 29491);                         // 0.25–0.45, Q16
  const std::int64_t peak = uniform_in(rng, 49152, 65536);                              // 0.75–1, Q16
  const std::int64_t sigma = uniform_in(rng, 1966, 6554);                               // 0.03–0.10, Q16
  // Irwin–Hall of four 16-bit uniforms: mean 0, standard deviation 65536 / sqrt(3) ≈ 37837; scaled
  // to sigma by a Q32 factor (a multiply per pixel instead of a division).
  const std::int64_t noise_scale = (sigma << 32) / 37837;
  const Padded& glyph = font[static_cast<std::size_t>(label)];

  for (int y = 0; y < kSize; ++y) {
    const std::int64_t py = (2 * y + 1 - kSize) * 128 - dy;  // pixel centre relative to the image centre, Q8
    const std::int64_t v = ((py * inv_sy) >> 8) + kGlyphH * 32768;
    const std::int64_t sheared = (shear * py) >> 8;
    for (int x = 0; x < kSize; ++x) {
      const std::int64_t px = (2 * x + 1 - kSize) * 128 - dx - sheared;
      const std::int64_t u = ((px * inv_sx) >> 8) + kGlyphW * 32768;
      const std::int64_t b = sample(glyph, u, v);
      const std::int64_t ink = std::clamp<std::int64_t>((b - threshold) * 4, 0, 65536) * peak >> 16;
      const std::uint64_t w = rng.next();
      const std::int64_t n4 = static_cast<std::int64_t>(w & 0xFFFF) + static_cast<std::int64_t>(w >> 16 & 0xFFFF) +
                              static_cast<std::int64_t>(w >> 32 & 0xFFFF) + static_cast<std::int64_t>(w >> 48) -
                              2 * 65535;
      const std::int64_t noise = (n4 * noise_scale) >> 32;
      const std::int64_t value = std::clamp<std::int64_t>(ink + noise, 0, 65536);
      out[y * kSize + x] = static_cast<float>(value) * (1.0f / 65536.0f);
    }
  }
}

}  // namespace

DigitArrays synthetic_digits_arrays(std::int64_t n, std::uint64_t seed) {
  CHORUS_REQUIRE(n >= 0, InvalidArgumentError, "synthetic_digits: n must be >= 0, got ", n);
  const std::size_t count = static_cast<std::size_t>(n), pixels = kSize * kSize;
  std::vector<float> images(count * pixels);
  std::vector<std::int32_t> labels(count);
  const auto font = padded_font();

  auto work = [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      labels[i] = label_of(seed, static_cast<std::int64_t>(i));
      render(font, seed, static_cast<std::int64_t>(i), labels[i], images.data() + i * pixels);
    }
  };
  const std::size_t threads =
      std::clamp<std::size_t>(std::min<std::size_t>(std::thread::hardware_concurrency(), count / 1000), 1, 8);
  if (threads == 1) {
    work(0, count);
  } else {
    std::vector<std::thread> pool;
    for (std::size_t t = 0; t < threads; ++t) pool.emplace_back(work, count * t / threads, count * (t + 1) / threads);
    for (auto& th : pool) th.join();
  }

  const std::string device = internal::pipeline_device();
  DigitArrays out;
  out.images = Tensor::from_host(images.data(), Shape{n, kSize, kSize, 1}, DType::kFloat32, device);
  out.labels = Tensor::from_host(labels.data(), Shape{n}, DType::kInt32, device);
  return out;
}

Dataset synthetic_digits(std::int64_t n, std::uint64_t seed) {
  DigitArrays a = synthetic_digits_arrays(n, seed);
  return Dataset::from_tensor_slices({a.images, a.labels});
}

}  // namespace chorus::data
