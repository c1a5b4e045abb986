// cuDNN convolutions (ops/cuda/libraries.h): forward, backward data, backward filter.
//
// Layouts. chorus tensors are NHWC with HWIO filters; cuDNN has no HWIO layout, so the filter is
// always transposed (copy_strided) into a workspace: KRSC ([out_c, kh, kw, in_c]) for NHWC
// convolutions, KCRS for NCHW ones; the filter gradient is transposed back. float32 runs in NHWC
// directly; float64 runs in NCHW (cuDNN's double-precision kernels are NCHW-only in practice:
// frameworks such as PyTorch never send double NHWC convolutions to cuDNN), with x/dy
// transposed in and y/dx transposed out. If cuDNN offers no algorithm for float32 NHWC, the NCHW
// route is tried too. The layout that worked is cached with the algorithm.
//
// Fused forward (conv2d_bias_activation_forward, ops::fused_conv2d's GPU path):
// cudnnConvolutionBiasActivationForward, y = act(conv(x, w) + bias) in one call, with the plain
// forward's layout, algorithm and math (IMPLICIT_PRECOMP_GEMM for the identity activation, the only
// algorithm cuDNN runs it with). When cuDNN refuses, the caller runs the three kernels.
//
// Groups (grouped and depthwise convolutions): cudnnSetConvolutionGroupCount on the convolution
// descriptor, the filter descriptor's C being in_c / groups.
//
// Padding. cuDNN pads symmetrically; TF's SAME padding is asymmetric when the total is odd. Then
// x is copied into a zero-padded workspace (pad_top/left before, pad_bottom/right after) and the
// convolution runs with padding 0; backward data computes the padded gradient and crops it.
//
// Algorithms. With op determinism enabled: cuDNN's heuristics (cudnnGet*Algorithm_v7), the
// first algorithm marked CUDNN_DETERMINISTIC — the heuristics are themselves deterministic, so
// every process picks the same algorithm and results are bitwise reproducible across runs.
// Otherwise: the fastest algorithm measured by cudnnFind*AlgorithmEx on the call's own buffers
// with a workspace of at most 256 MiB from the device's allocator (blocking, once per cache key).
// float32 while TensorFloat-32 is enabled (core/config.h, the default) asks for CUDNN_DEFAULT_MATH,
// under which cuDNN may use TF32 tensor cores (compute capability 8.0+); disabled, it asks for
// CUDNN_FMA_MATH (no TF32, results comparable to the CPU kernels) and only if cuDNN offers nothing
// under it is CUDNN_DEFAULT_MATH allowed. Choices are cached per (direction, geometry, dtype,
// determinism, TF32 setting, GPU).
//
// Plans. The first call of a shape on a logical device keeps its descriptors, algorithm and
// workspace size (a Plan, below); later calls make no descriptor and query nothing, so their host
// time is the staging copies, the workspace allocation and cuDNN's own call.
#include <chorus/ops/cuda/libraries.h>

#ifdef CHORUS_WITH_CUDNN
#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include <chorus/core/config.h>
#include <chorus/core/logging.h>
#include <chorus/ops/cuda/cudnn_util.h>
#include <chorus/ops/determinism.h>
#endif

#include <string>

#include <chorus/core/error.h>

namespace chorus::ops::cuda {

#ifdef CHORUS_WITH_CUDNN

namespace {

using namespace cudnn;  // NOLINT: this file is the cuDNN wrapper
using ::chorus::internal::str_cat;

enum class Dir { kForward, kBackwardData, kBackwardFilter };

const char* op_name(Dir dir) {
  switch (dir) {
    case Dir::kForward: return "conv2d";
    case Dir::kBackwardData: return "conv2d_backprop_input";
    case Dir::kBackwardFilter: return "conv2d_backprop_filter";
  }
  return "conv2d";
}

struct Choice {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  Layout layout = Layout::kNHWC;
};

using Key = std::array<std::int64_t, 24>;

Key make_key(Dir dir, DType dtype, const Conv2dGeometry& g, bool det, bool tf32, int ordinal) {
  return {static_cast<std::int64_t>(dir),
          static_cast<std::int64_t>(dtype),
          det ? 1 : 0,
          ordinal,
          g.n,
          g.in_h,
          g.in_w,
          g.in_c,
          g.k_h,
          g.k_w,
          g.out_c,
          g.stride_h,
          g.stride_w,
          g.dilation_h,
          g.dilation_w,
          g.pad_top,
          g.pad_left,
          g.pad_bottom,
          g.pad_right,
          g.out_h,
          g.out_w,
          g.groups,
          tf32 ? 1 : 0,
          0};
}

std::mutex& cache_mu() {
  static std::mutex mu;
  return mu;
}
std::map<Key, Choice>& cache() {
  static std::map<Key, Choice> c;
  return c;
}

std::optional<Choice> cached(const Key& key) {
  std::lock_guard<std::mutex> lock(cache_mu());
  auto it = cache().find(key);
  if (it == cache().end()) return std::nullopt;
  return it->second;
}

void remember(const Key& key, const Choice& c) {
  std::lock_guard<std::mutex> lock(cache_mu());
  cache()[key] = c;
}

std::string describe(const Conv2dGeometry& g) {
  return str_cat("input ", g.n, "x", g.in_h, "x", g.in_w, "x", g.in_c, ", filter ", g.k_h, "x", g.k_w, "x",
                 g.filter_in_c(), "x", g.out_c, ", groups ", g.groups, ", strides ", g.stride_h, "x", g.stride_w,
                 ", dilations ", g.dilation_h, "x", g.dilation_w, ", pads (top ", g.pad_top, ", left ", g.pad_left,
                 ", bottom ", g.pad_bottom, ", right ", g.pad_right, "), output ", g.out_h, "x", g.out_w);
}

void check_geometry(const Conv2dGeometry& g, const char* op) {
  CHORUS_REQUIRE(g.n >= 0 && g.in_h > 0 && g.in_w > 0 && g.in_c >= 0 && g.k_h > 0 && g.k_w > 0 && g.out_c >= 0 &&
                     g.stride_h > 0 && g.stride_w > 0 && g.dilation_h > 0 && g.dilation_w > 0 && g.pad_top >= 0 &&
                     g.pad_left >= 0 && g.pad_bottom >= 0 && g.pad_right >= 0 && g.out_h > 0 && g.out_w > 0 &&
                     g.groups >= 1 && g.in_c % g.groups == 0 && g.out_c % g.groups == 0,
                 InvalidArgumentError, op, ": invalid geometry (", describe(g), ")");
}

// The input as cuDNN sees it: dims and the symmetric pads of the descriptor.
struct InputPlan {
  std::int64_t h, w, pad_h, pad_w;
  bool padded_copy;  // asymmetric padding: x lives in an explicitly zero-padded workspace
};

InputPlan plan_input(const Conv2dGeometry& g) {
  if (g.pad_top != g.pad_bottom || g.pad_left != g.pad_right)
    return {g.in_h + g.pad_top + g.pad_bottom, g.in_w + g.pad_left + g.pad_right, 0, 0, true};
  return {g.in_h, g.in_w, g.pad_top, g.pad_left, false};
}

// Filter strides for the index order (kh, kw, filter in_c, out_c). Grouped: cuDNN's filter is
// [out_c, in_c / groups, kh, kw] (the group of output channel k is k / (out_c / groups)), the same
// index order as TF's HWIO filter, so the transposes below are the ungrouped ones with in_c / groups.
std::array<std::int64_t, 4> hwio_strides(const Conv2dGeometry& g) {
  const std::int64_t c = g.filter_in_c();
  return {g.k_w * c * g.out_c, c * g.out_c, g.out_c, 1};
}
std::array<std::int64_t, 4> cudnn_filter_strides(Layout layout, const Conv2dGeometry& g) {
  const std::int64_t c = g.filter_in_c();
  if (layout == Layout::kNHWC) return {g.k_w * c, c, 1, g.k_h * g.k_w * c};  // KRSC
  return {g.k_w, 1, g.k_h * g.k_w, c * g.k_h * g.k_w};                       // KCRS
}

// ---- Algorithm choice -----------------------------------------------------------------------

// The per-direction cuDNN entry points, behind one shape so the choice logic is written once.
struct Descs {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
};
struct Buffers {
  void* x;  // const for forward / backward filter (cuDNN's Find writes only the output buffer)
  void* w;
  void* y;
};

template <typename Perf>
std::optional<Choice> first_acceptable(const Perf* perf, int count, bool det, std::size_t workspace_limit,
                                       Layout layout) {
  for (int i = 0; i < count; ++i) {
    const Perf& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS) continue;
    if (det && p.determinism != CUDNN_DETERMINISTIC) continue;
    if (p.memory > workspace_limit) continue;
    return Choice{static_cast<int>(p.algo), p.mathType, layout};
  }
  return std::nullopt;
}

// cudnnStatus of a Find/Get call: success → true; "not supported" (no engine for this layout or
// type) → false; anything else throws.
bool supported(cudnnStatus_t status, const char* call) {
  if (status == CUDNN_STATUS_SUCCESS) return true;
  if (CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_NOT_SUPPORTED) return false;
  internal::throw_cudnn_error(status, call, __FILE__, __LINE__);
}

constexpr std::size_t kFindWorkspace = std::size_t{256} << 20;

// Workspace for cudnnFind*Ex: as much as the allocator gives, up to kFindWorkspace.
Scratch find_workspace(DeviceContext& dev) {
  for (std::size_t bytes = kFindWorkspace; bytes >= (std::size_t{1} << 20); bytes /= 4) {
    try {
      return Scratch(dev, bytes, "cuDNN algorithm search workspace");
    } catch (const ResourceExhaustedError&) {
    }
  }
  return Scratch();
}

std::optional<Choice> select(DeviceContext& dev, cudnnHandle_t h, Dir dir, const Descs& d, const Buffers& b, bool det,
                             Layout layout) {
  int max_count = 0;
  if (det) {
    // Heuristics: no execution, no workspace; sorted by expected speed.
    switch (dir) {
      case Dir::kForward: {
        CHORUS_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max_count));
        std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<std::size_t>(std::max(max_count, 1)));
        int n = 0;
        if (!supported(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                              max_count, &n, perf.data()),
                       "cudnnGetConvolutionForwardAlgorithm_v7"))
          return std::nullopt;
        return first_acceptable(perf.data(), n, det, SIZE_MAX, layout);
      }
      case Dir::kBackwardData: {
        CHORUS_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max_count));
        std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<std::size_t>(std::max(max_count, 1)));
        int n = 0;
        if (!supported(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
                                                                   max_count, &n, perf.data()),
                       "cudnnGetConvolutionBackwardDataAlgorithm_v7"))
          return std::nullopt;
        return first_acceptable(perf.data(), n, det, SIZE_MAX, layout);
      }
      case Dir::kBackwardFilter: {
        CHORUS_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max_count));
        std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<std::size_t>(std::max(max_count, 1)));
        int n = 0;
        if (!supported(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(),
                                                                     max_count, &n, perf.data()),
                       "cudnnGetConvolutionBackwardFilterAlgorithm_v7"))
          return std::nullopt;
        return first_acceptable(perf.data(), n, det, SIZE_MAX, layout);
      }
    }
    return std::nullopt;
  }
  // Measurement on the call's buffers (it writes only the output buffer, which the real call
  // overwrites afterwards).
  Scratch ws = find_workspace(dev);
  switch (dir) {
    case Dir::kForward: {
      CHORUS_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max_count));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<std::size_t>(std::max(max_count, 1)));
      int n = 0;
      if (!supported(cudnnFindConvolutionForwardAlgorithmEx(h, d.x.get(), b.x, d.w.get(), b.w, d.conv.get(), d.y.get(),
                                                            b.y, max_count, &n, perf.data(), ws.get(), ws.size()),
                     "cudnnFindConvolutionForwardAlgorithmEx"))
        return std::nullopt;
      return first_acceptable(perf.data(), n, det, ws.size(), layout);
    }
    case Dir::kBackwardData: {
      CHORUS_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max_count));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<std::size_t>(std::max(max_count, 1)));
      int n = 0;
      if (!supported(
              cudnnFindConvolutionBackwardDataAlgorithmEx(h, d.w.get(), b.w, d.y.get(), b.y, d.conv.get(), d.x.get(),
                                                          b.x, max_count, &n, perf.data(), ws.get(), ws.size()),
              "cudnnFindConvolutionBackwardDataAlgorithmEx"))
        return std::nullopt;
      return first_acceptable(perf.data(), n, det, ws.size(), layout);
    }
    case Dir::kBackwardFilter: {
      CHORUS_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max_count));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<std::size_t>(std::max(max_count, 1)));
      int n = 0;
      if (!supported(
              cudnnFindConvolutionBackwardFilterAlgorithmEx(h, d.x.get(), b.x, d.y.get(), b.y, d.conv.get(), d.w.get(),
                                                            b.w, max_count, &n, perf.data(), ws.get(), ws.size()),
              "cudnnFindConvolutionBackwardFilterAlgorithmEx"))
        return std::nullopt;
      return first_acceptable(perf.data(), n, det, ws.size(), layout);
    }
  }
  return std::nullopt;
}

std::size_t workspace_size(cudnnHandle_t h, Dir dir, const Descs& d, int algo) {
  std::size_t bytes = 0;
  switch (dir) {
    case Dir::kForward:
      CHORUS_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                                 static_cast<cudnnConvolutionFwdAlgo_t>(algo), &bytes));
      break;
    case Dir::kBackwardData:
      CHORUS_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
          h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(), static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), &bytes));
      break;
    case Dir::kBackwardFilter:
      CHORUS_CUDNN_CHECK(
          cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(),
                                                         static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), &bytes));
      break;
  }
  return bytes;
}

// ---- Plans: what the calls of one shape share -------------------------------------------------

// d's descriptors for one layout: x (the input as cuDNN sees it), y, the filter and the
// convolution. Throws InvalidArgumentError when cuDNN's output size is not the geometry's.
void set_descriptors(Descs& d, Layout layout, cudnnDataType_t type, DType dtype, const Conv2dGeometry& g,
                     const InputPlan& in, const char* op) {
  set_tensor(d.x, layout, type, g.n, g.in_c, in.h, in.w, op);
  set_tensor(d.y, layout, type, g.n, g.out_c, g.out_h, g.out_w, op);
  CHORUS_CUDNN_CHECK(cudnnSetFilter4dDescriptor(
      d.w.get(), type, layout == Layout::kNHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, to_int(g.out_c, op, "out_c"),
      to_int(g.filter_in_c(), op, "in_c"), to_int(g.k_h, op, "k_h"), to_int(g.k_w, op, "k_w")));
  CHORUS_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
      d.conv.get(), to_int(in.pad_h, op, "pad"), to_int(in.pad_w, op, "pad"), to_int(g.stride_h, op, "stride"),
      to_int(g.stride_w, op, "stride"), to_int(g.dilation_h, op, "dilation"), to_int(g.dilation_w, op, "dilation"),
      CUDNN_CROSS_CORRELATION, compute_type(dtype)));
  CHORUS_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d.conv.get(), to_int(g.groups, op, "groups")));
  int on = 0, oc = 0, oh = 0, ow = 0;
  CHORUS_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(d.conv.get(), d.x.get(), d.w.get(), &on, &oc, &oh, &ow));
  CHORUS_REQUIRE(oh == g.out_h && ow == g.out_w, InvalidArgumentError, op, ": the geometry's output ", g.out_h, "x",
                 g.out_w, " does not match the input, filter, strides and padding (cuDNN computes ", oh, "x", ow,
                 "): ", describe(g));
}

// The algorithm (and math type) for one layout, leaving d.conv set to the math type last tried;
// nullopt when cuDNN offers none for this layout.
std::optional<Choice> choose_algorithm(DeviceContext& dev, cudnnHandle_t h, Dir dir, DType dtype, const Descs& d,
                                       const Buffers& b, bool det, bool tf32, Layout layout) {
  // float32 with TF32 enabled: cuDNN's default math, TF32 tensor cores allowed (TF's choice with
  // tf32 on). float32 with TF32 disabled, and float64: plain FMA first (no TF32 rounding of float32
  // inputs, as TF with tf32 off), then whatever cuDNN offers. 16-bit: tensor cores first — the
  // reason to train in float16/bfloat16 — accumulating in float (compute_type).
  const std::vector<cudnnMathType_t> maths =
      is_16bit(dtype)                    ? std::vector<cudnnMathType_t>{CUDNN_TENSOR_OP_MATH, CUDNN_DEFAULT_MATH}
      : dtype == DType::kFloat32 && tf32 ? std::vector<cudnnMathType_t>{CUDNN_DEFAULT_MATH, CUDNN_FMA_MATH}
                                         : std::vector<cudnnMathType_t>{CUDNN_FMA_MATH, CUDNN_DEFAULT_MATH};
  for (const cudnnMathType_t math : maths) {
    CHORUS_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv.get(), math));
    if (std::optional<Choice> choice = select(dev, h, dir, d, b, det, layout)) return choice;
  }
  return std::nullopt;
}

// The fused forward's part of a plan, one per activation, made at its first use.
struct FusedPlan {
  bool available = false;  // false: cuDNN refused once, and every later call composes
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
  std::size_t ws_bytes = 0;
  TensorDesc bias;
  ActivationDesc act;
};

// Everything the calls of one shape share: the layout, the descriptors (math type set), the
// algorithm and its workspace size, and the fused forwards'. The first call of a shape on a logical
// device makes it (choosing the algorithm, or taking the choice another logical device of the same
// GPU made); later calls make no descriptor and ask cuDNN for nothing but the convolution (a
// convolution's host time was ~89 us per call on an H200 with descriptors made and sized per call,
// docs/gpu-validation.md). One per (logical device, key), kept for the process like the handle, and
// used only under that device's HandleLease: never by two threads at once, as cuDNN promises
// nothing about descriptors shared by concurrent calls.
struct Plan {
  Layout layout = Layout::kNHWC;
  Choice choice;
  Descs d;
  std::size_t ws_bytes = 0;
  std::array<std::unique_ptr<FusedPlan>, 2> fused;  // [identity, relu]
};

std::mutex& plans_mu() {
  static std::mutex mu;
  return mu;
}
std::map<std::pair<const DeviceContext*, Key>, std::unique_ptr<Plan>>& plans() {
  static std::map<std::pair<const DeviceContext*, Key>, std::unique_ptr<Plan>> p;
  return p;
}
Plan* find_plan(const DeviceContext& dev, const Key& key) {
  std::lock_guard<std::mutex> lock(plans_mu());
  auto it = plans().find({&dev, key});
  return it == plans().end() ? nullptr : it->second.get();
}
Plan& keep_plan(const DeviceContext& dev, const Key& key, std::unique_ptr<Plan> plan) {
  std::lock_guard<std::mutex> lock(plans_mu());
  std::unique_ptr<Plan>& slot = plans()[{&dev, key}];
  slot = std::move(plan);
  return *slot;
}

// ---- One call ---------------------------------------------------------------------------------

std::array<std::int64_t, 4> x_dims(const Conv2dGeometry& g) { return {g.n, g.in_h, g.in_w, g.in_c}; }
std::array<std::int64_t, 4> y_dims(const Conv2dGeometry& g) { return {g.n, g.out_h, g.out_w, g.out_c}; }
std::array<std::int64_t, 4> w_dims(const Conv2dGeometry& g) { return {g.k_h, g.k_w, g.filter_in_c(), g.out_c}; }

// A call's buffers in a layout cuDNN reads: x (the input of forward and backward filter, the output
// of backward data), y (the output of forward, dy of the backward passes) and the filter, copied
// in from the caller's NHWC / HWIO tensors where they cannot be used as they are.
struct Staged {
  Scratch x_buf, y_buf, w_buf;
  void* x = nullptr;
  void* y = nullptr;
  std::array<std::int64_t, 4> cx{}, cy{}, cw{};  // strides in the cuDNN layout
  std::int64_t x_off = 0;                        // where x starts in an explicitly padded x_buf
  bool x_direct = false;                         // x is the caller's tensor
};

// forward: in0 = x, in1 = w, out = y; backward data: in0 = dy, in1 = w, out = dx; backward
// filter: in0 = x, in1 = dy, out = dw.
Staged stage(DeviceContext& dev, Dir dir, DType dtype, const Conv2dGeometry& g, const InputPlan& in, Layout layout,
             const void* in0, const void* in1, void* out) {
  Staged s;
  const std::size_t es = dtype_size(dtype);
  s.cx = strides_of(layout, in.h, in.w, g.in_c);
  // Only an explicitly padded workspace holds x at an offset; with symmetric padding cuDNN pads
  // and x fills the workspace from its first element.
  s.x_off = in.padded_copy ? g.pad_top * s.cx[1] + g.pad_left * s.cx[2] : 0;
  s.x_direct = layout == Layout::kNHWC && !in.padded_copy;
  if (s.x_direct) {
    s.x = dir == Dir::kBackwardData ? out : const_cast<void*>(in0);
  } else {
    const std::int64_t count = g.n * in.h * in.w * g.in_c;
    s.x_buf = Scratch(dev, static_cast<std::size_t>(count) * es, "conv2d input in cuDNN layout");
    s.x = s.x_buf.get();
    if (dir != Dir::kBackwardData) {
      if (in.padded_copy) fill(dev, dtype, s.x, count, 0);
      copy4(dev, dtype, x_dims(g), strides_of(Layout::kNHWC, g.in_h, g.in_w, g.in_c), 0, in0, s.cx, s.x_off, s.x);
    }
  }
  s.cy = strides_of(layout, g.out_h, g.out_w, g.out_c);
  const void* dy = dir == Dir::kBackwardData ? in0 : in1;
  if (layout == Layout::kNHWC) {
    s.y = dir == Dir::kForward ? out : const_cast<void*>(dy);
  } else {
    s.y_buf = Scratch(dev, static_cast<std::size_t>(g.output_elements()) * es, "conv2d output in cuDNN layout");
    s.y = s.y_buf.get();
    if (dir != Dir::kForward)
      copy4(dev, dtype, y_dims(g), strides_of(Layout::kNHWC, g.out_h, g.out_w, g.out_c), 0, dy, s.cy, 0, s.y);
  }
  // The filter, always transposed from/to HWIO.
  s.cw = cudnn_filter_strides(layout, g);
  s.w_buf = Scratch(dev, static_cast<std::size_t>(g.filter_elements()) * es, "conv2d filter in cuDNN layout");
  if (dir != Dir::kBackwardFilter) copy4(dev, dtype, w_dims(g), hwio_strides(g), 0, in1, s.cw, 0, s.w_buf.get());
  return s;
}

// Copies the call's result from the cuDNN layout into `out` where cuDNN did not write it there.
void unstage(DeviceContext& dev, Dir dir, DType dtype, const Conv2dGeometry& g, Layout layout, const Staged& s,
             void* out) {
  switch (dir) {
    case Dir::kForward:
      if (layout == Layout::kNCHW)
        copy4(dev, dtype, y_dims(g), s.cy, 0, s.y, strides_of(Layout::kNHWC, g.out_h, g.out_w, g.out_c), 0, out);
      break;
    case Dir::kBackwardData:
      if (!s.x_direct)
        copy4(dev, dtype, x_dims(g), s.cx, s.x_off, s.x, strides_of(Layout::kNHWC, g.in_h, g.in_w, g.in_c), 0, out);
      break;
    case Dir::kBackwardFilter: copy4(dev, dtype, w_dims(g), s.cw, 0, s.w_buf.get(), hwio_strides(g), 0, out); break;
  }
}

// A plan for `layout` with the staged buffers (cuDNN's Find measures on them), choosing the
// algorithm unless `known` holds the choice; nullptr when cuDNN offers none for this layout.
std::unique_ptr<Plan> make_plan(DeviceContext& dev, cudnnHandle_t h, Dir dir, DType dtype, const Conv2dGeometry& g,
                                const InputPlan& in, Layout layout, const std::optional<Choice>& known, const Staged& s,
                                bool det, bool tf32, const char* op) {
  auto plan = std::make_unique<Plan>();
  plan->layout = layout;
  set_descriptors(plan->d, layout, data_type(dtype, op), dtype, g, in, op);
  std::optional<Choice> choice = known;
  if (!choice)
    choice = choose_algorithm(dev, h, dir, dtype, plan->d, Buffers{s.x, s.w_buf.get(), s.y}, det, tf32, layout);
  if (!choice) return nullptr;
  plan->choice = *choice;
  CHORUS_CUDNN_CHECK(cudnnSetConvolutionMathType(plan->d.conv.get(), choice->math));
  plan->ws_bytes = workspace_size(h, dir, plan->d, choice->algo);
  return plan;
}

// The forward's fused epilogue: y = act(conv(x, w) + bias), cudnnConvolutionBiasActivationForward.
struct Epilogue {
  const void* bias;  // [out_c], the convolution's dtype
  bool relu;         // else identity
};

// Whether the fused forward ran: cuDNN refused it (no fused kernel for this dtype/geometry, or any
// error of the fused call) → false, and the caller composes conv + bias + relu into y; the plan
// remembers the refusal. The first refusal per (dtype, relu) is logged: silently slower is worse
// than a line in the log.
bool run_fused_forward(cudnnHandle_t h, DeviceContext& dev, DType dtype, const Conv2dGeometry& g, Plan& plan,
                       const Staged& s, const Epilogue& epi, const char* op) {
  std::unique_ptr<FusedPlan>& f = plan.fused[epi.relu ? 1 : 0];
  const Descs& d = plan.d;
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  if (!f) {
    f = std::make_unique<FusedPlan>();
    // cuDNN: IDENTITY runs only with IMPLICIT_PRECOMP_GEMM; RELU with the plain forward's choice.
    f->algo = epi.relu ? static_cast<cudnnConvolutionFwdAlgo_t>(plan.choice.algo)
                       : CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
    status = cudnnGetConvolutionForwardWorkspaceSize(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(), f->algo,
                                                     &f->ws_bytes);
    if (status == CUDNN_STATUS_SUCCESS) {
      set_tensor(f->bias, plan.layout, data_type(dtype, op), 1, g.out_c, 1, 1, op);
      CHORUS_CUDNN_CHECK(cudnnSetActivationDescriptor(
          f->act.get(), epi.relu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY, CUDNN_PROPAGATE_NAN, 0.0));
      f->available = true;
    }
  }
  if (f->available) {
    Scratch ws;
    if (f->ws_bytes > 0) ws = Scratch(dev, f->ws_bytes, "cuDNN fused convolution workspace");
    const Blend blend(dtype);
    // alpha2 = 0: z (here y itself, as cuDNN allows) does not enter the sum.
    status = cudnnConvolutionBiasActivationForward(
        h, blend.one(), d.x.get(), s.x, d.w.get(), s.w_buf.get(), d.conv.get(), f->algo, ws.get(), f->ws_bytes,
        blend.zero(), d.y.get(), s.y, f->bias.get(), epi.bias, f->act.get(), d.y.get(), s.y);
    if (status == CUDNN_STATUS_SUCCESS) return true;
    f->available = false;
  }
  if (status == CUDNN_STATUS_SUCCESS) return false;  // refused by an earlier call, logged then
  static std::mutex mu;
  static std::set<std::pair<int, bool>> logged;
  std::lock_guard<std::mutex> lock(mu);
  if (logged.insert({static_cast<int>(dtype), epi.relu}).second) {
    CHORUS_LOG(WARNING) << op << ": cuDNN's fused convolution + bias + " << (epi.relu ? "relu" : "identity")
                        << " is not available for " << dtype_name(dtype) << " (" << cudnnGetErrorString(status)
                        << "); running the convolution, the bias add and the activation as three kernels";
  }
  return false;
}

// Runs the call on staged buffers with `plan`. With an epilogue (forward only), returns whether the
// fused forward ran (false: nothing was written); without one, true.
bool execute(cudnnHandle_t h, DeviceContext& dev, Dir dir, DType dtype, const Conv2dGeometry& g, Plan& plan,
             const Staged& s, void* out, const Epilogue* epi, const char* op) {
  if (epi != nullptr) {
    if (!run_fused_forward(h, dev, dtype, g, plan, s, *epi, op)) return false;
    unstage(dev, dir, dtype, g, plan.layout, s, out);
    return true;
  }
  const Descs& d = plan.d;
  Scratch ws;
  if (plan.ws_bytes > 0) ws = Scratch(dev, plan.ws_bytes, "cuDNN convolution workspace");
  const Blend blend(dtype);
  switch (dir) {
    case Dir::kForward:
      CHORUS_CUDNN_CHECK(cudnnConvolutionForward(h, blend.one(), d.x.get(), s.x, d.w.get(), s.w_buf.get(), d.conv.get(),
                                                 static_cast<cudnnConvolutionFwdAlgo_t>(plan.choice.algo), ws.get(),
                                                 plan.ws_bytes, blend.zero(), d.y.get(), s.y));
      break;
    case Dir::kBackwardData:
      CHORUS_CUDNN_CHECK(cudnnConvolutionBackwardData(h, blend.one(), d.w.get(), s.w_buf.get(), d.y.get(), s.y,
                                                      d.conv.get(),
                                                      static_cast<cudnnConvolutionBwdDataAlgo_t>(plan.choice.algo),
                                                      ws.get(), plan.ws_bytes, blend.zero(), d.x.get(), s.x));
      break;
    case Dir::kBackwardFilter:
      CHORUS_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, blend.one(), d.x.get(), s.x, d.y.get(), s.y, d.conv.get(),
                                                        static_cast<cudnnConvolutionBwdFilterAlgo_t>(plan.choice.algo),
                                                        ws.get(), plan.ws_bytes, blend.zero(), d.w.get(),
                                                        s.w_buf.get()));
      break;
  }
  unstage(dev, dir, dtype, g, plan.layout, s, out);
  return true;
}

// The layouts a shape's first call tries, in order: the choice's when another logical device of
// the GPU made one; NCHW for float64; else NHWC (the callers' layout, no transposes), then NCHW.
std::vector<Layout> layouts_to_try(const std::optional<Choice>& known, DType dtype) {
  if (known) return {known->layout};
  if (dtype == DType::kFloat64) return {Layout::kNCHW};
  return {Layout::kNHWC, Layout::kNCHW};
}

// forward: in0 = x, in1 = w, out = y; backward data: in0 = dy, in1 = w, out = dx;
// backward filter: in0 = x, in1 = dy, out = dw. With an epilogue (forward only), returns whether
// the fused forward ran (false: nothing was written); without one, always true.
bool convolve(DeviceContext& dev, Dir dir, DType dtype, const Conv2dGeometry& g, const void* in0, const void* in1,
              void* out, const Epilogue* epi = nullptr) {
  const char* op = op_name(dir);
  CHORUS_REQUIRE(dev.is_gpu(), InvalidArgumentError, op, ": cuDNN needs a GPU device, got ", dev.name());
  (void)data_type(dtype, op);  // an unsupported dtype says so before anything else
  check_geometry(g, op);
  // Empty outputs, and empty sums (which cuDNN may reject): zeros.
  const std::int64_t out_elements = dir == Dir::kForward        ? g.output_elements()
                                    : dir == Dir::kBackwardData ? g.input_elements()
                                                                : g.filter_elements();
  if (out_elements == 0) return true;
  const bool empty_sum = dir == Dir::kForward ? g.in_c == 0 : dir == Dir::kBackwardData ? g.out_c == 0 : g.n == 0;
  if (empty_sum) {
    if (epi != nullptr) return false;  // act(0 + bias): the composition
    fill(dev, dtype, out, out_elements, 0);
    return true;
  }

  const bool det = op_determinism_enabled();
  const bool tf32 = dtype == DType::kFloat32 && config::tensor_float_32_execution_enabled();
  const Key key = make_key(dir, dtype, g, det, tf32, dev.gpu_ordinal());
  const InputPlan in = plan_input(g);
  HandleLease h(dev);
  if (Plan* plan = find_plan(dev, key)) {
    const Staged s = stage(dev, dir, dtype, g, in, plan->layout, in0, in1, out);
    return execute(h.get(), dev, dir, dtype, g, *plan, s, out, epi, op);
  }
  const std::optional<Choice> known = cached(key);
  for (const Layout layout : layouts_to_try(known, dtype)) {
    const Staged s = stage(dev, dir, dtype, g, in, layout, in0, in1, out);
    std::unique_ptr<Plan> made = make_plan(dev, h.get(), dir, dtype, g, in, layout, known, s, det, tf32, op);
    if (!made) continue;  // next layout
    if (!known) remember(key, made->choice);
    return execute(h.get(), dev, dir, dtype, g, keep_plan(dev, key, std::move(made)), s, out, epi, op);
  }
  throw InternalError(str_cat(op, ": cuDNN offers no ", det ? "deterministic " : "", "algorithm for ",
                              dtype_name(dtype), " ", describe(g), " (tried NHWC and NCHW layouts)"));
}

}  // namespace

void conv2d_forward(DeviceContext& dev, DType dtype, const Conv2dGeometry& g, const void* x, const void* w, void* y) {
  convolve(dev, Dir::kForward, dtype, g, x, w, y);
}
bool conv2d_bias_activation_forward(DeviceContext& dev, DType dtype, const Conv2dGeometry& g, const void* x,
                                    const void* w, const void* bias, bool relu, void* y) {
  const Epilogue epi{bias, relu};
  return convolve(dev, Dir::kForward, dtype, g, x, w, y, &epi);
}
void conv2d_backward_data(DeviceContext& dev, DType dtype, const Conv2dGeometry& g, const void* dy, const void* w,
                          void* dx) {
  convolve(dev, Dir::kBackwardData, dtype, g, dy, w, dx);
}
void conv2d_backward_filter(DeviceContext& dev, DType dtype, const Conv2dGeometry& g, const void* x, const void* dy,
                            void* dw) {
  convolve(dev, Dir::kBackwardFilter, dtype, g, x, dy, dw);
}

#else  // !CHORUS_WITH_CUDNN

namespace {
[[noreturn]] void no_cudnn(const char* op) {
  throw UnimplementedError(std::string(op) +
                           " on GPU needs cuDNN, and chorus was built without it (set CUDNN_HOME and reconfigure)");
}
}  // namespace

void conv2d_forward(DeviceContext&, DType, const Conv2dGeometry&, const void*, const void*, void*) {
  no_cudnn("conv2d");
}
bool conv2d_bias_activation_forward(DeviceContext&, DType, const Conv2dGeometry&, const void*, const void*, const void*,
                                    bool, void*) {
  return false;  // the composition's conv2d says why
}
void conv2d_backward_data(DeviceContext&, DType, const Conv2dGeometry&, const void*, const void*, void*) {
  no_cudnn("conv2d_backprop_input");
}
void conv2d_backward_filter(DeviceContext&, DType, const Conv2dGeometry&, const void*, const void*, void*) {
  no_cudnn("conv2d_backprop_filter");
}

#endif  // CHORUS_WITH_CUDNN

}  // namespace chorus::ops::cuda
