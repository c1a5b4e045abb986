// The entry points of ops/cpu/dnn.h: validate once, handle empty shapes, then send float32 to
// oneDNN (or the reference loops in a build without it) and float64 to the reference loops.
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "ops/cpu/dnn.h"
#include "ops/cpu/onednn.h"
#include "ops/cpu/reference.h"

namespace chorus::ops::cpu {
namespace {

#ifdef CHORUS_WITH_DNNL
constexpr bool kWithDnnl = true;
#else
constexpr bool kWithDnnl = false;
#endif

void require_float(DType dtype, const char* what) {
  CHORUS_REQUIRE(dtype == DType::kFloat32 || dtype == DType::kFloat64, InvalidArgumentError, what,
                 ": dtype must be float32 or float64, got ", dtype);
}

void require_non_negative(const char* what, const char* name, std::int64_t v) {
  CHORUS_REQUIRE(v >= 0, InvalidArgumentError, what, ": ", name, " must be >= 0, got ", v);
}

// Each axis must satisfy out = (in + pad_lo + pad_hi - ((k - 1) * dilation + 1)) / stride + 1
// (floor), the rule oneDNN and the reference loops share; compute_output_size() produces it.
void require_axis(const char* what, const char* axis, std::int64_t in, std::int64_t k, std::int64_t stride,
                  std::int64_t dilation, std::int64_t lo, std::int64_t hi, std::int64_t out) {
  CHORUS_REQUIRE(in > 0 && k > 0 && stride > 0 && dilation > 0 && lo >= 0 && hi >= 0, InvalidArgumentError, what, ": ",
                 axis, " geometry must have in, k, stride, dilation > 0 and pads >= 0, got in=", in, " k=", k,
                 " stride=", stride, " dilation=", dilation, " pads=", lo, "/", hi);
  const std::int64_t span = in + lo + hi - ((k - 1) * dilation + 1);
  CHORUS_REQUIRE(span >= 0 && out == span / stride + 1, InvalidArgumentError, what, ": ", axis, " output size ", out,
                 " does not match in=", in, " k=", k, " stride=", stride, " dilation=", dilation, " pads=", lo, "/", hi,
                 " (expected ", span >= 0 ? span / stride + 1 : 0, ")");
}

void require_geometry(const Conv2dGeometry& g, const char* what, bool pooling) {
  CHORUS_REQUIRE(g.n >= 0 && g.in_c > 0 && g.out_c > 0, InvalidArgumentError, what,
                 ": need n >= 0, in_c > 0, out_c > 0, got n=", g.n, " in_c=", g.in_c, " out_c=", g.out_c);
  require_axis(what, "height", g.in_h, g.k_h, g.stride_h, g.dilation_h, g.pad_top, g.pad_bottom, g.out_h);
  require_axis(what, "width", g.in_w, g.k_w, g.stride_w, g.dilation_w, g.pad_left, g.pad_right, g.out_w);
  if (pooling) {
    CHORUS_REQUIRE(g.out_c == g.in_c && g.dilation_h == 1 && g.dilation_w == 1, InvalidArgumentError, what,
                   ": pooling needs out_c == in_c and dilation 1, got in_c=", g.in_c, " out_c=", g.out_c,
                   " dilation=", g.dilation_h, "x", g.dilation_w);
  }
}

template <typename T>
const T* cp(const void* p) {
  return static_cast<const T*>(p);
}
template <typename T>
T* mp(void* p) {
  return static_cast<T*>(p);
}

}  // namespace

void use_threads(int n) {
  CHORUS_REQUIRE(n >= 1, InvalidArgumentError, "use_threads: n must be >= 1, got ", n);
  if (omp_get_max_threads() != n) omp_set_num_threads(n);
}

bool have_onednn() { return kWithDnnl; }

CacheStats cache_stats() {
#ifdef CHORUS_WITH_DNNL
  return onednn::CacheRegistry::instance().total();
#else
  return {};
#endif
}

void matmul(DType dtype, const void* a, std::int64_t a_batch_stride, const void* b, std::int64_t b_batch_stride,
            void* c, std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a, bool trans_b) {
  require_float(dtype, "matmul");
  require_non_negative("matmul", "batch", batch);
  require_non_negative("matmul", "m", m);
  require_non_negative("matmul", "n", n);
  require_non_negative("matmul", "k", k);
  require_non_negative("matmul", "a_batch_stride", a_batch_stride);
  require_non_negative("matmul", "b_batch_stride", b_batch_stride);
  if (batch == 0 || m == 0 || n == 0) return;
  if (k == 0) {
    std::memset(c, 0, static_cast<std::size_t>(batch * m * n) * dtype_size(dtype));
    return;
  }
  if (dtype == DType::kFloat64) {
    reference::matmul(cp<double>(a), a_batch_stride, cp<double>(b), b_batch_stride, mp<double>(c), batch, m, n, k,
                      trans_a, trans_b);
    return;
  }
#ifdef CHORUS_WITH_DNNL
  onednn::matmul(cp<float>(a), a_batch_stride, cp<float>(b), b_batch_stride, mp<float>(c), batch, m, n, k, trans_a,
                 trans_b);
#else
  reference::matmul(cp<float>(a), a_batch_stride, cp<float>(b), b_batch_stride, mp<float>(c), batch, m, n, k, trans_a,
                    trans_b);
#endif
}

// Expands to the float64 reference call, or the float32 oneDNN / reference one.
#ifdef CHORUS_WITH_DNNL
#define CHORUS_DNN_CALL(fn, f64args, f32args) (dtype == DType::kFloat64 ? reference::fn f64args : onednn::fn f32args)
#else
#define CHORUS_DNN_CALL(fn, f64args, f32args) (dtype == DType::kFloat64 ? reference::fn f64args : reference::fn f32args)
#endif

void conv2d_forward(DType dtype, const Conv2dGeometry& g, const void* x, const void* w, void* y) {
  require_float(dtype, "conv2d_forward");
  require_geometry(g, "conv2d_forward", false);
  if (g.n == 0) return;
  CHORUS_DNN_CALL(conv2d_forward, (g, cp<double>(x), cp<double>(w), mp<double>(y)),
                  (g, cp<float>(x), cp<float>(w), mp<float>(y)));
}

void conv2d_backward_data(DType dtype, const Conv2dGeometry& g, const void* dy, const void* w, void* dx) {
  require_float(dtype, "conv2d_backward_data");
  require_geometry(g, "conv2d_backward_data", false);
  if (g.n == 0) return;
  CHORUS_DNN_CALL(conv2d_backward_data, (g, cp<double>(dy), cp<double>(w), mp<double>(dx)),
                  (g, cp<float>(dy), cp<float>(w), mp<float>(dx)));
}

void conv2d_backward_filter(DType dtype, const Conv2dGeometry& g, const void* x, const void* dy, void* dw) {
  require_float(dtype, "conv2d_backward_filter");
  require_geometry(g, "conv2d_backward_filter", false);
  if (g.n == 0) {  // an empty batch contributes nothing
    std::memset(dw, 0, static_cast<std::size_t>(g.filter_elements()) * dtype_size(dtype));
    return;
  }
  CHORUS_DNN_CALL(conv2d_backward_filter, (g, cp<double>(x), cp<double>(dy), mp<double>(dw)),
                  (g, cp<float>(x), cp<float>(dy), mp<float>(dw)));
}

void pool2d_forward(PoolKind kind, DType dtype, const Conv2dGeometry& g, const void* x, void* y) {
  require_float(dtype, "pool2d_forward");
  require_geometry(g, "pool2d_forward", true);
  if (g.n == 0) return;
  CHORUS_DNN_CALL(pool2d_forward, (kind, g, cp<double>(x), mp<double>(y)), (kind, g, cp<float>(x), mp<float>(y)));
}

void pool2d_backward(PoolKind kind, DType dtype, const Conv2dGeometry& g, const void* x, const void* dy, void* dx) {
  require_float(dtype, "pool2d_backward");
  require_geometry(g, "pool2d_backward", true);
  if (g.n == 0) return;
  CHORUS_DNN_CALL(pool2d_backward, (kind, g, cp<double>(x), cp<double>(dy), mp<double>(dx)),
                  (kind, g, cp<float>(x), cp<float>(dy), mp<float>(dx)));
}

void softmax_forward(DType dtype, bool log, const void* x, void* y, std::int64_t rows, std::int64_t cols) {
  require_float(dtype, "softmax_forward");
  require_non_negative("softmax_forward", "rows", rows);
  require_non_negative("softmax_forward", "cols", cols);
  if (rows == 0 || cols == 0) return;
  CHORUS_DNN_CALL(softmax_forward, (log, cp<double>(x), mp<double>(y), rows, cols),
                  (log, cp<float>(x), mp<float>(y), rows, cols));
}

void softmax_backward(DType dtype, bool log, const void* y, const void* dy, void* dx, std::int64_t rows,
                      std::int64_t cols) {
  require_float(dtype, "softmax_backward");
  require_non_negative("softmax_backward", "rows", rows);
  require_non_negative("softmax_backward", "cols", cols);
  if (rows == 0 || cols == 0) return;
  CHORUS_DNN_CALL(softmax_backward, (log, cp<double>(y), cp<double>(dy), mp<double>(dx), rows, cols),
                  (log, cp<float>(y), cp<float>(dy), mp<float>(dx), rows, cols));
}

namespace {
void require_batch_norm(const char* what, std::int64_t rows, std::int64_t channels, double epsilon) {
  require_non_negative(what, "rows", rows);
  require_non_negative(what, "channels", channels);
  CHORUS_REQUIRE(epsilon >= 0, InvalidArgumentError, what, ": epsilon must be >= 0, got ", epsilon);
}
}  // namespace

// rows == 0 has no batch statistics: the reference loops write NaN mean/variance (0 / 0), as
// a division by the empty count does in TensorFlow; oneDNN is not asked.
void batch_norm_training(DType dtype, const void* x, const void* gamma, const void* beta, void* y, void* batch_mean,
                         void* batch_var, std::int64_t rows, std::int64_t channels, double epsilon) {
  require_float(dtype, "batch_norm_training");
  require_batch_norm("batch_norm_training", rows, channels, epsilon);
  if (channels == 0) return;
  if (rows == 0 && dtype == DType::kFloat32) {
    reference::batch_norm_training(cp<float>(x), cp<float>(gamma), cp<float>(beta), mp<float>(y), mp<float>(batch_mean),
                                   mp<float>(batch_var), rows, channels, epsilon);
    return;
  }
  CHORUS_DNN_CALL(batch_norm_training,
                  (cp<double>(x), cp<double>(gamma), cp<double>(beta), mp<double>(y), mp<double>(batch_mean),
                   mp<double>(batch_var), rows, channels, epsilon),
                  (cp<float>(x), cp<float>(gamma), cp<float>(beta), mp<float>(y), mp<float>(batch_mean),
                   mp<float>(batch_var), rows, channels, epsilon));
}

void batch_norm_inference(DType dtype, const void* x, const void* gamma, const void* beta, const void* mean,
                          const void* var, void* y, std::int64_t rows, std::int64_t channels, double epsilon) {
  require_float(dtype, "batch_norm_inference");
  require_batch_norm("batch_norm_inference", rows, channels, epsilon);
  if (rows == 0 || channels == 0) return;
  CHORUS_DNN_CALL(batch_norm_inference,
                  (cp<double>(x), cp<double>(gamma), cp<double>(beta), cp<double>(mean), cp<double>(var), mp<double>(y),
                   rows, channels, epsilon),
                  (cp<float>(x), cp<float>(gamma), cp<float>(beta), cp<float>(mean), cp<float>(var), mp<float>(y), rows,
                   channels, epsilon));
}

void batch_norm_backward(DType dtype, const void* x, const void* dy, const void* gamma, const void* mean,
                         const void* var, void* dx, void* dgamma, void* dbeta, std::int64_t rows, std::int64_t channels,
                         double epsilon) {
  require_float(dtype, "batch_norm_backward");
  require_batch_norm("batch_norm_backward", rows, channels, epsilon);
  if (channels == 0) return;
  if (rows == 0) {  // no rows: zero parameter gradients, dx is empty
    std::memset(dgamma, 0, static_cast<std::size_t>(channels) * dtype_size(dtype));
    std::memset(dbeta, 0, static_cast<std::size_t>(channels) * dtype_size(dtype));
    return;
  }
  CHORUS_DNN_CALL(batch_norm_backward,
                  (cp<double>(x), cp<double>(dy), cp<double>(gamma), cp<double>(mean), cp<double>(var), mp<double>(dx),
                   mp<double>(dgamma), mp<double>(dbeta), rows, channels, epsilon),
                  (cp<float>(x), cp<float>(dy), cp<float>(gamma), cp<float>(mean), cp<float>(var), mp<float>(dx),
                   mp<float>(dgamma), mp<float>(dbeta), rows, channels, epsilon));
}

#undef CHORUS_DNN_CALL

bool eltwise_forward(UnaryOp op, DType dtype, const void* x, void* y, std::int64_t n) {
  if (dtype != DType::kFloat32) return false;
  require_non_negative("eltwise_forward", "n", n);
#ifdef CHORUS_WITH_DNNL
  switch (op) {
    case UnaryOp::kRelu:
    case UnaryOp::kSigmoid:
    case UnaryOp::kTanh:
    case UnaryOp::kGelu:
    case UnaryOp::kExp:
    case UnaryOp::kLog:
    case UnaryOp::kSqrt:
    case UnaryOp::kSquare:
    case UnaryOp::kAbs: break;
    default: return false;
  }
  if (n == 0) return true;
  return onednn::eltwise_forward(op, cp<float>(x), mp<float>(y), n);
#else
  (void)op, (void)x, (void)y;
  return false;
#endif
}

}  // namespace chorus::ops::cpu
