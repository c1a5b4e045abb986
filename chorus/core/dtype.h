// Element types: the ten dtypes chorus tensors hold, their sizes and names, and conversions.
//
// kString (TF's tf.string, DT_STRING) holds arbitrary bytes per element as a std::string; string
// tensors live in host memory only (core/tensor.h "String tensors"). It is not a number: convert()
// and element_as_double() to or from it throw InvalidArgumentError (TF has no cast either; parse
// numbers with a decoder), and its dtype_size() is sizeof(std::string), the in-place object.
//
// Names are TensorFlow's ("float32", "bfloat16", ...). float16 is IEEE 754 binary16; bfloat16 is
// the upper 16 bits of a float32. Conversions to the 16-bit types round to nearest even, keep
// NaN a NaN and overflow to ±inf, as TF and CUDA's __float2half_rn / __float2bfloat16 do.
// Conversions to integer types truncate toward zero like static_cast (C++ rules; out-of-range
// floats convert to the nearest representable value of the target, NaN to 0 — never UB).
// To bool: nonzero → true.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <string_view>

namespace chorus {

enum class DType : std::uint8_t {
  kFloat32 = 0,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt32,
  kInt64,
  kUInt8,
  kBool,
  kString,
  kUInt16,  // after kString: dtype codes are stable (cache files, wire fingerprints)
};
inline constexpr int kNumDTypes = 10;

// Bytes per element: 4, 8, 2, 2, 4, 8, 1, 1, sizeof(std::string) (the object; the bytes of a long
// string live on the heap), 2.
std::size_t dtype_size(DType dtype);
// "float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8", "bool", "string", "uint16".
std::string_view dtype_name(DType dtype);
// Parses a TF name (also "float", "double", "half"); throws InvalidArgumentError listing names.
DType parse_dtype(std::string_view name);
bool is_floating(DType dtype);  // float32/64/16, bfloat16
bool is_integer(DType dtype);   // int32/64, uint8, uint16
std::ostream& operator<<(std::ostream& os, DType dtype);

// IEEE binary16 stored as bits.
struct float16 {
  std::uint16_t bits = 0;
  float16() = default;
  explicit float16(float f);
  explicit operator float() const;
  static float16 from_bits(std::uint16_t b) {
    float16 h;
    h.bits = b;
    return h;
  }
};

float float16_to_float(std::uint16_t bits);
std::uint16_t float_to_float16(float f);

// bfloat16 <-> float are inline: they are a shift and a rounding add, and every bfloat16 loop
// (elementwise kernels, reductions, casts, 16-bit collectives) runs them per element.
inline float bfloat16_to_float(std::uint16_t bits) {
  std::uint32_t b = static_cast<std::uint32_t>(bits) << 16;
  if ((bits & 0x7F80u) == 0x7F80u && (bits & 0x007Fu) != 0) b |= 0x00400000u;  // NaN: quiet it
  float f;
  std::memcpy(&f, &b, sizeof f);  // not std::bit_cast: .cu files include this header as C++17
  return f;
}
inline std::uint16_t float_to_bfloat16(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  if ((b & 0x7F800000u) == 0x7F800000u && (b & 0x007FFFFFu) != 0)
    return static_cast<std::uint16_t>((b >> 16) | 0x0040u);  // quiet NaN; rounding could make inf
  // bfloat16 shares float's exponent, so rounding the upper half is a plain integer round half
  // to even: add 0x7FFF plus the lowest kept bit. A carry moves into the exponent, which is right
  // for subnormal -> normal and for the largest finite values -> inf.
  return static_cast<std::uint16_t>((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

// bfloat16 stored as bits.
struct bfloat16 {
  std::uint16_t bits = 0;
  bfloat16() = default;
  explicit bfloat16(float f) : bits(float_to_bfloat16(f)) {}
  explicit operator float() const { return bfloat16_to_float(bits); }
  static bfloat16 from_bits(std::uint16_t b) {
    bfloat16 h;
    h.bits = b;
    return h;
  }
};

// The dtype of a C++ element type: dtype_of<float>() == DType::kFloat32.
template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kFloat32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::kFloat64;
}
template <>
constexpr DType dtype_of<float16>() {
  return DType::kFloat16;
}
template <>
constexpr DType dtype_of<bfloat16>() {
  return DType::kBFloat16;
}
template <>
constexpr DType dtype_of<std::int32_t>() {
  return DType::kInt32;
}
template <>
constexpr DType dtype_of<std::int64_t>() {
  return DType::kInt64;
}
template <>
constexpr DType dtype_of<std::uint8_t>() {
  return DType::kUInt8;
}
template <>
constexpr DType dtype_of<std::uint16_t>() {
  return DType::kUInt16;
}
template <>
constexpr DType dtype_of<bool>() {
  return DType::kBool;
}
template <>
constexpr DType dtype_of<std::string>() {
  return DType::kString;
}

// Converts `count` elements from host buffer `src` of `src_type` to host buffer `dst` of
// `dst_type` (buffers must not overlap unless identical with equal types). Rules above. Either
// type kString → InvalidArgumentError (std::string objects are not bytes to copy or convert).
void convert(const void* src, DType src_type, void* dst, DType dst_type, std::size_t count);

// Reads element `index` of a host buffer of `dtype` as double (for printing and item<T>()).
// kString → InvalidArgumentError.
double element_as_double(const void* data, DType dtype, std::size_t index);

}  // namespace chorus
