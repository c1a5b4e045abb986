// The entry points of ops/cpu/dnn.h: validate once, handle empty shapes, then send float32 to
// oneDNN (or the reference loops in a build without it), float64 to the reference loops, and
// bfloat16 / float16 to oneDNN's 16-bit kernels or the float32 fallback (run_16bit below).
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

#include <chorus/core/env.h>
#include <chorus/core/error.h>
#include <chorus/ops/cpu/dnn.h>

#include <cmath>
#include <chorus/ops/cpu/max_pool.h>
#include <chorus/ops/cpu/numeric.h>
#include <chorus/ops/cpu/onednn.h>
#include <chorus/ops/cpu/reference.h>

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

bool is_16bit(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }

// matmul, convolution, pooling: the 16-bit types too.
void require_dnn_float(DType dtype, const char* what) {
  CHORUS_REQUIRE(dtype == DType::kFloat32 || dtype == DType::kFloat64 || is_16bit(dtype), InvalidArgumentError, what,
                 ": dtype must be float32, float64, bfloat16 or float16, got ", dtype);
}

// ---- bfloat16 / float16 ------------------------------------------------------------------------

constexpr const char* kBf16Variable = "CHORUS_ONEDNN_BF16";
std::atomic<int> g_bf16_enabled{-1};  // -1: not yet read from kBf16Variable
std::atomic<std::int64_t> g_bf16_onednn{0}, g_bf16_fallback{0};

#ifdef CHORUS_WITH_DNNL
// oneDNN's name of its effective ISA.
const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic: return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "unknown";
  }
}

// oneDNN 2.6 has bfloat16 JIT kernels from avx512_core up (emulated below avx512_core_bf16); the ISA
// values are bit sets, each containing the ones it extends (avx2_vnni does not contain avx512_core).
bool isa_has_bf16() {
  static const bool has = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    return (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
  }();
  return has;
}

// Whether oneDNN gives a JIT kernel for a small matmul in `dtype` (one creation and run, uncounted).
bool probe_matmul(DType dtype) {
  std::vector<std::uint16_t> a(32 * 32), b(32 * 32), c(32 * 32);
  return onednn::matmul(dtype, a.data(), 0, b.data(), 0, c.data(), 1, 32, 32, 32, false, false);
}
#endif

DnnDispatch decide(const DnnCall& call);  // dnn_dispatch() without the argument checks; below

// Runs a 16-bit kernel on the path decide() names: onednn_call() (which returns whether it ran; it
// must, as decide() created its primitive), else bfloat16's fallback() (float32 compute), else
// float16's UnimplementedError.
template <typename OneDnn, typename Fallback>
void run_16bit(const DnnCall& call, const char* what, OneDnn&& onednn_call, Fallback&& fallback) {
  const DnnDispatch d = decide(call);
  if (d.path == DnnPath::kOneDnn) {
    CHORUS_REQUIRE(onednn_call(), InternalError, what, ": dnn_dispatch chose oneDNN (", d.reason,
                   ") but oneDNN ran no kernel");
    if (call.dtype == DType::kBFloat16) g_bf16_onednn.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (d.path == DnnPath::kUnsupported) throw_float16_unsupported(what);
  g_bf16_fallback.fetch_add(1, std::memory_order_relaxed);
  fallback();
}

// The float32 fallback's conversions (round to nearest even on the way back, core/dtype.h).
std::vector<float> widen(DType dtype, const void* p, std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  convert(p, dtype, v.data(), DType::kFloat32, v.size());
  return v;
}
void narrow(const std::vector<float>& v, DType dtype, void* p) {
  convert(v.data(), DType::kFloat32, p, dtype, v.size());
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
  CHORUS_REQUIRE(g.groups >= 1 && g.in_c % g.groups == 0 && g.out_c % g.groups == 0 && (!pooling || g.groups == 1),
                 InvalidArgumentError, what,
                 ": groups must be >= 1 and divide in_c and out_c (1 for pooling), got groups=", g.groups,
                 " in_c=", g.in_c, " out_c=", g.out_c);
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

// float32 max pooling that chorus's own loops take (max_pool.h), forward and backward alike.
bool own_max_pool(PoolKind kind, DType dtype, const Conv2dGeometry& g) {
  return kind == PoolKind::kMax && dtype == DType::kFloat32 && max_pool::fits(g);
}

DnnCall conv_call(DnnKernel kernel, DType dtype, const Conv2dGeometry& g, const ConvEpilogue& epilogue = {}) {
  DnnCall call;
  call.kernel = kernel;
  call.dtype = dtype;
  call.geometry = g;
  call.conv_bias = epilogue.bias != nullptr;
  call.conv_relu = epilogue.relu;
  return call;
}
DnnCall pool_call(DnnKernel kernel, PoolKind kind, DType dtype, const Conv2dGeometry& g) {
  DnnCall call = conv_call(kernel, dtype, g);
  call.pool = kind;
  return call;
}

// Not kRelu: oneDNN 2.6's eltwise_relu maps NaN to 0 (measured on every JIT ISA), TF keeps NaN.
bool eltwise_on_onednn(UnaryOp op) {
  switch (op) {
    case UnaryOp::kSigmoid:
    case UnaryOp::kTanh:
    case UnaryOp::kGelu:
    case UnaryOp::kExp:
    case UnaryOp::kLog:
    case UnaryOp::kSqrt:
    case UnaryOp::kSquare:
    case UnaryOp::kAbs: return true;
    default: return false;
  }
}

#ifdef CHORUS_WITH_DNNL
std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return chorus::internal::str_cat("oneDNN ", v->major, ".", v->minor, ".", v->patch);
}

// Whether oneDNN has a usable kernel for `call` (16-bit): the kernel's own entry point in probe
// mode (onednn.h), so that the primitive it creates and caches is the one the call then runs.
bool onednn_has_kernel(const DnnCall& c) {
  static const std::uint16_t dummy = 0;  // a non-null bias: the epilogue is part of the primitive
  const Conv2dGeometry& g = c.geometry;
  switch (c.kernel) {
    case DnnKernel::kMatmul:
      return onednn::matmul(c.dtype, nullptr, c.a_batch_stride, nullptr, c.b_batch_stride, nullptr, c.batch, c.m, c.n,
                            c.k, c.trans_a, c.trans_b);
    case DnnKernel::kConv2dForward:
      return onednn::conv2d_forward(c.dtype, g, nullptr, nullptr, nullptr,
                                    {c.conv_bias ? &dummy : nullptr, c.conv_relu});
    case DnnKernel::kConv2dBackwardData: return onednn::conv2d_backward_data(c.dtype, g, nullptr, nullptr, nullptr);
    case DnnKernel::kConv2dBackwardFilter: return onednn::conv2d_backward_filter(c.dtype, g, nullptr, nullptr, nullptr);
    case DnnKernel::kPool2dForward: return onednn::pool2d_forward(c.pool, c.dtype, g, nullptr, nullptr);
    case DnnKernel::kPool2dBackward: return onednn::pool2d_backward(c.pool, c.dtype, g, nullptr, nullptr, nullptr);
    case DnnKernel::kEltwiseForward: return true;  // every covered op has a bf16 kernel from avx512_core up
    case DnnKernel::kEltwiseBackward:              // gelu's; elements do not change which kernel oneDNN picks
      return onednn::eltwise_backward(c.unary, c.dtype, nullptr, nullptr, nullptr, 1);
  }
  return false;
}
#endif

DnnDispatch decide(const DnnCall& c) {
  const DType dtype = c.dtype;
  if (c.kernel == DnnKernel::kEltwiseForward) {
    if (!kWithDnnl || !eltwise_on_onednn(c.unary))
      return {DnnPath::kChorusLoops, "no oneDNN eltwise kernel for this op"};
    if (dtype != DType::kFloat32 && dtype != DType::kBFloat16)
      return {DnnPath::kChorusLoops, "oneDNN eltwise is used for float32 and bfloat16 only"};
  } else if (c.kernel == DnnKernel::kEltwiseBackward) {
    if (!kWithDnnl || c.unary != UnaryOp::kGelu)
      return {DnnPath::kChorusLoops, "no oneDNN eltwise backward for this op (gelu only)"};
    if (dtype != DType::kFloat32 && dtype != DType::kBFloat16)
      return {DnnPath::kChorusLoops, "oneDNN eltwise backward is used for float32 and bfloat16 only"};
  } else if (dtype == DType::kFloat64) {
    return {DnnPath::kChorusLoops, "float64 runs chorus's reference loops"};
  }
  if (!kWithDnnl) {
    if (dtype == DType::kFloat16) return {DnnPath::kUnsupported, "chorus was built without oneDNN"};
    return {dtype == DType::kBFloat16 ? DnnPath::kFloat32Fallback : DnnPath::kChorusLoops,
            "chorus was built without oneDNN"};
  }
#ifdef CHORUS_WITH_DNNL
  const std::string on_isa = " on " + onednn_isa();
  if (dtype == DType::kFloat32) {
    const bool pool = c.kernel == DnnKernel::kPool2dForward || c.kernel == DnnKernel::kPool2dBackward;
    if (pool && own_max_pool(c.pool, dtype, c.geometry))
      return {DnnPath::kChorusLoops, "float32 max pooling runs chorus's loops (max_pool.h)"};
    return {DnnPath::kOneDnn, onednn_version() + " float32" + on_isa};
  }
  // bfloat16 and float16 (float16 has no fallback: kUnsupported where bfloat16 falls back).
  const DnnPath no_kernel = dtype == DType::kFloat16 ? DnnPath::kUnsupported : DnnPath::kFloat32Fallback;
  if (dtype == DType::kBFloat16) {
    if (!onednn_bf16_enabled())
      return {no_kernel, "the oneDNN bfloat16 path is switched off (CHORUS_ONEDNN_BF16, set_onednn_bf16_enabled)"};
    if (!isa_has_bf16())
      return {no_kernel, "oneDNN's ISA " + onednn_isa() + " is below avx512_core: no bfloat16 kernels there"};
  }
  // Where pooling windows overlap, an input element sums the gradients of several windows, and
  // oneDNN 2.6's 16-bit pooling backward rounds that sum after each addition (errors of several
  // roundings, measured): such geometries take the float32 path, which rounds once.
  const Conv2dGeometry& g = c.geometry;
  if (c.kernel == DnnKernel::kPool2dBackward && (g.k_h > g.stride_h || g.k_w > g.stride_w))
    return {no_kernel,
            "overlapping pooling windows: oneDNN's 16-bit pooling backward would round their gradients' "
            "sum after each addition"};
  // oneDNN 2.6's bfloat16 max pooling backward (jit, measured on avx512_core and AMX) routes a
  // window's gradient to a NaN at its first tap; TensorFlow and the float32 path skip NaN.
  if (c.kernel == DnnKernel::kPool2dBackward && c.pool == PoolKind::kMax && dtype == DType::kBFloat16)
    return {no_kernel, "bfloat16 max pooling backward: oneDNN's would send the gradient to a NaN (TF skips NaN)"};
  if (!onednn_has_kernel(c))
    return {no_kernel, onednn_version() + " has no " + std::string(dtype_name(dtype)) + " JIT kernel for this shape" +
                           on_isa + " (only its reference loops)"};
  return {DnnPath::kOneDnn, onednn_version() + " " + std::string(dtype_name(dtype)) + " JIT kernel" + on_isa};
#else
  return {DnnPath::kChorusLoops, "unreachable"};
#endif
}

}  // namespace

const char* dnn_path_name(DnnPath path) {
  switch (path) {
    case DnnPath::kOneDnn: return "onednn";
    case DnnPath::kFloat32Fallback: return "float32 fallback";
    case DnnPath::kChorusLoops: return "chorus loops";
    case DnnPath::kUnsupported: return "unsupported";
  }
  return "unknown";
}

DnnDispatch dnn_dispatch(const DnnCall& c) {
  switch (c.kernel) {
    case DnnKernel::kMatmul:
      require_dnn_float(c.dtype, "dnn_dispatch");
      require_non_negative("dnn_dispatch", "batch", c.batch);
      require_non_negative("dnn_dispatch", "m", c.m);
      require_non_negative("dnn_dispatch", "n", c.n);
      require_non_negative("dnn_dispatch", "k", c.k);
      break;
    case DnnKernel::kEltwiseForward:
    case DnnKernel::kEltwiseBackward: require_non_negative("dnn_dispatch", "elements", c.elements); break;
    case DnnKernel::kPool2dForward:
    case DnnKernel::kPool2dBackward:
    case DnnKernel::kConv2dForward:
    case DnnKernel::kConv2dBackwardData:
    case DnnKernel::kConv2dBackwardFilter:
      require_dnn_float(c.dtype, "dnn_dispatch");
      require_geometry(c.geometry, "dnn_dispatch",
                       c.kernel == DnnKernel::kPool2dForward || c.kernel == DnnKernel::kPool2dBackward);
      break;
  }
  return decide(c);
}

void use_threads(int n) {
  CHORUS_REQUIRE(n >= 1, InvalidArgumentError, "use_threads: n must be >= 1, got ", n);
  if (omp_get_max_threads() != n) omp_set_num_threads(n);
}

bool have_onednn() { return kWithDnnl; }

void set_onednn_bf16_enabled(bool enabled) { g_bf16_enabled.store(enabled ? 1 : 0); }

bool onednn_bf16_enabled() {
  int v = g_bf16_enabled.load();
  if (v < 0) {
    const int from_env = env::get_bool(kBf16Variable).value_or(true) ? 1 : 0;
    g_bf16_enabled.compare_exchange_strong(v, from_env);  // a concurrent set_onednn_bf16_enabled wins
    v = g_bf16_enabled.load();
  }
  return v == 1;
}

Bf16Stats bf16_stats() { return {g_bf16_onednn.load(), g_bf16_fallback.load()}; }

std::string onednn_isa() {
#ifdef CHORUS_WITH_DNNL
  return isa_name(dnnl::get_effective_cpu_isa());
#else
  return "none";
#endif
}

std::string bf16_path() {
#ifdef CHORUS_WITH_DNNL
  static const bool probed = isa_has_bf16() && probe_matmul(DType::kBFloat16);
  if (probed && onednn_bf16_enabled()) return std::string("onednn ") + isa_name(dnnl::get_effective_cpu_isa());
#endif
  return "float32 fallback";
}

bool float16_supported() {
#ifdef CHORUS_WITH_DNNL
  static const bool supported = probe_matmul(DType::kFloat16);
  return supported;
#else
  return false;
#endif
}

void throw_float16_unsupported(const char* op) {
#ifdef CHORUS_WITH_DNNL
  const dnnl_version_t* v = dnnl_version();
  const std::string where = chorus::internal::str_cat("oneDNN ", v->major, ".", v->minor, ".", v->patch,
                                                      " offers no float16 kernels on this CPU, ISA ",
                                                      isa_name(dnnl::get_effective_cpu_isa()));
#else
  const std::string where = "chorus was built without oneDNN";
#endif
  throw UnimplementedError(chorus::internal::str_cat(op, ": float16 is not supported on the CPU (", where,
                                                     "). Use the mixed_bfloat16 policy: bfloat16 works on this CPU (",
                                                     bf16_path(), "); float16 (mixed_float16) runs on a GPU"));
}

CacheStats cache_stats() {
#ifdef CHORUS_WITH_DNNL
  return onednn::CacheRegistry::instance().total();
#else
  return {};
#endif
}

void matmul(DType dtype, const void* a, std::int64_t a_batch_stride, const void* b, std::int64_t b_batch_stride,
            void* c, std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a, bool trans_b) {
  require_dnn_float(dtype, "matmul");
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
  if (is_16bit(dtype)) {
    DnnCall call{DnnKernel::kMatmul, dtype, batch, m, n, k, a_batch_stride, b_batch_stride, trans_a, trans_b};
    run_16bit(
        call, "matmul",
        [&] {
#ifdef CHORUS_WITH_DNNL
          return onednn::matmul(dtype, a, a_batch_stride, b, b_batch_stride, c, batch, m, n, k, trans_a, trans_b);
#else
          return false;
#endif
        },
        [&] {
          // Each operand's extent: its last matrix ends at (count - 1) * stride + rows * cols.
          const auto extent = [&](std::int64_t stride, std::int64_t size) {
            return stride == 0 ? size : (batch - 1) * stride + size;
          };
          const std::vector<float> fa = widen(dtype, a, extent(a_batch_stride, m * k));
          const std::vector<float> fb = widen(dtype, b, extent(b_batch_stride, k * n));
          std::vector<float> fc(static_cast<std::size_t>(batch * m * n));
          matmul(DType::kFloat32, fa.data(), a_batch_stride, fb.data(), b_batch_stride, fc.data(), batch, m, n, k,
                 trans_a, trans_b);
          narrow(fc, dtype, c);
        });
    return;
  }
  if (dtype == DType::kFloat64) {
    reference::matmul(cp<double>(a), a_batch_stride, cp<double>(b), b_batch_stride, mp<double>(c), batch, m, n, k,
                      trans_a, trans_b);
    return;
  }
#ifdef CHORUS_WITH_DNNL
  onednn::matmul(dtype, a, a_batch_stride, b, b_batch_stride, c, batch, m, n, k, trans_a, trans_b);
#else
  reference::matmul(cp<float>(a), a_batch_stride, cp<float>(b), b_batch_stride, mp<float>(c), batch, m, n, k, trans_a,
                    trans_b);
#endif
}

// The float32 / float64 kernel of conv2d and pooling: reference loops for float64 (and for float32
// without oneDNN), oneDNN for float32.
#ifdef CHORUS_WITH_DNNL
#define CHORUS_DNN_FLOAT_CALL(fn, f64args, onednn_args, f32args) \
  (dtype == DType::kFloat64 ? reference::fn f64args : (void)onednn::fn onednn_args)
#else
#define CHORUS_DNN_FLOAT_CALL(fn, f64args, onednn_args, f32args) \
  (dtype == DType::kFloat64 ? reference::fn f64args : reference::fn f32args)
#endif
#ifdef CHORUS_WITH_DNNL
#define CHORUS_ONEDNN_16(expr) [&] { return expr; }
#else
#define CHORUS_ONEDNN_16(expr) [] { return false; }
#endif

void conv2d_forward(DType dtype, const Conv2dGeometry& g, const void* x, const void* w, void* y,
                    const ConvEpilogue& epilogue) {
  require_dnn_float(dtype, "conv2d_forward");
  require_geometry(g, "conv2d_forward", false);
  if (g.n == 0) return;
  const bool has_epilogue = epilogue.bias != nullptr || epilogue.relu;
  if (is_16bit(dtype)) {
    run_16bit(conv_call(DnnKernel::kConv2dForward, dtype, g, epilogue), "conv2d_forward",
              CHORUS_ONEDNN_16(onednn::conv2d_forward(dtype, g, x, w, y, epilogue)), [&] {
                const auto fx = widen(dtype, x, g.input_elements()), fw = widen(dtype, w, g.filter_elements());
                const auto fb = epilogue.bias != nullptr ? widen(dtype, epilogue.bias, g.out_c) : std::vector<float>();
                std::vector<float> fy(static_cast<std::size_t>(g.output_elements()));
                conv2d_forward(DType::kFloat32, g, fx.data(), fw.data(), fy.data(),
                               {epilogue.bias != nullptr ? fb.data() : nullptr, epilogue.relu});
                narrow(fy, dtype, y);
              });
    return;
  }
#ifdef CHORUS_WITH_DNNL
  if (dtype == DType::kFloat32) {
    onednn::conv2d_forward(dtype, g, x, w, y, epilogue);  // never false for float32
    return;
  }
#endif
  CHORUS_DNN_FLOAT_CALL(conv2d_forward, (g, cp<double>(x), cp<double>(w), mp<double>(y)), (dtype, g, x, w, y, {}),
                        (g, cp<float>(x), cp<float>(w), mp<float>(y)));
  if (has_epilogue && g.output_elements() > 0)
    bias_activation_forward(dtype, epilogue.relu, y, epilogue.bias, g.output_elements() / g.out_c, g.out_c);
}

void conv2d_backward_data(DType dtype, const Conv2dGeometry& g, const void* dy, const void* w, void* dx) {
  require_dnn_float(dtype, "conv2d_backward_data");
  require_geometry(g, "conv2d_backward_data", false);
  if (g.n == 0) return;
  if (is_16bit(dtype)) {
    run_16bit(conv_call(DnnKernel::kConv2dBackwardData, dtype, g), "conv2d_backward_data",
              CHORUS_ONEDNN_16(onednn::conv2d_backward_data(dtype, g, dy, w, dx)), [&] {
                const auto fdy = widen(dtype, dy, g.output_elements()), fw = widen(dtype, w, g.filter_elements());
                std::vector<float> fdx(static_cast<std::size_t>(g.input_elements()));
                conv2d_backward_data(DType::kFloat32, g, fdy.data(), fw.data(), fdx.data());
                narrow(fdx, dtype, dx);
              });
    return;
  }
  CHORUS_DNN_FLOAT_CALL(conv2d_backward_data, (g, cp<double>(dy), cp<double>(w), mp<double>(dx)), (dtype, g, dy, w, dx),
                        (g, cp<float>(dy), cp<float>(w), mp<float>(dx)));
}

void conv2d_backward_filter(DType dtype, const Conv2dGeometry& g, const void* x, const void* dy, void* dw) {
  require_dnn_float(dtype, "conv2d_backward_filter");
  require_geometry(g, "conv2d_backward_filter", false);
  if (g.n == 0) {  // an empty batch contributes nothing
    std::memset(dw, 0, static_cast<std::size_t>(g.filter_elements()) * dtype_size(dtype));
    return;
  }
  if (is_16bit(dtype)) {
    run_16bit(conv_call(DnnKernel::kConv2dBackwardFilter, dtype, g), "conv2d_backward_filter",
              CHORUS_ONEDNN_16(onednn::conv2d_backward_filter(dtype, g, x, dy, dw)), [&] {
                const auto fx = widen(dtype, x, g.input_elements()), fdy = widen(dtype, dy, g.output_elements());
                std::vector<float> fdw(static_cast<std::size_t>(g.filter_elements()));
                conv2d_backward_filter(DType::kFloat32, g, fx.data(), fdy.data(), fdw.data());
                narrow(fdw, dtype, dw);
              });
    return;
  }
  CHORUS_DNN_FLOAT_CALL(conv2d_backward_filter, (g, cp<double>(x), cp<double>(dy), mp<double>(dw)),
                        (dtype, g, x, dy, dw), (g, cp<float>(x), cp<float>(dy), mp<float>(dw)));
}

void pool2d_forward(PoolKind kind, DType dtype, const Conv2dGeometry& g, const void* x, void* y) {
  require_dnn_float(dtype, "pool2d_forward");
  require_geometry(g, "pool2d_forward", true);
  if (g.n == 0) return;
  if (is_16bit(dtype)) {
    run_16bit(pool_call(DnnKernel::kPool2dForward, kind, dtype, g), "pool2d_forward",
              CHORUS_ONEDNN_16(onednn::pool2d_forward(kind, dtype, g, x, y)), [&] {
                const auto fx = widen(dtype, x, g.input_elements());
                std::vector<float> fy(static_cast<std::size_t>(g.output_elements()));
                pool2d_forward(kind, DType::kFloat32, g, fx.data(), fy.data());
                narrow(fy, dtype, y);
              });
    return;
  }
  if (own_max_pool(kind, dtype, g)) {                                            // decide()'s rule for float32
    max_pool::forward(g, static_cast<const float*>(x), static_cast<float*>(y));  // as in training
    return;
  }
  CHORUS_DNN_FLOAT_CALL(pool2d_forward, (kind, g, cp<double>(x), mp<double>(y)), (kind, dtype, g, x, y),
                        (kind, g, cp<float>(x), mp<float>(y)));
}

void pool2d_backward(PoolKind kind, DType dtype, const Conv2dGeometry& g, const void* x, const void* dy, void* dx) {
  require_dnn_float(dtype, "pool2d_backward");
  require_geometry(g, "pool2d_backward", true);
  if (g.n == 0) return;
  if (is_16bit(dtype)) {
    // Overlapping windows take the float32 path (decide() says why).
    run_16bit(pool_call(DnnKernel::kPool2dBackward, kind, dtype, g), "pool2d_backward",
              CHORUS_ONEDNN_16(onednn::pool2d_backward(kind, dtype, g, x, dy, dx)), [&] {
                const auto fx = widen(dtype, x, g.input_elements()), fdy = widen(dtype, dy, g.output_elements());
                std::vector<float> fdx(static_cast<std::size_t>(g.input_elements()));
                pool2d_backward(kind, DType::kFloat32, g, fx.data(), fdy.data(), fdx.data());
                narrow(fdx, dtype, dx);
              });
    return;
  }
  if (own_max_pool(kind, dtype, g)) {  // decide()'s rule for float32
    // The same loops as training's workspace path (max_pool.h), so both give the same dx.
    std::vector<float> y(static_cast<std::size_t>(g.output_elements()));
    std::vector<std::uint8_t> workspace(max_pool::workspace_bytes(g));
    max_pool::forward_training(g, static_cast<const float*>(x), y.data(), workspace.data());
    max_pool::backward(g, static_cast<const float*>(dy), workspace.data(), static_cast<float*>(dx));
    return;
  }
  CHORUS_DNN_FLOAT_CALL(pool2d_backward, (kind, g, cp<double>(x), cp<double>(dy), mp<double>(dx)),
                        (kind, dtype, g, x, dy, dx), (kind, g, cp<float>(x), cp<float>(dy), mp<float>(dx)));
}

std::size_t pool2d_workspace_bytes(PoolKind kind, DType dtype, const Conv2dGeometry& g) {
  if (kind != PoolKind::kMax || dtype != DType::kFloat32 || g.n == 0 || g.output_elements() == 0) return 0;
  require_geometry(g, "pool2d_workspace_bytes", true);
  if (max_pool::fits(g)) return max_pool::workspace_bytes(g);
#ifdef CHORUS_WITH_DNNL
  return onednn::pool2d_workspace_bytes(g);
#else
  return 0;
#endif
}

void pool2d_forward_training(PoolKind kind, DType dtype, const Conv2dGeometry& g, const void* x, void* y,
                             void* workspace) {
  CHORUS_REQUIRE(pool2d_workspace_bytes(kind, dtype, g) > 0, InvalidArgumentError,
                 "pool2d_forward_training: no workspace for this pooling (pool2d_workspace_bytes is 0)");
  if (max_pool::fits(g)) {
    max_pool::forward_training(g, static_cast<const float*>(x), static_cast<float*>(y),
                               static_cast<std::uint8_t*>(workspace));
    return;
  }
#ifdef CHORUS_WITH_DNNL
  onednn::pool2d_forward_training(g, x, y, workspace);
#else
  (void)x, (void)y, (void)workspace;
#endif
}

void pool2d_backward_with_workspace(PoolKind kind, DType dtype, const Conv2dGeometry& g, const void* dy,
                                    const void* workspace, void* dx) {
  CHORUS_REQUIRE(pool2d_workspace_bytes(kind, dtype, g) > 0, InvalidArgumentError,
                 "pool2d_backward_with_workspace: no workspace for this pooling (pool2d_workspace_bytes is 0)");
  if (max_pool::fits(g)) {
    max_pool::backward(g, static_cast<const float*>(dy), static_cast<const std::uint8_t*>(workspace),
                       static_cast<float*>(dx));
    return;
  }
#ifdef CHORUS_WITH_DNNL
  onednn::pool2d_backward_with_workspace(g, dy, workspace, dx);
#else
  (void)dy, (void)workspace, (void)dx;
#endif
}

#undef CHORUS_DNN_FLOAT_CALL
#undef CHORUS_ONEDNN_16

// Softmax and batch normalization: float32 → oneDNN (reference loops without it), float64 →
// reference loops.
#ifdef CHORUS_WITH_DNNL
#define CHORUS_DNN_CALL(fn, f64args, f32args) (dtype == DType::kFloat64 ? reference::fn f64args : onednn::fn f32args)
#else
#define CHORUS_DNN_CALL(fn, f64args, f32args) (dtype == DType::kFloat64 ? reference::fn f64args : reference::fn f32args)
#endif

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

namespace {

// Whether an eltwise call of `kernel` runs on oneDNN (decide()'s answer).
bool eltwise_runs_on_onednn(DnnKernel kernel, UnaryOp op, DType dtype, std::int64_t n, const char* what) {
  require_non_negative(what, "n", n);
  DnnCall call;
  call.kernel = kernel;
  call.dtype = dtype;
  call.unary = op;
  call.elements = n;
  return decide(call).path == DnnPath::kOneDnn;
}

}  // namespace

bool eltwise_forward(UnaryOp op, DType dtype, const void* x, void* y, std::int64_t n) {
  if (!eltwise_runs_on_onednn(DnnKernel::kEltwiseForward, op, dtype, n, "eltwise_forward")) return false;
#ifdef CHORUS_WITH_DNNL
  if (n == 0) return true;
  return onednn::eltwise_forward(op, dtype, x, y, n);
#else
  (void)op, (void)x, (void)y;
  return false;
#endif
}

bool eltwise_backward(UnaryOp op, DType dtype, const void* x, const void* dy, void* dx, std::int64_t n) {
  if (!eltwise_runs_on_onednn(DnnKernel::kEltwiseBackward, op, dtype, n, "eltwise_backward")) return false;
#ifdef CHORUS_WITH_DNNL
  if (n == 0) return true;
  if (!onednn::eltwise_backward(op, dtype, x, dy, dx, n)) return false;
  // Non-finite inputs by chorus's loop formula (gelu_grad, numeric.h): TF's composed gradient
  // gives NaN at ±Inf (Inf · 0) and NaN; oneDNN's approximation is not bound to.
  if (dtype == DType::kFloat32) {
    const auto* xs = static_cast<const float*>(x);
    const auto* dys = static_cast<const float*>(dy);
    auto* dxs = static_cast<float*>(dx);
    for (std::int64_t i = 0; i < n; ++i)
      if (!std::isfinite(xs[i])) dxs[i] = dys[i] * gelu_grad(xs[i]);
  } else {  // bfloat16: the loop's float computation, rounded once
    const auto* xs = static_cast<const std::uint16_t*>(x);
    const auto* dys = static_cast<const std::uint16_t*>(dy);
    auto* dxs = static_cast<std::uint16_t*>(dx);
    for (std::int64_t i = 0; i < n; ++i) {
      const float xi = bfloat16_to_float(xs[i]);
      if (!std::isfinite(xi)) dxs[i] = float_to_bfloat16(bfloat16_to_float(dys[i]) * gelu_grad(xi));
    }
  }
  return true;
#else
  (void)op, (void)x, (void)dy, (void)dx;
  return false;
#endif
}

}  // namespace chorus::ops::cpu
