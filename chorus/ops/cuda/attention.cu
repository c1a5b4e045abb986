// chorus's fused attention kernels on the GPU (ops/cuda/attention.h): one warp per row, an online
// softmax over the keys, the backward recomputing the weights from lse (FlashAttention's scheme
// without its tiling). Every (query, key) decision comes from ops/attention_geometry.h.
#include <cuda_runtime.h>

#include <cstdint>

#include <chorus/core/cuda/check.h>
#include <chorus/ops/attention_geometry.h>
#include <chorus/ops/cuda/attention.h>
#include <chorus/ops/cuda/common.cuh>

namespace chorus::ops::cuda {
namespace {

using namespace detail;  // NOLINT: the .cu files' shared vocabulary

constexpr int kRowsPerBlock = 4;  // warps per block, one row each

template <typename C>
__device__ __forceinline__ C neg_inf() {
  return -C(INFINITY);
}

// Sum over the warp, every lane gets it (fixed butterfly order).
template <typename C>
__device__ __forceinline__ C warp_sum(C v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <typename C>
__device__ __forceinline__ C nan_max(C running, C x) {
  return (x > running || x != x) ? x : running;
}

// Lane's share of row `src` (width n): elements lane, lane + 32, ... into r[0..kPer).
template <int kPer, typename T, typename C>
__device__ __forceinline__ void load_lane(const T* src, i64 n, int lane, C (&r)[kPer]) {
#pragma unroll
  for (int t = 0; t < kPer; ++t) {
    const i64 d = lane + 32 * t;
    r[t] = d < n ? static_cast<C>(load(src[d])) : C(0);
  }
}

template <int kPer, typename T, typename C>
__device__ __forceinline__ C lane_dot(const C (&a)[kPer], const T* b, i64 n, int lane) {
  C s = 0;
#pragma unroll
  for (int t = 0; t < kPer; ++t) {
    const i64 d = lane + 32 * t;
    if (d < n) s += a[t] * static_cast<C>(load(b[d]));
  }
  return warp_sum(s);
}

template <int kPer, typename T, typename C>
__device__ __forceinline__ void lane_axpy(C (&acc)[kPer], C a, const T* x, i64 n, int lane) {
#pragma unroll
  for (int t = 0; t < kPer; ++t) {
    const i64 d = lane + 32 * t;
    if (d < n) acc[t] += a * static_cast<C>(load(x[d]));
  }
}

template <typename C>
__device__ __forceinline__ C keep_of(const AttentionGeometry& g, i64 bh, i64 i, i64 j) {
  if (g.dropout_rate <= 0) return C(1);
  C keep;
  attention_dropout_row<C>(g, static_cast<std::uint64_t>((bh * g.tq + i) * g.tk + j), 1, &keep);
  return keep;
}

template <int kPer, typename T, typename C>
__global__ void forward_kernel(AttentionGeometry g, const T* q, const T* k, const T* v, T* out, C* lse, i64 rows) {
  const int lane = threadIdx.x & 31;
  const i64 row = static_cast<i64>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;  // whole warps leave together
  const i64 bh = row / g.tq, i = row % g.tq;
  const i64 d = g.head_dim, dv = g.value_dim;
  const C scale = static_cast<C>(g.scale);
  C qr[kPer], acc[kPer];
  load_lane(q + row * d, d, lane, qr);
#pragma unroll
  for (int t = 0; t < kPer; ++t) acc[t] = 0;
  C m = neg_inf<C>(), l = 0;
  bool seen = false;
  const std::uint8_t* mrow = attention_mask_row(g, bh, i);
  for (i64 j = 0; j < g.tk; ++j) {
    const bool allowed = attention_allowed(g, mrow, i, j);
    C s = neg_inf<C>();
    if (allowed) s = lane_dot(qr, k + (bh * g.tk + j) * d, d, lane) * scale;
    const C m_new = allowed ? nan_max(m, s) : m;
    const C m_safe = m_new == neg_inf<C>() ? C(0) : m_new;
    const C alpha = d_exp(m - m_safe);
    const C p = allowed ? d_exp(s - m_safe) : C(0);
    seen = seen || allowed;
    l = l * alpha + p;
    const C pd = p * keep_of<C>(g, bh, i, j);
#pragma unroll
    for (int t = 0; t < kPer; ++t) acc[t] *= alpha;
    lane_axpy(acc, pd, v + (bh * g.tk + j) * dv, dv, lane);  // masked: 0 * v (NaN stays NaN)
    m = m_new;
  }
  C L;
  if (!seen) {  // no key attended: uniform weights over every key
    const C p = C(1) / static_cast<C>(g.tk);
#pragma unroll
    for (int t = 0; t < kPer; ++t) acc[t] = 0;
    for (i64 j = 0; j < g.tk; ++j) lane_axpy(acc, p * keep_of<C>(g, bh, i, j), v + (bh * g.tk + j) * dv, dv, lane);
    L = neg_inf<C>();
  } else {
    const C inv = C(1) / l;
#pragma unroll
    for (int t = 0; t < kPer; ++t) acc[t] *= inv;
    L = l == C(0) ? C(NAN) : (m == neg_inf<C>() ? C(0) : m) + d_log(l);
  }
#pragma unroll
  for (int t = 0; t < kPer; ++t) {
    const i64 e = lane + 32 * t;
    if (e < dv) out[row * dv + e] = store<T>(static_cast<acc_t<T>>(acc[t]));
  }
  if (lane == 0) lse[row] = L;
}

// dq of one query row, and delta = dout . out of that row (read by the dk/dv kernel after).
template <int kPer, typename T, typename C>
__global__ void dq_kernel(AttentionGeometry g, const T* q, const T* k, const T* v, const T* out, const C* lse,
                          const T* dout, C* delta, T* dq, i64 rows) {
  const int lane = threadIdx.x & 31;
  const i64 row = static_cast<i64>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const i64 bh = row / g.tq, i = row % g.tq;
  const i64 d = g.head_dim, dv = g.value_dim;
  const C scale = static_cast<C>(g.scale);
  C qr[kPer], dor[kPer], acc[kPer];
  load_lane(q + row * d, d, lane, qr);
  load_lane(dout + row * dv, dv, lane, dor);
  const C delta_i = lane_dot(dor, out + row * dv, dv, lane);
  if (lane == 0) delta[row] = delta_i;
#pragma unroll
  for (int t = 0; t < kPer; ++t) acc[t] = 0;
  const C L = lse[row];
  const std::uint8_t* mrow = attention_mask_row(g, bh, i);
  for (i64 j = 0; j < g.tk; ++j) {
    C ds = 0;  // masked pairs and rows with no key: constant logits, no gradient
    if (L != neg_inf<C>() && attention_allowed(g, mrow, i, j)) {
      const C p = d_exp(lane_dot(qr, k + (bh * g.tk + j) * d, d, lane) * scale - L);
      const C dp = lane_dot(dor, v + (bh * g.tk + j) * dv, dv, lane) * keep_of<C>(g, bh, i, j);
      ds = p * (dp - delta_i);
    }
    lane_axpy(acc, ds, k + (bh * g.tk + j) * d, d, lane);  // 0 * k too: NaN reaches dq as in matmul
  }
#pragma unroll
  for (int t = 0; t < kPer; ++t) {
    const i64 e = lane + 32 * t;
    if (e < d) dq[row * d + e] = store<T>(static_cast<acc_t<T>>(acc[t] * scale));
  }
}

// dk and dv of one key row.
template <int kPer, typename T, typename C>
__global__ void dkdv_kernel(AttentionGeometry g, const T* q, const T* k, const T* v, const C* lse, const T* dout,
                            const C* delta, T* dk, T* dv, i64 rows) {
  const int lane = threadIdx.x & 31;
  const i64 row = static_cast<i64>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const i64 bh = row / g.tk, j = row % g.tk;
  const i64 d = g.head_dim, dvw = g.value_dim;
  const C scale = static_cast<C>(g.scale);
  C kr[kPer], vr[kPer], dk_acc[kPer], dv_acc[kPer];
  load_lane(k + row * d, d, lane, kr);
  load_lane(v + row * dvw, dvw, lane, vr);
#pragma unroll
  for (int t = 0; t < kPer; ++t) dk_acc[t] = dv_acc[t] = 0;
  for (i64 i = 0; i < g.tq; ++i) {
    const i64 qrow = bh * g.tq + i;
    const C L = lse[qrow];
    const C keep = keep_of<C>(g, bh, i, j);
    C pd = 0, ds = 0;
    if (L == neg_inf<C>()) {
      pd = keep / static_cast<C>(g.tk);  // uniform weights, constant logits
    } else if (attention_allowed(g, attention_mask_row(g, bh, i), i, j)) {
      const C p = d_exp(lane_dot(kr, q + qrow * d, d, lane) * scale - L);
      pd = p * keep;
      ds = p * (lane_dot(vr, dout + qrow * dvw, dvw, lane) * keep - delta[qrow]);
    } else if (L != L) {
      pd = L;  // a NaN row's softmax is NaN at masked keys too
    }
    lane_axpy(dv_acc, pd, dout + qrow * dvw, dvw, lane);
    lane_axpy(dk_acc, ds, q + qrow * d, d, lane);
  }
#pragma unroll
  for (int t = 0; t < kPer; ++t) {
    const i64 e = lane + 32 * t;
    if (e < d) dk[row * d + e] = store<T>(static_cast<acc_t<T>>(dk_acc[t] * scale));
    if (e < dvw) dv[row * dvw + e] = store<T>(static_cast<acc_t<T>>(dv_acc[t]));
  }
}

// Calls f(kPer constant) with 32 * kPer >= max(head_dim, value_dim).
template <typename F>
void dispatch_width(const AttentionGeometry& g, F&& f) {
  const std::int64_t w = g.head_dim > g.value_dim ? g.head_dim : g.value_dim;
  if (w <= 32) return f(std::integral_constant<int, 1>{});
  if (w <= 64) return f(std::integral_constant<int, 2>{});
  if (w <= 128) return f(std::integral_constant<int, 4>{});
  if (w <= 256) return f(std::integral_constant<int, 8>{});
  if (w <= 512) return f(std::integral_constant<int, 16>{});
  throw UnimplementedError(::chorus::internal::str_cat("ScaledDotProductAttention on GPU: head_dim ", g.head_dim,
                                                       " / value dim ", g.value_dim,
                                                       " exceed the fused CUDA kernel's 512"));
}

unsigned blocks_for(std::int64_t rows) { return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

void attention_forward(int ordinal, gpu::StreamHandle stream, DType dtype, const AttentionGeometry& g, const void* q,
                       const void* k, const void* v, void* out, void* lse) {
  const std::int64_t rows = g.batch * g.heads * g.tq;
  if (rows == 0 || g.value_dim == 0) return;
  gpu::internal::DeviceGuard guard(ordinal);
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_float(dtype, "ScaledDotProductAttention", [&](auto tag) {
    using T = decltype(tag);
    using C = acc_t<T>;
    dispatch_width(g, [&](auto per) {
      forward_kernel<decltype(per)::value, T, C><<<blocks_for(rows), 32 * kRowsPerBlock, 0, s>>>(
          g, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(out),
          static_cast<C*>(lse), rows);
    });
  });
  CHORUS_CUDA_CHECK(cudaGetLastError());
}

void attention_backward(int ordinal, gpu::StreamHandle stream, DType dtype, const AttentionGeometry& g, const void* q,
                        const void* k, const void* v, const void* out, const void* lse, const void* dout, void* delta,
                        void* dq, void* dk, void* dv) {
  const std::int64_t q_rows = g.batch * g.heads * g.tq, k_rows = g.batch * g.heads * g.tk;
  if (q_rows == 0 || k_rows == 0) return;
  gpu::internal::DeviceGuard guard(ordinal);
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_float(dtype, "ScaledDotProductAttentionGrad", [&](auto tag) {
    using T = decltype(tag);
    using C = acc_t<T>;
    dispatch_width(g, [&](auto per) {
      constexpr int kPer = decltype(per)::value;
      // dq first: it writes delta, which the dk/dv kernel reads (same stream, so ordered).
      dq_kernel<kPer, T, C><<<blocks_for(q_rows), 32 * kRowsPerBlock, 0, s>>>(
          g, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<const T*>(out),
          static_cast<const C*>(lse), static_cast<const T*>(dout), static_cast<C*>(delta), static_cast<T*>(dq), q_rows);
      CHORUS_CUDA_CHECK(cudaGetLastError());
      dkdv_kernel<kPer, T, C><<<blocks_for(k_rows), 32 * kRowsPerBlock, 0, s>>>(
          g, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<const C*>(lse),
          static_cast<const T*>(dout), static_cast<const C*>(delta), static_cast<T*>(dk), static_cast<T*>(dv), k_rows);
    });
  });
  CHORUS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace chorus::ops::cuda
