// The op kinds shared by the op layer and its CPU and CUDA kernels (C++17: included by .cu files).
//
// Elementwise semantics follow TensorFlow: integer division truncates toward zero (tf.truncatediv
// is not TF's `/`, but C++ engineers expect it; documented in docs/ops.md), comparisons return
// bool, logical ops take bool. The *Grad kinds are the fused backward kernels of activations:
//   kReluGrad(dy, x)    = x > 0 ? dy : 0
//   kSigmoidGrad(dy, y) = dy * y * (1 - y)        (y = sigmoid(x))
//   kTanhGrad(dy, y)    = dy * (1 - y * y)        (y = tanh(x))
//   kGeluGrad(dy, x)    = dy * d/dx [x * Phi(x)]  (exact, erf form, as tf.nn.gelu(approximate=False))
//   kRsqrtGrad etc. are not needed: gradients compose from the kinds below.
#pragma once

#include <cstdint>

namespace chorus::ops {

enum class UnaryOp : std::uint8_t {
  kNeg,
  kExp,
  kLog,
  kSqrt,
  kRsqrt,
  kSquare,
  kAbs,
  kSign,
  kReciprocal,
  kRelu,
  kSigmoid,
  kTanh,
  kGelu,
  kLogicalNot,
};

enum class BinaryOp : std::uint8_t {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,
  kMaximum,
  kMinimum,
  kEqual,
  kNotEqual,
  kLess,
  kLessEqual,
  kGreater,
  kGreaterEqual,  // → bool
  kLogicalAnd,
  kLogicalOr,  // bool × bool → bool
  kReluGrad,
  kSigmoidGrad,
  kTanhGrad,
  kGeluGrad,  // (dy, x or y) → dx
};

enum class ReduceKind : std::uint8_t { kSum, kMean, kMax, kMin, kProd };

enum class PoolKind : std::uint8_t { kMax, kAvg };

// TF's padding strings: 'SAME' pads so that out = ceil(in / stride); 'VALID' does not pad.
enum class Padding : std::uint8_t { kSame, kValid };

inline bool is_comparison(BinaryOp op) { return op >= BinaryOp::kEqual && op <= BinaryOp::kGreaterEqual; }
inline bool is_logical(BinaryOp op) { return op == BinaryOp::kLogicalAnd || op == BinaryOp::kLogicalOr; }

}  // namespace chorus::ops
