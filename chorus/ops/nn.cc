#include <chorus/ops/nn.h>

#include <chorus/ops/cpu/dnn.h>
#include <chorus/ops/cpu/loops.h>
#include <chorus/ops/elementwise.h>
#include <chorus/ops/geometry.h>
#include <chorus/ops/internal.h>
#include <chorus/ops/reduction.h>
#include <chorus/ops/shape_ops.h>
#include <chorus/ops/tape.h>
#if CHORUS_WITH_CUDA
#include <chorus/ops/cuda/kernels.h>
#include <chorus/ops/cuda/libraries.h>
#endif

namespace chorus::ops {
namespace {

using internal::output;

// Convolution and pooling: every floating dtype on both devices; CPU float16 only where oneDNN has
// kernels for it (else UnimplementedError pointing to bfloat16, ops/cpu/dnn.h).
void require_dnn_dtype(const char* op, const DeviceContext& dev, const Tensor& x) {
  internal::require_float(op, x);
  if (!dev.is_gpu() && x.dtype() == DType::kFloat16 && !cpu::float16_supported()) cpu::throw_float16_unsupported(op);
}

// Softmax and batch normalization kernels take float32 / float64; 16-bit inputs run in float32.
void require_wide_dtype(const char* op, const Tensor& x) {
  internal::require_dtype(op, x, {DType::kFloat32, DType::kFloat64});
}

bool is_16bit(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }

// The number of groups: the input depth over the filters' input depth, as TF infers it, or
// `requested` when > 0, which must then agree. The output depth must be a multiple of it.
std::int64_t conv_groups(const char* op, const Shape& x, const Shape& w, std::int64_t requested) {
  const std::int64_t in_c = x.dims()[3], f_in = w.dims()[2], out_c = w.dims()[3];
  CHORUS_REQUIRE(requested >= 0, InvalidArgumentError, op, ": groups must be >= 0 (0: inferred), got ", requested);
  std::int64_t groups = requested;
  if (groups == 0) {
    CHORUS_REQUIRE(f_in > 0 ? in_c > 0 && in_c % f_in == 0 : in_c == 0, InvalidArgumentError, op, ": input depth ",
                   in_c, " must be a multiple of the filters' input depth ", f_in, " (groups = ", in_c, " / ", f_in,
                   "; input ", x.to_string(), ", filters ", w.to_string(), ")");
    groups = f_in > 0 ? in_c / f_in : 1;
  } else {
    CHORUS_REQUIRE(in_c == groups * f_in, InvalidArgumentError, op, ": input depth ", in_c, " must be groups (", groups,
                   ") x the filters' input depth ", f_in, " (input ", x.to_string(), ", filters ", w.to_string(), ")");
  }
  CHORUS_REQUIRE(out_c % groups == 0, InvalidArgumentError, op, ": output depth ", out_c,
                 " must be a multiple of the number of groups ", groups, " (input ", x.to_string(), ", filters ",
                 w.to_string(), ")");
  return groups;
}

Conv2dGeometry conv_geometry(const char* op, const Shape& x, const Shape& w, const Conv2dOptions& o) {
  CHORUS_REQUIRE(x.rank() == 4, InvalidArgumentError, op, ": input must be NHWC (rank 4), got ", x.to_string());
  CHORUS_REQUIRE(w.rank() == 4, InvalidArgumentError, op, ": filters must be HWIO (rank 4), got ", w.to_string());
  CHORUS_REQUIRE(o.strides[0] > 0 && o.strides[1] > 0 && o.dilations[0] > 0 && o.dilations[1] > 0, InvalidArgumentError,
                 op, ": strides and dilations must be > 0, got strides (", o.strides[0], ", ", o.strides[1],
                 ") dilations (", o.dilations[0], ", ", o.dilations[1], ")");
  Conv2dGeometry g;
  g.groups = conv_groups(op, x, w, o.groups);
  g.n = x.dims()[0];
  g.in_h = x.dims()[1];
  g.in_w = x.dims()[2];
  g.in_c = x.dims()[3];
  g.k_h = w.dims()[0];
  g.k_w = w.dims()[1];
  g.out_c = w.dims()[3];
  g.stride_h = o.strides[0];
  g.stride_w = o.strides[1];
  g.dilation_h = o.dilations[0];
  g.dilation_w = o.dilations[1];
  CHORUS_REQUIRE(compute_output_size(g, o.padding), InvalidArgumentError, op, ": the ", g.k_h, "x", g.k_w,
                 " filter (dilation ", g.dilation_h, "x", g.dilation_w, ") does not fit the ", g.in_h, "x", g.in_w,
                 " input with VALID padding");
  return g;
}

Conv2dGeometry pool_geometry(const char* op, const Shape& x, std::array<std::int64_t, 2> k,
                             std::array<std::int64_t, 2> s, Padding padding) {
  CHORUS_REQUIRE(x.rank() == 4, InvalidArgumentError, op, ": input must be NHWC (rank 4), got ", x.to_string());
  CHORUS_REQUIRE(k[0] > 0 && k[1] > 0 && s[0] > 0 && s[1] > 0, InvalidArgumentError, op,
                 ": ksize and strides must be > 0");
  Conv2dGeometry g;
  g.n = x.dims()[0];
  g.in_h = x.dims()[1];
  g.in_w = x.dims()[2];
  g.in_c = g.out_c = x.dims()[3];
  g.k_h = k[0];
  g.k_w = k[1];
  g.stride_h = s[0];
  g.stride_w = s[1];
  CHORUS_REQUIRE(compute_output_size(g, padding), InvalidArgumentError, op, ": the ", k[0], "x", k[1],
                 " window does not fit the ", g.in_h, "x", g.in_w, " input with VALID padding");
  return g;
}

// The fused backward kernels below are not differentiable again: when an outer tape watches their
// inputs (a second derivative), record them with a gradient that says so instead of letting the
// outer gradient silently miss their contribution.
void record_no_second_order(const char* op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
  if (!internal::should_record(inputs)) return;
  const std::string name = op;
  internal::record(name, inputs, outputs, [name](const std::vector<Tensor>&) -> std::vector<Tensor> {
    throw UnimplementedError(chorus::internal::str_cat(
        "the gradient of ", name,
        " is not implemented: second derivatives through conv2d, pooling, softmax, "
        "batch_norm and the fused cross-entropy losses are not supported (elementwise ops, reductions, matmul and "
        "shape ops support them)"));
  });
}

Shape nhwc(const Conv2dGeometry& g) { return Shape{g.n, g.out_h, g.out_w, g.out_c}; }

Tensor pool(PoolKind kind, const Tensor& x, std::array<std::int64_t, 2> k, std::array<std::int64_t, 2> s,
            Padding padding) {
  const char* name = kind == PoolKind::kMax ? "MaxPool" : "AvgPool";
  auto dev = internal::device_of(name, x);
  require_dnn_dtype(name, *dev, x);
  const Conv2dGeometry g = pool_geometry(name, x.shape(), k, s, padding);
  Tensor y = output(dev, nhwc(g), x.dtype());
  const bool record = internal::should_record({x});
  // Training max pooling on the CPU keeps where each maximum was (oneDNN's workspace) for the
  // gradient, which then need not pool again.
  const std::size_t ws_bytes =
      record && !dev->is_gpu() && y.num_elements() > 0 ? cpu::pool2d_workspace_bytes(kind, x.dtype(), g) : 0;
  Tensor workspace = ws_bytes > 0 ? output(dev, Shape{static_cast<std::int64_t>(ws_bytes)}, DType::kUInt8) : Tensor();
  if (y.num_elements() > 0) {
    if (dev->is_gpu()) {
      CHORUS_IF_CUDA(cuda::pool2d_forward(*dev, kind, x.dtype(), g, x.data(), y.data()));
    } else if (ws_bytes > 0) {
      internal::run_cpu(
          *dev, [&] { cpu::pool2d_forward_training(kind, x.dtype(), g, x.data(), y.data(), workspace.data()); });
    } else {
      internal::run_cpu(*dev, [&] { cpu::pool2d_forward(kind, x.dtype(), g, x.data(), y.data()); });
    }
  }
  if (record) {
    internal::record(name, {x}, {y}, [kind, g, x, y, workspace](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
      const Tensor& dy = gs[0];
      auto d = dy.buffer()->device_ptr();
      Tensor dx = output(d, x.shape(), x.dtype());
      if (dx.num_elements() > 0) {
        if (d->is_gpu()) {
          CHORUS_IF_CUDA(cuda::pool2d_backward(*d, kind, x.dtype(), g, x.data(), y.data(), dy.data(), dx.data()));
        } else if (workspace.defined()) {
          internal::run_cpu(*d, [&] {
            cpu::pool2d_backward_with_workspace(kind, x.dtype(), g, dy.data(), workspace.data(), dx.data());
          });
        } else {
          internal::run_cpu(*d, [&] { cpu::pool2d_backward(kind, x.dtype(), g, x.data(), dy.data(), dx.data()); });
        }
      }
      record_no_second_order(kind == PoolKind::kMax ? "MaxPoolGrad" : "AvgPoolGrad", {x, dy}, {dx});
      return {dx};
    });
  }
  return y;
}

Tensor softmax_last(bool log, const Tensor& x) {
  const char* name = log ? "LogSoftmax" : "Softmax";
  auto dev = internal::device_of(name, x);
  require_wide_dtype(name, x);
  CHORUS_REQUIRE(x.shape().rank() >= 1, InvalidArgumentError, name, ": logits must have rank >= 1");
  const std::int64_t cols = x.shape().dims().back();
  const std::int64_t rows = cols == 0 ? 0 : x.num_elements() / cols;
  Tensor y = output(dev, x.shape(), x.dtype());
  if (y.num_elements() > 0) {
    if (dev->is_gpu()) {
      CHORUS_IF_CUDA(cuda::softmax_forward(*dev, x.dtype(), log, x.data(), y.data(), rows, cols));
    } else {
      internal::run_cpu(*dev, [&] { cpu::softmax_forward(x.dtype(), log, x.data(), y.data(), rows, cols); });
    }
  }
  if (internal::should_record({x})) {
    internal::record(name, {x}, {y}, [log, y, rows, cols](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
      const Tensor& dy = gs[0];
      auto d = dy.buffer()->device_ptr();
      Tensor dx = output(d, y.shape(), y.dtype());
      if (dx.num_elements() > 0) {
        if (d->is_gpu()) {
          CHORUS_IF_CUDA(cuda::softmax_backward(*d, y.dtype(), log, y.data(), dy.data(), dx.data(), rows, cols));
        } else {
          internal::run_cpu(*d,
                            [&] { cpu::softmax_backward(y.dtype(), log, y.data(), dy.data(), dx.data(), rows, cols); });
        }
      }
      record_no_second_order(log ? "LogSoftmaxGrad" : "SoftmaxGrad", {y, dy}, {dx});
      return {dx};
    });
  }
  return y;
}

Tensor softmax_axis(bool log, const Tensor& x, int axis) {
  internal::device_of(log ? "LogSoftmax" : "Softmax", x);
  // 16-bit logits: computed in float32 and rounded once (the casts carry the gradient back).
  if (is_16bit(x.dtype())) return cast(softmax_axis(log, cast(x, DType::kFloat32), axis), x.dtype());
  const int r = x.shape().rank();
  const int a = internal::normalize_axis(log ? "LogSoftmax" : "Softmax", axis, r);
  if (a == r - 1) return softmax_last(log, x);
  std::vector<int> perm;
  for (int i = 0; i < r; ++i) perm.push_back(i);
  std::swap(perm[static_cast<std::size_t>(a)], perm.back());
  return transpose(softmax_last(log, transpose(x, perm)), perm);  // a swap is its own inverse
}

// Runs the fused loss kernel: per-row loss and the logits' gradient.
std::pair<Tensor, Tensor> xent(bool sparse, const Tensor& labels, const Tensor& logits) {
  const char* name = sparse ? "SparseSoftmaxCrossEntropyWithLogits" : "SoftmaxCrossEntropyWithLogits";
  auto dev = internal::common_device(name, {labels, logits});
  internal::require_float(name, logits, "logits");
  CHORUS_REQUIRE(logits.shape().rank() == 2, InvalidArgumentError, name, ": logits must be [batch, classes], got ",
                 logits.shape().to_string());
  const std::int64_t rows = logits.shape().dims()[0], cols = logits.shape().dims()[1];
  if (sparse) {
    internal::require_dtype(name, labels, {DType::kInt32, DType::kInt64}, "labels");
    CHORUS_REQUIRE(labels.shape() == Shape{rows}, InvalidArgumentError, name, ": labels must have shape (", rows,
                   ",) to match logits ", logits.shape().to_string(), ", got ", labels.shape().to_string());
  } else {
    CHORUS_REQUIRE(labels.shape() == logits.shape() && labels.dtype() == logits.dtype(), InvalidArgumentError, name,
                   ": labels must match logits ", dtype_name(logits.dtype()), logits.shape().to_string(), ", got ",
                   dtype_name(labels.dtype()), labels.shape().to_string());
  }
  Tensor loss = output(dev, Shape{rows}, logits.dtype());
  Tensor grad = output(dev, logits.shape(), logits.dtype());
  if (rows > 0) {
    CHORUS_REQUIRE(cols > 0, InvalidArgumentError, name, ": logits have 0 classes");
    if (dev->is_gpu()) {
      CHORUS_IF_CUDA(sparse ? cuda::sparse_softmax_xent(dev->gpu_ordinal(), dev->stream().native_handle(),
                                                        logits.dtype(), logits.data(), labels.dtype(), labels.data(),
                                                        loss.data(), grad.data(), rows, cols)
                            : cuda::softmax_xent(dev->gpu_ordinal(), dev->stream().native_handle(), logits.dtype(),
                                                 logits.data(), labels.data(), loss.data(), grad.data(), rows, cols));
    } else {
      internal::run_cpu(*dev, [&] {
        if (sparse)
          cpu::sparse_softmax_xent(logits.dtype(), logits.data(), labels.dtype(), labels.data(), loss.data(),
                                   grad.data(), rows, cols);
        else
          cpu::softmax_xent(logits.dtype(), logits.data(), labels.data(), loss.data(), grad.data(), rows, cols);
      });
    }
  }
  return {loss, grad};
}

Tensor xent_op(bool sparse, const Tensor& labels, const Tensor& logits) {
  auto [loss, grad] = xent(sparse, labels, logits);
  if (internal::should_record({logits})) {
    record_no_second_order(sparse ? "SparseSoftmaxCrossEntropyWithLogitsGrad" : "SoftmaxCrossEntropyWithLogitsGrad",
                           {logits}, {grad});
    internal::record(sparse ? "SparseSoftmaxCrossEntropyWithLogits" : "SoftmaxCrossEntropyWithLogits", {labels, logits},
                     {loss}, [grad](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
                       return {Tensor(), mul(expand_dims(gs[0], -1), grad)};
                     });
  }
  return loss;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Conv2dOptions& o) {
  auto dev = internal::common_device("Conv2D", {x, w});
  require_dnn_dtype("Conv2D", *dev, x);
  internal::require_same_dtype("Conv2D", x, w);
  const Conv2dGeometry g = conv_geometry("Conv2D", x.shape(), w.shape(), o);
  Tensor y = output(dev, nhwc(g), x.dtype());
  if (y.num_elements() > 0) {
    if (dev->is_gpu()) {
      CHORUS_IF_CUDA(cuda::conv2d_forward(*dev, x.dtype(), g, x.data(), w.data(), y.data()));
    } else {
      internal::run_cpu(*dev, [&] { cpu::conv2d_forward(x.dtype(), g, x.data(), w.data(), y.data()); });
    }
  }
  if (internal::should_record({x, w})) {
    internal::record("Conv2D", {x, w}, {y}, [x, w, o](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
      // The first layer's input gradient (the images') is not wanted: not computed.
      return {internal::wants_input_gradient(0) ? conv2d_backprop_input(x.shape(), w, gs[0], o) : Tensor(),
              internal::wants_input_gradient(1) ? conv2d_backprop_filter(x, w.shape(), gs[0], o) : Tensor()};
    });
  }
  return y;
}

Tensor depthwise_conv2d(const Tensor& x, const Tensor& filter, const Conv2dOptions& o) {
  const char* op = "DepthwiseConv2dNative";
  internal::common_device(op, {x, filter});
  const Shape& xs = x.shape();
  const Shape& fs = filter.shape();
  CHORUS_REQUIRE(xs.rank() == 4, InvalidArgumentError, op, ": input must be NHWC (rank 4), got ", xs.to_string());
  CHORUS_REQUIRE(fs.rank() == 4, InvalidArgumentError, op, ": filter must be [kh, kw, in_channels, multiplier], got ",
                 fs.to_string());
  const std::int64_t c = xs.dims()[3], m = fs.dims()[3];
  CHORUS_REQUIRE(fs.dims()[2] == c, InvalidArgumentError, op, ": input depth ", c,
                 " does not match the filter's in-channels ", fs.dims()[2], " (input ", xs.to_string(), ", filter ",
                 fs.to_string(), ")");
  CHORUS_REQUIRE(o.groups == 0 || o.groups == c, InvalidArgumentError, op, ": options.groups must be 0 or the ",
                 "input depth ", c, ", got ", o.groups);
  Conv2dOptions grouped = o;
  // No channels: a plain convolution with no input (groups would be 0).
  grouped.groups = c > 0 ? c : 0;
  const Tensor w = reshape(filter, {fs.dims()[0], fs.dims()[1], c > 0 ? 1 : 0, c * m});
  return conv2d(x, w, grouped);
}

Tensor conv1d(const Tensor& x, const Tensor& filters, std::int64_t stride, Padding padding, std::int64_t dilation) {
  const char* op = "conv1d";
  CHORUS_REQUIRE(x.shape().rank() == 3, InvalidArgumentError, op, ": input must be [batch, width, channels], got ",
                 x.shape().to_string());
  CHORUS_REQUIRE(filters.shape().rank() == 3, InvalidArgumentError, op,
                 ": filters must be [width, in_channels, out_channels], got ", filters.shape().to_string());
  CHORUS_REQUIRE(stride > 0 && dilation > 0, InvalidArgumentError, op, ": stride and dilation must be > 0, got stride ",
                 stride, ", dilation ", dilation);
  const Tensor y =
      conv2d(expand_dims(x, 1), expand_dims(filters, 0), Conv2dOptions{{1, stride}, padding, {1, dilation}});
  return squeeze(y, {1});
}

namespace {
// The gradient of y = act(z) with z = conv + bias: dz, and the bias's gradient (sum of dz over all
// but the channel axis), in one pass on the CPU.
std::pair<Tensor, Tensor> bias_activation_grad(const Tensor& dy, const Tensor& y, FusedActivation act) {
  auto dev = internal::common_device("BiasActivationGrad", {dy, y});
  const std::int64_t channels = y.shape().dims().back();
  const std::int64_t rows = channels > 0 ? y.num_elements() / channels : 0;
  if (dev->is_gpu()) {
    Tensor dz = act == FusedActivation::kRelu ? binary(BinaryOp::kReluGrad, dy, y) : dy;  // y > 0 iff z > 0
    return {dz, sum_to_shape(dz, Shape{channels})};
  }
  // dz overwrites dy when nothing else holds dy's storage (the tape hands a gradient function the
  // output gradients it already dropped from its map): one 11 MB buffer fewer to fill per step
  // for the seed CNN's first layer, and the writes land on lines the loop just read.
  const bool in_place = act != FusedActivation::kRelu || dy.buffer().use_count() == 1;
  Tensor dz = in_place ? dy : output(dev, y.shape(), y.dtype());
  Tensor db = output(dev, Shape{channels}, y.dtype());
  internal::run_cpu(*dev, [&] {
    cpu::bias_activation_backward(y.dtype(), act == FusedActivation::kRelu, dy.data(), y.data(), dz.data(), db.data(),
                                  rows, channels);
  });
  record_no_second_order("BiasActivationGrad", {dy, y}, {dz, db});
  return {dz, db};
}
}  // namespace

Tensor fused_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, FusedActivation act, const Conv2dOptions& o) {
  auto dev = internal::common_device("FusedConv2D", {x, w, b});
  require_dnn_dtype("FusedConv2D", *dev, x);
  internal::require_same_dtype("FusedConv2D", x, w);
  internal::require_same_dtype("FusedConv2D", x, b);
  const Conv2dGeometry g = conv_geometry("FusedConv2D", x.shape(), w.shape(), o);
  CHORUS_REQUIRE(b.shape() == Shape{g.out_c}, InvalidArgumentError, "FusedConv2D: bias has shape ",
                 b.shape().to_string(), ", the filters give ", g.out_c, " output channels");
  const bool relu_act = act == FusedActivation::kRelu;
  Tensor y = output(dev, nhwc(g), x.dtype());
  if (dev->is_gpu()) {
    bool fused = y.num_elements() == 0;
    CHORUS_IF_CUDA(fused = fused || cuda::conv2d_bias_activation_forward(*dev, x.dtype(), g, x.data(), w.data(),
                                                                         b.data(), relu_act, y.data()));
    if (!fused) {  // cuDNN has no fused kernel for this case: the three ops, each recorded
      Tensor z = add(conv2d(x, w, o), b);
      return relu_act ? relu(z) : z;
    }
  } else if (y.num_elements() > 0) {
    internal::run_cpu(*dev, [&] {
      cpu::conv2d_forward(x.dtype(), g, x.data(), w.data(), y.data(), {b.data(), relu_act});
    });
  }
  if (internal::should_record({x, w, b})) {
    internal::record("FusedConv2D", {x, w, b}, {y}, [x, w, y, act, o](const std::vector<Tensor>& gs) {
      auto [dz, db] = bias_activation_grad(gs[0], y, act);
      return std::vector<Tensor>{
          internal::wants_input_gradient(0) ? conv2d_backprop_input(x.shape(), w, dz, o) : Tensor(),
          internal::wants_input_gradient(1) ? conv2d_backprop_filter(x, w.shape(), dz, o) : Tensor(), db};
    });
  }
  return y;
}

Tensor conv2d_backprop_input(const Shape& input_shape, const Tensor& w, const Tensor& dy, const Conv2dOptions& o) {
  auto dev = internal::common_device("Conv2DBackpropInput", {w, dy});
  require_dnn_dtype("Conv2DBackpropInput", *dev, dy);
  internal::require_same_dtype("Conv2DBackpropInput", w, dy);
  const Conv2dGeometry g = conv_geometry("Conv2DBackpropInput", input_shape, w.shape(), o);
  CHORUS_REQUIRE(dy.shape() == nhwc(g), InvalidArgumentError, "Conv2DBackpropInput: dy has shape ",
                 dy.shape().to_string(), ", the convolution's output is ", nhwc(g).to_string());
  Tensor dx = g.input_elements() > 0 && g.output_elements() > 0 ? output(dev, input_shape, dy.dtype())
                                                                : Tensor::zeros(input_shape, dy.dtype(), dev->name());
  if (g.input_elements() > 0 && g.output_elements() > 0) {
    if (dev->is_gpu()) {
      CHORUS_IF_CUDA(cuda::conv2d_backward_data(*dev, dy.dtype(), g, dy.data(), w.data(), dx.data()));
    } else {
      internal::run_cpu(*dev, [&] { cpu::conv2d_backward_data(dy.dtype(), g, dy.data(), w.data(), dx.data()); });
    }
  }
  record_no_second_order("Conv2DBackpropInput", {w, dy}, {dx});
  return dx;
}

Tensor conv2d_backprop_filter(const Tensor& x, const Shape& filter_shape, const Tensor& dy, const Conv2dOptions& o) {
  auto dev = internal::common_device("Conv2DBackpropFilter", {x, dy});
  require_dnn_dtype("Conv2DBackpropFilter", *dev, dy);
  internal::require_same_dtype("Conv2DBackpropFilter", x, dy);
  const Conv2dGeometry g = conv_geometry("Conv2DBackpropFilter", x.shape(), filter_shape, o);
  CHORUS_REQUIRE(dy.shape() == nhwc(g), InvalidArgumentError, "Conv2DBackpropFilter: dy has shape ",
                 dy.shape().to_string(), ", the convolution's output is ", nhwc(g).to_string());
  const bool work = g.output_elements() > 0 && g.filter_elements() > 0;
  Tensor dw = work ? output(dev, filter_shape, dy.dtype()) : Tensor::zeros(filter_shape, dy.dtype(), dev->name());
  if (work) {
    if (dev->is_gpu()) {
      CHORUS_IF_CUDA(cuda::conv2d_backward_filter(*dev, dy.dtype(), g, x.data(), dy.data(), dw.data()));
    } else {
      internal::run_cpu(*dev, [&] { cpu::conv2d_backward_filter(dy.dtype(), g, x.data(), dy.data(), dw.data()); });
    }
  }
  record_no_second_order("Conv2DBackpropFilter", {x, dy}, {dw});
  return dw;
}

Tensor max_pool2d(const Tensor& x, std::array<std::int64_t, 2> k, std::array<std::int64_t, 2> s, Padding p) {
  return pool(PoolKind::kMax, x, k, s, p);
}
Tensor avg_pool2d(const Tensor& x, std::array<std::int64_t, 2> k, std::array<std::int64_t, 2> s, Padding p) {
  return pool(PoolKind::kAvg, x, k, s, p);
}

Tensor softmax(const Tensor& logits, int axis) { return softmax_axis(false, logits, axis); }
Tensor log_softmax(const Tensor& logits, int axis) { return softmax_axis(true, logits, axis); }

Tensor sparse_softmax_cross_entropy_with_logits(const Tensor& labels, const Tensor& logits) {
  return xent_op(true, labels, logits);
}
Tensor softmax_cross_entropy_with_logits(const Tensor& labels, const Tensor& logits) {
  return xent_op(false, labels, logits);
}

BatchNormResult batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& mean,
                           const Tensor& variance, double epsilon, bool training) {
  const char* name = "FusedBatchNormV3";
  auto dev = training ? internal::common_device(name, {x, gamma, beta})
                      : internal::common_device(name, {x, gamma, beta, mean, variance});
  if (is_16bit(x.dtype())) {
    // TF's FusedBatchNormV3 with T = half/bfloat16, U = float: float32 parameters and statistics,
    // x normalized in float32 and y rounded once (the casts carry the gradient back to x's dtype).
    CHORUS_REQUIRE(gamma.dtype() == DType::kFloat32, InvalidArgumentError, name, ": with ", dtype_name(x.dtype()),
                   " x, scale/offset/mean/variance must be float32 (TF's FusedBatchNormV3 rule), got ",
                   dtype_name(gamma.dtype()));
    BatchNormResult r = batch_norm(cast(x, DType::kFloat32), gamma, beta, mean, variance, epsilon, training);
    r.y = cast(r.y, x.dtype());
    return r;
  }
  require_wide_dtype(name, x);
  CHORUS_REQUIRE(x.shape().rank() >= 2, InvalidArgumentError, name, ": x must be [..., channels], got ",
                 x.shape().to_string());
  CHORUS_REQUIRE(epsilon > 0, InvalidArgumentError, name, ": epsilon must be > 0, got ", epsilon);
  const std::int64_t c = x.shape().dims().back();
  const std::int64_t rows = c == 0 ? 0 : x.num_elements() / c;
  std::vector<std::reference_wrapper<const Tensor>> params{gamma, beta};
  if (!training) {
    params.push_back(mean);
    params.push_back(variance);
  }
  for (const Tensor& p : params) {
    CHORUS_REQUIRE(p.shape() == Shape{c} && p.dtype() == x.dtype(), InvalidArgumentError, name,
                   ": scale/offset/mean/variance must be ", dtype_name(x.dtype()), "(", c, ",), got ",
                   dtype_name(p.dtype()), p.shape().to_string());
  }
  BatchNormResult r;
  r.y = output(dev, x.shape(), x.dtype());
  if (training) {
    CHORUS_REQUIRE(rows > 0, InvalidArgumentError, name, ": training needs a non-empty batch");
    r.batch_mean = output(dev, Shape{c}, x.dtype());
    r.batch_variance = output(dev, Shape{c}, x.dtype());
    Tensor y = r.y, bm = r.batch_mean, bv = r.batch_variance;
    if (dev->is_gpu()) {
      CHORUS_IF_CUDA(cuda::batch_norm_training(*dev, x.dtype(), x.data(), gamma.data(), beta.data(), y.data(),
                                               bm.data(), bv.data(), rows, c, epsilon));
    } else {
      internal::run_cpu(*dev, [&] {
        cpu::batch_norm_training(x.dtype(), x.data(), gamma.data(), beta.data(), y.data(), bm.data(), bv.data(), rows,
                                 c, epsilon);
      });
    }
    if (internal::should_record({x, gamma, beta})) {
      internal::record(
          name, {x, gamma, beta}, {r.y, r.batch_mean, r.batch_variance},
          [x, gamma, bm, bv, rows, c, epsilon](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
            // Gradients reaching batch_mean / batch_variance are ignored (as TF's fused op).
            if (!gs[0].defined()) return {Tensor(), Tensor(), Tensor()};
            const Tensor& dy = gs[0];
            auto d = dy.buffer()->device_ptr();
            Tensor dx = output(d, x.shape(), x.dtype());
            Tensor dg = output(d, gamma.shape(), x.dtype());
            Tensor db = output(d, gamma.shape(), x.dtype());
            if (d->is_gpu()) {
              CHORUS_IF_CUDA(cuda::batch_norm_backward(*d, x.dtype(), x.data(), dy.data(), gamma.data(), bm.data(),
                                                       bv.data(), dx.data(), dg.data(), db.data(), rows, c, epsilon));
            } else {
              internal::run_cpu(*d, [&] {
                cpu::batch_norm_backward(x.dtype(), x.data(), dy.data(), gamma.data(), bm.data(), bv.data(), dx.data(),
                                         dg.data(), db.data(), rows, c, epsilon);
              });
            }
            record_no_second_order("FusedBatchNormGradV3", {x, dy, gamma}, {dx, dg, db});
            return {dx, dg, db};
          });
    }
    return r;
  }
  if (rows > 0) {
    Tensor y = r.y;
    if (dev->is_gpu()) {
      CHORUS_IF_CUDA(cuda::batch_norm_inference(*dev, x.dtype(), x.data(), gamma.data(), beta.data(), mean.data(),
                                                variance.data(), y.data(), rows, c, epsilon));
    } else {
      internal::run_cpu(*dev, [&] {
        cpu::batch_norm_inference(x.dtype(), x.data(), gamma.data(), beta.data(), mean.data(), variance.data(),
                                  y.data(), rows, c, epsilon);
      });
    }
  }
  if (internal::should_record({x, gamma, beta})) {
    internal::record(name, {x, gamma, beta}, {r.y},
                     [x, gamma, mean, variance, epsilon](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
                       // y = gamma * (x - mean) * inv + beta with constants mean, variance.
                       const Tensor& dy = gs[0];
                       Tensor inv = rsqrt(add(variance, scalar_like(variance, epsilon)));
                       Tensor xhat = mul(sub(x, mean), inv);
                       const Shape cs = gamma.shape();
                       return {mul(dy, mul(gamma, inv)), sum_to_shape(mul(dy, xhat), cs), sum_to_shape(dy, cs)};
                     });
  }
  return r;
}

}  // namespace chorus::ops
