// Gather, scatter-add (atomic and deterministic) and one-hot.
//
// Deterministic scatter-add (op determinism, ops/determinism.h): no atomics. One block per
// index j; the block that holds the *first* occurrence of a row (no j' < j has the same index)
// owns that row of `out` and adds the updates of every j'' >= j with that index, in increasing
// j'' order, each thread owning a fixed set of columns. No two blocks write one row and every
// element sees its additions in index order, rounded after each one exactly as the CPU loop
// does. Work: O(num_indices^2 / 256) index compares for the ownership scans plus one pass over
// the updates (instead of one thread per element of `out` scanning every index).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include <chorus/core/cuda/check.h>
#include <chorus/core/dtype.h>
#include <chorus/ops/cuda/common.cuh>
#include <chorus/ops/cuda/kernels.h>

namespace chorus::ops::cuda {
namespace {

using namespace detail;  // NOLINT: the .cu files' shared vocabulary

// ---- Gather ----------------------------------------------------------------------------------

// out[j, c] = params[idx[j], c]; an index outside [0, rows) gives a zero row.
template <typename E, typename I>
__global__ void gather_kernel(const E* params, i64 rows, i64 inner, const I* idx, i64 num_indices, E* out) {
  const i64 total = num_indices * inner;
  const i64 stride = static_cast<i64>(blockDim.x) * gridDim.x;
  for (i64 t = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; t < total; t += stride) {
    const i64 j = t / inner;
    const i64 c = t - j * inner;
    const i64 row = static_cast<i64>(idx[j]);
    out[t] = (row >= 0 && row < rows) ? params[row * inner + c] : E(0);
  }
}

// ---- Scatter-add -----------------------------------------------------------------------------

// a + b with the element type's rules: 16-bit floats add in float and round, integers wrap.
template <typename T>
__device__ __forceinline__ T add_elem(T a, T b) {
  if constexpr (is_float_v<T>) {
    return store<T>(load(a) + load(b));
  } else {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  }
}

// 8- and 16-bit integer atomics do not exist: compare-and-swap the aligned 32-bit word holding
// the value. The word stays inside the allocation: chorus's allocators hand out 256-byte aligned,
// 256-byte rounded blocks.
template <typename T>
__device__ __forceinline__ void atomic_add_subword(T* p, T v) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2, "8- or 16-bit values");
  constexpr unsigned kMask = sizeof(T) == 1 ? 0xffu : 0xffffu;
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  auto* word = reinterpret_cast<unsigned int*>(addr & ~static_cast<std::uintptr_t>(3));
  const unsigned shift = static_cast<unsigned>(addr & 3) * 8u;
  unsigned old = *word;
  unsigned assumed;
  do {
    assumed = old;
    const unsigned value = ((assumed >> shift) + v) & kMask;
    const unsigned next = (assumed & ~(kMask << shift)) | (value << shift);
    old = atomicCAS(word, assumed, next);
  } while (assumed != old);
}

template <typename T>
__device__ __forceinline__ void atomic_add(T* p, T v) {
  if constexpr (std::is_same_v<T, i64>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));  // wraps
  } else if constexpr (std::is_same_v<T, std::uint8_t> || std::is_same_v<T, std::uint16_t>) {
    atomic_add_subword(p, v);
  } else {
    atomicAdd(p, v);  // float, double, int, __half (sm_70+), __nv_bfloat16 (sm_80+)
  }
}

template <typename T, typename I>
__global__ void scatter_atomic_kernel(const T* updates, i64 inner, const I* idx, i64 num_indices, T* out, i64 rows) {
  const i64 total = num_indices * inner;
  const i64 stride = static_cast<i64>(blockDim.x) * gridDim.x;
  for (i64 t = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; t < total; t += stride) {
    const i64 j = t / inner;
    const i64 c = t - j * inner;
    const i64 row = static_cast<i64>(idx[j]);
    if (row >= 0 && row < rows) atomic_add(out + row * inner + c, updates[t]);
  }
}

template <typename T, typename I>
__global__ void scatter_deterministic_kernel(const T* updates, i64 inner, const I* idx, i64 num_indices, T* out,
                                             i64 rows) {
  __shared__ unsigned char hit[kThreads];
  for (i64 j = blockIdx.x; j < num_indices; j += gridDim.x) {
    // Every branch below depends on j (the same for the whole block) or on a block-wide vote,
    // so all threads reach the same barriers.
    const i64 row = static_cast<i64>(idx[j]);
    if (row < 0 || row >= rows) continue;
    bool owner = true;
    for (i64 base = 0; base < j; base += kThreads) {
      const i64 jj = base + threadIdx.x;
      const int earlier = jj < j && static_cast<i64>(idx[jj]) == row;
      if (__syncthreads_or(earlier)) {
        owner = false;
        break;
      }
    }
    if (!owner) continue;
    T* dst = out + row * inner;
    for (i64 base = j; base < num_indices; base += kThreads) {
      const i64 jj = base + threadIdx.x;
      const int mine = jj < num_indices && static_cast<i64>(idx[jj]) == row;
      hit[threadIdx.x] = static_cast<unsigned char>(mine);
      if (__syncthreads_count(mine) != 0) {  // the barrier also publishes hit[]
        const int chunk = static_cast<int>(num_indices - base < kThreads ? num_indices - base : kThreads);
        for (int k = 0; k < chunk; ++k) {
          if (!hit[k]) continue;
          const T* src = updates + (base + k) * inner;
          for (i64 c = threadIdx.x; c < inner; c += kThreads) dst[c] = add_elem(dst[c], src[c]);
        }
      }
      __syncthreads();  // hit[] is rewritten by the next chunk
    }
  }
}

// ---- One-hot ---------------------------------------------------------------------------------

template <typename E, typename I>
__global__ void one_hot_kernel(const I* idx, i64 num_indices, i64 depth, E on, E off, E* out) {
  const i64 total = num_indices * depth;
  const i64 stride = static_cast<i64>(blockDim.x) * gridDim.x;
  for (i64 t = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; t < total; t += stride) {
    const i64 j = t / depth;
    const i64 d = t - j * depth;
    out[t] = static_cast<i64>(idx[j]) == d ? on : off;  // out of range: an all-off row (TF)
  }
}

}  // namespace

void gather(int ordinal, StreamHandle stream, DType dtype, const void* params, std::int64_t rows, std::int64_t inner,
            DType index_dtype, const void* indices, std::int64_t num_indices, void* out) {
  dispatch_index(index_dtype, "gather", [](auto) {});
  dispatch_bytes(dtype_size(dtype), "gather", [](auto) {});
  CHORUS_REQUIRE(rows >= 0 && inner >= 0 && num_indices >= 0, InvalidArgumentError, "gather: negative extent (rows ",
                 rows, ", inner ", inner, ", indices ", num_indices, ")");
  const std::int64_t total = num_indices * inner;
  if (total == 0) return;
  gpu::internal::DeviceGuard guard(ordinal);
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_bytes(dtype_size(dtype), "gather", [&](auto e) {
    using E = decltype(e);
    dispatch_index(index_dtype, "gather", [&](auto it) {
      using I = decltype(it);
      gather_kernel<E, I><<<grid_for(total), kThreads, 0, s>>>(static_cast<const E*>(params), rows, inner,
                                                               static_cast<const I*>(indices), num_indices,
                                                               static_cast<E*>(out));
    });
  });
  CHORUS_CUDA_CHECK(cudaGetLastError());
}

void scatter_add(int ordinal, StreamHandle stream, DType dtype, const void* updates, std::int64_t inner,
                 DType index_dtype, const void* indices, std::int64_t num_indices, void* out, std::int64_t rows,
                 bool deterministic) {
  CHORUS_REQUIRE(dtype != DType::kBool, InvalidArgumentError, "scatter_add: bool is not defined");
  dispatch_all(dtype, "scatter_add", [](auto) {});
  dispatch_index(index_dtype, "scatter_add", [](auto) {});
  CHORUS_REQUIRE(rows >= 0 && inner >= 0 && num_indices >= 0, InvalidArgumentError,
                 "scatter_add: negative extent (rows ", rows, ", inner ", inner, ", indices ", num_indices, ")");
  if (num_indices * inner == 0 || rows == 0) return;
  gpu::internal::DeviceGuard guard(ordinal);
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_all(dtype, "scatter_add", [&](auto t) {
    using T = decltype(t);
    if constexpr (!std::is_same_v<T, bool_tag>) {
      dispatch_index(index_dtype, "scatter_add", [&](auto it) {
        using I = decltype(it);
        const auto* u = static_cast<const T*>(updates);
        const auto* ix = static_cast<const I*>(indices);
        auto* o = static_cast<T*>(out);
        if (deterministic) {
          scatter_deterministic_kernel<T, I>
              <<<grid_for(num_indices, 1), kThreads, 0, s>>>(u, inner, ix, num_indices, o, rows);
        } else {
          scatter_atomic_kernel<T, I>
              <<<grid_for(num_indices * inner), kThreads, 0, s>>>(u, inner, ix, num_indices, o, rows);
        }
      });
    }
  });
  CHORUS_CUDA_CHECK(cudaGetLastError());
}

void one_hot(int ordinal, StreamHandle stream, DType dtype, DType index_dtype, const void* indices,
             std::int64_t num_indices, std::int64_t depth, double on, double off, void* out) {
  dispatch_index(index_dtype, "one_hot", [](auto) {});
  const std::size_t bytes = dtype_size(dtype);
  dispatch_bytes(bytes, "one_hot", [](auto) {});
  CHORUS_REQUIRE(num_indices >= 0 && depth >= 0, InvalidArgumentError, "one_hot: negative extent (indices ",
                 num_indices, ", depth ", depth, ")");
  const std::int64_t total = num_indices * depth;
  if (total == 0) return;
  // on/off converted once on the host with core/dtype.h's rules, passed as bit patterns.
  unsigned char on_bits[8] = {}, off_bits[8] = {};
  convert(&on, DType::kFloat64, on_bits, dtype, 1);
  convert(&off, DType::kFloat64, off_bits, dtype, 1);
  gpu::internal::DeviceGuard guard(ordinal);
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_bytes(bytes, "one_hot", [&](auto e) {
    using E = decltype(e);
    E on_v{}, off_v{};
    static_assert(sizeof(E) <= sizeof(on_bits), "one_hot: element larger than 8 bytes");
    std::memcpy(&on_v, on_bits, sizeof(E));
    std::memcpy(&off_v, off_bits, sizeof(E));
    dispatch_index(index_dtype, "one_hot", [&](auto it) {
      using I = decltype(it);
      one_hot_kernel<E, I><<<grid_for(total), kThreads, 0, s>>>(static_cast<const I*>(indices), num_indices, depth,
                                                                on_v, off_v, static_cast<E*>(out));
    });
  });
  CHORUS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace chorus::ops::cuda
