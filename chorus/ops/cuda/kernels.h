// Launchers of ops/'s hand-written CUDA kernels (ops/cuda/*.cu). Host code includes this header;
// it never includes kernel code. C++17 (the .cu files include it too).
//
// Every launcher enqueues on `stream` of GPU `ordinal` and returns without waiting. Pointers are
// device memory of that GPU. Launch errors → chorus errors via CHORUS_CUDA_CHECK. Zero-element
// calls launch nothing. dtypes: kFloat32, kFloat64, kFloat16, kBFloat16 (16-bit floats computed in
// float32 and rounded once), kInt32, kInt64 where the op makes sense for integers, kBool/kUInt8
// for logical ops and `where` conditions. An unsupported dtype → InvalidArgumentError.
//
// Data errors a kernel cannot report (TF's GPU kernels behave the same): integer division by
// zero gives 0, an integer to a negative power gives the truncated result, an index or label out
// of range gives a zero row / NaN loss as documented below. The CPU kernels raise instead.
//
// Determinism: every kernel here is deterministic (fixed-order reductions: one thread block per
// output, tree order fixed by the block size) except scatter_add with deterministic = false,
// which uses atomicAdd.
#pragma once

#include <cstdint>

#include <chorus/core/dtype.h>
#include <chorus/core/gpu.h>
#include <chorus/ops/kinds.h>
#include <chorus/ops/strided.h>

namespace chorus::ops::cuda {

using gpu::StreamHandle;

// y[i] = f(x[i]), contiguous, n elements, same dtype (kLogicalNot: bool). alpha: kLeakyRelu's
// slope, used as the compute type's value (the op layer rounds it to the dtype first, as TF does);
// every other kind ignores it (likewise kLeakyReluGrad's in binary).
void unary(int ordinal, StreamHandle stream, UnaryOp op, DType dtype, const void* x, void* y, std::int64_t n,
           double alpha = 0.0);
// out = a op b over `layout` (operands 0 = a, 1 = b; out is dense over layout.dims). a and b have
// `dtype`; out has `dtype`, or kBool for comparisons and logical ops.
void binary(int ordinal, StreamHandle stream, BinaryOp op, DType dtype, const StridedLayout& layout, const void* a,
            const void* b, void* out, double alpha = 0.0);
// out = cond ? x : y over `layout` (operands 0 = cond (bool), 1 = x, 2 = y; out dense, `dtype`).
void where(int ordinal, StreamHandle stream, DType dtype, const StridedLayout& layout, const void* cond, const void* x,
           const void* y, void* out);
// y = cast(x) with core/dtype.h's conversion rules, n contiguous elements.
void cast(int ordinal, StreamHandle stream, DType from, DType to, const void* x, void* y, std::int64_t n);
// Copies elements of `elem_bytes` (1, 2, 4, 8) from operand 0 to operand 1 of `layout`.
void copy_strided(int ordinal, StreamHandle stream, std::size_t elem_bytes, const CopyLayout& layout, const void* src,
                  void* dst);

// x viewed as [outer, r, inner]; y[o, i] = reduce over r (kMean divides by r; r == 0 gives the
// identity: 0 for sum/mean, 1 for prod, -inf/+inf (lowest/max for integers) for max/min).
// `workspace`: reduce_workspace_bytes(outer, r, inner) bytes of device memory on the same stream
// (8-byte aligned), or nullptr. With it, a shape with few outputs and a long r (a bias gradient,
// [N*H*W, C]) is split along r over many blocks; without it, the same result from fewer blocks.
// Either way the result depends on the shape alone (deterministic), and may differ between the
// two in the last bits of a float sum.
std::int64_t reduce_workspace_bytes(std::int64_t outer, std::int64_t r, std::int64_t inner);
void reduce(int ordinal, StreamHandle stream, ReduceKind kind, DType dtype, const void* x, void* y, std::int64_t outer,
            std::int64_t r, std::int64_t inner, void* workspace = nullptr);
// y[o, i] = index (int64) of the first maximum over r (argmin when `min`). r must be > 0.
void argmax(int ordinal, StreamHandle stream, bool min, DType dtype, const void* x, std::int64_t* y, std::int64_t outer,
            std::int64_t r, std::int64_t inner);

// Fused optimizer updates (ops/training.h's apply_fused_update on a GPU): every variable of
// `variables[0..count)` updated by `rule` (ops/update_rules.h), up to 24 per launch. Per variable:
// w, g and the slots (s0: Adam m, SGD momentum or null, RMSprop velocity; s1: Adam v, RMSprop
// momentum or null; s2: RMSprop average or null), n elements, and the decoupled decay applied first
// when `decays`. dtype kFloat32 or kFloat64. Bitwise the optimizer's op sequence (no contraction).
struct FusedTensors {
  void* w = nullptr;
  const void* g = nullptr;
  void* s0 = nullptr;
  void* s1 = nullptr;
  void* s2 = nullptr;
  std::int64_t n = 0;
  double decay = 0.0;
  bool decays = false;
};
// `block`: null, or ops/training.h's scalar block on this GPU (FusedScalars' fields, then the
// decay, as doubles), read by the kernels in place of `scalars` and each variable's decay.
void fused_update(int ordinal, StreamHandle stream, FusedRule rule, DType dtype, bool nesterov,
                  const FusedScalars& scalars, const FusedTensors* variables, int count, const double* block = nullptr);

// Softmax cross-entropy over [rows, cols] logits (float types), fused and numerically stable
// (max-subtracted log-sum-exp). loss[row] = -log softmax(logits)[label];
// grad = softmax(logits) - one_hot(label) (grad may be nullptr when not wanted).
// sparse: labels are int32/int64 class ids (`label_dtype`); an id outside [0, cols) gives NaN loss
// and NaN gradient for that row (TF's GPU behaviour; the CPU kernel raises instead).
void sparse_softmax_xent(int ordinal, StreamHandle stream, DType dtype, const void* logits, DType label_dtype,
                         const void* labels, void* loss, void* grad, std::int64_t rows, std::int64_t cols);
// dense: labels are probabilities of `dtype`, [rows, cols].
void softmax_xent(int ordinal, StreamHandle stream, DType dtype, const void* logits, const void* labels, void* loss,
                  void* grad, std::int64_t rows, std::int64_t cols);

// out[j, :] = params[indices[j], :] for params [rows, inner]; an index outside [0, rows) gives a
// zero row (TF's GPU behaviour).
void gather(int ordinal, StreamHandle stream, DType dtype, const void* params, std::int64_t rows, std::int64_t inner,
            DType index_dtype, const void* indices, std::int64_t num_indices, void* out);
// out[indices[j], :] += updates[j, :] for out [rows, inner] (out is not cleared first); indices
// outside [0, rows) are skipped. deterministic = true sums in index order without atomics.
void scatter_add(int ordinal, StreamHandle stream, DType dtype, const void* updates, std::int64_t inner,
                 DType index_dtype, const void* indices, std::int64_t num_indices, void* out, std::int64_t rows,
                 bool deterministic);
// out[j, d] = (indices[j] == d) ? on : off, out [num_indices, depth] of `dtype`.
void one_hot(int ordinal, StreamHandle stream, DType dtype, DType index_dtype, const void* indices,
             std::int64_t num_indices, std::int64_t depth, double on, double off, void* out);

}  // namespace chorus::ops::cuda
