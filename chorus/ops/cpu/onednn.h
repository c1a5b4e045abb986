// Internal to ops/cpu: the oneDNN plumbing shared by onednn_*.cc — one CPU engine, one stream per
// thread, a thread-safe LRU of primitives per primitive kind, a per-thread scratchpad, and the
// entry points that ops/cpu/dnn_dispatch.cc calls after validating its arguments: float32 for
// every kernel, and bfloat16 / float16 for matmul, convolution and pooling.
//
// Only compiled into a build with oneDNN (CHORUS_WITH_DNNL); nothing outside ops/cpu includes it.
//
// Concurrency: primitives are created with scratchpad_mode::user so that one cached primitive may
// execute on several threads at once (each passes its own thread-local scratchpad); streams are
// thread_local because a dnnl::stream is not meant to be shared between threads.
#pragma once

#ifdef CHORUS_WITH_DNNL

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include <chorus/core/error.h>
#include <chorus/ops/cpu/dnn.h>

namespace chorus::ops::cpu::onednn {

// The process-wide CPU engine (created on first use; thread-safe).
dnnl::engine& engine();
// The calling thread's stream on engine() (in-order; execution is synchronous on CPU, but callers
// still wait() so that the contract "returns when done" does not depend on that).
dnnl::stream& stream();

// A 64-byte aligned buffer of at least `bytes` owned by the calling thread, one per slot: grows,
// never shrinks; valid until the next call with the same slot on this thread.
enum class BufferSlot { kScratchpad, kWeights };
void* thread_buffer(BufferSlot slot, std::size_t bytes);

// Scratchpad memory for one primitive execution on the calling thread (BufferSlot::kScratchpad).
dnnl::memory scratchpad(const dnnl::primitive_desc_base& pd);

// Executes `prim` with `args` on stream() and waits for it.
void execute(const dnnl::primitive& prim, const std::unordered_map<int, dnnl::memory>& args);

// Attributes every chorus primitive is created with (user-managed scratchpad).
dnnl::primitive_attr default_attr();

// A memory object wrapping a caller's host pointer (oneDNN does not own it).
inline dnnl::memory wrap(const dnnl::memory::desc& md, const void* p) {
  return dnnl::memory(md, engine(), const_cast<void*>(p));
}

// Cache key: every shape and attribute parameter of a primitive, as integers.
using CacheKey = std::vector<std::int64_t>;
struct CacheKeyHash {
  std::size_t operator()(const CacheKey& k) const noexcept {
    std::size_t h = k.size();
    for (std::int64_t v : k) h ^= static_cast<std::size_t>(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
  }
};

// Counters every PrimitiveCache registers itself with, for cache_stats().
class CacheRegistry {
 public:
  static CacheRegistry& instance();
  void add(std::function<CacheStats()> stats);
  CacheStats total() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::function<CacheStats()>> sources_;
};

// Thread-safe LRU from CacheKey to Value (a small struct of dnnl handles: copying is cheap and
// shares the underlying primitive). Construction of a missing entry runs outside the lock; when
// two threads build the same key at once, the first insert wins and both use it.
template <typename Value>
class PrimitiveCache {
 public:
  explicit PrimitiveCache(std::size_t capacity = 256) : capacity_(capacity) {
    CacheRegistry::instance().add([this] { return stats(); });
  }
  PrimitiveCache(const PrimitiveCache&) = delete;
  PrimitiveCache& operator=(const PrimitiveCache&) = delete;

  template <typename Make>
  Value get(const CacheKey& key, Make&& make) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = index_.find(key);
      if (it != index_.end()) {
        ++hits_;
        lru_.splice(lru_.begin(), lru_, it->second);
        return it->second->second;
      }
      ++misses_;
    }
    Value made = make();
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) return it->second->second;
    lru_.emplace_front(key, made);
    index_.emplace(key, lru_.begin());
    while (lru_.size() > capacity_) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
    return made;
  }

  CacheStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    CacheStats s;
    s.hits = hits_;
    s.misses = misses_;
    s.entries = static_cast<std::int64_t>(lru_.size());
    return s;
  }

 private:
  using Entry = std::pair<CacheKey, Value>;
  const std::size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<CacheKey, typename std::list<Entry>::iterator, CacheKeyHash> index_;
  std::int64_t hits_ = 0, misses_ = 0;
};

// Runs f(); a dnnl::error becomes InternalError naming the primitive and oneDNN's status.
template <typename F>
decltype(auto) guarded(const char* primitive, F&& f) {
  try {
    return f();
  } catch (const dnnl::error& e) {
    throw InternalError(
        internal::str_cat("oneDNN ", primitive, " failed: ", e.what(), " (status ", static_cast<int>(e.status), ")"));
  }
}

// oneDNN's data type for kFloat32, kBFloat16, kFloat16 (anything else: InternalError).
dnnl::memory::data_type data_type(DType dtype);

// Whether a primitive descriptor made for `dtype` is one chorus runs. float32: always. bfloat16 and
// float16: only a JIT implementation — oneDNN's reference loops ("ref:any") are far slower than
// its float32 JIT kernels plus two conversions, so for a 16-bit dtype they count as "no kernel".
bool usable(DType dtype, const dnnl::primitive_desc_base& pd);

// Builds a cache entry with make(). For a 16-bit dtype, oneDNN's dnnl_unimplemented (no kernel for
// this data type, ISA and shape) gives Entry{} — whose `ok` is false — instead of an error, so the
// caller can fall back; make() itself returns Entry{} when !usable(dtype, pd). Every other failure
// propagates (guarded() turns it into InternalError).
template <typename Entry, typename Make>
Entry make_entry(DType dtype, Make&& make) {
  if (dtype == DType::kFloat32) return make();
  try {
    return make();
  } catch (const dnnl::error& e) {
    if (e.status == dnnl_unimplemented) return Entry{};
    throw;
  }
}

// Kernels for dtype kFloat32, kBFloat16 or kFloat16 (source, weights and destination all of that
// type; oneDNN accumulates 16-bit products in float32 and rounds each output once). Arguments are
// already validated and non-empty (see dnn_dispatch.cc). Return true when they ran; false, having
// done nothing, when oneDNN has no usable kernel for a 16-bit dtype here (see make_entry): the
// caller then falls back (bfloat16) or reports the dtype as unsupported (float16). Never false
// for float32. The outcome is cached with the primitive, so a miss costs one creation attempt.
// Probe: with a null first data pointer (a for matmul, x for conv2d_forward, conv2d_backward_filter
// and pool2d_forward, dy for conv2d_backward_data and pool2d_backward) nothing runs; the primitive
// is created (and cached) and the return value says whether the call would run (dnn_dispatch()).
bool matmul(DType dtype, const void* a, std::int64_t a_batch_stride, const void* b, std::int64_t b_batch_stride,
            void* c, std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a, bool trans_b);
bool conv2d_forward(DType dtype, const Conv2dGeometry& g, const void* x, const void* w, void* y,
                    const ConvEpilogue& epilogue);
bool conv2d_backward_data(DType dtype, const Conv2dGeometry& g, const void* dy, const void* w, void* dx);
bool conv2d_backward_filter(DType dtype, const Conv2dGeometry& g, const void* x, const void* dy, void* dw);
bool pool2d_forward(PoolKind kind, DType dtype, const Conv2dGeometry& g, const void* x, void* y);
bool pool2d_backward(PoolKind kind, DType dtype, const Conv2dGeometry& g, const void* x, const void* dy, void* dx);
// Max pooling, float32 (see dnn.h): the workspace's size, the forward that fills it, the backward
// that reads it.
std::size_t pool2d_workspace_bytes(const Conv2dGeometry& g);
void pool2d_forward_training(const Conv2dGeometry& g, const void* x, void* y, void* workspace);
void pool2d_backward_with_workspace(const Conv2dGeometry& g, const void* dy, const void* workspace, void* dx);

// float32 only; arguments already validated and non-empty (see dnn_dispatch.cc).
void softmax_forward(bool log, const float* x, float* y, std::int64_t rows, std::int64_t cols);
void softmax_backward(bool log, const float* y, const float* dy, float* dx, std::int64_t rows, std::int64_t cols);
void batch_norm_training(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* var,
                         std::int64_t rows, std::int64_t channels, double epsilon);
void batch_norm_inference(const float* x, const float* gamma, const float* beta, const float* mean, const float* var,
                          float* y, std::int64_t rows, std::int64_t channels, double epsilon);
void batch_norm_backward(const float* x, const float* dy, const float* gamma, const float* mean, const float* var,
                         float* dx, float* dgamma, float* dbeta, std::int64_t rows, std::int64_t channels,
                         double epsilon);
// False for kinds oneDNN's eltwise does not cover. dtype: kFloat32, or kBFloat16 (the caller checks
// that the bfloat16 path is on; oneDNN computes in float32 and rounds once).
bool eltwise_forward(UnaryOp op, DType dtype, const void* x, void* y, std::int64_t n);
// dx = dy · f'(x), float32 or bfloat16 (computed in float32, rounded once), from the source (dnn.h's
// eltwise_backward; kGelu only). False for other ops, or without a usable kernel for the dtype;
// x == nullptr probes (true: a call would run).
bool eltwise_backward(UnaryOp op, DType dtype, const void* x, const void* dy, void* dx, std::int64_t n);

}  // namespace chorus::ops::cpu::onednn

#endif  // CHORUS_WITH_DNNL
