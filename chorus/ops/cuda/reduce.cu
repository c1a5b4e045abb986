// Reductions over the middle axis of [outer, r, inner] and arg-max/arg-min, deterministic by
// construction (common.cuh): each output is reduced by one warp, one block, or one column of a
// block, in an order fixed by the shape alone.
//
// Kernels, chosen from the shape only (so the same shape always takes the same path):
//   few parallel units and a   split r: r cut into chunks fixed by the shape, each (chunk, unit)
//   long r, with a workspace   folded by one block (the two layouts below), the partials then
//                              folded by one warp per output in a fixed order. A bias gradient
//                              (x = [N*H*W, C], C = 32) otherwise ran on 32 blocks of one GPU's
//                              132 multiprocessors, with loads 128 bytes apart;
//   inner == 1, r <= kWarpMaxR  one warp per output (rows of a contiguous matrix);
//   inner == 1, r larger, or
//   few outputs with a long r   one block of 256 per output (elements j at stride inner);
//   otherwise                   tiles of 32 outputs along inner per block, 8 threads down r per
//                               output, then a fixed 3-step tree: coalesced loads along inner.
// Accumulation as the CPU kernels: floats in double, integers in int64 (wrapping), so results
// match ops/cpu/reduce.cc up to summation order.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <chorus/core/cuda/check.h>
#include <chorus/ops/cuda/common.cuh>
#include <chorus/ops/cuda/kernels.h>

namespace chorus::ops::cuda {
namespace {

using namespace detail;  // NOLINT: the .cu files' shared vocabulary

constexpr std::int64_t kWarpMaxR = 4096;    // longest row one warp reduces
constexpr std::int64_t kFewOutputs = 1024;  // below this many outputs ...
constexpr std::int64_t kLongR = 2048;       // ... and from this r on, one block per output
constexpr int kTileX = 32;                  // outputs per tile (along inner)
constexpr int kTileY = kThreads / kTileX;   // threads down r per output
static_assert(kTileY == 8, "the column tree below is written for 8 rows");
constexpr std::int64_t kSplitMinR = 4096;   // r from which splitting it may pay ...
constexpr std::int64_t kSplitUnits = 128;   // ... when fewer parallel units than this (outputs, or tiles)
constexpr std::int64_t kSplitTarget = 512;  // blocks the split aims at (a few per multiprocessor)
constexpr std::int64_t kMinChunk = 1024;    // rows per chunk at least: workspace <= x's elements / 1024

// Chunks of r for the split path (1: no split). Depends on the shape only.
std::int64_t split_count(std::int64_t outer, std::int64_t r, std::int64_t inner) {
  if (r < kSplitMinR || outer * inner == 0) return 1;
  const std::int64_t units = inner == 1 ? outer : outer * ((inner + kTileX - 1) / kTileX);
  if (units >= kSplitUnits) return 1;
  const std::int64_t want = std::min((kSplitTarget + units - 1) / units, r / kMinChunk);
  if (want <= 1) return 1;
  const std::int64_t chunk = (r + want - 1) / want;
  return (r + chunk - 1) / chunk;  // no empty chunk
}

template <typename T>
using reduce_acc_t = std::conditional_t<is_float_v<T>, double, i64>;

// ---- Reducers: what the kernels fold --------------------------------------------------------

template <typename T, ReduceKind K>
struct ValueReducer {
  using A = reduce_acc_t<T>;
  using Out = T;
  A identity;
  i64 r;
  __device__ __forceinline__ A init() const { return identity; }
  __device__ __forceinline__ A make(T v, i64) const { return static_cast<A>(load(v)); }
  __device__ __forceinline__ A combine(A a, A b) const {
    if constexpr (std::is_same_v<A, double>) {
      switch (K) {
        case ReduceKind::kSum:
        case ReduceKind::kMean: return a + b;
        case ReduceKind::kProd: return a * b;
        case ReduceKind::kMax: return (b > a || d_isnan(b)) ? b : a;  // NaN propagates
        case ReduceKind::kMin: return (b < a || d_isnan(b)) ? b : a;
      }
    } else {
      using U = unsigned long long;
      switch (K) {
        case ReduceKind::kSum:
        case ReduceKind::kMean: return static_cast<i64>(static_cast<U>(a) + static_cast<U>(b));
        case ReduceKind::kProd: return static_cast<i64>(static_cast<U>(a) * static_cast<U>(b));
        case ReduceKind::kMax: return b > a ? b : a;
        case ReduceKind::kMin: return b < a ? b : a;
      }
    }
    return a;
  }
  __device__ __forceinline__ Out finalize(A a) const {
    if (K == ReduceKind::kMean && r > 0) a = a / static_cast<A>(r);
    if constexpr (is_float_v<T>) {
      return store<T>(static_cast<acc_t<T>>(a));  // as the CPU: double → compute type → storage
    } else {
      return static_cast<T>(a);
    }
  }
};

// Arg-max/arg-min with the CPU kernel's exact result: the first extreme in index order, and a NaN
// never wins (at index 0 neither). As a total order: class 1 = numbers beyond T's lowest (argmin:
// highest) value, by value, ties to the lower index; class 0 = NaN and the start value itself;
// i < 0 marks "no element yet"; a row with nothing in class 1 gives index 0.
template <typename T, bool kMin>
struct ArgReducer {
  using V = std::conditional_t<is_float_v<T>, acc_t<T>, i64>;
  using A = ValIdx<V>;
  using Out = i64;
  __device__ __forceinline__ A init() const { return A{V(0), -1}; }
  __device__ __forceinline__ A make(T v, i64 j) const { return A{static_cast<V>(load(v)), j}; }
  // TensorFlow's rule (the CPU's, ops/cpu/reduce.cc): from index 0 and T's lowest (argmin: highest)
  // value, an element wins when strictly greater (less). Class 1: can win; 0: NaN, or not beyond
  // the start (finalize gives index 0 when nothing can win).
  __device__ __forceinline__ static V start() {
    if constexpr (std::is_same_v<T, float>)
      return kMin ? V(3.402823466e38f) : V(-3.402823466e38f);
    else if constexpr (std::is_same_v<T, double>)
      return kMin ? 1.7976931348623157e308 : -1.7976931348623157e308;
    else if constexpr (std::is_same_v<T, __half>)
      return kMin ? V(65504.f) : V(-65504.f);
    else if constexpr (std::is_same_v<T, __nv_bfloat16>)
      return kMin ? V(3.38953139e38f) : V(-3.38953139e38f);
    else
      return kMin ? V(Limits<T>::max) : V(Limits<T>::lowest);
  }
  __device__ __forceinline__ static int cls(const A& p) {
    if (d_isnan(p.v)) return 0;
    return (kMin ? p.v < start() : p.v > start()) ? 1 : 0;
  }
  __device__ __forceinline__ A combine(A a, A b) const {
    if (b.i < 0) return a;
    if (a.i < 0) return b;
    const int ca = cls(a), cb = cls(b);
    if (ca != cb) return cb > ca ? b : a;
    if (ca == 1 && a.v != b.v) return (kMin ? b.v < a.v : b.v > a.v) ? b : a;
    return b.i < a.i ? b : a;
  }
  __device__ __forceinline__ Out finalize(A a) const { return cls(a) == 1 ? a.i : 0; }
};

// ---- Kernels ---------------------------------------------------------------------------------

// One warp per output; lane l folds elements l, l + 32, ... then the warp tree.
template <typename T, typename R>
__global__ void reduce_warp_kernel(R red, const T* x, typename R::Out* y, i64 outputs, i64 r, i64 inner) {
  using A = typename R::A;
  const int lane = threadIdx.x & 31;
  const i64 warps = static_cast<i64>(gridDim.x) * (blockDim.x / 32);
  for (i64 out = blockIdx.x * static_cast<i64>(blockDim.x / 32) + (threadIdx.x >> 5); out < outputs; out += warps) {
    const i64 o = out / inner, i = out % inner;
    const T* base = x + o * r * inner + i;
    A acc = red.init();
    for (i64 j = lane; j < r; j += 32) acc = red.combine(acc, red.make(base[j * inner], j));
    acc = warp_reduce(acc, [&red](A a, A b) { return red.combine(a, b); });
    if (lane == 0) y[out] = red.finalize(acc);
  }
}

// One block per output; thread t folds elements t, t + 256, ... then the block tree.
template <typename T, typename R>
__global__ void reduce_block_kernel(R red, const T* x, typename R::Out* y, i64 outputs, i64 r, i64 inner) {
  using A = typename R::A;
  __shared__ A smem[kWarps + 1];
  for (i64 out = blockIdx.x; out < outputs; out += gridDim.x) {
    const i64 o = out / inner, i = out % inner;
    const T* base = x + o * r * inner + i;
    A acc = red.init();
    for (i64 j = threadIdx.x; j < r; j += blockDim.x) acc = red.combine(acc, red.make(base[j * inner], j));
    acc = block_reduce(
        acc, [&red](A a, A b) { return red.combine(a, b); }, smem);
    if (threadIdx.x == 0) y[out] = red.finalize(acc);
  }
}

// Tiles of kTileX consecutive outputs along inner; thread (tx, ty) folds rows ty, ty + 8, ... of
// output column tx, then rows combine in the fixed tree (0,4)(1,5)(2,6)(3,7), (0,2)(1,3), (0,1).
template <typename T, typename R>
__global__ void reduce_tile_kernel(R red, const T* x, typename R::Out* y, i64 outer, i64 r, i64 inner) {
  using A = typename R::A;
  __shared__ A smem[kTileY][kTileX];
  const int tx = threadIdx.x % kTileX;
  const int ty = threadIdx.x / kTileX;
  const i64 tiles_per_outer = (inner + kTileX - 1) / kTileX;
  const i64 tiles = outer * tiles_per_outer;
  for (i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const i64 o = tile / tiles_per_outer;
    const i64 i = (tile % tiles_per_outer) * kTileX + tx;
    A acc = red.init();
    if (i < inner) {
      const T* base = x + o * r * inner + i;
      for (i64 j = ty; j < r; j += kTileY) acc = red.combine(acc, red.make(base[j * inner], j));
    }
    smem[ty][tx] = acc;
    __syncthreads();
#pragma unroll
    for (int s = kTileY / 2; s > 0; s >>= 1) {
      if (ty < s) smem[ty][tx] = red.combine(smem[ty][tx], smem[ty + s][tx]);
      __syncthreads();
    }
    if (ty == 0 && i < inner) y[o * inner + i] = red.finalize(smem[0][tx]);
    __syncthreads();  // smem is rewritten by the next tile
  }
}

// Split path, pass 1 for inner == 1: block p folds chunk p / outputs of output p % outputs
// (consecutive elements: coalesced) into ws[chunk * outputs + output].
template <typename T, typename R>
__global__ void reduce_split_rows_kernel(R red, const T* x, typename R::A* ws, i64 outputs, i64 r, i64 chunk,
                                         i64 splits) {
  using A = typename R::A;
  __shared__ A smem[kWarps + 1];
  for (i64 p = blockIdx.x; p < splits * outputs; p += gridDim.x) {
    const i64 c = p / outputs, out = p % outputs;
    const T* base = x + out * r;
    const i64 lo = c * chunk, hi = lo + chunk < r ? lo + chunk : r;
    A acc = red.init();
    for (i64 j = lo + threadIdx.x; j < hi; j += blockDim.x) acc = red.combine(acc, red.make(base[j], j));
    acc = block_reduce(
        acc, [&red](A a, A b) { return red.combine(a, b); }, smem);
    if (threadIdx.x == 0) ws[c * outputs + out] = acc;
  }
}

// Split path, pass 1 for inner > 1: block p folds chunk p / units of tile p % units (kTileX
// outputs along inner, 8 threads down the chunk's rows, the tile kernel's fixed tree) into ws.
template <typename T, typename R>
__global__ void reduce_split_tile_kernel(R red, const T* x, typename R::A* ws, i64 outer, i64 r, i64 inner, i64 chunk,
                                         i64 splits) {
  using A = typename R::A;
  __shared__ A smem[kTileY][kTileX];
  const int tx = threadIdx.x % kTileX;
  const int ty = threadIdx.x / kTileX;
  const i64 tiles_per_outer = (inner + kTileX - 1) / kTileX;
  const i64 units = outer * tiles_per_outer;
  const i64 outputs = outer * inner;
  for (i64 p = blockIdx.x; p < splits * units; p += gridDim.x) {
    const i64 c = p / units, tile = p % units;
    const i64 o = tile / tiles_per_outer;
    const i64 i = (tile % tiles_per_outer) * kTileX + tx;
    const i64 lo = c * chunk, hi = lo + chunk < r ? lo + chunk : r;
    A acc = red.init();
    if (i < inner) {
      const T* base = x + o * r * inner + i;
      for (i64 j = lo + ty; j < hi; j += kTileY) acc = red.combine(acc, red.make(base[j * inner], j));
    }
    smem[ty][tx] = acc;
    __syncthreads();
#pragma unroll
    for (int h = kTileY / 2; h > 0; h >>= 1) {
      if (ty < h) smem[ty][tx] = red.combine(smem[ty][tx], smem[ty + h][tx]);
      __syncthreads();
    }
    if (ty == 0 && i < inner) ws[c * outputs + o * inner + i] = smem[0][tx];
    __syncthreads();  // smem is rewritten by the next tile
  }
}

// Split path, pass 2: one warp per output; lane l folds the partials of chunks l, l + 32, ...,
// then the warp's fixed tree. (One thread per output reading its up to 512 partials in a row took
// 30 µs per bias gradient on an H200: a chain of dependent loads.)
template <typename R>
__global__ void reduce_split_finish_kernel(R red, const typename R::A* ws, typename R::Out* y, i64 outputs,
                                           i64 splits) {
  using A = typename R::A;
  const int lane = threadIdx.x & 31;
  const i64 warps = static_cast<i64>(gridDim.x) * (blockDim.x / 32);
  for (i64 out = blockIdx.x * static_cast<i64>(blockDim.x / 32) + (threadIdx.x >> 5); out < outputs; out += warps) {
    A acc = red.init();
    for (i64 c = lane; c < splits; c += 32) acc = red.combine(acc, ws[c * outputs + out]);
    acc = warp_reduce(acc, [&red](A a, A b) { return red.combine(a, b); });
    if (lane == 0) y[out] = red.finalize(acc);
  }
}

// ws: split_count(outer, r, inner) * outer * inner values of R::A, or nullptr (no split).
template <typename T, typename R>
void launch(cudaStream_t s, const R& red, const T* x, typename R::Out* y, i64 outer, i64 r, i64 inner,
            typename R::A* ws = nullptr) {
  const i64 outputs = outer * inner;
  if (const i64 splits = split_count(outer, r, inner); ws != nullptr && splits > 1) {
    const i64 chunk = (r + splits - 1) / splits;
    if (inner == 1) {
      reduce_split_rows_kernel<T, R>
          <<<grid_for(splits * outputs, 1), kThreads, 0, s>>>(red, x, ws, outputs, r, chunk, splits);
    } else {
      const i64 units = outer * ((inner + kTileX - 1) / kTileX);
      reduce_split_tile_kernel<T, R>
          <<<grid_for(splits * units, 1), kThreads, 0, s>>>(red, x, ws, outer, r, inner, chunk, splits);
    }
    reduce_split_finish_kernel<R><<<grid_for(outputs, kWarps), kThreads, 0, s>>>(red, ws, y, outputs, splits);
    return;
  }
  if (inner == 1 && r <= kWarpMaxR) {
    reduce_warp_kernel<T, R><<<grid_for(outputs, kWarps), kThreads, 0, s>>>(red, x, y, outputs, r, inner);
  } else if (inner == 1 || (outputs < kFewOutputs && r >= kLongR)) {
    reduce_block_kernel<T, R><<<grid_for(outputs, 1), kThreads, 0, s>>>(red, x, y, outputs, r, inner);
  } else {
    const i64 tiles = outer * ((inner + kTileX - 1) / kTileX);
    reduce_tile_kernel<T, R><<<grid_for(tiles, 1), kThreads, 0, s>>>(red, x, y, outer, r, inner);
  }
}

template <typename T, ReduceKind K>
void reduce_typed(cudaStream_t s, const void* x, void* y, i64 outer, i64 r, i64 inner, void* ws) {
  using R = ValueReducer<T, K>;
  using A = typename R::A;
  A identity = A(0);
  if (K == ReduceKind::kProd) identity = A(1);
  if constexpr (std::is_same_v<A, double>) {
    if (K == ReduceKind::kMax) identity = -std::numeric_limits<double>::infinity();
    if (K == ReduceKind::kMin) identity = std::numeric_limits<double>::infinity();
  } else {
    if (K == ReduceKind::kMax) identity = static_cast<A>(Limits<T>::lowest);
    if (K == ReduceKind::kMin) identity = static_cast<A>(Limits<T>::max);
  }
  launch<T, R>(s, R{identity, r}, static_cast<const T*>(x), static_cast<T*>(y), outer, r, inner, static_cast<A*>(ws));
}

}  // namespace

std::int64_t reduce_workspace_bytes(std::int64_t outer, std::int64_t r, std::int64_t inner) {
  const std::int64_t splits = split_count(outer, r, inner);
  // Both accumulators (double, int64) are 8 bytes.
  static_assert(sizeof(double) == 8 && sizeof(i64) == 8, "the split path's partials are 8 bytes");
  return splits > 1 ? splits * outer * inner * 8 : 0;
}

void reduce(int ordinal, StreamHandle stream, ReduceKind kind, DType dtype, const void* x, void* y, std::int64_t outer,
            std::int64_t r, std::int64_t inner, void* workspace) {
  CHORUS_REQUIRE(outer >= 0 && r >= 0 && inner >= 0, InvalidArgumentError, "reduce: negative extent in [", outer, ", ",
                 r, ", ", inner, "]");
  CHORUS_REQUIRE(dtype != DType::kBool, InvalidArgumentError,
                 "reductions of bool tensors are not defined (use reduce_any/all or cast)");
  dispatch_all(dtype, "reduce", [](auto) {});
  if (outer * inner == 0) return;
  gpu::internal::DeviceGuard guard(ordinal);
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_all(dtype, "reduce", [&](auto t) {
    using T = decltype(t);
    if constexpr (!std::is_same_v<T, bool_tag>) {
      switch (kind) {
        case ReduceKind::kSum: return reduce_typed<T, ReduceKind::kSum>(s, x, y, outer, r, inner, workspace);
        case ReduceKind::kMean: return reduce_typed<T, ReduceKind::kMean>(s, x, y, outer, r, inner, workspace);
        case ReduceKind::kMax: return reduce_typed<T, ReduceKind::kMax>(s, x, y, outer, r, inner, workspace);
        case ReduceKind::kMin: return reduce_typed<T, ReduceKind::kMin>(s, x, y, outer, r, inner, workspace);
        case ReduceKind::kProd: return reduce_typed<T, ReduceKind::kProd>(s, x, y, outer, r, inner, workspace);
      }
      throw InvalidArgumentError(::chorus::internal::str_cat("reduce: unknown kind ", static_cast<int>(kind)));
    }
  });
  CHORUS_CUDA_CHECK(cudaGetLastError());
}

void argmax(int ordinal, StreamHandle stream, bool min, DType dtype, const void* x, std::int64_t* y, std::int64_t outer,
            std::int64_t r, std::int64_t inner) {
  CHORUS_REQUIRE(r > 0, InvalidArgumentError, "argmax: the reduced axis is empty");
  CHORUS_REQUIRE(outer >= 0 && inner >= 0, InvalidArgumentError, "argmax: negative extent in [", outer, ", ", r, ", ",
                 inner, "]");
  // bool is stored as one byte 0/1: its arg-max is the uint8 one, as on the CPU (false < true).
  const DType as = dtype == DType::kBool ? DType::kUInt8 : dtype;
  dispatch_all(as, "argmax", [](auto) {});
  if (outer * inner == 0) return;
  gpu::internal::DeviceGuard guard(ordinal);
  auto s = static_cast<cudaStream_t>(stream);
  auto* out = reinterpret_cast<i64*>(y);
  dispatch_all(as, "argmax", [&](auto t) {
    using T = decltype(t);
    if constexpr (!std::is_same_v<T, bool_tag>) {
      const auto* in = static_cast<const T*>(x);
      if (min)
        launch<T>(s, ArgReducer<T, true>{}, in, out, outer, r, inner);
      else
        launch<T>(s, ArgReducer<T, false>{}, in, out, outer, r, inner);
    }
  });
  CHORUS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace chorus::ops::cuda
