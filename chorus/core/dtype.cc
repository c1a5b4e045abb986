#include <chorus/core/dtype.h>

#include <bit>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include <chorus/core/error.h>

namespace chorus {
namespace {

using internal::str_cat;

constexpr std::string_view kValidNames =
    "float32, float64, float16, bfloat16, int32, int64, uint8, uint16, bool, string (aliases: float, double, half)";

[[noreturn]] void throw_bad_dtype(DType dtype) {
  throw InvalidArgumentError(
      str_cat("invalid DType value ", static_cast<int>(dtype), "; valid dtypes are ", kValidNames));
}

// ---- Rounding an exact value to a narrow binary float ----------------------------------------
//
// Every finite source value (double, float, any integer) is exactly magnitude * 2^exponent with
// an integer magnitude, so one routine rounds all of them to float16 or bfloat16. Rounding from
// the exact value matters: double -> float -> float16 would round twice and get ties wrong
// (1 + 2^-11 + 2^-40 becomes the tie 1 + 2^-11 in float, then rounds down instead of up), and
// int64 -> double -> bfloat16 fails the same way for large integers.
//
// The result's unit in the last place is 2^(t_exp - kMant) with t_exp the value's binary exponent,
// but never below the smallest normal exponent: that clamp is exactly what makes subnormals.
// With N = the magnitude rounded to that unit, the encoding is ((t_exp + bias - 1) << kMant) + N:
// N carries the implicit leading bit into the exponent field, so a rounding carry (N == 2^(kMant+1))
// or a subnormal rounding up to the smallest normal (N == 2^kMant) lands on the right pattern.
template <int kExpBits, int kMant>
std::uint16_t round_exact_to_narrow(bool negative, std::uint64_t magnitude, int exponent) {
  constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  constexpr int kMinExp = 1 - kBias;  // exponent of the smallest normal
  constexpr int kMaxExp = kBias;      // exponent of the largest finite binade
  constexpr std::uint32_t kInfBits = ((1u << kExpBits) - 1) << kMant;
  const std::uint32_t sign = negative ? (1u << (kExpBits + kMant)) : 0u;
  if (magnitude == 0) return static_cast<std::uint16_t>(sign);

  const int top_bit = 63 - std::countl_zero(magnitude);
  const int value_exp = top_bit + exponent;  // floor(log2(value))
  if (value_exp > kMaxExp) return static_cast<std::uint16_t>(sign | kInfBits);
  const int t_exp = value_exp < kMinExp ? kMinExp : value_exp;
  const int shift = (t_exp - kMant) - exponent;  // bits of `magnitude` below the target's ulp

  std::uint64_t n;
  if (shift <= 0) {
    n = magnitude << -shift;  // exact: magnitude has at most kMant + 1 significant bits here
  } else if (shift >= 64) {
    // value / ulp = magnitude / 2^shift < 1; it rounds to 1 only above the tie at 2^63 (shift 64).
    n = (shift == 64 && magnitude > (std::uint64_t{1} << 63)) ? 1 : 0;
  } else {
    n = magnitude >> shift;
    const std::uint64_t rest = magnitude & ((std::uint64_t{1} << shift) - 1);
    const std::uint64_t half = std::uint64_t{1} << (shift - 1);
    if (rest > half || (rest == half && (n & 1))) ++n;  // round half to even
  }
  const std::uint64_t bits = (static_cast<std::uint64_t>(t_exp + kBias - 1) << kMant) + n;
  // A carry out of the largest binade gives exactly kInfBits; anything above cannot happen.
  return static_cast<std::uint16_t>(sign | (bits >= kInfBits ? kInfBits : bits));
}

// NaN payloads keep their top bits and gain the quiet bit, so a NaN never turns into infinity
// (its payload bits may all fall off) and a signalling NaN comes out quiet, as hardware converts.
template <int kExpBits, int kMant>
std::uint16_t narrow_nan(bool negative, std::uint64_t top_payload_bits) {
  const std::uint32_t sign = negative ? (1u << (kExpBits + kMant)) : 0u;
  const std::uint32_t exp = ((1u << kExpBits) - 1) << kMant;
  const std::uint32_t quiet = 1u << (kMant - 1);
  return static_cast<std::uint16_t>(sign | exp | quiet | static_cast<std::uint32_t>(top_payload_bits));
}

template <int kExpBits, int kMant>
std::uint16_t narrow_inf(bool negative) {
  const std::uint32_t sign = negative ? (1u << (kExpBits + kMant)) : 0u;
  return static_cast<std::uint16_t>(sign | (((1u << kExpBits) - 1) << kMant));
}

template <int kExpBits, int kMant>
std::uint16_t double_to_narrow(double d) {
  const auto b = std::bit_cast<std::uint64_t>(d);
  const bool negative = (b >> 63) != 0;
  const int biased = static_cast<int>((b >> 52) & 0x7FF);
  const std::uint64_t frac = b & ((std::uint64_t{1} << 52) - 1);
  if (biased == 0x7FF) {
    if (frac == 0) return narrow_inf<kExpBits, kMant>(negative);
    return narrow_nan<kExpBits, kMant>(negative, frac >> (52 - kMant));
  }
  if (biased == 0) return round_exact_to_narrow<kExpBits, kMant>(negative, frac, -1074);
  return round_exact_to_narrow<kExpBits, kMant>(negative, frac | (std::uint64_t{1} << 52), biased - 1075);
}

template <int kExpBits, int kMant, typename I>
std::uint16_t integer_to_narrow(I v) {
  if constexpr (std::is_signed_v<I>) {
    // 0 - uint64(v) is the magnitude even for the most negative value, without signed overflow.
    const std::uint64_t u = static_cast<std::uint64_t>(v);
    return round_exact_to_narrow<kExpBits, kMant>(v < 0, v < 0 ? 0 - u : u, 0);
  } else {
    return round_exact_to_narrow<kExpBits, kMant>(false, v, 0);
  }
}

// ---- Element storage and the 9x9 conversion table --------------------------------------------
//
// Every element is loaded to one of six "value" types (float, double, int32, int64, uint8, uint16) with
// no rounding — float16/bfloat16 widen to float exactly, bool to uint8 0/1 — and stored with the
// destination's rules. That gives all 81 pairs from 9 loaders and 9 storers. Loads and stores use
// memcpy: buffers come in as void* and may be unaligned (element_as_double on a byte offset).

template <DType D>
struct Storage;
template <>
struct Storage<DType::kFloat32> {
  using type = float;
};
template <>
struct Storage<DType::kFloat64> {
  using type = double;
};
template <>
struct Storage<DType::kFloat16> {
  using type = std::uint16_t;
};
template <>
struct Storage<DType::kBFloat16> {
  using type = std::uint16_t;
};
template <>
struct Storage<DType::kInt32> {
  using type = std::int32_t;
};
template <>
struct Storage<DType::kInt64> {
  using type = std::int64_t;
};
template <>
struct Storage<DType::kUInt8> {
  using type = std::uint8_t;
};
template <>
struct Storage<DType::kUInt16> {
  using type = std::uint16_t;
};
// bool is stored as one byte read as "nonzero is true": reading a byte that is not 0/1 through a
// C++ bool would be UB, and tensors may come from foreign memory.
template <>
struct Storage<DType::kBool> {
  using type = std::uint8_t;
};

template <DType D>
auto load(const void* base, std::size_t i) {
  typename Storage<D>::type raw;
  std::memcpy(&raw, static_cast<const unsigned char*>(base) + i * sizeof raw, sizeof raw);
  if constexpr (D == DType::kFloat16)
    return float16_to_float(raw);
  else if constexpr (D == DType::kBFloat16)
    return bfloat16_to_float(raw);
  else if constexpr (D == DType::kBool)
    return static_cast<std::uint8_t>(raw != 0);
  else
    return raw;
}

// Floating -> integer. static_cast is UB for NaN and out-of-range values, so those are handled
// first: NaN -> 0, out of range saturates. `hi` = max + 1 is a power of two, exact in double;
// `lo_minus_one` = min - 1 is exact except for int64, where it rounds to -2^63 and v == -2^63
// then saturates to -2^63, the value the cast would give anyway.
template <typename I, typename F>
I float_to_integer(F f) {
  const double v = static_cast<double>(f);  // exact for float
  if (std::isnan(v)) return 0;
  constexpr double hi = static_cast<double>(std::numeric_limits<I>::max()) + 1.0;
  constexpr double lo_minus_one = static_cast<double>(std::numeric_limits<I>::min()) - 1.0;
  if (v >= hi) return std::numeric_limits<I>::max();
  if (v <= lo_minus_one) return std::numeric_limits<I>::min();
  return static_cast<I>(v);  // truncates toward zero; in range, so defined
}

// double -> float: a finite double beyond float's range is UB for static_cast. IEEE rounding
// sends everything at or above FLT_MAX + half an ulp (2^128 - 2^103) to infinity; below that the
// cast is defined and rounds to nearest.
float double_to_float(double d) {
  constexpr double kOverflow = 0x1.ffffffp127;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  if (std::isfinite(d) && std::fabs(d) >= kOverflow) return d > 0 ? kInf : -kInf;
  return static_cast<float>(d);
}

template <DType D, typename V>
void store(void* base, std::size_t i, V v) {
  using S = typename Storage<D>::type;
  S out;
  if constexpr (D == DType::kBool) {
    // NaN != 0, so NaN -> true, as a C++ conversion of NaN to bool gives.
    out = static_cast<std::uint8_t>(v != 0 ? 1 : 0);
  } else if constexpr (D == DType::kFloat32) {
    if constexpr (std::is_same_v<V, double>)
      out = double_to_float(v);
    else
      out = static_cast<float>(v);  // ints: round to nearest by the hardware
  } else if constexpr (D == DType::kFloat64) {
    out = static_cast<double>(v);
  } else if constexpr (D == DType::kFloat16) {
    if constexpr (std::is_same_v<V, float>)
      out = float_to_float16(v);
    else if constexpr (std::is_same_v<V, double>)
      out = double_to_narrow<5, 10>(v);
    else
      out = integer_to_narrow<5, 10>(v);
  } else if constexpr (D == DType::kBFloat16) {
    if constexpr (std::is_same_v<V, float>)
      out = float_to_bfloat16(v);
    else if constexpr (std::is_same_v<V, double>)
      out = double_to_narrow<8, 7>(v);
    else
      out = integer_to_narrow<8, 7>(v);
  } else if constexpr (std::is_floating_point_v<V>) {
    out = float_to_integer<S>(v);
  } else {
    // Integer -> integer wraps modulo 2^bits (defined since C++20), as tf.cast and NumPy do:
    // int32 300 -> uint8 44. Only float -> integer saturates, because there the cast is UB.
    out = static_cast<S>(v);
  }
  std::memcpy(static_cast<unsigned char*>(base) + i * sizeof out, &out, sizeof out);
}

template <DType Src, DType Dst>
void convert_loop(const void* src, void* dst, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) store<Dst>(dst, i, load<Src>(src, i));
}

template <DType Src>
void convert_from(const void* src, void* dst, DType dst_type, std::size_t count) {
  switch (dst_type) {
    case DType::kFloat32: return convert_loop<Src, DType::kFloat32>(src, dst, count);
    case DType::kFloat64: return convert_loop<Src, DType::kFloat64>(src, dst, count);
    case DType::kFloat16: return convert_loop<Src, DType::kFloat16>(src, dst, count);
    case DType::kBFloat16: return convert_loop<Src, DType::kBFloat16>(src, dst, count);
    case DType::kInt32: return convert_loop<Src, DType::kInt32>(src, dst, count);
    case DType::kInt64: return convert_loop<Src, DType::kInt64>(src, dst, count);
    case DType::kUInt8: return convert_loop<Src, DType::kUInt8>(src, dst, count);
    case DType::kUInt16: return convert_loop<Src, DType::kUInt16>(src, dst, count);
    case DType::kBool: return convert_loop<Src, DType::kBool>(src, dst, count);
    case DType::kString: break;  // refused by convert() before the dispatch
  }
  throw_bad_dtype(dst_type);
}

}  // namespace

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kUInt8: return 1;
    case DType::kUInt16: return 2;
    case DType::kBool: return 1;
    case DType::kString: return sizeof(std::string);
  }
  throw_bad_dtype(dtype);
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUInt8: return "uint8";
    case DType::kUInt16: return "uint16";
    case DType::kBool: return "bool";
    case DType::kString: return "string";
  }
  throw_bad_dtype(dtype);
}

DType parse_dtype(std::string_view name) {
  std::string lower;
  lower.reserve(name.size());
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (int i = 0; i < kNumDTypes; ++i) {
    const auto d = static_cast<DType>(i);
    if (lower == dtype_name(d)) return d;
  }
  if (lower == "float") return DType::kFloat32;
  if (lower == "double") return DType::kFloat64;
  if (lower == "half") return DType::kFloat16;
  throw InvalidArgumentError(str_cat("unknown dtype '", name, "'; valid names are ", kValidNames));
}

bool is_floating(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kFloat16 || dtype == DType::kBFloat16;
}

bool is_integer(DType dtype) {
  return dtype == DType::kInt32 || dtype == DType::kInt64 || dtype == DType::kUInt8 || dtype == DType::kUInt16;
}

std::ostream& operator<<(std::ostream& os, DType dtype) {
  // Printing must not throw (it is used inside error messages), so bad values print raw.
  if (static_cast<int>(dtype) >= kNumDTypes) return os << "DType(" << static_cast<int>(dtype) << ')';
  return os << dtype_name(dtype);
}

// ---- float16 ---------------------------------------------------------------------------------

float float16_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000) << 16;
  const std::uint32_t exp = (bits >> 10) & 0x1F;
  const std::uint32_t frac = bits & 0x3FF;
  if (exp == 0x1F) {
    // inf stays inf; NaN keeps its payload in the top float fraction bits and is made quiet.
    const std::uint32_t quiet = frac != 0 ? 0x00400000u : 0u;
    return std::bit_cast<float>(sign | 0x7F800000u | quiet | (frac << 13));
  }
  if (exp == 0) {
    // Zero or subnormal: frac * 2^-24 exactly (frac < 2^10 fits the float significand).
    const float magnitude = std::ldexp(static_cast<float>(frac), -24);
    return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(magnitude));
  }
  return std::bit_cast<float>(sign | ((exp - 15 + 127) << 23) | (frac << 13));
}

std::uint16_t float_to_float16(float f) {
  const auto b = std::bit_cast<std::uint32_t>(f);
  const bool negative = (b >> 31) != 0;
  if ((b & 0x7F800000u) == 0x7F800000u && (b & 0x007FFFFFu) != 0)
    return narrow_nan<5, 10>(negative, (b & 0x007FFFFFu) >> 13);
  return double_to_narrow<5, 10>(static_cast<double>(f));  // float -> double is exact
}

float16::float16(float f) : bits(float_to_float16(f)) {}
float16::operator float() const { return float16_to_float(bits); }

// ---- buffers ---------------------------------------------------------------------------------

namespace {

// float32 <-> bfloat16, the conversions mixed precision runs on every weight and gradient each
// step: blocks of 16 with a fixed trip count (which -O2's cheap vectorizer takes), compiled for
// AVX-512, AVX2 and the x86-64 baseline, the best chosen when the library loads.
// Not under TSan: an ifunc resolver runs during relocation, before the TSan runtime is up, and its
// instrumented entry crashes the process (the sanitized build takes the baseline loop).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define CHORUS_CONVERT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CHORUS_CONVERT_CLONES
#endif

CHORUS_CONVERT_CLONES void floats_to_bfloat16(const float* __restrict src, std::uint16_t* __restrict dst,
                                              std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (std::size_t j = 0; j < 16; ++j) dst[i + j] = float_to_bfloat16(src[i + j]);
  for (; i < n; ++i) dst[i] = float_to_bfloat16(src[i]);
}

CHORUS_CONVERT_CLONES void bfloat16_to_floats(const std::uint16_t* __restrict src, float* __restrict dst,
                                              std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (std::size_t j = 0; j < 16; ++j) dst[i + j] = bfloat16_to_float(src[i + j]);
  for (; i < n; ++i) dst[i] = bfloat16_to_float(src[i]);
}

bool overlap(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

}  // namespace

void convert(const void* src, DType src_type, void* dst, DType dst_type, std::size_t count) {
  if (src_type == DType::kString || dst_type == DType::kString) {
    throw InvalidArgumentError(
        str_cat("convert: cannot convert ", src_type, " to ", dst_type,
                ": string elements are std::string objects holding bytes, not numbers (TF has no cast between "
                "string and numeric dtypes either); read them with Tensor::strings() or to_vector<std::string>()"));
  }
  if (src_type == dst_type) {
    // Bit-for-bit copy: NaN payloads and bool bytes other than 0/1 pass through unchanged.
    const std::size_t bytes = count * dtype_size(src_type);
    if (src != dst && bytes > 0) std::memmove(dst, src, bytes);
    return;
  }
  // The typed fast paths need separate buffers aligned for their types (tensor storage is).
  const auto aligned = [](const void* p, std::uintptr_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; };
  if (src_type == DType::kFloat32 && dst_type == DType::kBFloat16 && aligned(src, 4) && aligned(dst, 2) &&
      !overlap(src, 4 * count, dst, 2 * count))
    return floats_to_bfloat16(static_cast<const float*>(src), static_cast<std::uint16_t*>(dst), count);
  if (src_type == DType::kBFloat16 && dst_type == DType::kFloat32 && aligned(src, 2) && aligned(dst, 4) &&
      !overlap(src, 2 * count, dst, 4 * count))
    return bfloat16_to_floats(static_cast<const std::uint16_t*>(src), static_cast<float*>(dst), count);
  switch (src_type) {
    case DType::kFloat32: return convert_from<DType::kFloat32>(src, dst, dst_type, count);
    case DType::kFloat64: return convert_from<DType::kFloat64>(src, dst, dst_type, count);
    case DType::kFloat16: return convert_from<DType::kFloat16>(src, dst, dst_type, count);
    case DType::kBFloat16: return convert_from<DType::kBFloat16>(src, dst, dst_type, count);
    case DType::kInt32: return convert_from<DType::kInt32>(src, dst, dst_type, count);
    case DType::kInt64: return convert_from<DType::kInt64>(src, dst, dst_type, count);
    case DType::kUInt8: return convert_from<DType::kUInt8>(src, dst, dst_type, count);
    case DType::kUInt16: return convert_from<DType::kUInt16>(src, dst, dst_type, count);
    case DType::kBool: return convert_from<DType::kBool>(src, dst, dst_type, count);
    case DType::kString: break;  // refused above
  }
  throw_bad_dtype(src_type);
}

double element_as_double(const void* data, DType dtype, std::size_t index) {
  CHORUS_REQUIRE(dtype != DType::kString, InvalidArgumentError, "element_as_double: a string element is not a number");
  double out;
  convert(static_cast<const unsigned char*>(data) + index * dtype_size(dtype), dtype, &out, DType::kFloat64, 1);
  return out;
}

}  // namespace chorus
