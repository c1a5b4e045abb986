// Reductions over the middle axis of [outer, r, inner], and arg-max/arg-min.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <chorus/ops/cpu/loops.h>
#include <chorus/ops/cpu/numeric.h>

namespace chorus::ops::cpu {
namespace {

template <typename T>
void reduce_typed(ReduceKind kind, const T* x, T* y, std::int64_t outer, std::int64_t r, std::int64_t inner) {
  using N = Num<T>;
  using C = typename N::C;
  // Accumulator: double for floats, int64 for integers, as documented in loops.h.
  using A = std::conditional_t<std::is_floating_point_v<C>, double, std::int64_t>;
  A init = A(0);
  if (kind == ReduceKind::kProd) init = A(1);
  if constexpr (std::is_floating_point_v<C>) {
    if (kind == ReduceKind::kMax) init = -std::numeric_limits<double>::infinity();
    if (kind == ReduceKind::kMin) init = std::numeric_limits<double>::infinity();
  } else {
    if (kind == ReduceKind::kMax) init = static_cast<A>(std::numeric_limits<C>::lowest());
    if (kind == ReduceKind::kMin) init = static_cast<A>(std::numeric_limits<C>::max());
  }
  std::vector<A> acc(static_cast<std::size_t>(inner));
#pragma omp parallel for schedule(static) firstprivate(acc) if (outer > 1 && outer * r * inner > (1 << 16))
  for (std::int64_t o = 0; o < outer; ++o) {
    std::fill(acc.begin(), acc.end(), init);
    const T* base = x + o * r * inner;
    for (std::int64_t j = 0; j < r; ++j) {
      const T* row = base + j * inner;
      for (std::int64_t i = 0; i < inner; ++i) {
        const A v = static_cast<A>(N::load(row[i]));
        A& a = acc[static_cast<std::size_t>(i)];
        switch (kind) {
          case ReduceKind::kSum:
          case ReduceKind::kMean: a += v; break;
          case ReduceKind::kProd: a *= v; break;
          case ReduceKind::kMax: a = (v > a || v != v) ? v : a; break;
          case ReduceKind::kMin: a = (v < a || v != v) ? v : a; break;
        }
      }
    }
    for (std::int64_t i = 0; i < inner; ++i) {
      A a = acc[static_cast<std::size_t>(i)];
      if (kind == ReduceKind::kMean && r > 0) a = a / static_cast<A>(r);
      y[o * inner + i] = N::store(static_cast<C>(a));
    }
  }
}

template <typename T>
void argmax_typed(bool min, const T* x, std::int64_t* y, std::int64_t outer, std::int64_t r, std::int64_t inner) {
  using N = Num<T>;
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t i = 0; i < inner; ++i) {
      const T* p = x + o * r * inner + i;
      // TensorFlow's rule (Eigen's ArgMax): from index 0 and the lowest (argmin: highest) value, an
      // element wins when strictly greater (less): NaN never wins, ties keep the first.
      using C = typename N::C;
      C best = min ? std::numeric_limits<C>::max() : std::numeric_limits<C>::lowest();
      std::int64_t at = 0;
      for (std::int64_t j = 0; j < r; ++j) {
        const auto v = N::load(p[j * inner]);
        if (min ? v < best : v > best) {
          best = v;
          at = j;
        }
      }
      y[o * inner + i] = at;
    }
  }
}

}  // namespace

void reduce(ReduceKind kind, DType dtype, const void* x, void* y, std::int64_t outer, std::int64_t r,
            std::int64_t inner) {
  dispatch_dtype(dtype, "reduce", [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, bool>) {
      throw InvalidArgumentError("reductions of bool tensors are not defined (use reduce_any/all or cast)");
    } else {
      reduce_typed<T>(kind, static_cast<const T*>(x), static_cast<T*>(y), outer, r, inner);
    }
  });
}

void argmax(bool min, DType dtype, const void* x, std::int64_t* y, std::int64_t outer, std::int64_t r,
            std::int64_t inner) {
  CHORUS_REQUIRE(r > 0, InvalidArgumentError, "argmax: the reduced axis is empty");
  dispatch_dtype(dtype, "argmax", [&](auto t) {
    using T = decltype(t);
    argmax_typed<T>(min, static_cast<const T*>(x), y, outer, r, inner);
  });
}

}  // namespace chorus::ops::cpu
