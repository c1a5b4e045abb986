// Internal to ops/cpu: the oneDNN plumbing shared by onednn_*.cc — one CPU engine, one stream per
// thread, a thread-safe LRU of primitives per primitive kind, a per-thread scratchpad, and the
// float32 entry points that ops/cpu/dnn_dispatch.cc calls after validating its arguments.
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

#include "core/error.h"
#include "ops/cpu/dnn.h"

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

// float32 kernels; arguments already validated and non-empty (see dnn_dispatch.cc).
void matmul(const float* a, std::int64_t a_batch_stride, const float* b, std::int64_t b_batch_stride, float* c,
            std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a, bool trans_b);
void conv2d_forward(const Conv2dGeometry& g, const float* x, const float* w, float* y);
void conv2d_backward_data(const Conv2dGeometry& g, const float* dy, const float* w, float* dx);
void conv2d_backward_filter(const Conv2dGeometry& g, const float* x, const float* dy, float* dw);
void pool2d_forward(PoolKind kind, const Conv2dGeometry& g, const float* x, float* y);
void pool2d_backward(PoolKind kind, const Conv2dGeometry& g, const float* x, const float* dy, float* dx);
void softmax_forward(bool log, const float* x, float* y, std::int64_t rows, std::int64_t cols);
void softmax_backward(bool log, const float* y, const float* dy, float* dx, std::int64_t rows, std::int64_t cols);
void batch_norm_training(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* var,
                         std::int64_t rows, std::int64_t channels, double epsilon);
void batch_norm_inference(const float* x, const float* gamma, const float* beta, const float* mean, const float* var,
                          float* y, std::int64_t rows, std::int64_t channels, double epsilon);
void batch_norm_backward(const float* x, const float* dy, const float* gamma, const float* mean, const float* var,
                         float* dx, float* dgamma, float* dbeta, std::int64_t rows, std::int64_t channels,
                         double epsilon);
// False for kinds oneDNN's eltwise does not cover.
bool eltwise_forward(UnaryOp op, const float* x, float* y, std::int64_t n);

}  // namespace chorus::ops::cpu::onednn

#endif  // CHORUS_WITH_DNNL
