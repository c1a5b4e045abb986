#include <chorus/ops/elementwise.h>

#include <chorus/ops/cpu/dnn.h>
#include <chorus/ops/cpu/loops.h>
#include <chorus/ops/internal.h>
#include <chorus/ops/reduction.h>
#include <chorus/ops/tape.h>
#if CHORUS_WITH_CUDA
#include <chorus/ops/cuda/kernels.h>
#include <chorus/ops/cuda/libraries.h>
#endif

namespace chorus::ops {
namespace {

using internal::common_device;
using internal::output;

const char* unary_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::kNeg: return "Neg";
    case UnaryOp::kExp: return "Exp";
    case UnaryOp::kLog: return "Log";
    case UnaryOp::kSqrt: return "Sqrt";
    case UnaryOp::kRsqrt: return "Rsqrt";
    case UnaryOp::kSquare: return "Square";
    case UnaryOp::kAbs: return "Abs";
    case UnaryOp::kSign: return "Sign";
    case UnaryOp::kReciprocal: return "Reciprocal";
    case UnaryOp::kRelu: return "Relu";
    case UnaryOp::kSigmoid: return "Sigmoid";
    case UnaryOp::kTanh: return "Tanh";
    case UnaryOp::kGelu: return "Gelu";
    case UnaryOp::kSilu: return "Silu";
    case UnaryOp::kLeakyRelu: return "LeakyRelu";
    case UnaryOp::kElu: return "Elu";
    case UnaryOp::kSoftplus: return "Softplus";
    case UnaryOp::kLogicalNot: return "LogicalNot";
  }
  return "Unary";
}

const char* binary_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return "AddV2";
    case BinaryOp::kSub: return "Sub";
    case BinaryOp::kMul: return "Mul";
    case BinaryOp::kDiv: return "RealDiv";
    case BinaryOp::kPow: return "Pow";
    case BinaryOp::kMaximum: return "Maximum";
    case BinaryOp::kMinimum: return "Minimum";
    case BinaryOp::kEqual: return "Equal";
    case BinaryOp::kNotEqual: return "NotEqual";
    case BinaryOp::kLess: return "Less";
    case BinaryOp::kLessEqual: return "LessEqual";
    case BinaryOp::kGreater: return "Greater";
    case BinaryOp::kGreaterEqual: return "GreaterEqual";
    case BinaryOp::kLogicalAnd: return "LogicalAnd";
    case BinaryOp::kLogicalOr: return "LogicalOr";
    case BinaryOp::kReluGrad: return "ReluGrad";
    case BinaryOp::kSigmoidGrad: return "SigmoidGrad";
    case BinaryOp::kTanhGrad: return "TanhGrad";
    case BinaryOp::kGeluGrad: return "GeluGrad";
    case BinaryOp::kSiluGrad: return "SiluGrad";
    case BinaryOp::kLeakyReluGrad: return "LeakyReluGrad";
    case BinaryOp::kEluGrad: return "EluGrad";
    case BinaryOp::kSoftplusGrad: return "SoftplusGrad";
    case BinaryOp::kSqrtGrad: return "SqrtGrad";
    case BinaryOp::kRsqrtGrad: return "RsqrtGrad";
    case BinaryOp::kReciprocalGrad: return "ReciprocalGrad";
  }
  return "Binary";
}

bool unary_needs_float(UnaryOp op) {
  switch (op) {
    case UnaryOp::kNeg:
    case UnaryOp::kSquare:
    case UnaryOp::kAbs:
    case UnaryOp::kSign:
    case UnaryOp::kRelu:
    case UnaryOp::kLogicalNot: return false;
    default: return true;
  }
}

void check_unary_dtype(UnaryOp op, const Tensor& x) {
  const char* name = unary_name(op);
  if (op == UnaryOp::kLogicalNot) return internal::require_dtype(name, x, {DType::kBool});
  if (unary_needs_float(op)) return internal::require_float(name, x);
  internal::require_dtype(name, x,
                          {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt32,
                           DType::kInt64, DType::kUInt8, DType::kUInt16});
}

void check_binary_dtype(BinaryOp op, const Tensor& a) {
  const char* name = binary_name(op);
  if (is_logical(op)) return internal::require_dtype(name, a, {DType::kBool});
  if (op == BinaryOp::kEqual || op == BinaryOp::kNotEqual) return;  // any dtype
  if (is_comparison(op) || op == BinaryOp::kAdd || op == BinaryOp::kSub || op == BinaryOp::kMul ||
      op == BinaryOp::kDiv || op == BinaryOp::kPow || op == BinaryOp::kMaximum || op == BinaryOp::kMinimum ||
      op == BinaryOp::kReluGrad)
    return internal::require_dtype(name, a,
                                   {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt32,
                                    DType::kInt64, DType::kUInt8, DType::kUInt16});
  internal::require_float(name, a);
}

// TF's LeakyRelu takes alpha as a float attr and casts it to T: float32 first, then x's dtype.
double leaky_alpha(double alpha, DType dtype) {
  const float a32 = static_cast<float>(alpha);
  double out = 0;
  unsigned char raw[8];
  convert(&a32, DType::kFloat32, raw, dtype, 1);
  convert(raw, dtype, &out, DType::kFloat64, 1);
  return out;
}

// Raw kernel launch without recording.
Tensor launch_unary(UnaryOp op, const Tensor& x, double alpha) {
  auto dev = common_device(unary_name(op), {x});
  Tensor y = output(dev, x.shape(), x.dtype());
  const std::int64_t n = x.num_elements();
  if (n == 0) return y;
  if (dev->is_gpu()) {
    CHORUS_IF_CUDA(if (!cuda::activation_forward(*dev, op, x.dtype(), x.data(), y.data(), n)) cuda::unary(
        dev->gpu_ordinal(), dev->stream().native_handle(), op, x.dtype(), x.data(), y.data(), n, alpha));
  } else {
    internal::run_cpu(*dev, [&] {
      if (op == UnaryOp::kSilu && x.dtype() == DType::kFloat32 &&
          cpu::eltwise_forward(UnaryOp::kSigmoid, x.dtype(), x.data(), y.data(), n)) {
        // float32 silu as oneDNN's vectorized sigmoid times x (TF's own formula, x·sigmoid(x)):
        // ~5x faster than the scalar expf loop; NaN/Inf as TF (sigmoid(-inf) = 0, -inf·0 = NaN).
        const Shape flat{n};
        cpu::binary(BinaryOp::kMul, x.dtype(), internal::broadcast_layout("Silu", flat, {&flat, &flat}), x.data(),
                    y.data(), y.data());
      } else if (!cpu::eltwise_forward(op, x.dtype(), x.data(), y.data(), n)) {
        cpu::unary(op, x.dtype(), x.data(), y.data(), n, alpha);
      }
    });
  }
  return y;
}

Tensor launch_binary(BinaryOp op, const Tensor& a, const Tensor& b, double alpha) {
  const char* name = binary_name(op);
  auto dev = common_device(name, {a, b});
  internal::require_same_dtype(name, a, b);
  const Shape shape = internal::broadcast_shape(name, a.shape(), b.shape());
  const bool to_bool = is_comparison(op) || is_logical(op);
  Tensor out = output(dev, shape, to_bool ? DType::kBool : a.dtype());
  if (out.num_elements() == 0) return out;
  const StridedLayout layout = internal::broadcast_layout(name, shape, {&a.shape(), &b.shape()});
  if (dev->is_gpu()) {
    CHORUS_IF_CUDA(cuda::binary(dev->gpu_ordinal(), dev->stream().native_handle(), op, a.dtype(), layout, a.data(),
                                b.data(), out.data(), alpha));
  } else {
    internal::run_cpu(*dev, [&] {
      // GeluGrad(dy, x) of one shape in float32 or bfloat16: oneDNN's vectorized eltwise backward (the scalar
      // loop's erf and exp per element were a quarter of a transformer step, docs/benchmarks.md).
      if (op == BinaryOp::kGeluGrad && a.shape() == b.shape() &&
          cpu::eltwise_backward(UnaryOp::kGelu, a.dtype(), b.data(), a.data(), out.data(), out.num_elements()))
        return;
      cpu::binary(op, a.dtype(), layout, a.data(), b.data(), out.data(), alpha);
    });
  }
  return out;
}

std::vector<Tensor> binary_grad(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& y, const Tensor& g,
                                double alpha) {
  auto red = [](const Tensor& t, const Tensor& like) { return sum_to_shape(t, like.shape()); };
  switch (op) {
    case BinaryOp::kAdd: return {red(g, a), red(g, b)};
    case BinaryOp::kSub: return {red(g, a), red(neg(g), b)};
    case BinaryOp::kMul: return {red(mul(g, b), a), red(mul(g, a), b)};
    case BinaryOp::kDiv: return {red(div(g, b), a), red(neg(div(mul(g, y), b)), b)};
    case BinaryOp::kPow: {
      // d/da = b * a^(b-1); d/db = log(a) * a^b where a > 0, else 0 (TF).
      Tensor ga = mul(g, mul(b, pow(a, sub(b, scalar_like(b, 1.0)))));
      Tensor safe_log =
          where(greater(a, zeros_like(a)), log(where(greater(a, zeros_like(a)), a, ones_like(a))), zeros_like(a));
      Tensor gb = mul(g, mul(y, safe_log));
      return {red(ga, a), red(gb, b)};
    }
    case BinaryOp::kMaximum:
    case BinaryOp::kMinimum: {
      Tensor mask = op == BinaryOp::kMaximum ? greater_equal(a, b) : less_equal(a, b);
      Tensor zero = zeros_like(g);
      return {red(where(mask, g, zero), a), red(where(mask, zero, g), b)};
    }
    // The activation gradients are differentiable too (TF registers gradients for them), so that
    // an outer tape gets second derivatives through relu, sigmoid, tanh and gelu. a = dy.
    case BinaryOp::kReluGrad: return {red(binary(BinaryOp::kReluGrad, g, b), a), Tensor()};
    case BinaryOp::kSigmoidGrad:  // dy * y * (1 - y)
      return {red(binary(BinaryOp::kSigmoidGrad, g, b), a),
              red(mul(mul(g, a), sub(scalar_like(b, 1.0), mul(b, scalar_like(b, 2.0)))), b)};
    case BinaryOp::kTanhGrad:  // dy * (1 - y^2)
      return {red(binary(BinaryOp::kTanhGrad, g, b), a), red(mul(mul(g, a), mul(b, scalar_like(b, -2.0))), b)};
    case BinaryOp::kGeluGrad: {  // dy * (Phi(x) + x phi(x)); d/dx = dy * phi(x) * (2 - x^2)
      Tensor phi = mul(exp(mul(square(b), scalar_like(b, -0.5))), scalar_like(b, 0.39894228040143267794));
      return {red(binary(BinaryOp::kGeluGrad, g, b), a),
              red(mul(mul(g, a), mul(phi, sub(scalar_like(b, 2.0), square(b)))), b)};
    }
    case BinaryOp::kSiluGrad: {  // dy * f'(x); d/dx = dy * s (1 - s) (2 + x (1 - 2 s))
      const Tensor s = sigmoid(b);
      const Tensor f2 = mul(mul(s, sub(scalar_like(s, 1.0), s)),
                            add(scalar_like(b, 2.0), mul(b, sub(scalar_like(s, 1.0), mul(s, scalar_like(s, 2.0))))));
      return {red(binary(BinaryOp::kSiluGrad, g, b), a), red(mul(mul(g, a), f2), b)};
    }
    // TF's _LeakyReluGradGrad: the slope is piecewise constant, nothing flows to x.
    case BinaryOp::kLeakyReluGrad: return {red(binary(BinaryOp::kLeakyReluGrad, g, b, alpha), a), Tensor()};
    case BinaryOp::kEluGrad:  // TF's _EluGradGrad: (EluGrad(g, y), y < 0 ? g * dy : 0)
      return {red(binary(BinaryOp::kEluGrad, g, b), a),
              red(where(less(b, zeros_like(b)), mul(g, a), zeros_like(b)), b)};
    case BinaryOp::kSoftplusGrad:  // TF's _SoftplusGradGrad: g * dy / (exp(-x) + 2 + exp(x))
      return {red(binary(BinaryOp::kSoftplusGrad, g, b), a),
              red(div(mul(g, a), add(add(exp(neg(b)), scalar_like(b, 2.0)), exp(b))), b)};
    case BinaryOp::kSqrtGrad: {  // TF's _SqrtGradGrad: ga = g / y; (0.5 * ga, -ga * SqrtGrad(dy, y))
      const Tensor ga = div(g, b);
      return {red(mul(ga, scalar_like(b, 0.5)), a), red(neg(mul(ga, binary(BinaryOp::kSqrtGrad, a, b))), b)};
    }
    case BinaryOp::kRsqrtGrad:  // TF's _RsqrtGradGrad: (RsqrtGrad(g, y), -1.5 * g * dy * y^2)
      return {red(binary(BinaryOp::kRsqrtGrad, g, b), a), red(mul(mul(g, a), mul(square(b), scalar_like(b, -1.5))), b)};
    case BinaryOp::kReciprocalGrad:  // TF's _ReciprocalGradGrad: (ReciprocalGrad(g, y), -2 * g * dy * y)
      return {red(binary(BinaryOp::kReciprocalGrad, g, b), a), red(mul(mul(g, a), mul(b, scalar_like(b, -2.0))), b)};
    default: return {Tensor(), Tensor()};
  }
}

}  // namespace

Tensor unary(UnaryOp op, const Tensor& x, double alpha_in) {
  internal::device_of(unary_name(op), x);  // defined-ness first, for a clear message
  check_unary_dtype(op, x);
  const double alpha = op == UnaryOp::kLeakyRelu ? leaky_alpha(alpha_in, x.dtype()) : 0.0;
  Tensor y = launch_unary(op, x, alpha);
  if (is_floating(x.dtype()) && internal::should_record({x})) {
    internal::record(unary_name(op), {x}, {y}, [op, x, y, alpha](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
      const Tensor& g = gs[0];
      switch (op) {
        case UnaryOp::kNeg: return {neg(g)};
        case UnaryOp::kExp: return {mul(g, y)};
        case UnaryOp::kLog: return {div(g, x)};
        case UnaryOp::kSqrt: return {binary(BinaryOp::kSqrtGrad, g, y)};
        case UnaryOp::kRsqrt: return {binary(BinaryOp::kRsqrtGrad, g, y)};
        case UnaryOp::kSquare: return {mul(g, mul(x, scalar_like(x, 2.0)))};
        case UnaryOp::kAbs: return {mul(g, sign(x))};
        case UnaryOp::kSign: return {zeros_like(x)};
        case UnaryOp::kReciprocal: return {binary(BinaryOp::kReciprocalGrad, g, y)};
        case UnaryOp::kRelu: return {binary(BinaryOp::kReluGrad, g, x)};
        case UnaryOp::kSigmoid: return {binary(BinaryOp::kSigmoidGrad, g, y)};
        case UnaryOp::kTanh: return {binary(BinaryOp::kTanhGrad, g, y)};
        case UnaryOp::kGelu: return {binary(BinaryOp::kGeluGrad, g, x)};
        case UnaryOp::kSilu: return {binary(BinaryOp::kSiluGrad, g, x)};
        case UnaryOp::kLeakyRelu: return {binary(BinaryOp::kLeakyReluGrad, g, x, alpha)};
        case UnaryOp::kElu: return {binary(BinaryOp::kEluGrad, g, y)};
        case UnaryOp::kSoftplus: return {binary(BinaryOp::kSoftplusGrad, g, x)};
        case UnaryOp::kLogicalNot: break;
      }
      return {Tensor()};
    });
  }
  return y;
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b, double alpha_in) {
  internal::common_device(binary_name(op), {a, b});
  check_binary_dtype(op, a);
  const double alpha = op == BinaryOp::kLeakyReluGrad ? leaky_alpha(alpha_in, a.dtype()) : 0.0;
  Tensor y = launch_binary(op, a, b, alpha);
  const bool differentiable = is_floating(a.dtype()) && !is_comparison(op) && !is_logical(op);
  if (differentiable && internal::should_record({a, b})) {
    internal::record(binary_name(op), {a, b}, {y}, [op, a, b, y, alpha](const std::vector<Tensor>& gs) {
      return binary_grad(op, a, b, y, gs[0], alpha);
    });
  }
  return y;
}

Tensor where(const Tensor& cond, const Tensor& x, const Tensor& y) {
  auto dev = common_device("SelectV2", {cond, x, y});
  internal::require_dtype("SelectV2", cond, {DType::kBool}, "cond");
  internal::require_same_dtype("SelectV2", x, y);
  const Shape shape =
      internal::broadcast_shape("SelectV2", internal::broadcast_shape("SelectV2", cond.shape(), x.shape()), y.shape());
  Tensor out = output(dev, shape, x.dtype());
  if (out.num_elements() > 0) {
    const StridedLayout layout = internal::broadcast_layout("SelectV2", shape, {&cond.shape(), &x.shape(), &y.shape()});
    if (dev->is_gpu()) {
      CHORUS_IF_CUDA(cuda::where(dev->gpu_ordinal(), dev->stream().native_handle(), x.dtype(), layout, cond.data(),
                                 x.data(), y.data(), out.data()));
    } else {
      internal::run_cpu(*dev, [&] { cpu::where(x.dtype(), layout, cond.data(), x.data(), y.data(), out.data()); });
    }
  }
  if (is_floating(x.dtype()) && internal::should_record({x, y})) {
    internal::record("SelectV2", {cond, x, y}, {out},
                     [cond, x, y](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
                       Tensor zero = zeros_like(gs[0]);
                       return {Tensor(), sum_to_shape(where(cond, gs[0], zero), x.shape()),
                               sum_to_shape(where(cond, zero, gs[0]), y.shape())};
                     });
  }
  return out;
}

Tensor cast(const Tensor& x, DType dtype) {
  auto dev = internal::device_of("Cast", x);
  Tensor y = output(dev, x.shape(), dtype);
  const std::int64_t n = x.num_elements();
  if (n > 0) {
    if (dev->is_gpu()) {
      CHORUS_IF_CUDA(
          cuda::cast(dev->gpu_ordinal(), dev->stream().native_handle(), x.dtype(), dtype, x.data(), y.data(), n));
    } else {
      internal::run_cpu(*dev, [&] { cpu::cast(x.dtype(), dtype, x.data(), y.data(), n); });
    }
  }
  if (is_floating(x.dtype()) && is_floating(dtype) && internal::should_record({x})) {
    const DType from = x.dtype();
    internal::record("Cast", {x}, {y},
                     [from](const std::vector<Tensor>& gs) -> std::vector<Tensor> { return {cast(gs[0], from)}; });
  }
  return y;
}

Tensor scalar_like(const Tensor& x, double value) {
  CHORUS_REQUIRE(x.defined(), InvalidArgumentError, "scalar_like: undefined tensor");
  return Tensor::full({}, value, x.dtype(), x.device_name());
}
Tensor zeros_like(const Tensor& x) {
  CHORUS_REQUIRE(x.defined(), InvalidArgumentError, "zeros_like: undefined tensor");
  return Tensor::zeros(x.shape(), x.dtype(), x.device_name());
}
Tensor ones_like(const Tensor& x) {
  CHORUS_REQUIRE(x.defined(), InvalidArgumentError, "ones_like: undefined tensor");
  return Tensor::ones(x.shape(), x.dtype(), x.device_name());
}

}  // namespace chorus::ops
