// Element access for the CPU loops: each dtype's storage type and the type arithmetic runs in
// (16-bit floats compute in float and round once on store, as TF's CPU kernels do).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include <chorus/core/dtype.h>
#include <chorus/core/error.h>

namespace chorus::ops::cpu {

template <typename T>
struct Num {
  using C = T;
  static C load(T v) { return v; }
  static T store(C v) { return v; }
};
template <>
struct Num<float16> {
  using C = float;
  static C load(float16 v) { return static_cast<float>(v); }
  static float16 store(C v) { return float16(v); }
};
template <>
struct Num<bfloat16> {
  using C = float;
  static C load(bfloat16 v) { return static_cast<float>(v); }
  static bfloat16 store(C v) { return bfloat16(v); }
};

// Calls f(T{}) with T the storage type of `dtype` (bool is stored as uint8 but dispatched as bool
// only where `with_bool`); unsupported → InvalidArgumentError naming `what`.
template <typename F>
decltype(auto) dispatch_dtype(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat64: return f(double{});
    case DType::kFloat16: return f(float16{});
    case DType::kBFloat16: return f(bfloat16{});
    case DType::kInt32: return f(std::int32_t{});
    case DType::kInt64: return f(std::int64_t{});
    case DType::kUInt8: return f(std::uint8_t{});
    case DType::kUInt16: return f(std::uint16_t{});
    case DType::kBool: return f(bool{});
    case DType::kString: break;  // never reached: ops refuse string inputs (ops/internal.h)
  }
  throw InvalidArgumentError(chorus::internal::str_cat(what, ": unsupported dtype ", dtype_name(dtype)));
}

template <typename F>
decltype(auto) dispatch_float(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat64: return f(double{});
    case DType::kFloat16: return f(float16{});
    case DType::kBFloat16: return f(bfloat16{});
    default: break;
  }
  throw InvalidArgumentError(chorus::internal::str_cat(what, ": needs a floating dtype, got ", dtype_name(dtype)));
}

template <typename F>
decltype(auto) dispatch_index(DType dtype, const char* what, F&& f) {
  if (dtype == DType::kInt32) return f(std::int32_t{});
  if (dtype == DType::kInt64) return f(std::int64_t{});
  throw InvalidArgumentError(
      chorus::internal::str_cat(what, ": indices must be int32 or int64, got ", dtype_name(dtype)));
}

// d/dx of the exact GELU x·Φ(x): Φ(x) + x·φ(x) (TF's composed gradient: NaN at ±Inf, Inf · 0).
// Shared by the elementwise loop and the oneDNN path's non-finite fix-up (dnn_dispatch.cc).
template <typename C>
C gelu_grad(C x) {
  const C cdf = C(0.5) * (C(1) + std::erf(x * C(0.70710678118654752440)));
  const C pdf = std::exp(C(-0.5) * x * x) * C(0.39894228040143267794);
  return cdf + x * pdf;
}

}  // namespace chorus::ops::cpu
