// Fused scaled-dot-product attention on the CPU (ops/cpu/attention.h): FlashAttention-2's forward
// and backward over tiles, in plain loops the compiler vectorizes (every innermost loop runs over a
// contiguous row: tiles of k, and of v in the backward, are stored transposed for the dot products).
//
// Why the special cases look the way they do (the composed reference is where + softmax + matmul):
//   - masked pairs get weight exactly 0 and are still multiplied in (0 * Inf = NaN, as matmul does);
//     only whole causal tiles (and, in the forward, a row's wholly masked tile) are skipped, and only
//     when the tensor the skipped zeros would multiply is finite;
//   - the running max propagates NaN (std::max would drop it), and a row whose max is still -inf
//     subtracts 0 instead (exp(-inf - -inf) would be NaN where the softmax gives 0);
//   - lse = -inf marks a row with no key at all (uniform weights), NaN a NaN row (see the geometry).
#include <chorus/ops/cpu/attention.h>

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include <chorus/ops/cpu/clones.h>
#include <chorus/ops/cpu/numeric.h>

namespace chorus::ops::cpu {
namespace {

constexpr std::int64_t kBq = 64;  // queries per tile
constexpr std::int64_t kBk = 64;  // keys per tile

template <typename C>
constexpr C kNegInf = -std::numeric_limits<C>::infinity();
template <typename C>
constexpr C kNaN = std::numeric_limits<C>::quiet_NaN();

template <typename T, typename C>
void load_rows(const T* src, std::int64_t n, C* dst) {
  for (std::int64_t e = 0; e < n; ++e) dst[e] = static_cast<C>(Num<T>::load(src[e]));
}

// dst[d * kBk + r] = src[r * width + d] for r < rows.
template <typename T, typename C>
void load_transposed(const T* src, std::int64_t rows, std::int64_t width, C* dst) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t d = 0; d < width; ++d) dst[d * kBk + r] = static_cast<C>(Num<T>::load(src[r * width + d]));
}

// The three tile products below hold nearly all the arithmetic: compiled for AVX-512, AVX2 and the
// baseline (clones.h). The clones may contract a * b + c into an FMA, so the last bits of a result
// depend on the CPU — as oneDNN's do for the composed ops. Each keeps its running sums in a local
// block of kChunk values (registers), not in the output row: a load-add-store chain through memory
// would wait on store forwarding at every step. Blocks run past a row's end (into the next row or
// the kChunk values of slack every scratch row buffer has); those lanes are never stored.
constexpr std::int64_t kChunk = 64;

// c[r * kBk + j] = sum_d a[r * depth + d] * bt[d * kBk + j] for r < rows, j < n.
template <typename C>
CHORUS_CPU_CLONES void dot_tile(const C* a, std::int64_t rows, std::int64_t depth, const C* bt, std::int64_t n, C* c) {
  static_assert(kBk == kChunk, "one block spans a tile row");
  for (std::int64_t r = 0; r < rows; ++r) {
    C sum[kChunk] = {};
    for (std::int64_t d = 0; d < depth; ++d) {
      const C av = a[r * depth + d];
      const C* b = bt + d * kBk;
      for (std::int64_t j = 0; j < kChunk; ++j) sum[j] += av * b[j];
    }
    for (std::int64_t j = 0; j < n; ++j) c[r * kBk + j] = sum[j];
  }
}

// acc[r * width + e] += sum_j p[r * kBk + j] * x[j * width + e] for r < rows (weights times rows).
template <typename C>
CHORUS_CPU_CLONES void accumulate_rows(const C* p, std::int64_t rows, std::int64_t nk, const C* x, std::int64_t width,
                                       C* acc) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t e0 = 0; e0 < width; e0 += kChunk) {
      C sum[kChunk] = {};
      for (std::int64_t j = 0; j < nk; ++j) {
        const C pj = p[r * kBk + j];
        const C* xj = x + j * width + e0;
        for (std::int64_t e = 0; e < kChunk; ++e) sum[e] += pj * xj[e];
      }
      const std::int64_t ne = std::min(kChunk, width - e0);
      for (std::int64_t e = 0; e < ne; ++e) acc[r * width + e0 + e] += sum[e];
    }
  }
}

// acc[j * width + e] += sum_r p[r * kBk + j] * x[r * width + e] for j < nk (transposed weights).
template <typename C>
CHORUS_CPU_CLONES void accumulate_cols(const C* p, std::int64_t rows, std::int64_t nk, const C* x, std::int64_t width,
                                       C* acc) {
  for (std::int64_t j = 0; j < nk; ++j) {
    for (std::int64_t e0 = 0; e0 < width; e0 += kChunk) {
      C sum[kChunk] = {};
      for (std::int64_t r = 0; r < rows; ++r) {
        const C pj = p[r * kBk + j];
        const C* xr = x + r * width + e0;
        for (std::int64_t e = 0; e < kChunk; ++e) sum[e] += pj * xr[e];
      }
      const std::int64_t ne = std::min(kChunk, width - e0);
      for (std::int64_t e = 0; e < ne; ++e) acc[j * width + e0 + e] += sum[e];
    }
  }
}

// exp(x) for float with Cephes's expf polynomial (relative error ~2 ulp, a few ulp from glibc's):
// written without calls or branches so the clones below vectorize it (glibc's vector expf needs
// -ffast-math). NaN → NaN, x < -87.5 → 0 (exactly: masked logits are -inf), x > 88.5 → +inf.
inline float exp_poly(float x) {
  const float xc = x != x ? 0.0f : std::min(std::max(x, -87.5f), 88.5f);    // NaN: selected at the end
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const float y = p * std::bit_cast<float>((static_cast<std::int32_t>(n) + 127) << 23);
  return x != x ? x : x < -87.5f ? 0.0f : (x > 88.5f ? std::numeric_limits<float>::infinity() : y);
}

// s[j] = exp(s[j] - shift) for j < n; returns their sum (float: exp_poly, vectorized).
CHORUS_CPU_CLONES float exp_row(float* s, std::int64_t n, float shift) {
  for (std::int64_t j = 0; j < n; ++j) s[j] = exp_poly(s[j] - shift);
  float part[16] = {};  // 16 running sums (one vector), then added up: a fixed order
  std::int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int e = 0; e < 16; ++e) part[e] += s[j + e];
  float sum = 0;
  for (; j < n; ++j) sum += s[j];
  for (float x : part) sum += x;
  return sum;
}
double exp_row(double* s, std::int64_t n, double shift) {
  double sum = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - shift);
    sum += s[j];
  }
  return sum;
}

// max that keeps NaN (once NaN, always NaN).
template <typename C>
C nan_max(C running, C x) {
  return (x > running || x != x) ? x : running;
}

template <typename T>
bool finite_rows(const T* x, std::int64_t n) {
  bool ok = true;
  for (std::int64_t e = 0; e < n; ++e) ok &= std::isfinite(static_cast<double>(Num<T>::load(x[e])));
  return ok;
}

// Calls body(unit, thread) for unit in [0, units) on the OpenMP threads (dynamic: causal tiles
// differ in cost). body must not throw (scratch is allocated before, per thread).
template <typename Body>
void parallel_units(std::int64_t units, Body body) {
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t u = 0; u < units; ++u) body(u, omp_get_thread_num());
}

// ---- forward ----

template <typename C>
struct ForwardScratch {
  std::vector<C> q, kt, v, s, acc, m, l, keep;
  std::vector<std::uint8_t> seen;
  ForwardScratch(std::int64_t d, std::int64_t dv)
      : q(kBq * d),
        kt(d * kBk),
        v(kBk * dv + kChunk),
        s(kBq * kBk),
        acc(kBq * dv),
        m(kBq),
        l(kBq),
        keep(kBk),
        seen(kBq) {}
};

// Folds key tile [j0, j0 + nk) into row r (query i) of the running softmax. w.s row r holds q.k.
template <typename C>
void online_row(const AttentionGeometry& g, std::int64_t bh, std::int64_t i, std::int64_t r, std::int64_t j0,
                std::int64_t nk, bool skip_ok, ForwardScratch<C>& w) {
  const std::int64_t dv = g.value_dim;
  const std::uint8_t* mrow = attention_mask_row(g, bh, i);
  C* s = w.s.data() + r * kBk;
  const C scale = static_cast<C>(g.scale);
  std::int64_t count = 0;
  C mx = kNegInf<C>;
  for (std::int64_t j = 0; j < nk; ++j) {
    if (attention_allowed(g, mrow, i, j0 + j)) {
      ++count;
      s[j] *= scale;
      mx = nan_max(mx, s[j]);
    } else {
      s[j] = kNegInf<C>;  // weight exactly 0 below
    }
  }
  if (count == 0 && skip_ok) {  // nothing changes (no Inf/NaN in v to meet a zero weight)
    std::fill(s, s + nk, C(0));
    return;
  }
  if (count > 0) w.seen[static_cast<std::size_t>(r)] = 1;
  const C m_old = w.m[static_cast<std::size_t>(r)];
  const C m_new = nan_max(m_old, mx);
  const C m_safe = m_new == kNegInf<C> ? C(0) : m_new;
  const C alpha = std::exp(m_old - m_safe);
  const bool dropout = g.dropout_rate > 0;
  if (dropout) attention_dropout_row<C>(g, static_cast<std::uint64_t>((bh * g.tq + i) * g.tk + j0), nk, w.keep.data());
  const C sum = exp_row(s, nk, m_safe);
  if (dropout)
    for (std::int64_t j = 0; j < nk; ++j) s[j] *= w.keep[static_cast<std::size_t>(j)];
  w.l[static_cast<std::size_t>(r)] = w.l[static_cast<std::size_t>(r)] * alpha + sum;
  w.m[static_cast<std::size_t>(r)] = m_new;
  C* acc = w.acc.data() + r * dv;
  for (std::int64_t d = 0; d < dv; ++d) acc[d] *= alpha;  // then the tile's weights are added (forward_unit)
}

// A row that attends to no key: uniform weights 1 / Tk over every key (after dropout), into acc.
template <typename T, typename C>
void uniform_row(const AttentionGeometry& g, std::int64_t bh, std::int64_t i, const T* v, C* acc, C* keep) {
  const std::int64_t dv = g.value_dim;
  const C p = C(1) / static_cast<C>(g.tk);
  std::fill(acc, acc + dv, C(0));
  for (std::int64_t j0 = 0; j0 < g.tk; j0 += kBk) {
    const std::int64_t nk = std::min(kBk, g.tk - j0);
    if (g.dropout_rate > 0)
      attention_dropout_row<C>(g, static_cast<std::uint64_t>((bh * g.tq + i) * g.tk + j0), nk, keep);
    for (std::int64_t j = 0; j < nk; ++j) {
      const C pj = g.dropout_rate > 0 ? p * keep[j] : p;
      const T* vj = v + (bh * g.tk + j0 + j) * dv;
      for (std::int64_t d = 0; d < dv; ++d) acc[d] += pj * static_cast<C>(Num<T>::load(vj[d]));
    }
  }
}

// Query tile [i0, i0 + kBq) of head bh.
template <typename T, typename C>
void forward_unit(const AttentionGeometry& g, const T* q, const T* k, const T* v, T* out, C* lse, std::int64_t bh,
                  std::int64_t i0, ForwardScratch<C>& w) {
  const std::int64_t d = g.head_dim, dv = g.value_dim;
  // Causal tiles (and wholly masked rows of a tile) may be skipped when this head's v is finite:
  // 0 * v is then 0. The scan costs about 1 / (2 * kBq) of the unit's work.
  const bool skip_ok = finite_rows(v + bh * g.tk * dv, g.tk * dv);
  const std::int64_t nq = std::min(kBq, g.tq - i0);
  load_rows(q + (bh * g.tq + i0) * d, nq * d, w.q.data());
  std::fill(w.m.begin(), w.m.end(), kNegInf<C>);
  std::fill(w.l.begin(), w.l.end(), C(0));
  std::fill(w.acc.begin(), w.acc.end(), C(0));
  std::fill(w.seen.begin(), w.seen.end(), std::uint8_t{0});
  const std::int64_t k_end = g.causal && skip_ok ? std::min(g.tk, i0 + nq) : g.tk;
  for (std::int64_t j0 = 0; j0 < k_end; j0 += kBk) {
    const std::int64_t nk = std::min(kBk, g.tk - j0);
    load_transposed(k + (bh * g.tk + j0) * d, nk, d, w.kt.data());
    load_rows(v + (bh * g.tk + j0) * dv, nk * dv, w.v.data());
    dot_tile(w.q.data(), nq, d, w.kt.data(), nk, w.s.data());
    for (std::int64_t r = 0; r < nq; ++r) online_row(g, bh, i0 + r, r, j0, nk, skip_ok, w);
    accumulate_rows(w.s.data(), nq, nk, w.v.data(), dv, w.acc.data());
  }
  for (std::int64_t r = 0; r < nq; ++r) {
    const std::int64_t i = i0 + r;
    C* acc = w.acc.data() + r * dv;
    T* o = out + (bh * g.tq + i) * dv;
    const std::size_t ru = static_cast<std::size_t>(r);
    if (!w.seen[ru]) {
      uniform_row(g, bh, i, v, acc, w.keep.data());
      for (std::int64_t e = 0; e < dv; ++e) o[e] = Num<T>::store(acc[e]);
      lse[bh * g.tq + i] = kNegInf<C>;
      continue;
    }
    const C inv = C(1) / w.l[ru];
    for (std::int64_t e = 0; e < dv; ++e) o[e] = Num<T>::store(acc[e] * inv);
    const C m_safe = w.m[ru] == kNegInf<C> ? C(0) : w.m[ru];
    // l == 0: every attended logit was -inf, the softmax is 0/0 (NaN), and so is its gradient.
    lse[bh * g.tq + i] = w.l[ru] == C(0) ? kNaN<C> : m_safe + std::log(w.l[ru]);
  }
}

template <typename T, typename C>
void forward(const AttentionGeometry& g, const T* q, const T* k, const T* v, T* out, C* lse) {
  const std::int64_t heads = g.heads_total();
  std::vector<ForwardScratch<C>> scratch(static_cast<std::size_t>(omp_get_max_threads()),
                                         ForwardScratch<C>(g.head_dim, g.value_dim));
  const std::int64_t tiles = (g.tq + kBq - 1) / kBq;
  parallel_units(heads * tiles, [&](std::int64_t u, int t) {
    forward_unit(g, q, k, v, out, lse, u / tiles, (u % tiles) * kBq, scratch[static_cast<std::size_t>(t)]);
  });
}

// ---- backward ----

template <typename C>
struct BackwardScratch {
  std::vector<C> q, kt, k, dout, vt, s, dp, keep, delta, dq, dk, dv;
  BackwardScratch(std::int64_t d, std::int64_t dv_)
      : q(kBq * d + kChunk),
        kt(d * kBk),
        k(kBk * d + kChunk),
        dout(kBq * dv_ + kChunk),
        vt(dv_ * kBk),
        s(kBq * kBk),
        dp(kBq * kBk),
        keep(kBk),
        delta(kBq),
        dq(kBq * d),
        dk(kBk * d),
        dv(kBk * dv_) {}
};

// Loads query rows [i0, i0 + nq) of q and dout, and their delta = dout . out (FlashAttention-2's
// D; equals sum_j P_ij dP_ij, with dropout too).
template <typename T, typename C>
void load_query_tile(const AttentionGeometry& g, const T* q, const T* out, const T* dout, std::int64_t bh,
                     std::int64_t i0, std::int64_t nq, BackwardScratch<C>& w) {
  const std::int64_t d = g.head_dim, dv = g.value_dim;
  load_rows(q + (bh * g.tq + i0) * d, nq * d, w.q.data());
  load_rows(dout + (bh * g.tq + i0) * dv, nq * dv, w.dout.data());
  for (std::int64_t r = 0; r < nq; ++r) {
    const T* o = out + (bh * g.tq + i0 + r) * dv;
    C acc = 0;
    for (std::int64_t e = 0; e < dv; ++e)
      acc += w.dout[static_cast<std::size_t>(r * dv + e)] * static_cast<C>(Num<T>::load(o[e]));
    w.delta[static_cast<std::size_t>(r)] = acc;
  }
}

// For query rows [i0, i0 + nq) x keys [j0, j0 + nk), with the query tile and w.kt, w.vt loaded:
// w.s = the weights after dropout, w.dp = the logits' gradient (before the scale).
template <typename C>
void weights_and_dlogits(const AttentionGeometry& g, std::int64_t bh, std::int64_t i0, std::int64_t nq, std::int64_t j0,
                         std::int64_t nk, const C* lse, BackwardScratch<C>& w) {
  dot_tile(w.q.data(), nq, g.head_dim, w.kt.data(), nk, w.s.data());
  dot_tile(w.dout.data(), nq, g.value_dim, w.vt.data(), nk, w.dp.data());
  const C scale = static_cast<C>(g.scale);
  const bool dropout = g.dropout_rate > 0;
  for (std::int64_t r = 0; r < nq; ++r) {
    const std::int64_t i = i0 + r;
    const C L = lse[bh * g.tq + i], delta_i = w.delta[static_cast<std::size_t>(r)];
    C* s = w.s.data() + r * kBk;
    C* dp = w.dp.data() + r * kBk;
    if (dropout)
      attention_dropout_row<C>(g, static_cast<std::uint64_t>((bh * g.tq + i) * g.tk + j0), nk, w.keep.data());
    if (L == kNegInf<C>) {  // no key attended: uniform weights, constant logits
      const C p = C(1) / static_cast<C>(g.tk);
      for (std::int64_t j = 0; j < nk; ++j) {
        s[j] = dropout ? p * w.keep[static_cast<std::size_t>(j)] : p;
        dp[j] = 0;
      }
      continue;
    }
    const std::uint8_t* mrow = attention_mask_row(g, bh, i);
    bool allowed[kBk];
    for (std::int64_t j = 0; j < nk; ++j) {
      allowed[j] = attention_allowed(g, mrow, i, j0 + j);
      s[j] = allowed[j] ? s[j] * scale : kNegInf<C>;
    }
    exp_row(s, nk, L);  // the weights before dropout
    for (std::int64_t j = 0; j < nk; ++j) {
      const C keep = dropout ? w.keep[static_cast<std::size_t>(j)] : C(1);
      if (allowed[j]) {
        const C p = s[j];
        s[j] = p * keep;
        dp[j] = p * (dp[j] * keep - delta_i);
      } else {
        s[j] = L != L ? L : C(0);  // a NaN row's softmax is NaN at masked keys too
        dp[j] = 0;                 // where() passes no gradient to masked logits
      }
    }
  }
}

// Whether the dk/dv pass may skip causal query tiles of head bh: q and dout finite (the skipped
// pairs would add 0 * q and 0 * dout), and every row with an ordinary lse (rows with uniform or
// NaN weights reach every key). Costs about 1 / (3 * kBk) of a key unit's work.
template <typename T, typename C>
bool key_pass_may_skip(const AttentionGeometry& g, const T* q, const C* lse, const T* dout, std::int64_t bh) {
  for (std::int64_t i = 0; i < g.tq; ++i) {
    const C L = lse[bh * g.tq + i];
    if (L != L || L == kNegInf<C>) return false;
  }
  return finite_rows(q + bh * g.tq * g.head_dim, g.tq * g.head_dim) &&
         finite_rows(dout + bh * g.tq * g.value_dim, g.tq * g.value_dim);
}

// dk, dv of key tile [j0, j0 + kBk) of head bh.
template <typename T, typename C>
void key_unit(const AttentionGeometry& g, const T* q, const T* k, const T* v, const T* out, const C* lse, const T* dout,
              T* dk, T* dv, std::int64_t bh, std::int64_t j0, BackwardScratch<C>& w) {
  const std::int64_t d = g.head_dim, dvw = g.value_dim;
  const std::int64_t nk = std::min(kBk, g.tk - j0);
  load_transposed(k + (bh * g.tk + j0) * d, nk, d, w.kt.data());
  load_transposed(v + (bh * g.tk + j0) * dvw, nk, dvw, w.vt.data());
  std::fill(w.dk.begin(), w.dk.end(), C(0));
  std::fill(w.dv.begin(), w.dv.end(), C(0));
  // Query tiles whose last row is below j0 attend to none of these keys under the causal rule.
  const bool skip = g.causal && key_pass_may_skip(g, q, lse, dout, bh);
  for (std::int64_t i0 = skip ? (j0 / kBq) * kBq : 0; i0 < g.tq; i0 += kBq) {
    const std::int64_t nq = std::min(kBq, g.tq - i0);
    load_query_tile(g, q, out, dout, bh, i0, nq, w);
    weights_and_dlogits(g, bh, i0, nq, j0, nk, lse, w);
    accumulate_cols(w.s.data(), nq, nk, w.dout.data(), dvw, w.dv.data());
    accumulate_cols(w.dp.data(), nq, nk, w.q.data(), d, w.dk.data());
  }
  const C scale = static_cast<C>(g.scale);
  T* dk_out = dk + (bh * g.tk + j0) * d;
  T* dv_out = dv + (bh * g.tk + j0) * dvw;
  for (std::int64_t e = 0; e < nk * d; ++e) dk_out[e] = Num<T>::store(w.dk[static_cast<std::size_t>(e)] * scale);
  for (std::int64_t e = 0; e < nk * dvw; ++e) dv_out[e] = Num<T>::store(w.dv[static_cast<std::size_t>(e)]);
}

// dq of query tile [i0, i0 + kBq) of head bh.
template <typename T, typename C>
void query_unit(const AttentionGeometry& g, const T* q, const T* k, const T* v, const T* out, const C* lse,
                const T* dout, T* dq, std::int64_t bh, std::int64_t i0, BackwardScratch<C>& w) {
  const std::int64_t d = g.head_dim, dvw = g.value_dim;
  const std::int64_t nq = std::min(kBq, g.tq - i0);
  load_query_tile(g, q, out, dout, bh, i0, nq, w);
  std::fill(w.dq.begin(), w.dq.end(), C(0));
  // Causal key tiles may be skipped when k is finite (they would add 0 * k).
  const bool skip = g.causal && finite_rows(k + bh * g.tk * d, g.tk * d);
  const std::int64_t k_end = skip ? std::min(g.tk, i0 + nq) : g.tk;
  for (std::int64_t j0 = 0; j0 < k_end; j0 += kBk) {
    const std::int64_t nk = std::min(kBk, g.tk - j0);
    load_transposed(k + (bh * g.tk + j0) * d, nk, d, w.kt.data());
    load_rows(k + (bh * g.tk + j0) * d, nk * d, w.k.data());
    load_transposed(v + (bh * g.tk + j0) * dvw, nk, dvw, w.vt.data());
    weights_and_dlogits(g, bh, i0, nq, j0, nk, lse, w);
    accumulate_rows(w.dp.data(), nq, nk, w.k.data(), d, w.dq.data());
  }
  const C scale = static_cast<C>(g.scale);
  T* dq_out = dq + (bh * g.tq + i0) * d;
  for (std::int64_t e = 0; e < nq * d; ++e) dq_out[e] = Num<T>::store(w.dq[static_cast<std::size_t>(e)] * scale);
}

// One OpenMP region for both passes (they write disjoint outputs): the dk/dv units over key
// tiles, then, without a barrier between, the dq units over query tiles.
template <typename T, typename C>
void backward(const AttentionGeometry& g, const T* q, const T* k, const T* v, const T* out, const C* lse, const T* dout,
              T* dq, T* dk, T* dv) {
  const std::int64_t heads = g.heads_total();
  std::vector<BackwardScratch<C>> scratch(static_cast<std::size_t>(omp_get_max_threads()),
                                          BackwardScratch<C>(g.head_dim, g.value_dim));
  const std::int64_t key_tiles = (g.tk + kBk - 1) / kBk, query_tiles = (g.tq + kBq - 1) / kBq;
#pragma omp parallel
  {
    BackwardScratch<C>& w = scratch[static_cast<std::size_t>(omp_get_thread_num())];
#pragma omp for schedule(dynamic, 1) nowait
    for (std::int64_t u = 0; u < heads * key_tiles; ++u)
      key_unit(g, q, k, v, out, lse, dout, dk, dv, u / key_tiles, (u % key_tiles) * kBk, w);
#pragma omp for schedule(dynamic, 1) nowait
    for (std::int64_t u = 0; u < heads * query_tiles; ++u)
      query_unit(g, q, k, v, out, lse, dout, dq, u / query_tiles, (u % query_tiles) * kBq, w);
  }
}

// Storage type T and compute type C of `dtype`.
template <typename F>
void dispatch(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32: return f(float{}, float{});
    case DType::kFloat64: return f(double{}, double{});
    case DType::kBFloat16: return f(bfloat16{}, float{});
    case DType::kFloat16: return f(float16{}, float{});
    default: break;
  }
  throw InvalidArgumentError(chorus::internal::str_cat("ScaledDotProductAttention: unsupported dtype ",
                                                       dtype_name(dtype), " (float32, float64, bfloat16, float16)"));
}

}  // namespace

void attention_forward(DType dtype, const AttentionGeometry& g, const void* q, const void* k, const void* v, void* out,
                       void* lse) {
  dispatch(dtype, [&](auto t, auto c) {
    using T = decltype(t);
    using C = decltype(c);
    forward(g, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(out),
            static_cast<C*>(lse));
  });
}

void attention_backward(DType dtype, const AttentionGeometry& g, const void* q, const void* k, const void* v,
                        const void* out, const void* lse, const void* dout, void* dq, void* dk, void* dv) {
  dispatch(dtype, [&](auto t, auto c) {
    using T = decltype(t);
    using C = decltype(c);
    backward(g, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
             static_cast<const T*>(out), static_cast<const C*>(lse), static_cast<const T*>(dout), static_cast<T*>(dq),
             static_cast<T*>(dk), static_cast<T*>(dv));
  });
}

}  // namespace chorus::ops::cpu
