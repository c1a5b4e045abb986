#include <chorus/ops/normalization.h>

#include <cmath>
#include <string>
#include <vector>

#include <chorus/ops/cpu/normalization.h>
#include <chorus/ops/elementwise.h>
#include <chorus/ops/internal.h>
#include <chorus/ops/kinds.h>
#include <chorus/ops/tape.h>
#if CHORUS_WITH_CUDA
#include <chorus/ops/cuda/normalization.h>
#endif

namespace chorus::ops {
namespace {

using internal::output;

bool is_16bit(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }

// gamma or beta as the kernels take it: [x.shape[axis:]] on x's device, of the parameter dtype
// (16-bit ones of x's dtype cast to float32, differentiably). Undefined stays undefined.
Tensor checked_param(const char* op, const char* what, const Tensor& x, const Tensor& p, const Shape& shape,
                     DType param_dtype) {
  if (!p.defined()) return p;
  internal::common_device(op, {x, p});
  CHORUS_REQUIRE(p.shape() == shape, InvalidArgumentError, op, ": ", what, " must have shape ", shape.to_string(),
                 " (x.shape[begin_axis:] of x ", x.shape().to_string(), "), got ", p.shape().to_string());
  if (is_16bit(x.dtype()) && p.dtype() == x.dtype()) return cast(p, param_dtype);
  CHORUS_REQUIRE(p.dtype() == param_dtype, InvalidArgumentError, op, ": ", what, " must be ", dtype_name(param_dtype),
                 is_16bit(x.dtype()) ? " (or x's dtype)" : "", " for ", dtype_name(x.dtype()), " x, got ",
                 dtype_name(p.dtype()));
  return p;
}

// The fused backward is not differentiable again: an outer tape watching its inputs gets an
// error instead of a silently missing second-order term.
void record_no_second_order(const char* op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
  if (!internal::should_record(inputs)) return;
  const std::string name = op;
  internal::record(name, inputs, outputs, [name](const std::vector<Tensor>&) -> std::vector<Tensor> {
    throw UnimplementedError(chorus::internal::str_cat("the gradient of ", name,
                                                       " is not implemented: second derivatives through layer_norm "
                                                       "and rms_norm are not supported"));
  });
}

struct Saved {
  NormKind kind;
  Tensor x, gamma, mean, rstd;
  Shape param_shape;
  std::int64_t rows, cols;
  DType param_dtype;
};

// dx, dgamma, dbeta for the upstream dy (each only where the tape wants it).
std::vector<Tensor> norm_grad(const Saved& s, bool has_beta, const Tensor& dy) {
  if (!dy.defined()) return {Tensor(), Tensor(), Tensor()};
  auto d = dy.buffer()->device_ptr();
  const bool layer = s.kind == NormKind::kLayer;
  if (s.rows == 0) {  // nothing to normalize: zero parameter gradients
    auto zeros = [&] { return internal::zeros_on(d, s.param_shape, s.param_dtype); };
    return {internal::zeros_on(d, s.x.shape(), s.x.dtype()), s.gamma.defined() ? zeros() : Tensor(),
            layer && has_beta ? zeros() : Tensor()};
  }
  Tensor dx = internal::wants_input_gradient(0) ? output(d, s.x.shape(), s.x.dtype()) : Tensor();
  Tensor dg =
      s.gamma.defined() && internal::wants_input_gradient(1) ? output(d, s.gamma.shape(), s.param_dtype) : Tensor();
  Tensor db =
      layer && has_beta && internal::wants_input_gradient(2) ? output(d, s.param_shape, s.param_dtype) : Tensor();
  auto ptr = [](const Tensor& t) -> void* { return t.defined() ? t.data() : nullptr; };
  const void* mean = layer ? s.mean.data() : nullptr;
  if (d->is_gpu()) {
    CHORUS_IF_CUDA({
      const std::size_t bytes =
          dg.defined() || db.defined() ? cuda::norm_backward_workspace_bytes(s.x.dtype(), s.rows, s.cols) : 0;
      Tensor ws = bytes > 0 ? output(d, Shape{static_cast<std::int64_t>(bytes)}, DType::kUInt8) : Tensor();
      cuda::norm_backward(d->gpu_ordinal(), d->stream().native_handle(), s.kind, s.x.dtype(), s.x.data(), dy.data(),
                          ptr(s.gamma), mean, s.rstd.data(), ptr(dx), ptr(dg), ptr(db), s.rows, s.cols, ptr(ws));
    });
  } else {
    internal::run_cpu(*d, [&] {
      cpu::norm_backward(s.kind, s.x.dtype(), s.x.data(), dy.data(), ptr(s.gamma), mean, s.rstd.data(), ptr(dx),
                         ptr(dg), ptr(db), s.rows, s.cols);
    });
  }
  const char* grad_name = layer ? "LayerNormGrad" : "RMSNormGrad";
  std::vector<Tensor> outs;
  for (const Tensor& t : {dx, dg, db})
    if (t.defined()) outs.push_back(t);
  record_no_second_order(grad_name, {s.x, dy, s.gamma}, outs);
  return {dx, dg, db};
}

Tensor normalize(NormKind kind, const Tensor& x, const Tensor& gamma_in, const Tensor& beta_in, double epsilon,
                 int begin_axis) {
  const bool layer = kind == NormKind::kLayer;
  const char* name = layer ? "LayerNorm" : "RMSNorm";
  auto dev = internal::device_of(name, x);
  internal::require_float(name, x);
  const int rank = x.shape().rank();
  CHORUS_REQUIRE(rank >= 1, InvalidArgumentError, name, ": x must have rank >= 1, got a scalar");
  const int axis = internal::normalize_axis(name, begin_axis, rank);
  CHORUS_REQUIRE(epsilon >= 0, InvalidArgumentError, name, ": epsilon must be >= 0, got ", epsilon);
  const auto& dims = x.shape().dims();
  const Shape pshape(std::vector<std::int64_t>(dims.begin() + axis, dims.end()));
  const DType pdtype = x.dtype() == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  const Tensor gamma = checked_param(name, layer ? "gamma" : "scale", x, gamma_in, pshape, pdtype);
  const Tensor beta = layer ? checked_param(name, "beta", x, beta_in, pshape, pdtype) : Tensor();
  const std::int64_t cols = pshape.num_elements();
  const std::int64_t rows = cols == 0 ? 0 : x.num_elements() / cols;

  Tensor y = output(dev, x.shape(), x.dtype());
  Tensor mean = layer ? output(dev, Shape{rows}, pdtype) : Tensor();
  Tensor rstd = output(dev, Shape{rows}, pdtype);
  auto ptr = [](const Tensor& t) -> const void* { return t.defined() ? t.data() : nullptr; };
  if (rows > 0) {
    void* m = layer ? mean.data() : nullptr;
    if (dev->is_gpu()) {
      CHORUS_IF_CUDA(cuda::norm_forward(dev->gpu_ordinal(), dev->stream().native_handle(), kind, x.dtype(), x.data(),
                                        ptr(gamma), ptr(beta), y.data(), m, rstd.data(), rows, cols, epsilon));
    } else {
      internal::run_cpu(*dev, [&] {
        cpu::norm_forward(kind, x.dtype(), x.data(), ptr(gamma), ptr(beta), y.data(), m, rstd.data(), rows, cols,
                          epsilon);
      });
    }
  }
  if (internal::should_record({x, gamma, beta})) {
    Saved s{kind, x, gamma, mean, rstd, pshape, rows, cols, pdtype};
    const bool has_beta = beta.defined();
    internal::record(name, {x, gamma, beta}, {y},
                     [s, has_beta](const std::vector<Tensor>& gs) { return norm_grad(s, has_beta, gs[0]); });
  }
  return y;
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double epsilon, int begin_axis) {
  return normalize(NormKind::kLayer, x, gamma, beta, epsilon, begin_axis);
}

Tensor rms_norm(const Tensor& x, const Tensor& gamma, double epsilon, int begin_axis) {
  return normalize(NormKind::kRms, x, gamma, Tensor(), epsilon, begin_axis);
}

}  // namespace chorus::ops
