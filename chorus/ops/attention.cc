// scaled_dot_product_attention: validation, the dropout key/counter, dispatch to the fused CPU or
// CUDA kernel, and the tape record whose gradient runs the fused backward.
#include <chorus/ops/attention.h>

#include <cmath>
#include <string>
#include <vector>

#include <chorus/ops/attention_geometry.h>
#include <chorus/ops/cpu/attention.h>
#include <chorus/ops/internal.h>
#include <chorus/ops/tape.h>
#if CHORUS_WITH_CUDA
#include <chorus/ops/cuda/attention.h>
#endif

namespace chorus::ops {
namespace {

constexpr const char* kOp = "ScaledDotProductAttention";

std::string shapes_of(const Tensor& q, const Tensor& k, const Tensor& v) {
  return chorus::internal::str_cat("(q ", q.shape().to_string(), ", k ", k.shape().to_string(), ", v ",
                                   v.shape().to_string(), ")");
}

// The geometry of q, k, v, after checking their ranks, dims and dtypes.
AttentionGeometry check_shapes(const Tensor& q, const Tensor& k, const Tensor& v) {
  internal::require_float(kOp, q, "q");
  internal::require_same_dtype(kOp, q, k);
  internal::require_same_dtype(kOp, q, v);
  CHORUS_REQUIRE(q.shape().rank() == 4 && k.shape().rank() == 4 && v.shape().rank() == 4, InvalidArgumentError, kOp,
                 ": q, k and v must be [batch, heads, seq, head_dim] (rank 4), got ", shapes_of(q, k, v));
  const auto& qd = q.shape().dims();
  const auto& kd = k.shape().dims();
  const auto& vd = v.shape().dims();
  CHORUS_REQUIRE(kd[0] == qd[0] && vd[0] == qd[0] && kd[1] == qd[1] && vd[1] == qd[1], InvalidArgumentError, kOp,
                 ": q, k and v must agree in batch and heads (dims 0 and 1), got ", shapes_of(q, k, v));
  CHORUS_REQUIRE(kd[3] == qd[3], InvalidArgumentError, kOp, ": q and k must have the same head_dim (dim 3), got ",
                 shapes_of(q, k, v));
  CHORUS_REQUIRE(vd[2] == kd[2], InvalidArgumentError, kOp, ": k and v must have the same number of keys (dim 2), got ",
                 shapes_of(q, k, v));
  AttentionGeometry g;
  g.batch = qd[0];
  g.heads = qd[1];
  g.tq = qd[2];
  g.tk = kd[2];
  g.head_dim = qd[3];
  g.value_dim = vd[3];
  return g;
}

// Broadcast strides of a bool mask onto [B, H, Tq, Tk] (right-aligned; size-1 dims get stride 0).
void check_mask(const Tensor& mask, const Tensor& q, const Tensor& k, const Tensor& v, AttentionGeometry& g) {
  internal::require_dtype(kOp, mask, {DType::kBool}, "mask");
  const std::int64_t target[4] = {g.batch, g.heads, g.tq, g.tk};
  const auto& md = mask.shape().dims();
  const int rank = mask.shape().rank();
  bool ok = rank <= 4;
  std::int64_t stride = 1;
  for (int a = rank - 1; ok && a >= 0; --a) {
    const int t = 4 - rank + a;
    const std::int64_t m = md[static_cast<std::size_t>(a)];
    ok = m == target[t] || m == 1;
    g.mask_strides[t] = m == 1 ? 0 : stride;
    stride *= m;
  }
  CHORUS_REQUIRE(ok, InvalidArgumentError, kOp, ": mask of shape ", mask.shape().to_string(),
                 " does not broadcast to [batch, heads, Tq, Tk] = (", g.batch, ", ", g.heads, ", ", g.tq, ", ", g.tk,
                 ") ", shapes_of(q, k, v));
}

void set_options(const AttentionOptions& o, AttentionGeometry& g) {
  CHORUS_REQUIRE(std::isfinite(o.scale), InvalidArgumentError, kOp,
                 ": scale must be finite (0: 1/sqrt(head_dim)), got ", o.scale);
  CHORUS_REQUIRE(o.dropout_rate >= 0.0 && o.dropout_rate < 1.0, InvalidArgumentError, kOp,
                 ": dropout_rate must be in [0, 1), got ", o.dropout_rate);
  g.scale = o.scale != 0 ? o.scale : 1.0 / std::sqrt(static_cast<double>(g.head_dim > 0 ? g.head_dim : 1));
  g.causal = o.causal;
  g.dropout_rate = o.dropout_rate;
}

// Draws the dropout key and counter (after every check: a failing call consumes nothing).
void draw_dropout(const AttentionOptions& o, AttentionGeometry& g) {
  if (g.dropout_rate == 0) return;
  if (o.generator == nullptr && o.seed.has_value()) {
    philox_from_stateless_seed(static_cast<std::uint64_t>((*o.seed)[0]), static_cast<std::uint64_t>((*o.seed)[1]),
                               &g.dropout_key, &g.dropout_counter);
    return;
  }
  Generator& source = o.generator != nullptr ? *o.generator : global_generator();
  const GeneratorState child = source.split(1)[0].state();
  g.dropout_key = child.philox_key();
  g.dropout_counter = child.philox_counter();
}

DType lse_dtype(DType dtype) { return dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32; }

// The gradient op: dq, dk, dv from dout with the fused backward kernel.
std::vector<Tensor> attention_grad(const AttentionGeometry& g0, const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& mask, const Tensor& out, const Tensor& lse, const Tensor& dout) {
  auto dev = internal::common_device("ScaledDotProductAttentionGrad", {q, k, v, out, dout});
  if (out.num_elements() == 0 || g0.tk == 0) {
    return {internal::zeros_on(dev, q.shape(), q.dtype()), internal::zeros_on(dev, k.shape(), k.dtype()),
            internal::zeros_on(dev, v.shape(), v.dtype())};
  }
  AttentionGeometry g = g0;
  g.mask = mask.defined() ? static_cast<const std::uint8_t*>(mask.data()) : nullptr;
  Tensor dq = internal::output(dev, q.shape(), q.dtype());
  Tensor dk = internal::output(dev, k.shape(), k.dtype());
  Tensor dv = internal::output(dev, v.shape(), v.dtype());
  if (dev->is_gpu()) {
    Tensor delta = internal::output(dev, lse.shape(), lse.dtype());
    CHORUS_IF_CUDA(cuda::attention_backward(dev->gpu_ordinal(), dev->stream().native_handle(), q.dtype(), g, q.data(),
                                            k.data(), v.data(), out.data(), lse.data(), dout.data(), delta.data(),
                                            dq.data(), dk.data(), dv.data()));
  } else {
    internal::run_cpu(*dev, [&] {
      cpu::attention_backward(q.dtype(), g, q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(),
                              dq.data(), dk.data(), dv.data());
    });
  }
  if (internal::should_record({q, k, v, dout})) {
    internal::record("ScaledDotProductAttentionGrad", {q, k, v, dout}, {dq, dk, dv},
                     [](const std::vector<Tensor>&) -> std::vector<Tensor> {
                       throw UnimplementedError(
                           "the gradient of ScaledDotProductAttentionGrad is not implemented: second derivatives "
                           "through scaled_dot_product_attention are not supported (compose matmul, softmax and "
                           "where for them)");
                     });
  }
  return {dq, dk, dv};
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                    const AttentionOptions& options) {
  auto dev = mask.defined() ? internal::common_device(kOp, {q, k, v, mask}) : internal::common_device(kOp, {q, k, v});
  AttentionGeometry g = check_shapes(q, k, v);
  if (mask.defined()) check_mask(mask, q, k, v, g);
  set_options(options, g);
  draw_dropout(options, g);

  const Shape out_shape{g.batch, g.heads, g.tq, g.value_dim};
  const bool empty = out_shape.num_elements() == 0 || g.tk == 0;
  Tensor out = empty ? internal::zeros_on(dev, out_shape, q.dtype()) : internal::output(dev, out_shape, q.dtype());
  Tensor lse = internal::output(dev, Shape{g.batch, g.heads, g.tq}, lse_dtype(q.dtype()));
  if (!empty) {
    AttentionGeometry run = g;
    run.mask = mask.defined() ? static_cast<const std::uint8_t*>(mask.data()) : nullptr;
    if (dev->is_gpu()) {
      CHORUS_IF_CUDA(cuda::attention_forward(dev->gpu_ordinal(), dev->stream().native_handle(), q.dtype(), run,
                                             q.data(), k.data(), v.data(), out.data(), lse.data()));
    } else {
      internal::run_cpu(
          *dev, [&] { cpu::attention_forward(q.dtype(), run, q.data(), k.data(), v.data(), out.data(), lse.data()); });
    }
  }
  if (internal::should_record({q, k, v})) {
    // The mask tensor is held by the gradient (the geometry's pointer is re-taken from it there).
    internal::record(kOp, {q, k, v}, {out}, [g, q, k, v, mask, out, lse](const std::vector<Tensor>& gs) {
      if (!gs[0].defined()) return std::vector<Tensor>{Tensor(), Tensor(), Tensor()};
      return attention_grad(g, q, k, v, mask, out, lse, gs[0]);
    });
  }
  return out;
}

}  // namespace chorus::ops
