// Allocators: the per-logical-device memory arena that enforces the device's memory limit.
//
// Every logical device owns one Allocator (a BFCAllocator over a SubAllocator: aligned host
// memory for CPU devices, cudaMalloc for GPU devices). Tensors get their storage from it.
//
// Thread-safety: every Allocator method may be called from any thread concurrently.
// Errors: allocate() throws ResourceExhaustedError when the request does not fit under the limit
// (after coalescing); the allocator stays usable, so the caller may catch and retry smaller.
// deallocate() of a pointer this allocator did not return, or of one already freed, throws
// InvalidArgumentError and leaves the arena unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace chorus {

// A snapshot of one allocator's accounting. Bytes are the rounded sizes actually handed out.
struct MemoryInfo {
  std::size_t current = 0;             // bytes in live allocations
  std::size_t peak = 0;                // max of `current` since creation or reset_memory_stats
  std::size_t limit = 0;               // the device's memory limit
  std::size_t reserved = 0;            // bytes obtained from the SubAllocator (arena regions)
  std::size_t largest_free_block = 0;  // largest single allocation that would succeed now
  std::int64_t num_allocs = 0;         // allocate() calls that succeeded since creation
  std::int64_t num_live = 0;           // allocations not yet freed
  std::size_t pooled_free = 0;         // free bytes kept by graph pools (below), not counted in
                                       // largest_free_block: only a pool's users can have them
};

// One live allocation, as listed in out-of-memory messages.
struct LiveAllocation {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  std::string tag;  // what asked for it (e.g. "Tensor float32[1024,1024]"); may be empty
};

// Raw memory the arena is carved from. Not thread-safe by itself: BFCAllocator serializes calls.
class SubAllocator {
 public:
  virtual ~SubAllocator() = default;
  // Returns `bytes` of memory aligned to at least 256 bytes, or nullptr when the system has
  // none to give (never throws for that case).
  virtual void* alloc(std::size_t bytes) = 0;
  virtual void free(void* ptr, std::size_t bytes) = 0;
  // For messages: "host memory", "cudaMalloc on GPU:0".
  virtual std::string describe() const = 0;
};

// Aligned host memory (std::aligned_alloc), the SubAllocator of CPU logical devices.
std::unique_ptr<SubAllocator> make_host_sub_allocator();

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory for `bytes` (0 is allowed and returns a unique non-null pointer of a minimum
  // size). `tag` is kept with the allocation for OOM reports. Throws ResourceExhaustedError.
  virtual void* allocate(std::size_t bytes, std::string_view tag = {}) = 0;
  // Frees memory returned by allocate(). Throws InvalidArgumentError for foreign pointers and
  // double frees. nullptr is a no-op.
  virtual void deallocate(void* ptr) = 0;
  virtual MemoryInfo memory_info() const = 0;
  // Sets peak to current (TF's reset_memory_stats).
  virtual void reset_peak() = 0;
  // The largest live allocations, biggest first, at most `n`.
  virtual std::vector<LiveAllocation> largest_live_allocations(std::size_t n) const = 0;
  virtual const std::string& name() const = 0;

  // ---- Graph pools (CUDA-graph capture, core/graph_capture.h) ----
  // A captured graph replays with the addresses it was captured with, so the memory it touches
  // must stay its own for as long as it lives: a pool. Between begin_pool_use(p) and
  // end_pool_use() on a thread, that thread's allocations come from pool p (free memory the pool
  // already holds first, then memory taken from the arena), and every chunk the thread frees goes
  // to p, wherever it came from (memory allocated before a capture and freed inside it is still
  // read by the graph's replays). A pool's chunks freed later, from any thread, go back to the pool
  // too, never to the arena, so no allocation outside the pool reuses them; the next capture into
  // the same pool, or allocations while it is in use, do. release_pool(p) returns the pool's free
  // memory to the arena at once and each of its live allocations when it is freed. Pool ids are
  // never reused. PyTorch's private memory pools of torch.cuda.graph are the model.
  using PoolId = std::uint64_t;
  virtual PoolId create_pool() = 0;
  // One pool per thread at a time: FailedPreconditionError when the calling thread already uses
  // one; NotFoundError for a pool that was never created or is released.
  virtual void begin_pool_use(PoolId pool) = 0;
  // No-op when the calling thread uses no pool.
  virtual void end_pool_use() noexcept = 0;
  // FailedPreconditionError while some thread uses the pool; NotFoundError for an unknown id.
  virtual void release_pool(PoolId pool) = 0;
};

// begin_pool_use in the constructor, end_pool_use in the destructor.
class PoolUse {
 public:
  PoolUse(Allocator& allocator, Allocator::PoolId pool) : allocator_(allocator) { allocator_.begin_pool_use(pool); }
  ~PoolUse() { allocator_.end_pool_use(); }
  PoolUse(const PoolUse&) = delete;
  PoolUse& operator=(const PoolUse&) = delete;

 private:
  Allocator& allocator_;
};

struct BFCOptions {
  std::string logical_device;    // canonical name, e.g. "/job:localhost/replica:0/task:0/device:GPU:1"
  std::string physical_device;   // e.g. "/physical_device:GPU:0"
  std::size_t memory_limit = 0;  // bytes; allocations beyond it throw ResourceExhaustedError
  // false: the whole limit is reserved from the SubAllocator in one region at the first
  //        allocation (TensorFlow's default for GPUs: no fragmentation across regions).
  // true:  regions are reserved on demand, each at least double the previous, never past the
  //        limit (TF's allow_growth). Memory is never returned to the system before destruction.
  bool allow_growth = true;
};

// Best-fit with coalescing (TensorFlow's BFC allocator idea): the arena is a set of regions cut
// into chunks; free chunks sit in size-class bins (powers of two from 256 B); allocate() takes
// the smallest free chunk that fits, splitting off the remainder when it is large enough;
// deallocate() merges a chunk with free neighbours. Sizes are rounded up to 256 bytes.
std::unique_ptr<Allocator> make_bfc_allocator(std::unique_ptr<SubAllocator> sub, BFCOptions options);

}  // namespace chorus
