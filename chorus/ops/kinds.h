// The op kinds shared by the op layer and its CPU and CUDA kernels (C++17: included by .cu files).
//
// Elementwise semantics follow TensorFlow: integer division truncates toward zero (tf.truncatediv
// is not TF's `/`, but C++ engineers expect it; documented in docs/ops.md), comparisons return
// bool, logical ops take bool. The *Grad kinds are the fused backward kernels of activations:
//   kReluGrad(dy, x)    = x > 0 ? dy : 0
//   kSigmoidGrad(dy, y) = dy * y * (1 - y)        (y = sigmoid(x))
//   kTanhGrad(dy, y)    = dy * (1 - y * y)        (y = tanh(x))
//   kGeluGrad(dy, x)    = dy * d/dx [x * Phi(x)]  (exact, erf form, as tf.nn.gelu(approximate=False))
//   kSiluGrad(dy, x)    = dy * s * (1 + x * (1 - s)), s = sigmoid(x)   (tf.nn.silu's gradient)
//   kLeakyReluGrad(dy, x) = x > 0 ? dy : dy * alpha                     (TF's LeakyReluGrad)
//   kEluGrad(dy, y)     = y < 0 ? dy * (y + 1) : dy   (y = elu(x))      (TF's EluGrad)
//   kSoftplusGrad(dy, x) = dy / (exp(-x) + 1)                           (TF's SoftplusGrad)
//   kSqrtGrad(dy, y)    = dy == 0 ? 0 : dy * 0.5 / y     (y = sqrt(x))    (TF's SqrtGrad)
//   kRsqrtGrad(dy, y)   = dy == 0 ? 0 : -0.5 * dy * y^3  (y = rsqrt(x))   (TF's RsqrtGrad)
//   kReciprocalGrad(dy, y) = dy == 0 ? 0 : -dy * y^2    (y = 1/x)        (TF's ReciprocalGrad)
// The last three return 0 for a zero upstream gradient whatever y is (0, inf, NaN), as TF's
// kernels do: sqrt(0) with a zero gradient flowing back gives 0, not 0/0.
// kLeakyRelu and kLeakyReluGrad are the parameterised kinds: the kernels take their slope `alpha`
// as an extra argument (ignored by every other kind).
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
  kSilu,       // x * sigmoid(x) (tf.nn.silu, Keras's swish)
  kLeakyRelu,  // x > 0 ? x : alpha * x (tf.nn.leaky_relu)
  kElu,        // x < 0 ? expm1(x) : x (tf.nn.elu, alpha 1)
  kSoftplus,   // log(1 + exp(x)), with TF's thresholds for large |x| (tf.math.softplus)
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
  kGeluGrad,
  kSiluGrad,
  kLeakyReluGrad,
  kEluGrad,
  kSoftplusGrad,
  kSqrtGrad,
  kRsqrtGrad,
  kReciprocalGrad,  // (dy, x or y) → dx
};

enum class ReduceKind : std::uint8_t { kSum, kMean, kMax, kMin, kProd };

// The fused optimizer updates (ops/training.h's apply_fused_update; the rules: ops/update_rules.h)
// and their host scalars, as doubles (the kernels round each to the variables' dtype, as
// ops::scalar_like does).
enum class FusedRule : std::uint8_t { kAdam, kSgd, kRMSprop };
struct FusedScalars {
  double learning_rate = 0.0;     // SGD, RMSprop
  double alpha = 0.0;             // Adam: learning_rate · sqrt(1 − β2^t) / (1 − β1^t)
  double one_minus_beta_1 = 0.0;  // Adam
  double one_minus_beta_2 = 0.0;  // Adam
  double epsilon = 0.0;           // Adam, RMSprop
  double momentum = 0.0;          // SGD, RMSprop
  double rho = 0.0;               // RMSprop
  double one_minus_rho = 0.0;     // RMSprop
};

enum class PoolKind : std::uint8_t { kMax, kAvg };

// The row normalizations of ops/normalization.h (rstd = 1/sqrt(var + eps), var biased):
enum class NormKind : std::uint8_t {
  kLayer,  // y = (x − mean) · rstd · gamma + beta
  kRms,    // y = x · rstd · gamma with var = mean(x²): no centering, no beta
};

// TF's padding strings: 'SAME' pads so that out = ceil(in / stride); 'VALID' does not pad.
enum class Padding : std::uint8_t { kSame, kValid };

inline bool is_comparison(BinaryOp op) { return op >= BinaryOp::kEqual && op <= BinaryOp::kGreaterEqual; }
inline bool is_logical(BinaryOp op) { return op == BinaryOp::kLogicalAnd || op == BinaryOp::kLogicalOr; }

}  // namespace chorus::ops
