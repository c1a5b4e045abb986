// Philox4x32-10, the counter-based generator behind every chorus random op, and the mappings from
// its output words to samples. One header for host and device: the CPU loop (ops/random.cc) and the
// CUDA kernel (ops/cuda/random.cu) call the same functions below, so a seed gives the same numbers
// on every device and replica. C++17 (nvcc includes it).
//
// Generator (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC'11; the
// one TensorFlow uses): a 128-bit counter and a 64-bit key give 4 uint32 words per call ("block"),
// 10 rounds of multiply-hi/lo (0xD2511F53, 0xCD9E8D57) with the key bumped by the Weyl constants
// (0x9E3779B9, 0xBB67AE85) between rounds. Pure function: block(key, counter) depends on nothing
// else, so any element can be computed anywhere, in any order.
//
// ---- What each draw consumes (the determinism contract) ----
// A draw of n elements with (key, base counter c). "block b" = philox4x32_10(c + b, key), where
// "+" is a 128-bit add into the low 64 bits (philox_skip), "w0..w3" its words. E = elements per
// block. Element i lives in block b = i / E:
//
//   uniform  float32/float16/bfloat16  E=4  u = uint32_to_float(w[i%4])            (23 bits)
//            float64                   E=2  u = uint64_to_double(w[2j], w[2j+1]), j = i%2 (52 bits)
//            int32                     E=4  minval + w[i%4] mod (maxval-minval)
//            int64                     E=2  minval + (w[2j] | w[2j+1] << 32) mod (maxval-minval)
//   normal   float32/float16/bfloat16  E=4  j = i%4: box_muller_float(w[2(j/2)], w[2(j/2)+1]),
//                                           the sin output for even j, the cos output for odd j
//            float64                   E=2  box_muller_double(w0, w1, w2, w3), sin (i even) / cos (odd)
//   truncated normal: as normal, but element i draws attempt k = 0, 1, 2, ... from block b of
//            lane k — the counter c + b with k added to its HIGH 64 bits (philox_lane) — and keeps
//            the first z with |z| < 2. So attempt 0 is exactly the normal draw, and no element's
//            value depends on how many attempts another element needed. Lanes k >= 1 are never
//            reached by draws on lane 0 (that would take 2^64 blocks). After kMaxTruncatedAttempts
//            rejections (probability 0.0455^64 < 1e-85 per element) the element is z = 0.
//
// The draw consumes ceil(n / E) blocks of lane 0 (philox_blocks): a Generator advances its counter
// by exactly that much, so draws of n and m (n a multiple of E) equal one draw of n + m.
// Scaling (SampleParams): float uniform = min(u * (maxval - minval) + minval, largest value of the
// dtype below maxval) computed in the dtype's compute type (float32 for the 16-bit types), normal =
// z * stddev + mean; 16-bit results are rounded to nearest even once, at the store.
//
// CPU vs GPU: uniform draws (every dtype) are bitwise identical — only exact IEEE operations, with
// multiply and add kept separate (mul_rn/add_rn: nvcc would otherwise fuse them into an FMA, which
// rounds once instead of twice). Normal and truncated normal agree up to the accuracy of log, sin
// and cos in glibc and in CUDA's math library (a few ulp; sqrt is exact on both); in rare cases a
// 16-bit result then rounds to a neighbouring value, or a truncated-normal element within an ulp of
// |z| = 2 is accepted on one side and resampled on the other.
//
// Uniform float32/float64 and normal float32/float64 follow TensorFlow's Philox kernels word for
// word (Uint32ToFloat takes the LOW 23 bits, Uint64ToDouble 20 + 32 bits, Box-Muller with the
// 1e-7 floor on u1 that guards log(0)), and stateless seeds are scrambled as TF's GenerateKey does,
// so stateless_random_uniform/normal in float32/float64 are meant to reproduce
// tf.random.stateless_uniform/normal for the same seed (not checked against TF in this repository).
// TF's 16-bit kernels and truncated normal consume bits differently; chorus does not follow them.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include <chorus/core/dtype.h>

#if defined(__CUDACC__)
#define CHORUS_PHILOX_HD __host__ __device__
#else
#define CHORUS_PHILOX_HD
#endif

namespace chorus::ops {

struct PhiloxCounter {
  std::uint32_t v[4];  // v[0] least significant
};
struct PhiloxKey {
  std::uint32_t v[2];
};

enum class Distribution : std::uint8_t { kUniform, kNormal, kTruncatedNormal };

// Rejection attempts per truncated-normal element (see above).
constexpr int kMaxTruncatedAttempts = 64;

// ---- the generator ----

CHORUS_PHILOX_HD inline void philox_mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t* hi, std::uint32_t* lo) {
#if defined(__CUDA_ARCH__)
  *lo = a * b;
  *hi = __umulhi(a, b);
#else
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  *lo = static_cast<std::uint32_t>(p);
  *hi = static_cast<std::uint32_t>(p >> 32);
#endif
}

// One block: Philox4x32 with 10 rounds.
CHORUS_PHILOX_HD inline PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k.v[0] += 0x9E3779B9u;
      k.v[1] += 0xBB67AE85u;
    }
    std::uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(0xD2511F53u, c.v[0], &hi0, &lo0);
    philox_mulhilo(0xCD9E8D57u, c.v[2], &hi1, &lo1);
    const PhiloxCounter next = {{hi1 ^ c.v[1] ^ k.v[0], lo1, hi0 ^ c.v[3] ^ k.v[1], lo0}};
    c = next;
  }
  return c;
}

// c + n as 128-bit integers (carry from the low 64 bits into the high 64; wraps at 2^128).
CHORUS_PHILOX_HD inline PhiloxCounter philox_skip(PhiloxCounter c, std::uint64_t n) {
  const std::uint64_t lo = static_cast<std::uint64_t>(c.v[0]) | static_cast<std::uint64_t>(c.v[1]) << 32;
  const std::uint64_t sum = lo + n;
  c.v[0] = static_cast<std::uint32_t>(sum);
  c.v[1] = static_cast<std::uint32_t>(sum >> 32);
  if (sum < lo) {  // carry
    if (++c.v[2] == 0) ++c.v[3];
  }
  return c;
}

// c + lane * 2^64: the truncated-normal retry lanes (wraps in the high 64 bits).
CHORUS_PHILOX_HD inline PhiloxCounter philox_lane(PhiloxCounter c, std::uint64_t lane) {
  std::uint64_t hi = static_cast<std::uint64_t>(c.v[2]) | static_cast<std::uint64_t>(c.v[3]) << 32;
  hi += lane;
  c.v[2] = static_cast<std::uint32_t>(hi);
  c.v[3] = static_cast<std::uint32_t>(hi >> 32);
  return c;
}

// Key and counter for a two-word seed (TF's GenerateKey for stateless ops): one Philox call with
// a fixed key scrambles the seed, so no half of the seed needs to be strong. The counter's low
// 64 bits start at 0.
CHORUS_PHILOX_HD inline void philox_scramble(std::uint64_t seed0, std::uint64_t seed1, std::uint32_t key0,
                                             std::uint32_t key1, PhiloxKey* key, PhiloxCounter* counter) {
  const PhiloxCounter in = {{static_cast<std::uint32_t>(seed0), static_cast<std::uint32_t>(seed0 >> 32),
                             static_cast<std::uint32_t>(seed1), static_cast<std::uint32_t>(seed1 >> 32)}};
  const PhiloxCounter mix = philox4x32_10(in, PhiloxKey{{key0, key1}});
  *key = PhiloxKey{{mix.v[0], mix.v[1]}};
  *counter = PhiloxCounter{{0, 0, mix.v[2], mix.v[3]}};
}
CHORUS_PHILOX_HD inline void philox_from_stateless_seed(std::uint64_t seed0, std::uint64_t seed1, PhiloxKey* key,
                                                        PhiloxCounter* counter) {
  philox_scramble(seed0, seed1, 0x3ec8f720u, 0x02461e29u, key, counter);
}

// ---- exact arithmetic helpers (never fused into an FMA, on either side) ----

CHORUS_PHILOX_HD inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
CHORUS_PHILOX_HD inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
CHORUS_PHILOX_HD inline double mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
CHORUS_PHILOX_HD inline double add_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

CHORUS_PHILOX_HD inline float abs_rn(float x) { return x < 0.0f ? -x : x; }
CHORUS_PHILOX_HD inline double abs_rn(double x) { return x < 0.0 ? -x : x; }

// ---- words → samples ----

// [0, 1) from the low 23 bits: the float in [1, 2) with that mantissa, minus 1 (exact).
CHORUS_PHILOX_HD inline float uint32_to_float(std::uint32_t x) {
  const std::uint32_t bits = 0x3f800000u | (x & 0x7fffffu);
#if defined(__CUDA_ARCH__)
  const float f = __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
#endif
  return f - 1.0f;
}

// [0, 1) from 52 bits: the low 20 bits of x0 (high mantissa) and all of x1.
CHORUS_PHILOX_HD inline double uint64_to_double(std::uint32_t x0, std::uint32_t x1) {
  const std::uint64_t bits = (std::uint64_t{1023} << 52) | (static_cast<std::uint64_t>(x0 & 0xfffffu) << 32) | x1;
#if defined(__CUDA_ARCH__)
  const double d = __longlong_as_double(static_cast<long long>(bits));
#else
  double d;
  std::memcpy(&d, &bits, sizeof d);
#endif
  return d - 1.0;
}

// Box-Muller: two uniforms → two independent standard normals. u1 is floored at 1e-7 so log(0)
// never happens (the largest |z| is then sqrt(-2 ln 1e-7) ≈ 5.68). 2π·u is computed in double and
// rounded to float (as TF does), an exact-rounding step on both sides.
CHORUS_PHILOX_HD inline void box_muller_float(std::uint32_t x0, std::uint32_t x1, float* z0, float* z1) {
  float u1 = uint32_to_float(x0);
  if (u1 < 1.0e-7f) u1 = 1.0e-7f;
  const float v1 = static_cast<float>(mul_rn(2.0 * 3.14159265358979323846, static_cast<double>(uint32_to_float(x1))));
#if defined(__CUDA_ARCH__)
  const float u2 = sqrtf(-2.0f * logf(u1));
  const float s = sinf(v1), c = cosf(v1);
#else
  const float u2 = std::sqrt(-2.0f * std::log(u1));
  const float s = std::sin(v1), c = std::cos(v1);
#endif
  *z0 = mul_rn(s, u2);
  *z1 = mul_rn(c, u2);
}

CHORUS_PHILOX_HD inline void box_muller_double(std::uint32_t x0, std::uint32_t x1, std::uint32_t x2, std::uint32_t x3,
                                               double* z0, double* z1) {
  double u1 = uint64_to_double(x0, x1);
  if (u1 < 1.0e-7) u1 = 1.0e-7;
  const double v1 = mul_rn(2.0 * 3.14159265358979323846, uint64_to_double(x2, x3));
#if defined(__CUDA_ARCH__)
  const double u2 = sqrt(-2.0 * log(u1));
  const double s = sin(v1), c = cos(v1);
#else
  const double u2 = std::sqrt(-2.0 * std::log(u1));
  const double s = std::sin(v1), c = std::cos(v1);
#endif
  *z0 = mul_rn(s, u2);
  *z1 = mul_rn(c, u2);
}

// ---- per-block sampling, shared by the CPU loop and the CUDA kernel ----

// Scaling of one draw, computed once on the host by make_sample_params (ops/random.cc validates
// the arguments before). Floats: value = scale * (u or z) + shift; uniform results are clamped to
// <= max (the largest value of the output dtype below maxval). Integers: minval + bits mod range.
struct SampleParams {
  float scale_f = 1, shift_f = 0, max_f = 0;
  double scale_d = 1, shift_d = 0, max_d = 0;
  std::int64_t lo_i = 0;
  std::uint64_t range_u = 1;
};

// SampleParams for a draw of `dtype` with a/b = minval/maxval (uniform) or mean/stddev (normal,
// truncated normal); the arguments must have passed ops/random.cc's validation. Host only; defined
// in ops/random.cc so that the CPU loop and the CUDA launcher share it.
SampleParams make_sample_params(Distribution dist, DType dtype, double a, double b);

// Blocks a draw of n elements consumes: ceil(n / E), E = 2 for float64/int64, else 4.
inline std::uint64_t philox_blocks(DType dtype, std::int64_t n) {
  const std::uint64_t e = (dtype == DType::kFloat64 || dtype == DType::kInt64) ? 2 : 4;
  return (static_cast<std::uint64_t>(n) + e - 1) / e;
}

// Standard normal element j (0..3) of a float block / (0..1) of a double block.
CHORUS_PHILOX_HD inline float normal_of_block_f32(const PhiloxCounter& w, int j) {
  float z0, z1;
  box_muller_float(w.v[2 * (j / 2)], w.v[2 * (j / 2) + 1], &z0, &z1);
  return (j % 2 == 0) ? z0 : z1;
}
CHORUS_PHILOX_HD inline double normal_of_block_f64(const PhiloxCounter& w, int j) {
  double z0, z1;
  box_muller_double(w.v[0], w.v[1], w.v[2], w.v[3], &z0, &z1);
  return (j % 2 == 0) ? z0 : z1;
}

// The 4 float32 results of block `g` of a draw (for float32/float16/bfloat16 outputs).
CHORUS_PHILOX_HD inline void sample_block_f32(Distribution dist, PhiloxKey key, PhiloxCounter base, std::uint64_t g,
                                              const SampleParams& p, float out[4]) {
  const PhiloxCounter at = philox_skip(base, g);
  const PhiloxCounter w = philox4x32_10(at, key);
  if (dist == Distribution::kUniform) {
    for (int j = 0; j < 4; ++j) {
      const float v = add_rn(mul_rn(uint32_to_float(w.v[j]), p.scale_f), p.shift_f);
      out[j] = v < p.max_f ? v : p.max_f;
    }
    return;
  }
  float z[4];
  box_muller_float(w.v[0], w.v[1], &z[0], &z[1]);
  box_muller_float(w.v[2], w.v[3], &z[2], &z[3]);
  if (dist == Distribution::kTruncatedNormal) {
    for (int j = 0; j < 4; ++j) {
      int attempt = 1;
      while (!(abs_rn(z[j]) < 2.0f) && attempt < kMaxTruncatedAttempts) {
        z[j] = normal_of_block_f32(philox4x32_10(philox_lane(at, static_cast<std::uint64_t>(attempt)), key), j);
        ++attempt;
      }
      if (!(abs_rn(z[j]) < 2.0f)) z[j] = 0.0f;
    }
  }
  for (int j = 0; j < 4; ++j) out[j] = add_rn(mul_rn(z[j], p.scale_f), p.shift_f);
}

// The 2 float64 results of block `g`.
CHORUS_PHILOX_HD inline void sample_block_f64(Distribution dist, PhiloxKey key, PhiloxCounter base, std::uint64_t g,
                                              const SampleParams& p, double out[2]) {
  const PhiloxCounter at = philox_skip(base, g);
  const PhiloxCounter w = philox4x32_10(at, key);
  if (dist == Distribution::kUniform) {
    for (int j = 0; j < 2; ++j) {
      const double v = add_rn(mul_rn(uint64_to_double(w.v[2 * j], w.v[2 * j + 1]), p.scale_d), p.shift_d);
      out[j] = v < p.max_d ? v : p.max_d;
    }
    return;
  }
  double z[2];
  box_muller_double(w.v[0], w.v[1], w.v[2], w.v[3], &z[0], &z[1]);
  if (dist == Distribution::kTruncatedNormal) {
    for (int j = 0; j < 2; ++j) {
      int attempt = 1;
      while (!(abs_rn(z[j]) < 2.0) && attempt < kMaxTruncatedAttempts) {
        z[j] = normal_of_block_f64(philox4x32_10(philox_lane(at, static_cast<std::uint64_t>(attempt)), key), j);
        ++attempt;
      }
      if (!(abs_rn(z[j]) < 2.0)) z[j] = 0.0;
    }
  }
  for (int j = 0; j < 2; ++j) out[j] = add_rn(mul_rn(z[j], p.scale_d), p.shift_d);
}

// Integer uniform (TF's rule, with its modulo bias of at most range / 2^32 resp. range / 2^64).
// Arithmetic in uint64 so that no signed overflow can happen; the result lies in [lo, lo + range).
CHORUS_PHILOX_HD inline void sample_block_i32(PhiloxKey key, PhiloxCounter base, std::uint64_t g, const SampleParams& p,
                                              std::int32_t out[4]) {
  const PhiloxCounter w = philox4x32_10(philox_skip(base, g), key);
  const std::uint32_t range = static_cast<std::uint32_t>(p.range_u);
  for (int j = 0; j < 4; ++j) out[j] = static_cast<std::int32_t>(static_cast<std::uint32_t>(p.lo_i) + w.v[j] % range);
}
CHORUS_PHILOX_HD inline void sample_block_i64(PhiloxKey key, PhiloxCounter base, std::uint64_t g, const SampleParams& p,
                                              std::int64_t out[2]) {
  const PhiloxCounter w = philox4x32_10(philox_skip(base, g), key);
  for (int j = 0; j < 2; ++j) {
    const std::uint64_t bits = static_cast<std::uint64_t>(w.v[2 * j]) | static_cast<std::uint64_t>(w.v[2 * j + 1])
                                                                            << 32;
    out[j] = static_cast<std::int64_t>(static_cast<std::uint64_t>(p.lo_i) + bits % p.range_u);
  }
}

}  // namespace chorus::ops
