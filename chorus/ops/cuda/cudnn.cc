// cuDNN pooling, softmax, batch normalization and activation (ops/cuda/libraries.h), plus the
// handle registry and helpers of cudnn_util.h. Convolutions are in cudnn_conv.cc.
//
// Layouts: pooling runs on NHWC tensors as they are; softmax, batch norm and activation view
// their [rows, cols] / [rows, channels] / [n] buffers as NCHW [rows, cols, 1, 1] (the same memory).
//
// Asymmetric padding (TF's SAME with an odd total): cuDNN pads symmetrically, so
//   - max pooling copies the input into a workspace padded explicitly with -inf (the lowest
//     float, which never wins a window that holds a real element) and pools it with padding 0;
//     the backward pass pools the same padded copy and crops the padded gradient into dx;
//   - average pooling runs chorus's own kernels (dnn_kernels.cu), because explicit zero padding
//     would be counted by CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING.
// Symmetric padding goes to cuDNN directly.
//
// Batch norm: cuDNN's training call returns the *unbiased* running variance; with
// exponentialAverageFactor = 1 (outputs zeroed first, so no garbage is blended in) that is the
// unbiased batch variance, scaled here by (rows - 1) / rows to the biased one chorus returns.
// The backward call gets saved mean = the given mean and saved inverse std = 1/sqrt(var + eps)
// computed from the given variance (dnn_kernels.cu), so it uses exactly the statistics passed in.
#include <chorus/ops/cuda/libraries.h>

#ifdef CHORUS_WITH_CUDNN
#include <map>
#include <memory>
#include <utility>

#include <chorus/ops/cuda/cudnn_util.h>
#include <chorus/ops/cuda/dnn_kernels.h>
#include <chorus/ops/cuda/kernels.h>
#include <chorus/ops/determinism.h>
#endif

#include <string>

#include <chorus/core/error.h>

namespace chorus::ops::cuda {

#ifdef CHORUS_WITH_CUDNN

namespace cudnn {
namespace {

struct HandleEntry {
  std::mutex mu;
  cudnnHandle_t handle = nullptr;
};

// One handle per logical device (keyed by context and GPU: a context created after a runtime
// reset at a reused address gets its own), created on its GPU and kept for the process:
// destroying handles at exit would race the CUDA runtime's teardown.
HandleEntry& entry_for(DeviceContext& dev) {
  static std::mutex registry_mu;
  static std::map<std::pair<const DeviceContext*, int>, std::unique_ptr<HandleEntry>> registry;
  std::lock_guard<std::mutex> lock(registry_mu);
  auto& slot = registry[{&dev, dev.gpu_ordinal()}];
  if (!slot) {
    auto e = std::make_unique<HandleEntry>();
    gpu::internal::DeviceGuard guard(dev.gpu_ordinal());
    CHORUS_CUDNN_CHECK(cudnnCreate(&e->handle));
    slot = std::move(e);
  }
  return *slot;
}

}  // namespace

HandleLease::HandleLease(DeviceContext& dev) : lock_(entry_for(dev).mu), guard_(dev.gpu_ordinal()) {
  handle_ = entry_for(dev).handle;
  CHORUS_CUDNN_CHECK(cudnnSetStream(handle_, static_cast<cudaStream_t>(dev.stream().native_handle())));
}

void copy4(DeviceContext& dev, DType dtype, const std::array<std::int64_t, 4>& dims,
           const std::array<std::int64_t, 4>& s, std::int64_t s_off, const void* src,
           const std::array<std::int64_t, 4>& d, std::int64_t d_off, void* dst) {
  CopyLayout layout;
  layout.rank = 4;
  for (int k = 0; k < 4; ++k) {
    layout.dims[k] = dims[static_cast<std::size_t>(k)];
    layout.strides[0][k] = s[static_cast<std::size_t>(k)];
    layout.strides[1][k] = d[static_cast<std::size_t>(k)];
  }
  layout.offsets[0] = s_off;
  layout.offsets[1] = d_off;
  copy_strided(dev.gpu_ordinal(), dev.stream().native_handle(), dtype_size(dtype), layout, src, dst);
}

void fill(DeviceContext& dev, DType dtype, void* dst, std::int64_t count, std::uint64_t bits) {
  if (count <= 0) return;
  gpu::fill_async(dev.gpu_ordinal(), dev.stream().native_handle(), dst, static_cast<std::size_t>(count),
                  dtype_size(dtype), bits);
}

void set_tensor(const TensorDesc& desc, Layout layout, cudnnDataType_t type, std::int64_t n, std::int64_t c,
                std::int64_t h, std::int64_t w, const char* op) {
  CHORUS_CUDNN_CHECK(cudnnSetTensor4dDescriptor(
      desc.get(), layout == Layout::kNHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, type, to_int(n, op, "n"),
      to_int(c, op, "channels"), to_int(h, op, "height"), to_int(w, op, "width")));
}

}  // namespace cudnn

using namespace cudnn;  // NOLINT: this file is the cuDNN wrapper

namespace {

// -inf in each floating dtype's bits (the padding of max pooling).
std::uint64_t minus_inf_bits(DType dtype) {
  switch (dtype) {
    case DType::kFloat64: return 0xfff0000000000000ull;
    case DType::kFloat16: return 0xfc00u;
    case DType::kBFloat16: return 0xff80u;
    default: return 0xff800000u;
  }
}

void require_gpu(const DeviceContext& dev, const char* op) {
  CHORUS_REQUIRE(dev.is_gpu(), InvalidArgumentError, op, ": cuDNN needs a GPU device, got ", dev.name());
}

bool asymmetric(const Conv2dGeometry& g) { return g.pad_top != g.pad_bottom || g.pad_left != g.pad_right; }

void check_pool_geometry(const Conv2dGeometry& g, const char* op) {
  CHORUS_REQUIRE(g.n >= 0 && g.in_h > 0 && g.in_w > 0 && g.in_c >= 0 && g.k_h > 0 && g.k_w > 0 && g.stride_h > 0 &&
                     g.stride_w > 0 && g.pad_top >= 0 && g.pad_bottom >= 0 && g.pad_left >= 0 && g.pad_right >= 0 &&
                     g.out_h > 0 && g.out_w > 0,
                 InvalidArgumentError, op, ": invalid geometry (input ", g.n, "x", g.in_h, "x", g.in_w, "x", g.in_c,
                 ", window ", g.k_h, "x", g.k_w, ", strides ", g.stride_h, "x", g.stride_w, ", output ", g.out_h, "x",
                 g.out_w, ")");
  CHORUS_REQUIRE(g.out_c == g.in_c, InvalidArgumentError, op, ": pooling keeps channels, got in_c ", g.in_c,
                 " and out_c ", g.out_c);
}

// The cuDNN side of a pooling call: input dims and symmetric pads as cuDNN sees them (for
// asymmetric max pooling, the explicitly padded copy with pads 0).
struct PoolPlan {
  std::int64_t h, w, pad_h, pad_w;
  bool padded_copy;
};

PoolPlan plan_pool(const Conv2dGeometry& g) {
  if (asymmetric(g)) return {g.in_h + g.pad_top + g.pad_bottom, g.in_w + g.pad_left + g.pad_right, 0, 0, true};
  return {g.in_h, g.in_w, g.pad_top, g.pad_left, false};
}

// Sets up descriptors for max/avg pooling and checks cuDNN's output size against the geometry.
void describe_pool(PoolKind kind, cudnnDataType_t type, const Conv2dGeometry& g, const PoolPlan& p,
                   const PoolDesc& pool, const TensorDesc& x_desc, const TensorDesc& y_desc, const char* op) {
  const cudnnPoolingMode_t mode = kind == PoolKind::kMax
                                      ? (op_determinism_enabled() ? CUDNN_POOLING_MAX_DETERMINISTIC : CUDNN_POOLING_MAX)
                                      : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
  CHORUS_CUDNN_CHECK(cudnnSetPooling2dDescriptor(pool.get(), mode, CUDNN_NOT_PROPAGATE_NAN, to_int(g.k_h, op, "k_h"),
                                                 to_int(g.k_w, op, "k_w"), to_int(p.pad_h, op, "pad"),
                                                 to_int(p.pad_w, op, "pad"), to_int(g.stride_h, op, "stride"),
                                                 to_int(g.stride_w, op, "stride")));
  set_tensor(x_desc, Layout::kNHWC, type, g.n, g.in_c, p.h, p.w, op);
  set_tensor(y_desc, Layout::kNHWC, type, g.n, g.in_c, g.out_h, g.out_w, op);
  int n = 0, c = 0, h = 0, w = 0;
  CHORUS_CUDNN_CHECK(cudnnGetPooling2dForwardOutputDim(pool.get(), x_desc.get(), &n, &c, &h, &w));
  CHORUS_REQUIRE(h == g.out_h && w == g.out_w, InvalidArgumentError, op, ": the geometry's output ", g.out_h, "x",
                 g.out_w, " does not match the window, strides and padding (cuDNN computes ", h, "x", w, ")");
}

// x copied into a -inf padded NHWC workspace [n, p.h, p.w, c].
Scratch pad_lowest(DeviceContext& dev, DType dtype, const Conv2dGeometry& g, const PoolPlan& p, const void* x) {
  const std::int64_t count = g.n * p.h * p.w * g.in_c;
  Scratch buf(dev, static_cast<std::size_t>(count) * dtype_size(dtype), "max_pool padded input");
  fill(dev, dtype, buf.get(), count, minus_inf_bits(dtype));
  const auto dst = strides_of(Layout::kNHWC, p.h, p.w, g.in_c);
  copy4(dev, dtype, {g.n, g.in_h, g.in_w, g.in_c}, strides_of(Layout::kNHWC, g.in_h, g.in_w, g.in_c), 0, x, dst,
        g.pad_top * dst[1] + g.pad_left * dst[2], buf.get());
  return buf;
}

}  // namespace

void pool2d_forward(DeviceContext& dev, PoolKind kind, DType dtype, const Conv2dGeometry& g, const void* x, void* y) {
  const char* op = kind == PoolKind::kMax ? "max_pool2d" : "avg_pool2d";
  require_gpu(dev, op);
  const cudnnDataType_t type = data_type(dtype, op);
  check_pool_geometry(g, op);
  if (g.output_elements() == 0) return;
  if (kind == PoolKind::kAvg && asymmetric(g)) {
    avg_pool_forward(dev.gpu_ordinal(), dev.stream().native_handle(), dtype, g, x, y);
    return;
  }
  const PoolPlan p = plan_pool(g);
  HandleLease h(dev);
  PoolDesc pool;
  TensorDesc x_desc, y_desc;
  describe_pool(kind, type, g, p, pool, x_desc, y_desc, op);
  Scratch padded;
  const void* xp = x;
  if (p.padded_copy) {
    padded = pad_lowest(dev, dtype, g, p, x);
    xp = padded.get();
  }
  const Blend blend(dtype);
  CHORUS_CUDNN_CHECK(
      cudnnPoolingForward(h.get(), pool.get(), blend.one(), x_desc.get(), xp, blend.zero(), y_desc.get(), y));
}

void pool2d_backward(DeviceContext& dev, PoolKind kind, DType dtype, const Conv2dGeometry& g, const void* x,
                     const void* y, const void* dy, void* dx) {
  const char* op = kind == PoolKind::kMax ? "max_pool2d_grad" : "avg_pool2d_grad";
  require_gpu(dev, op);
  const cudnnDataType_t type = data_type(dtype, op);
  check_pool_geometry(g, op);
  if (g.input_elements() == 0) return;
  if (kind == PoolKind::kAvg && asymmetric(g)) {
    avg_pool_backward(dev.gpu_ordinal(), dev.stream().native_handle(), dtype, g, dy, dx);
    return;
  }
  const PoolPlan p = plan_pool(g);
  HandleLease h(dev);
  PoolDesc pool;
  TensorDesc x_desc, y_desc;
  describe_pool(kind, type, g, p, pool, x_desc, y_desc, op);
  const Blend blend(dtype);
  if (!p.padded_copy) {
    CHORUS_CUDNN_CHECK(cudnnPoolingBackward(h.get(), pool.get(), blend.one(), y_desc.get(), y, y_desc.get(), dy,
                                            x_desc.get(), x, blend.zero(), x_desc.get(), dx));
    return;
  }
  // Max pooling with asymmetric padding: the gradient of the padded copy, cropped.
  Scratch padded = pad_lowest(dev, dtype, g, p, x);
  const std::int64_t count = g.n * p.h * p.w * g.in_c;
  Scratch dx_padded(dev, static_cast<std::size_t>(count) * dtype_size(dtype), "max_pool_grad padded gradient");
  CHORUS_CUDNN_CHECK(cudnnPoolingBackward(h.get(), pool.get(), blend.one(), y_desc.get(), y, y_desc.get(), dy,
                                          x_desc.get(), padded.get(), blend.zero(), x_desc.get(), dx_padded.get()));
  const auto src = strides_of(Layout::kNHWC, p.h, p.w, g.in_c);
  copy4(dev, dtype, {g.n, g.in_h, g.in_w, g.in_c}, src, g.pad_top * src[1] + g.pad_left * src[2], dx_padded.get(),
        strides_of(Layout::kNHWC, g.in_h, g.in_w, g.in_c), 0, dx);
}

void softmax_forward(DeviceContext& dev, DType dtype, bool log, const void* x, void* y, std::int64_t rows,
                     std::int64_t cols) {
  const char* op = log ? "log_softmax" : "softmax";
  require_gpu(dev, op);
  const cudnnDataType_t type = data_type(dtype, op);
  CHORUS_REQUIRE(rows >= 0 && cols >= 0, InvalidArgumentError, op, ": negative shape [", rows, ", ", cols, "]");
  if (rows == 0 || cols == 0) return;
  HandleLease h(dev);
  TensorDesc desc;
  set_tensor(desc, Layout::kNCHW, type, rows, cols, 1, 1, op);
  const Blend blend(dtype);
  CHORUS_CUDNN_CHECK(cudnnSoftmaxForward(h.get(), log ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE,
                                         CUDNN_SOFTMAX_MODE_INSTANCE, blend.one(), desc.get(), x, blend.zero(),
                                         desc.get(), y));
}

void softmax_backward(DeviceContext& dev, DType dtype, bool log, const void* y, const void* dy, void* dx,
                      std::int64_t rows, std::int64_t cols) {
  const char* op = log ? "log_softmax_grad" : "softmax_grad";
  require_gpu(dev, op);
  const cudnnDataType_t type = data_type(dtype, op);
  CHORUS_REQUIRE(rows >= 0 && cols >= 0, InvalidArgumentError, op, ": negative shape [", rows, ", ", cols, "]");
  if (rows == 0 || cols == 0) return;
  HandleLease h(dev);
  TensorDesc desc;
  set_tensor(desc, Layout::kNCHW, type, rows, cols, 1, 1, op);
  const Blend blend(dtype);
  CHORUS_CUDNN_CHECK(cudnnSoftmaxBackward(h.get(), log ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE,
                                          CUDNN_SOFTMAX_MODE_INSTANCE, blend.one(), desc.get(), y, desc.get(), dy,
                                          blend.zero(), desc.get(), dx));
}

namespace {

struct BnDescs {
  TensorDesc x, param;
};

void describe_bn(BnDescs& d, cudnnDataType_t type, std::int64_t rows, std::int64_t channels, const char* op) {
  // [rows, channels] is NCHW [rows, channels, 1, 1]: SPATIAL mode normalizes each channel over
  // N·H·W = rows.
  set_tensor(d.x, Layout::kNCHW, type, rows, channels, 1, 1, op);
  CHORUS_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(d.param.get(), d.x.get(), CUDNN_BATCHNORM_SPATIAL));
}

void check_bn(const DeviceContext& dev, DType dtype, std::int64_t rows, std::int64_t channels, double epsilon,
              const char* op) {
  require_gpu(dev, op);
  // cuDNN wants float scale/bias/statistics for 16-bit data; chorus's batch norm keeps them in the
  // data's dtype, so 16-bit data is normalized in float32 by the caller (ops::batch_norm,
  // BatchNormalization under a mixed policy).
  CHORUS_REQUIRE(!is_16bit(dtype), InvalidArgumentError, op, " on GPU: dtype ", dtype_name(dtype),
                 " is not supported; cast to float32 first (as BatchNormalization does under a mixed policy)");
  CHORUS_REQUIRE(rows >= 0 && channels >= 0, InvalidArgumentError, op, ": negative shape [", rows, ", ", channels, "]");
  CHORUS_REQUIRE(epsilon >= CUDNN_BN_MIN_EPSILON, InvalidArgumentError, op, ": epsilon ", epsilon,
                 " is below cuDNN's minimum ", CUDNN_BN_MIN_EPSILON);
}

}  // namespace

void batch_norm_training(DeviceContext& dev, DType dtype, const void* x, const void* gamma, const void* beta, void* y,
                         void* batch_mean, void* batch_var, std::int64_t rows, std::int64_t channels, double epsilon) {
  const char* op = "batch_norm";
  const cudnnDataType_t type = data_type(dtype, op);
  check_bn(dev, dtype, rows, channels, epsilon, op);
  if (rows == 0 || channels == 0) return;
  HandleLease h(dev);
  BnDescs d;
  describe_bn(d, type, rows, channels, op);
  // Factor 1 blends running = 0 · running + 1 · batch: zero the outputs so that no NaN left in
  // fresh memory survives the blend (0 · NaN = NaN).
  fill(dev, dtype, batch_mean, channels, 0);
  fill(dev, dtype, batch_var, channels, 0);
  const Blend blend(dtype);
  CHORUS_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      h.get(), CUDNN_BATCHNORM_SPATIAL, blend.one(), blend.zero(), d.x.get(), x, d.x.get(), y, d.param.get(), gamma,
      beta, /*exponentialAverageFactor=*/1.0, batch_mean, batch_var, epsilon, nullptr, nullptr));
  if (rows == 1) {
    fill(dev, dtype, batch_var, channels, 0);  // one sample: biased variance 0 (cuDNN's unbiased is 0/0)
  } else {
    const double ratio = static_cast<double>(rows - 1) / static_cast<double>(rows);
    const float ratio_f = static_cast<float>(ratio);
    CHORUS_CUDNN_CHECK(cudnnScaleTensor(h.get(), d.param.get(), batch_var,
                                        dtype == DType::kFloat64 ? static_cast<const void*>(&ratio) : &ratio_f));
  }
}

void batch_norm_inference(DeviceContext& dev, DType dtype, const void* x, const void* gamma, const void* beta,
                          const void* mean, const void* var, void* y, std::int64_t rows, std::int64_t channels,
                          double epsilon) {
  const char* op = "batch_norm (inference)";
  const cudnnDataType_t type = data_type(dtype, op);
  check_bn(dev, dtype, rows, channels, epsilon, op);
  if (rows == 0 || channels == 0) return;
  HandleLease h(dev);
  BnDescs d;
  describe_bn(d, type, rows, channels, op);
  const Blend blend(dtype);
  CHORUS_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(h.get(), CUDNN_BATCHNORM_SPATIAL, blend.one(),
                                                             blend.zero(), d.x.get(), x, d.x.get(), y, d.param.get(),
                                                             gamma, beta, mean, var, epsilon));
}

void batch_norm_backward(DeviceContext& dev, DType dtype, const void* x, const void* dy, const void* gamma,
                         const void* mean, const void* var, void* dx, void* dgamma, void* dbeta, std::int64_t rows,
                         std::int64_t channels, double epsilon) {
  const char* op = "batch_norm_grad";
  const cudnnDataType_t type = data_type(dtype, op);
  check_bn(dev, dtype, rows, channels, epsilon, op);
  if (channels == 0) return;
  if (rows == 0) {  // no samples: the parameter gradients are empty sums
    fill(dev, dtype, dgamma, channels, 0);
    fill(dev, dtype, dbeta, channels, 0);
    return;
  }
  HandleLease h(dev);
  BnDescs d;
  describe_bn(d, type, rows, channels, op);
  Scratch inv_std(dev, static_cast<std::size_t>(channels) * dtype_size(dtype), "batch_norm_grad inverse std");
  batch_norm_inv_std(dev.gpu_ordinal(), dev.stream().native_handle(), dtype, var, epsilon, inv_std.get(), channels);
  const Blend blend(dtype);
  CHORUS_CUDNN_CHECK(cudnnBatchNormalizationBackward(
      h.get(), CUDNN_BATCHNORM_SPATIAL, blend.one(), blend.zero(), blend.one(), blend.zero(), d.x.get(), x, d.x.get(),
      dy, d.x.get(), dx, d.param.get(), gamma, dgamma, dbeta, epsilon, mean, inv_std.get()));
}

bool activation_forward(DeviceContext& dev, UnaryOp op, DType dtype, const void* x, void* y, std::int64_t n) {
  cudnnActivationMode_t mode;
  switch (op) {
    case UnaryOp::kRelu: mode = CUDNN_ACTIVATION_RELU; break;
    case UnaryOp::kSigmoid: mode = CUDNN_ACTIVATION_SIGMOID; break;
    case UnaryOp::kTanh: mode = CUDNN_ACTIVATION_TANH; break;
    default: return false;
  }
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64) return false;
  if (!dev.is_gpu() || n < 0 || n > INT_MAX) return false;
  if (n == 0) return true;
  const char* what = "activation";
  HandleLease h(dev);
  ActivationDesc act;
  CHORUS_CUDNN_CHECK(cudnnSetActivationDescriptor(act.get(), mode, CUDNN_PROPAGATE_NAN, 0.0));
  TensorDesc desc;
  set_tensor(desc, Layout::kNCHW, data_type(dtype, what), 1, n, 1, 1, what);
  const Blend blend(dtype);
  CHORUS_CUDNN_CHECK(
      cudnnActivationForward(h.get(), act.get(), blend.one(), desc.get(), x, blend.zero(), desc.get(), y));
  return true;
}

#else  // !CHORUS_WITH_CUDNN

namespace {
[[noreturn]] void no_cudnn(const char* op) {
  throw UnimplementedError(std::string(op) +
                           " on GPU needs cuDNN, and chorus was built without it (set CUDNN_HOME and reconfigure)");
}
}  // namespace

void pool2d_forward(DeviceContext&, PoolKind kind, DType, const Conv2dGeometry&, const void*, void*) {
  no_cudnn(kind == PoolKind::kMax ? "max_pool2d" : "avg_pool2d");
}
void pool2d_backward(DeviceContext&, PoolKind kind, DType, const Conv2dGeometry&, const void*, const void*, const void*,
                     void*) {
  no_cudnn(kind == PoolKind::kMax ? "max_pool2d_grad" : "avg_pool2d_grad");
}
void softmax_forward(DeviceContext&, DType, bool log, const void*, void*, std::int64_t, std::int64_t) {
  no_cudnn(log ? "log_softmax" : "softmax");
}
void softmax_backward(DeviceContext&, DType, bool log, const void*, const void*, void*, std::int64_t, std::int64_t) {
  no_cudnn(log ? "log_softmax_grad" : "softmax_grad");
}
void batch_norm_training(DeviceContext&, DType, const void*, const void*, const void*, void*, void*, void*,
                         std::int64_t, std::int64_t, double) {
  no_cudnn("batch_norm");
}
void batch_norm_inference(DeviceContext&, DType, const void*, const void*, const void*, const void*, const void*, void*,
                          std::int64_t, std::int64_t, double) {
  no_cudnn("batch_norm (inference)");
}
void batch_norm_backward(DeviceContext&, DType, const void*, const void*, const void*, const void*, const void*, void*,
                         void*, void*, std::int64_t, std::int64_t, double) {
  no_cudnn("batch_norm_grad");
}
// Without cuDNN the fast path simply is not there: the caller launches its own kernel.
bool activation_forward(DeviceContext&, UnaryOp, DType, const void*, void*, std::int64_t) { return false; }

#endif  // CHORUS_WITH_CUDNN

}  // namespace chorus::ops::cuda
