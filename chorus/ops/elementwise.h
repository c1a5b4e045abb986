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

// alpha: the slope of the parameterised kinds (kLeakyRelu, kLeakyReluGrad), rounded to float32 and
// then to the dtype as TF's kernels do (its attr is a float); every other kind ignores it.
Tensor unary(UnaryOp op, const Tensor& x, double alpha = 0.0);
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b, double alpha = 0.0);

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
// silu, leaky_relu, elu, softplus: floating dtypes only; their gradients are differentiable again.
inline Tensor gelu(const Tensor& x) { return unary(UnaryOp::kGelu, x); }
// x·sigmoid(x) (tf.nn.silu = tf.nn.swish with beta 1). silu(-inf) is NaN (-inf·0), as TF's.
inline Tensor silu(const Tensor& x) { return unary(UnaryOp::kSilu, x); }
inline Tensor swish(const Tensor& x) { return silu(x); }
// x > 0 ? x : alpha·x (tf.nn.leaky_relu; any alpha, also > 1 or < 0). NaN stays NaN; the gradient
// at x = 0 and at NaN is alpha·dy (TF's LeakyReluGrad tests x > 0).
inline Tensor leaky_relu(const Tensor& x, double alpha = 0.2) { return unary(UnaryOp::kLeakyRelu, x, alpha); }
// x < 0 ? exp(x) − 1 : x (tf.nn.elu). The gradient uses the output, as TF's EluGrad: y < 0 ?
// dy·(y + 1) : dy, so a NaN input gets the gradient dy (NaN < 0 is false), as in TF.
inline Tensor elu(const Tensor& x) { return unary(UnaryOp::kElu, x); }
// log(1 + exp(x)) (tf.math.softplus), stable for large |x| with TF's thresholds (x itself above
// −log(ε) − 2, exp(x) below log(ε) + 2; ε of float32 for float32/float16, of float64, and of
// bfloat16, where TF's threshold is 2.84375). Gradient dy / (1 + exp(−x)) (TF's SoftplusGrad).
inline Tensor softplus(const Tensor& x) { return unary(UnaryOp::kSoftplus, x); }
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
