// tf.image.convert_image_dtype (ops/image.h), composed of elementwise ops in the order and in the
// dtypes TF's Python composes them (image_ops_impl.py, math_ops.saturate_cast), so that every
// intermediate rounds as TF's does.
#include <chorus/ops/image.h>

#include <cmath>
#include <cstring>
#include <limits>

#include <chorus/ops/elementwise.h>
#include <chorus/ops/internal.h>

namespace chorus::ops::image {
namespace {

using i64 = std::int64_t;

void require_image_dtype(const char* what, DType d) {
  CHORUS_REQUIRE(d != DType::kBool, InvalidArgumentError, "convert_image_dtype: ", what,
                 " must be a floating point or integer dtype (uint8, uint16, int32, int64, float16, bfloat16, "
                 "float32, float64), got bool");
}

// The value bits of the integer dtypes: max = 2^bits - 1.
int value_bits(DType d) { return d == DType::kUInt8 ? 8 : d == DType::kUInt16 ? 16 : d == DType::kInt32 ? 31 : 63; }
bool is_unsigned(DType d) { return d == DType::kUInt8 || d == DType::kUInt16; }
double int_min(DType d) { return is_unsigned(d) ? 0.0 : -std::ldexp(1.0, value_bits(d)); }
// The max as a double, as Python's float(dtype.max) rounds it (int64: 2^63).
double int_max(DType d) { return std::ldexp(1.0, value_bits(d)) - 1.0; }
double float_max(DType d) {
  switch (d) {
    case DType::kFloat16: return 65504.0;
    case DType::kBFloat16: return 3.3895313892515355e38;
    case DType::kFloat32: return static_cast<double>(std::numeric_limits<float>::max());
    default: return std::numeric_limits<double>::max();
  }
}

// 16-bit pattern of v rounded to nearest even in one step (as numpy converts a double): the
// float32 detour can round twice, so the neighbours of its result are checked against v.
std::uint16_t round16(double v, DType d) {
  auto to_bits = [d](float f) { return d == DType::kFloat16 ? float_to_float16(f) : float_to_bfloat16(f); };
  auto to_double = [d](std::uint16_t b) {
    return static_cast<double>(d == DType::kFloat16 ? float16_to_float(b) : bfloat16_to_float(b));
  };
  const std::uint16_t b = to_bits(static_cast<float>(v));
  if (!std::isfinite(to_double(b)) || v == 0) return b;
  std::uint16_t best = b;
  for (std::uint16_t c : {static_cast<std::uint16_t>(b - 1), static_cast<std::uint16_t>(b + 1)}) {
    const double cv = to_double(c), bv = to_double(best);
    if (!std::isfinite(cv) || std::signbit(cv) != std::signbit(v)) continue;
    const double dc = std::fabs(cv - v), db = std::fabs(bv - v);
    if (dc < db || (dc == db && (c & 1u) == 0)) best = c;
  }
  return best;
}

// v rounded to the floating dtype d, as a double (exact in d).
double round_to(double v, DType d) {
  switch (d) {
    case DType::kFloat64: return v;
    case DType::kFloat32: return static_cast<double>(static_cast<float>(v));
    case DType::kFloat16: return static_cast<double>(float16_to_float(round16(v, d)));
    default: return static_cast<double>(bfloat16_to_float(round16(v, d)));
  }
}

// The next value of dtype d toward 0 from v (exact in d, nonzero).
double toward_zero(double v, DType d) {
  switch (d) {
    case DType::kFloat64: return std::nextafter(v, 0.0);
    case DType::kFloat32: return static_cast<double>(std::nextafter(static_cast<float>(v), 0.0f));
    case DType::kFloat16: return static_cast<double>(float16_to_float(static_cast<std::uint16_t>(round16(v, d) - 1)));
    default: return static_cast<double>(bfloat16_to_float(static_cast<std::uint16_t>(round16(v, d) - 1)));
  }
}

Tensor clamp(const Tensor& x, double lo, double hi) {
  return maximum(minimum(x, scalar_like(x, hi)), scalar_like(x, lo));
}

// math_ops.saturate_cast(x, to): clip to to's range as representable in x's dtype (nudged toward
// 0 where rounding to x's dtype left it outside; comparisons in float64, numpy's promotion for
// these pairs), then cast.
Tensor saturate_cast(const Tensor& x, DType to) {
  const DType from = x.dtype();
  const double in_min = is_floating(from) ? -float_max(from) : int_min(from);
  const double in_max = is_floating(from) ? float_max(from) : int_max(from);
  const double out_min = is_floating(to) ? -float_max(to) : int_min(to);
  const double out_max = is_floating(to) ? float_max(to) : int_max(to);
  double lo = std::fmax(in_min, out_min), hi = std::fmin(in_max, out_max);
  if (is_floating(from)) {
    lo = round_to(lo, from);
    hi = round_to(hi, from);
    if (lo < out_min) lo = toward_zero(lo, from);
    if (hi > out_max) hi = toward_zero(hi, from);
  }
  return cast(clamp(x, lo, hi), to);
}

Tensor cast_maybe_saturated(const Tensor& x, DType to, bool saturate) {
  return saturate ? saturate_cast(x, to) : cast(x, to);
}

// floor(x / 2^shift) for an integer x (math_ops.floordiv by a power of two): the truncating
// quotient, one less where the remainder is negative.
Tensor floordiv_pow2(const Tensor& x, int shift) {
  const Tensor s = scalar_like(x, std::ldexp(1.0, shift));
  const Tensor q = div(x, s);
  const Tensor rem = sub(x, mul(q, s));
  return where(less(rem, scalar_like(x, 0.0)), sub(q, scalar_like(x, 1.0)), q);
}

}  // namespace

Tensor convert_image_dtype(const Tensor& image, DType dtype, bool saturate) {
  internal::device_of("convert_image_dtype", image);
  require_image_dtype("dtype", dtype);
  require_image_dtype("image dtype", image.dtype());
  const DType from = image.dtype();
  if (dtype == from) return image;
  if (!is_floating(from) && !is_floating(dtype)) {
    const int in_bits = value_bits(from), out_bits = value_bits(dtype);
    if (in_bits > out_bits)  // scaling down: scale, then cast
      return cast_maybe_saturated(floordiv_pow2(image, in_bits - out_bits), dtype, saturate);
    const Tensor c = cast_maybe_saturated(image, dtype, saturate);  // scaling up: cast, then scale
    return mul(c, scalar_like(c, std::ldexp(1.0, out_bits - in_bits)));
  }
  if (is_floating(from) && is_floating(dtype)) return cast(image, dtype);
  if (!is_floating(from)) {  // int → float: cast, then scale by 1 / in_max in the output dtype
    const Tensor c = cast(image, dtype);
    return mul(c, scalar_like(c, round_to(1.0 / int_max(from), dtype)));
  }
  // float → int: scale by out_max + 0.5 in the input dtype, then cast.
  const Tensor scaled = mul(image, scalar_like(image, round_to(int_max(dtype) + 0.5, from)));
  return cast_maybe_saturated(scaled, dtype, saturate);
}

}  // namespace chorus::ops::image
