// Elementwise ops with NumPy broadcasting (tf.math), each differentiable where TF's is.
//
//   using namespace chorus;
//   Tensor y = ops::relu(ops::add(ops::matmul(x, w), b));   // or: ops::relu(ops::matmul(x, w) + b)
//   Tensor z = x * 2.0;                                      // a double becomes a scalar of x's dtype
//
// Inputs must be defined, on one device (else InvalidArgumentError naming each input's device:
// move data with Tensor::to) and of one dtype (no implicit promotion, as in TF: use ops::cast).
// Shapes broadcast as in NumPy; incompatible → InvalidArgumentError "Incompatible shapes: ...".
// The result lives on the inputs' device. dtypes: floats everywhere; int32/int64/uint8 for
// add, sub, mul, div (truncating; division by zero → InvalidArgumentError at the next read), pow
// (non-negative exponents), maximum, minimum, neg, abs, square, sign, relu; comparisons for all
// non-bool dtypes (and equal/not_equal for bool) → bool; logical_* on bool.
// Gradients: TF's, reduced over broadcast dimensions; comparisons, sign, logical ops and
// integer tensors have none.
#pragma once

#include <chorus/core/tensor.h>
#include <chorus/ops/kinds.h>

namespace chorus::ops {

Tensor unary(UnaryOp op, const Tensor& x);
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);

inline Tensor neg(const Tensor& x) { return unary(UnaryOp::kNeg, x); }
inline Tensor exp(const Tensor& x) { return unary(UnaryOp::kExp, x); }
inline Tensor log(const Tensor& x) { return unary(UnaryOp::kLog, x); }
inline Tensor sqrt(const Tensor& x) { return unary(UnaryOp::kSqrt, x); }
inline Tensor rsqrt(const Tensor& x) { return unary(UnaryOp::kRsqrt, x); }
inline Tensor square(const Tensor& x) { return unary(UnaryOp::kSquare, x); }
inline Tensor abs(const Tensor& x) { return unary(UnaryOp::kAbs, x); }
inline Tensor sign(const Tensor& x) { return unary(UnaryOp::kSign, x); }
inline Tensor reciprocal(const Tensor& x) { return unary(UnaryOp::kReciprocal, x); }
inline Tensor relu(const Tensor& x) { return unary(UnaryOp::kRelu, x); }
inline Tensor sigmoid(const Tensor& x) { return unary(UnaryOp::kSigmoid, x); }
inline Tensor tanh(const Tensor& x) { return unary(UnaryOp::kTanh, x); }
// Exact GELU, x·Φ(x) (tf.nn.gelu(approximate=False)).
inline Tensor gelu(const Tensor& x) { return unary(UnaryOp::kGelu, x); }
inline Tensor logical_not(const Tensor& x) { return unary(UnaryOp::kLogicalNot, x); }

inline Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kAdd, a, b); }
inline Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kSub, a, b); }
inline Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kMul, a, b); }
inline Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kDiv, a, b); }
inline Tensor pow(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kPow, a, b); }
inline Tensor maximum(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kMaximum, a, b); }
inline Tensor minimum(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kMinimum, a, b); }
inline Tensor equal(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kEqual, a, b); }
inline Tensor not_equal(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kNotEqual, a, b); }
inline Tensor less(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kLess, a, b); }
inline Tensor less_equal(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kLessEqual, a, b); }
inline Tensor greater(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kGreater, a, b); }
inline Tensor greater_equal(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kGreaterEqual, a, b); }
inline Tensor logical_and(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kLogicalAnd, a, b); }
inline Tensor logical_or(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kLogicalOr, a, b); }

// cond ? x : y elementwise, all three broadcast together (tf.where with x and y). cond is bool.
Tensor where(const Tensor& cond, const Tensor& x, const Tensor& y);
// Converts to `dtype` (core/dtype.h rules). Gradient flows between floating dtypes only: the
// upstream gradient cast back to x's dtype (a float32 variable cast to bfloat16 gets a float32 gradient).
Tensor cast(const Tensor& x, DType dtype);

// A scalar of x's dtype on x's device.
Tensor scalar_like(const Tensor& x, double value);
Tensor zeros_like(const Tensor& x);
Tensor ones_like(const Tensor& x);

}  // namespace chorus::ops

namespace chorus {
// Operators on tensors (ADL finds them for chorus::Tensor); a double operand becomes a scalar of
// the tensor's dtype on its device.
inline Tensor operator+(const Tensor& a, const Tensor& b) { return ops::add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return ops::sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return ops::mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return ops::div(a, b); }
inline Tensor operator-(const Tensor& a) { return ops::neg(a); }
inline Tensor operator+(const Tensor& a, double b) { return ops::add(a, ops::scalar_like(a, b)); }
inline Tensor operator-(const Tensor& a, double b) { return ops::sub(a, ops::scalar_like(a, b)); }
inline Tensor operator*(const Tensor& a, double b) { return ops::mul(a, ops::scalar_like(a, b)); }
inline Tensor operator/(const Tensor& a, double b) { return ops::div(a, ops::scalar_like(a, b)); }
inline Tensor operator+(double a, const Tensor& b) { return ops::add(ops::scalar_like(b, a), b); }
inline Tensor operator-(double a, const Tensor& b) { return ops::sub(ops::scalar_like(b, a), b); }
inline Tensor operator*(double a, const Tensor& b) { return ops::mul(ops::scalar_like(b, a), b); }
inline Tensor operator/(double a, const Tensor& b) { return ops::div(ops::scalar_like(b, a), b); }
}  // namespace chorus
