// CPU kernels backed by oneDNN (float32; bfloat16 and float16 for matmul, convolution and pooling)
// with plain reference loops (float64, and float32 when chorus is built without oneDNN); float32
// max pooling runs chorus's own loops (max_pool.h), 2.2-4.6x faster than oneDNN 2.6's (docs/ops.md).
// Raw pointers to host memory, row-major, no aliasing between inputs and outputs unless stated. The op
// layer (ops/*.cc) validates shapes and dtypes and calls these on the device's stream worker; they
// run synchronously on the calling thread.
//
// Threads: oneDNN runs on OpenMP; each call uses omp_get_max_threads() of the calling thread,
// which the op layer sets per logical CPU device through use_threads() so that several replicas on
// few cores do not oversubscribe them.
//
// oneDNN primitives are created once per (kind, dtype, shapes, attributes) and cached (thread-safe
// LRU, capacity 256 per kind); cache_stats() reports hits/misses for tests and benchmarks.
//
// dtypes:
//   matmul, conv2d_*, pool2d_*: float32, float64, bfloat16, float16.
//     bfloat16 (every tensor of the call bfloat16): on oneDNN with bf16 memory (float32
//       accumulation, each output rounded once) when bf16_path() starts with "onednn" and oneDNN
//       has a JIT kernel for the shape; otherwise the float32 fallback — inputs widened to float32,
//       the float32 kernel, the output rounded to bfloat16 once. Either path gives the float32
//       result of the bfloat16 inputs to within one bfloat16 rounding (relative 2^-8) of each output
//       plus float32 accumulation-order differences; the paths may differ from each other by that.
//     float16: on oneDNN where it has float16 kernels (float16_supported(); never with oneDNN 2.6 on
//       x86, whose float16 support arrived with avx512_core_fp16 in later releases); otherwise
//       UnimplementedError naming the kernel and dtype and pointing to bfloat16 (mixed_bfloat16) on
//       this CPU or float16 on a GPU. No float32 fallback for float16, by design: a policy that
//       would silently run at float32 speed is worse than a clear error at the first step.
//   softmax_*, batch_norm_*: float32 or float64 (the op layer runs 16-bit inputs in float32).
//   Anything else → InvalidArgumentError (the op layer checks first, so this is a backstop).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <chorus/core/dtype.h>
#include <chorus/ops/geometry.h>
#include <chorus/ops/kinds.h>

namespace chorus::ops::cpu {

// Sets the calling thread's OpenMP thread count (omp_set_num_threads) when it differs from `n`.
void use_threads(int n);
// True when this build uses oneDNN (false: reference loops for float32 too).
bool have_onednn();
// The ISA oneDNN's JIT kernels use on this CPU ("avx512_core_bf16", "avx2", ...; it honours
// ONEDNN_MAX_CPU_ISA), or "none" without oneDNN: printed beside every benchmark figure.
std::string onednn_isa();

// The path bfloat16 matmul / convolution / pooling take in this process, for benchmark printouts:
// "onednn <isa>" (oneDNN's effective ISA, e.g. "onednn avx512_core_bf16" — native bf16 dot
// products — or "onednn avx512_core" — bf16 emulated with float32 arithmetic) or "float32 fallback"
// (no oneDNN, an ISA below avx512_core as on AVX2-only CPUs or under ONEDNN_MAX_CPU_ISA=AVX2, no
// bf16 matmul kernel in this oneDNN, or the oneDNN bf16 path switched off). The first call probes
// oneDNN (creates a small bf16 matmul primitive); later calls are cheap. Thread-safe. A shape for
// which oneDNN lacks a bf16 JIT kernel still falls back, per primitive (see bf16_stats()).
std::string bf16_path();

// ---- which kernel a call runs ---------------------------------------------------------------------
// dnn_dispatch() answers, for one call of the kernels below (kernel, dtype, shape), which path it
// takes on this machine in this process, and why. It is the function the kernels themselves
// dispatch with (dnn_dispatch.cc), so the answer and the behaviour cannot drift apart: a test that
// expects a path asks this, never the ISA's name. The answer depends on the build (oneDNN or not),
// oneDNN's effective ISA (honouring ONEDNN_MAX_CPU_ISA), the bfloat16 switch below, and whether
// oneDNN has a JIT kernel for this exact shape — to know that, a 16-bit query creates the oneDNN
// primitive (once; it is cached, and the call that follows reuses it: one more cache hit in
// cache_stats()). Thread-safe. Throws what the call would throw for an invalid dtype or geometry.
enum class DnnKernel : std::uint8_t {
  kMatmul,
  kConv2dForward,
  kConv2dBackwardData,
  kConv2dBackwardFilter,
  kPool2dForward,
  kPool2dBackward,
  kEltwiseForward,
  kEltwiseBackward,  // the gradient of an activation from its input (kGelu, float32)
};
enum class DnnPath : std::uint8_t {
  kOneDnn,           // oneDNN's kernel in the call's own dtype
  kFloat32Fallback,  // bfloat16: inputs widened to float32, the float32 path, outputs rounded once
  kChorusLoops,      // chorus's own loops (float64; float32 max pooling; builds without oneDNN)
  kUnsupported,      // float16 without a oneDNN kernel: the call throws UnimplementedError
};
const char* dnn_path_name(DnnPath path);  // "onednn", "float32 fallback", "chorus loops", "unsupported"

// One call's description: the fields its kernel uses, the others ignored.
struct DnnCall {
  DnnKernel kernel = DnnKernel::kMatmul;
  DType dtype = DType::kFloat32;
  // matmul (as matmul()'s arguments)
  std::int64_t batch = 1, m = 1, n = 1, k = 1, a_batch_stride = 0, b_batch_stride = 0;
  bool trans_a = false, trans_b = false;
  // conv2d_*, pool2d_*
  Conv2dGeometry geometry{};
  PoolKind pool = PoolKind::kMax;
  bool conv_bias = false, conv_relu = false;  // conv2d_forward's epilogue
  // eltwise_forward
  UnaryOp unary = UnaryOp::kRelu;
  std::int64_t elements = 1;
};
struct DnnDispatch {
  DnnPath path = DnnPath::kChorusLoops;
  std::string reason;  // e.g. "oneDNN 2.6.3 bf16 JIT kernel on avx512_core_vnni"
};
DnnDispatch dnn_dispatch(const DnnCall& call);

// Switch for the oneDNN bfloat16 path (tests and diagnostics): false forces the float32 fallback.
// Initially the value of the environment variable CHORUS_ONEDNN_BF16 (1/0/true/false/on/off, read
// once at the first bfloat16 kernel call or bf16_path(); unset → true; another value →
// InvalidArgumentError naming the variable). Takes effect at the next kernel call; thread-safe.
void set_onednn_bf16_enabled(bool enabled);
bool onednn_bf16_enabled();

// Counts of bfloat16 kernel calls (matmul, conv2d_*, pool2d_*) since process start, by the path
// that ran them. Thread-safe; for tests and benchmarks.
struct Bf16Stats {
  std::int64_t onednn = 0, fallback = 0;
};
Bf16Stats bf16_stats();

// True when oneDNN runs float16 matmul on this CPU (probed once by creating a small float16 matmul
// primitive, which must get a JIT kernel). False with oneDNN 2.6 on x86 and without oneDNN.
bool float16_supported();
// Throws UnimplementedError: "<op>: float16 is not supported on this CPU ... use the mixed_bfloat16
// policy (bfloat16 works on this CPU, via <bf16_path()>) or float16 on a GPU". For the op layer.
[[noreturn]] void throw_float16_unsupported(const char* op);

// Batched matrix product (float32, float64, bfloat16, float16): for b in [0, batch): C[b] = op(A[b]) · op(B[b]), op =
// transpose if set. A[b] is m×k (stored k×m when trans_a), B[b] is k×n (n×k when trans_b), C[b] is m×n.
// a_batch_stride/b_batch_stride are element offsets between consecutive matrices; 0 broadcasts
// one matrix over the batch. C is dense [batch, m, n]. k == 0 gives zeros.
void matmul(DType dtype, const void* a, std::int64_t a_batch_stride, const void* b, std::int64_t b_batch_stride,
            void* c, std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a, bool trans_b);

// What a convolution's forward applies to its output before writing it: y = act(y + bias[c]) per
// output channel c (bias: g.out_c values of the call's dtype; nullptr: none). oneDNN fuses both into
// the kernel (its bias argument and a ReLU post-op, one pass over y); the other paths (float64, the
// bfloat16 fallback, builds without oneDNN) run bias_activation_forward after the convolution.
struct ConvEpilogue {
  const void* bias = nullptr;
  bool relu = false;
};

// NHWC input, HWIO filter, NHWC output; geometry from ops/geometry.h. float32, float64, bfloat16,
// float16 (see the dtype rules above).
void conv2d_forward(DType dtype, const Conv2dGeometry& g, const void* x, const void* w, void* y,
                    const ConvEpilogue& epilogue = {});
void conv2d_backward_data(DType dtype, const Conv2dGeometry& g, const void* dy, const void* w, void* dx);
void conv2d_backward_filter(DType dtype, const Conv2dGeometry& g, const void* x, const void* dy, void* dw);

// Pooling over k_h×k_w windows (g.out_c == g.in_c). Average pooling divides by the number of
// in-bounds elements of each window (TF's behaviour under SAME). Max pooling's gradient goes to
// the first maximum of each window. float32, float64, bfloat16, float16.
void pool2d_forward(PoolKind kind, DType dtype, const Conv2dGeometry& g, const void* x, void* y);
void pool2d_backward(PoolKind kind, DType dtype, const Conv2dGeometry& g, const void* x, const void* dy, void* dx);
// Max pooling for training: the bytes of the workspace (where each window's maximum is) that
// pool2d_forward_training fills and pool2d_backward_with_workspace reads, so that the backward need
// not run the forward again. 0 where there is none (not max pooling, not float32, an empty shape,
// a window of more than 255 taps without oneDNN): use pool2d_forward and pool2d_backward then.
// float32 max pooling (forward and backward, with or without a workspace) runs chorus's loops
// (max_pool.h) up to 255 taps a window, oneDNN's above.
std::size_t pool2d_workspace_bytes(PoolKind kind, DType dtype, const Conv2dGeometry& g);
void pool2d_forward_training(PoolKind kind, DType dtype, const Conv2dGeometry& g, const void* x, void* y,
                             void* workspace);
void pool2d_backward_with_workspace(PoolKind kind, DType dtype, const Conv2dGeometry& g, const void* dy,
                                    const void* workspace, void* dx);

// y[r, c] = act(y[r, c] + bias[c]) in place over a [rows, channels] matrix (bias may be nullptr;
// act: ReLU when relu, else identity); 16-bit types computed in float and rounded once.
// float32, float64, bfloat16, float16.
void bias_activation_forward(DType dtype, bool relu, void* y, const void* bias, std::int64_t rows,
                             std::int64_t channels);
// The gradient of bias_activation_forward, given dy and its output y ([rows, channels]):
// dz = relu ? (y > 0 ? dy : 0) : dy (written to dz, which may be dy; with !relu and dz == dy nothing
// is written), and, when db is not nullptr, db[c] = sum over r of dz[r, c] — in one pass. The sums
// accumulate in double over fixed blocks of rows combined in block order, so they do not depend on
// the thread count. float32, float64, bfloat16, float16.
void bias_activation_backward(DType dtype, bool relu, const void* dy, const void* y, void* dz, void* db,
                              std::int64_t rows, std::int64_t channels);

// Softmax (or log-softmax) over the last axis of a [rows, cols] matrix; backward from y = output.
// float32 or float64.
void softmax_forward(DType dtype, bool log, const void* x, void* y, std::int64_t rows, std::int64_t cols);
void softmax_backward(DType dtype, bool log, const void* y, const void* dy, void* dx, std::int64_t rows,
                      std::int64_t cols);

// Batch normalization over [rows, channels] (NHWC flattened: rows = N·H·W). float32 or float64.
// Training: mean/variance of the batch (variance biased, divided by rows) are written to
// batch_mean/batch_var, y = gamma · (x - mean) / sqrt(var + eps) + beta.
void batch_norm_training(DType dtype, const void* x, const void* gamma, const void* beta, void* y, void* batch_mean,
                         void* batch_var, std::int64_t rows, std::int64_t channels, double epsilon);
// Inference: the given mean/variance.
void batch_norm_inference(DType dtype, const void* x, const void* gamma, const void* beta, const void* mean,
                          const void* var, void* y, std::int64_t rows, std::int64_t channels, double epsilon);
// Backward of batch_norm_training (mean/var are the batch statistics it produced): dx, dgamma, dbeta.
void batch_norm_backward(DType dtype, const void* x, const void* dy, const void* gamma, const void* mean,
                         const void* var, void* dx, void* dgamma, void* dbeta, std::int64_t rows, std::int64_t channels,
                         double epsilon);

// Elementwise activation y = f(x) over n contiguous float32 elements — or bfloat16 ones where the
// oneDNN bfloat16 path is on (bf16_path(); computed in float32, rounded once) — with oneDNN's
// eltwise primitive for kRelu, kSigmoid, kTanh, kGelu (erf), kExp, kLog, kSqrt, kSquare, kAbs.
// Returns false (doing nothing) for any other kind or dtype, or without oneDNN: the caller uses
// its loop.
bool eltwise_forward(UnaryOp op, DType dtype, const void* x, void* y, std::int64_t n);
// The activation's gradient dx = dy · f'(x) over n contiguous float32 elements — or bfloat16 ones
// where oneDNN has a bfloat16 JIT kernel for it (computed in float32, rounded once, as the loop) —
// with oneDNN's eltwise backward (from the source), for kGelu (erf); non-finite x are then
// recomputed by chorus's own formula, so NaN and ±Inf give what TF's composed gelu gradient gives.
// Returns false (doing nothing) for another kind or dtype, without a kernel, or without oneDNN:
// the caller uses its loop. dnn_dispatch says which (DnnKernel::kEltwiseBackward).
bool eltwise_backward(UnaryOp op, DType dtype, const void* x, const void* dy, void* dx, std::int64_t n);

struct CacheStats {
  std::int64_t hits = 0, misses = 0, entries = 0;
};
CacheStats cache_stats();

}  // namespace chorus::ops::cpu
