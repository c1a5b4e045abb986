// BFCAllocator: best-fit with coalescing over regions obtained from a SubAllocator (the idea of
// TensorFlow's bfc_allocator.cc, reduced to what chorus needs).
//
// Layout. Each region is a contiguous run of chunks linked in address order (prev/next); chunks
// never link across regions, because each region must go back to the SubAllocator whole. Every
// chunk is either in use or free, and every free chunk sits in exactly one bin. Invariants, all
// guarded by mu_:
//   - no two free chunks of the same pool are neighbours (deallocate() merges them), so a region
//     whose memory is all free and in the arena is exactly one chunk, and the arena's largest free
//     chunk is the largest possible block outside pools;
//   - chunk sizes and offsets are multiples of kGranule, so every pointer keeps the region's
//     256-byte alignment and every split remainder is itself a valid chunk;
//   - the sizes of a region's chunks sum to the region's size; current_ is the sum of the in-use
//     chunks and reserved_ the sum of the regions, so reserved_ - current_ is the free total;
//   - chunks_ maps the start address of every chunk, free or in use, to it; that is how
//     deallocate() tells a double free (a free chunk's start) from a foreign pointer.
//
// Graph pools (allocator.h). Every chunk belongs to the arena (pool 0) or to one open pool, and a
// free chunk sits in its own pool's bins. A pool takes memory by retagging a free arena chunk it
// splits (the remainder stays in the arena); chunks of different pools never merge; releasing a
// pool retags its free chunks to the arena, merging them with free arena neighbours, and a live
// chunk of a released pool goes to the arena when freed. pooled_free_ is the free bytes in pools.
#include <algorithm>
#include <array>
#include <bit>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <chorus/core/allocator.h>
#include <chorus/core/error.h>
#include <chorus/core/logging.h>

namespace chorus {
namespace {

using internal::str_cat;

// Rounding granule, minimum chunk and alignment in one: cudaMalloc aligns to 256 bytes, and
// keeping every offset a multiple of it preserves that alignment for every chunk.
constexpr std::size_t kGranule = 256;
// First region in growth mode: large enough that a model's many small tensors do not each
// trigger a region, small enough not to matter when the limit is tight.
constexpr std::size_t kInitialRegion = std::size_t{2} << 20;
// Bin i holds free chunks of [256 << i, 256 << (i + 1)) bytes; the last bin also holds larger.
constexpr int kNumBins = 56;
constexpr std::size_t kListedLive = 5;  // live allocations named in an OOM message

// "768 B", "1.50 GiB": the unit a person reads first, two decimals.
std::string format_bytes(std::size_t bytes) {
  if (bytes < 1024) return str_cat(bytes, " B");
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes) / 1024.0;
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.2f %s", value, kUnits[unit]);
  return text;
}

// Always "0x…", unlike operator<<(void*), whose format is implementation-defined.
std::string format_pointer(const void* ptr) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%" PRIxPTR, reinterpret_cast<std::uintptr_t>(ptr));
  return text;
}

std::uintptr_t address(const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr); }

std::size_t round_up(std::size_t bytes) {
  if (bytes == 0) return kGranule;  // allocate(0) still gets its own, unique chunk
  return (bytes + kGranule - 1) / kGranule * kGranule;
}

int bin_index(std::size_t size) {
  return std::min(kNumBins - 1, static_cast<int>(std::bit_width(size / kGranule)) - 1);
}

struct Chunk {
  char* ptr = nullptr;
  std::size_t size = 0;
  bool in_use = false;
  Allocator::PoolId pool = 0;  // 0: the arena
  Chunk* prev = nullptr;       // neighbour at the lower address in the same region, or nullptr
  Chunk* next = nullptr;       // neighbour at the higher address in the same region, or nullptr
  std::string tag;
};

// Orders a bin by (size, address): lower_bound on (n, 0) is then the best fit within the bin,
// and equal sizes prefer the lower address, which keeps allocations packed toward region starts.
struct BySizeThenAddress {
  using is_transparent = void;
  using Key = std::pair<std::size_t, std::uintptr_t>;
  static Key key(const Chunk* c) { return {c->size, address(c->ptr)}; }
  static Key key(const Key& k) { return k; }
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    return key(a) < key(b);
  }
};

// Free chunks by size class: bins[i] holds [256 << i, 256 << (i + 1)) bytes, the last also larger.
struct Bins {
  std::array<std::set<Chunk*, BySizeThenAddress>, kNumBins> sets;
  std::uint64_t nonempty = 0;  // bit i set ⇔ sets[i] is not empty
};

enum class OomReason {
  kExceedsLimit,        // the request alone is larger than the limit
  kNoFit,               // no free block is large enough and the limit allows no new region
  kSubAllocatorFailed,  // the limit allows a new region but the SubAllocator had no memory
};

class BFCAllocator final : public Allocator {
 public:
  BFCAllocator(std::unique_ptr<SubAllocator> sub, BFCOptions options)
      : sub_(std::move(sub)),
        options_(std::move(options)),
        // The limit is floored to the granule so that a region of exactly the limit is still a
        // whole number of minimum chunks.
        limit_(options_.memory_limit / kGranule * kGranule),
        name_(options_.logical_device.empty() ? "bfc_allocator" : options_.logical_device) {}

  ~BFCAllocator() override {
    if (num_live_ > 0) {
      CHORUS_LOG(WARNING) << "the allocator of " << device_description() << " is destroyed with " << num_live_
                          << " live allocation(s) of " << format_bytes(current_) << " (" << current_
                          << " bytes) in total; their memory goes back to " << sub_->describe()
                          << " now, so any pointer to it dangles";
    }
    for (const auto& [base, size] : regions_) {
      // A destructor must not throw; a failing free (e.g. a CUDA error) is reported instead.
      try {
        sub_->free(reinterpret_cast<void*>(base), size);
      } catch (const std::exception& e) {
        CHORUS_LOG(ERROR) << "returning a region of " << format_bytes(size) << " of " << device_description() << " to "
                          << sub_->describe() << " failed: " << e.what();
      }
    }
  }

  BFCAllocator(const BFCAllocator&) = delete;
  BFCAllocator& operator=(const BFCAllocator&) = delete;

  void* allocate(std::size_t bytes, std::string_view tag) override {
    std::lock_guard<std::mutex> lock(mu_);
    // Checked before rounding, which therefore cannot overflow: limit_ is far below SIZE_MAX.
    if (bytes > limit_) throw_oom(bytes, bytes, tag, OomReason::kExceedsLimit, 0);
    const std::size_t rounded = round_up(bytes);
    const PoolId pool = pool_of_this_thread();
    Chunk* chunk = pool == 0 ? nullptr : find_free_chunk(pools_.at(pool), rounded);
    if (chunk == nullptr) chunk = find_free_chunk(arena_, rounded);
    if (chunk == nullptr) chunk = add_region_for(bytes, rounded, tag);
    remove_free(chunk);
    const PoolId from = chunk->pool;  // a split's remainder stays where the chunk was
    chunk->pool = pool;
    if (chunk->size > rounded) split(chunk, rounded, from);
    chunk->in_use = true;
    chunk->tag.assign(tag);
    current_ += chunk->size;
    peak_ = std::max(peak_, current_);
    ++num_allocs_;
    ++num_live_;
    return chunk->ptr;
  }

  void deallocate(void* ptr) override {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    // Every check comes before the first change, so a bad pointer leaves the arena as it was.
    auto it = chunks_.find(address(ptr));
    if (it == chunks_.end()) throw_bad_pointer(ptr);
    Chunk* chunk = it->second;
    if (!chunk->in_use) {
      throw InvalidArgumentError(str_cat("double free of pointer ", format_pointer(ptr), " on ", device_description(),
                                         ": it is not allocated (already passed to deallocate(), or never returned by "
                                         "allocate())"));
    }
    chunk->in_use = false;
    chunk->tag.clear();  // keeps its capacity for the chunk's next user
    current_ -= chunk->size;
    --num_live_;
    if (chunk->pool != 0 && !pools_.contains(chunk->pool)) chunk->pool = 0;  // its pool was released
    if (chunk->pool == 0) chunk->pool = pool_of_this_thread();               // freed inside a capture: the graph's now
    merge_and_insert(chunk);
  }

  MemoryInfo memory_info() const override {
    std::lock_guard<std::mutex> lock(mu_);
    MemoryInfo info;
    info.current = current_;
    info.peak = peak_;
    info.limit = limit_;
    info.reserved = reserved_;
    info.largest_free_block = largest_free_block();
    info.num_allocs = num_allocs_;
    info.num_live = num_live_;
    info.pooled_free = pooled_free_;
    return info;
  }

  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mu_);
    peak_ = current_;
  }

  std::vector<LiveAllocation> largest_live_allocations(std::size_t n) const override {
    std::lock_guard<std::mutex> lock(mu_);
    return largest_live(n);
  }

  const std::string& name() const override { return name_; }

  PoolId create_pool() override {
    std::lock_guard<std::mutex> lock(mu_);
    const PoolId id = next_pool_++;
    pools_.emplace(id, Bins{});
    return id;
  }

  void begin_pool_use(PoolId pool) override {
    std::lock_guard<std::mutex> lock(mu_);
    CHORUS_REQUIRE(pools_.contains(pool), NotFoundError, "graph pool ", pool, " of ", device_description(),
                   " does not exist (never created, or released)");
    auto [it, inserted] = users_.emplace(std::this_thread::get_id(), pool);
    CHORUS_REQUIRE(inserted, FailedPreconditionError, "this thread already allocates from graph pool ", it->second,
                   " of ", device_description(), "; end that use before beginning one of pool ", pool);
  }

  void end_pool_use() noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    users_.erase(std::this_thread::get_id());
  }

  void release_pool(PoolId pool) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pools_.find(pool);
    CHORUS_REQUIRE(it != pools_.end(), NotFoundError, "graph pool ", pool, " of ", device_description(),
                   " does not exist (never created, or already released)");
    for (const auto& [thread, used] : users_) {
      CHORUS_REQUIRE(used != pool, FailedPreconditionError, "graph pool ", pool, " of ", device_description(),
                     " is still in use by a thread (end_pool_use first)");
    }
    std::vector<Chunk*> free_chunks;
    for (const auto& set : it->second.sets) free_chunks.insert(free_chunks.end(), set.begin(), set.end());
    // One at a time: a chunk merges only with arena chunks, among them those retagged before it.
    for (Chunk* chunk : free_chunks) {
      remove_free(chunk);
      chunk->pool = 0;
      merge_and_insert(chunk);
    }
    pools_.erase(it);
  }

 private:
  // The pool the calling thread allocates from; 0 when none.
  PoolId pool_of_this_thread() const {
    if (users_.empty()) return 0;
    auto it = users_.find(std::this_thread::get_id());
    return it == users_.end() ? 0 : it->second;
  }

  Bins& bins_of(const Chunk* chunk) { return chunk->pool == 0 ? arena_ : pools_.at(chunk->pool); }

  // Puts a free chunk that is in no bin (its pool already set) into its pool's bins, merged with
  // free neighbours of the same pool.
  void merge_and_insert(Chunk* chunk) {
    if (chunk->next != nullptr && !chunk->next->in_use && chunk->next->pool == chunk->pool) {
      remove_free(chunk->next);
      absorb_next(chunk);
    }
    if (chunk->prev != nullptr && !chunk->prev->in_use && chunk->prev->pool == chunk->pool) {
      Chunk* prev = chunk->prev;
      remove_free(prev);
      absorb_next(prev);
      chunk = prev;
    }
    insert_free(chunk);
  }

  // ---- bins ----
  void insert_free(Chunk* chunk) {
    Bins& bins = bins_of(chunk);
    const int b = bin_index(chunk->size);
    bins.sets[static_cast<std::size_t>(b)].insert(chunk);
    bins.nonempty |= std::uint64_t{1} << b;
    if (chunk->pool != 0) pooled_free_ += chunk->size;
  }

  // The chunk's size and pool must be the ones it was inserted with (the bin's key).
  void remove_free(Chunk* chunk) {
    Bins& bins = bins_of(chunk);
    const int b = bin_index(chunk->size);
    bins.sets[static_cast<std::size_t>(b)].erase(chunk);
    if (bins.sets[static_cast<std::size_t>(b)].empty()) bins.nonempty &= ~(std::uint64_t{1} << b);
    if (chunk->pool != 0) pooled_free_ -= chunk->size;
  }

  // The smallest free chunk of at least `rounded` bytes (lowest address among equals), or
  // nullptr. Within the request's own bin a lower_bound finds it; failing that, every chunk in
  // any higher non-empty bin fits, and the first such bin's smallest is the best.
  static Chunk* find_free_chunk(const Bins& bins, std::size_t rounded) {
    const int b = bin_index(rounded);
    const auto& own = bins.sets[static_cast<std::size_t>(b)];
    if ((bins.nonempty >> b) & 1) {
      auto it = own.lower_bound(BySizeThenAddress::Key{rounded, 0});
      if (it != own.end()) return *it;
    }
    const std::uint64_t higher = bins.nonempty & (~std::uint64_t{0} << (b + 1));
    if (higher == 0) return nullptr;
    return *bins.sets[static_cast<std::size_t>(std::countr_zero(higher))].begin();
  }

  // The arena's largest free chunk (pools' chunks are not for everyone).
  std::size_t largest_free_chunk() const {
    if (arena_.nonempty == 0) return 0;
    const int top = 63 - std::countl_zero(arena_.nonempty);
    return (*arena_.sets[static_cast<std::size_t>(top)].rbegin())->size;
  }

  // Bytes a new region could still take: with growth, whatever the limit leaves; without,
  // the whole limit until the single region exists.
  std::size_t unreserved() const {
    if (options_.allow_growth) return limit_ - reserved_;
    return regions_.empty() ? limit_ : 0;
  }

  std::size_t largest_free_block() const { return std::max(largest_free_chunk(), unreserved()); }

  // ---- chunks ----
  // Chunk objects are recycled rather than freed: splitting and merging happen on every
  // allocate/deallocate, and the pool keeps the tag strings' capacity too.
  Chunk* new_chunk() {
    if (spare_chunks_.empty()) {
      chunk_storage_.push_back(std::make_unique<Chunk>());
      return chunk_storage_.back().get();
    }
    Chunk* chunk = spare_chunks_.back();
    spare_chunks_.pop_back();
    return chunk;
  }

  void recycle(Chunk* chunk) {
    chunk->ptr = nullptr;
    chunk->size = 0;
    chunk->in_use = false;
    chunk->pool = 0;
    chunk->prev = chunk->next = nullptr;
    chunk->tag.clear();
    spare_chunks_.push_back(chunk);
  }

  // Cuts `chunk` (not in a bin) to `rounded` bytes; the rest becomes a free chunk of `rest_pool`
  // after it (with nothing to merge: its upper neighbour was the chunk's, so not a free chunk of
  // the pool the chunk came from).
  void split(Chunk* chunk, std::size_t rounded, PoolId rest_pool) {
    Chunk* rest = new_chunk();
    rest->ptr = chunk->ptr + rounded;
    rest->size = chunk->size - rounded;
    rest->pool = rest_pool;
    rest->prev = chunk;
    rest->next = chunk->next;
    if (chunk->next != nullptr) chunk->next->prev = rest;
    chunk->next = rest;
    chunk->size = rounded;
    chunks_.emplace(address(rest->ptr), rest);
    insert_free(rest);
  }

  // Merges chunk->next into chunk; neither may be in a bin.
  void absorb_next(Chunk* chunk) {
    Chunk* next = chunk->next;
    chunk->size += next->size;
    chunk->next = next->next;
    if (next->next != nullptr) next->next->prev = chunk;
    chunks_.erase(address(next->ptr));
    recycle(next);
  }

  // ---- regions ----
  // Gets a region that can hold `rounded` bytes and returns its (free, binned) chunk, or throws
  // ResourceExhaustedError. Nothing changes when it throws.
  Chunk* add_region_for(std::size_t bytes, std::size_t rounded, std::string_view tag) {
    if (!options_.allow_growth) {
      // Without growth there is one region of the whole limit, reserved at the first request;
      // once it exists, no fit means out of memory.
      if (!regions_.empty()) throw_oom(bytes, rounded, tag, OomReason::kNoFit, 0);
      void* base = sub_->alloc(limit_);
      if (base == nullptr) {
        throw ResourceExhaustedError(str_cat("OOM reserving the memory limit: ", device_description(), context_suffix(),
                                             " could not get its configured limit of ", format_bytes(limit_), " (",
                                             limit_, " bytes) from ", sub_->describe(), " at its first allocation (",
                                             format_bytes(bytes), tag.empty() ? "" : " for ", tag,
                                             "). The device has less free memory than the limit "
                                             "(other processes or libraries may hold some): lower the limit with "
                                             "set_logical_device_configuration(memory_limit_mb=...), or turn on "
                                             "set_memory_growth to reserve memory on demand."));
      }
      return add_region(base, limit_);
    }
    const std::size_t remaining = limit_ - reserved_;
    if (rounded > remaining) throw_oom(bytes, rounded, tag, OomReason::kNoFit, 0);
    // Doubling keeps the number of regions logarithmic in the memory used, so a long-lived
    // workload is not scattered over many small regions it cannot merge across.
    const std::size_t doubled = last_region_size_ > remaining / 2 ? remaining : 2 * last_region_size_;
    std::size_t size = std::min(remaining, std::max({rounded, kInitialRegion, doubled}));
    void* base = sub_->alloc(size);
    if (base == nullptr && size > rounded) {
      // The system could not give the generous region; the request itself may still fit.
      size = rounded;
      base = sub_->alloc(size);
    }
    if (base == nullptr) throw_oom(bytes, rounded, tag, OomReason::kSubAllocatorFailed, size);
    return add_region(base, size);
  }

  Chunk* add_region(void* base, std::size_t size) {
    Chunk* chunk = new_chunk();
    chunk->ptr = static_cast<char*>(base);
    chunk->size = size;
    regions_.emplace(address(base), size);
    chunks_.emplace(address(base), chunk);
    insert_free(chunk);
    reserved_ += size;
    last_region_size_ = std::max(last_region_size_, size);
    return chunk;
  }

  // ---- reports ----
  // "<logical> (physical <physical>[, <extra>])", leaving out what is empty.
  std::string device_description(const std::string& extra = "") const {
    std::string s = options_.logical_device.empty() ? "an unnamed device" : options_.logical_device;
    std::string details = options_.physical_device.empty() ? "" : "physical " + options_.physical_device;
    if (!extra.empty()) details += (details.empty() ? "" : ", ") + extra;
    if (!details.empty()) s += " (" + details + ")";
    return s;
  }

  // " [rank 0 replica 1]" for a replica thread, "" otherwise.
  static std::string context_suffix() {
    std::string prefix = log_context_prefix();
    while (!prefix.empty() && prefix.back() == ' ') prefix.pop_back();
    return prefix.empty() ? prefix : " " + prefix;
  }

  std::vector<LiveAllocation> largest_live(std::size_t n) const {
    std::vector<const Chunk*> live;
    live.reserve(static_cast<std::size_t>(num_live_));
    for (const auto& [addr, chunk] : chunks_) {
      if (chunk->in_use) live.push_back(chunk);
    }
    n = std::min(n, live.size());
    // Ties broken by address so that reports are reproducible.
    std::partial_sort(live.begin(), live.begin() + static_cast<std::ptrdiff_t>(n), live.end(),
                      [](const Chunk* a, const Chunk* b) {
                        if (a->size != b->size) return a->size > b->size;
                        return address(a->ptr) < address(b->ptr);
                      });
    std::vector<LiveAllocation> out;
    out.reserve(n);
    for (std::size_t i = 0; i < n; ++i) out.push_back({live[i]->ptr, live[i]->size, live[i]->tag});
    return out;
  }

  // The message says what was asked, where, the state of the arena, what holds the memory and
  // what to do, so that a user can act on it without rerunning under a debugger.
  [[noreturn]] void throw_oom(std::size_t bytes, std::size_t rounded, std::string_view tag, OomReason reason,
                              std::size_t region_request) const {
    std::string m = str_cat("OOM when allocating ", format_bytes(bytes), " (", bytes, " bytes");
    if (reason != OomReason::kExceedsLimit && rounded != bytes) {
      m += str_cat(", ", rounded, " after rounding to ", kGranule);
    }
    m += ")";
    if (!tag.empty()) m += str_cat(" for ", tag);
    m += str_cat(" on ", device_description(), context_suffix());

    const std::size_t free_in_chunks = reserved_ - current_ - pooled_free_;
    std::size_t free_blocks = 0;
    for (const auto& set : arena_.sets) free_blocks += set.size();
    const std::size_t not_reserved = unreserved();
    const bool fragmented = reason == OomReason::kNoFit && free_in_chunks + not_reserved >= rounded;
    m += str_cat(": limit ", format_bytes(limit_), ", in use ", format_bytes(current_), ", peak ", format_bytes(peak_),
                 ", reserved ", format_bytes(reserved_), ", largest free block ", format_bytes(largest_free_block()));
    if (free_blocks > 0 || not_reserved > 0) {
      m += fragmented ? " (fragmented: " : " (";
      if (free_blocks > 0) {
        m += str_cat(format_bytes(free_in_chunks), " free in ", free_blocks, free_blocks == 1 ? " block" : " blocks");
      }
      if (not_reserved > 0) {
        m += str_cat(free_blocks > 0 ? " + " : "", format_bytes(not_reserved), " not yet reserved");
      }
      m += ")";
    }
    if (pooled_free_ > 0) {
      m += str_cat(" (", format_bytes(pooled_free_), " more is free but kept for ", pools_.size(),
                   " captured CUDA graph(s); destroying them returns it)");
    }
    m += ". ";

    const std::vector<LiveAllocation> live = largest_live(kListedLive);
    if (live.empty()) {
      m += "No live allocations. ";
    } else {
      m += "Largest live allocations: ";
      // Runs of equal size and tag (a layer's identical weights) are written once with a count.
      for (std::size_t i = 0; i < live.size();) {
        std::size_t run = 1;
        while (i + run < live.size() && live[i + run].bytes == live[i].bytes && live[i + run].tag == live[i].tag) {
          ++run;
        }
        m += str_cat(i == 0 ? "" : ", ", format_bytes(live[i].bytes), " (",
                     live[i].tag.empty() ? "untagged" : live[i].tag, ")");
        if (run > 1) m += str_cat(" x", run);
        i += run;
      }
      const auto listed = static_cast<std::int64_t>(live.size());
      if (num_live_ > listed) m += str_cat(", and ", num_live_ - listed, " more");
      m += ". ";
    }

    const char* raise_limit = "raise the limit with set_logical_device_configuration(memory_limit_mb=...)";
    switch (reason) {
      case OomReason::kExceedsLimit:
        m += str_cat("The request alone is larger than the limit: ", raise_limit,
                     ", or make the tensor smaller (e.g. a smaller batch).");
        break;
      case OomReason::kNoFit:
        m += str_cat("Free tensors you no longer need, use a smaller batch, or ", raise_limit, ".");
        if (fragmented) {
          m += " Enough memory is free, but no single block is large enough: allocating large, "
               "long-lived tensors first reduces fragmentation";
          m += options_.allow_growth ? ", and so does turning memory growth off (the limit is "
                                       "then reserved as one region)."
                                     : ".";
        }
        break;
      case OomReason::kSubAllocatorFailed:
        m += str_cat("The limit allows it, but ", sub_->describe(), " could not provide a region of ",
                     format_bytes(region_request),
                     ": the device itself is out of memory (other "
                     "processes or libraries may hold it). Free that memory, or lower the limit "
                     "with set_logical_device_configuration(memory_limit_mb=...) to what the "
                     "device really has.");
        break;
    }
    throw ResourceExhaustedError(m);
  }

  // Called for a pointer that is no chunk's start: either inside a chunk, or not ours at all.
  [[noreturn]] void throw_bad_pointer(void* ptr) const {
    const std::uintptr_t p = address(ptr);
    auto region = regions_.upper_bound(p);
    if (region != regions_.begin()) {
      --region;
      if (p < region->first + region->second) {
        const Chunk* chunk = chunks_.at(region->first);  // a region always starts with a chunk
        while (p >= address(chunk->ptr) + chunk->size) chunk = chunk->next;
        if (!chunk->in_use) {
          throw InvalidArgumentError(str_cat("pointer ", format_pointer(ptr), " is not allocated: it lies ",
                                             p - address(chunk->ptr), " bytes into a free block of ",
                                             device_description(),
                                             " (a double free, or a pointer that allocate() never returned)"));
        }
        throw InvalidArgumentError(str_cat(
            "pointer ", format_pointer(ptr), " points ", p - address(chunk->ptr), " bytes into the allocation at ",
            format_pointer(chunk->ptr), " (", format_bytes(chunk->size), chunk->tag.empty() ? "" : ", ", chunk->tag,
            ") on ", device_description(), "; deallocate() takes exactly the pointer allocate() returned"));
      }
    }
    throw InvalidArgumentError(
        str_cat("pointer ", format_pointer(ptr), " was not allocated by the allocator of ",
                device_description(sub_->describe()),
                "; it may belong to another device's allocator or to another allocator altogether"));
  }

  const std::unique_ptr<SubAllocator> sub_;
  const BFCOptions options_;
  const std::size_t limit_;
  const std::string name_;

  mutable std::mutex mu_;
  // All below guarded by mu_.
  std::map<std::uintptr_t, std::size_t> regions_;  // base address → size, ordered for lookups
  std::size_t last_region_size_ = 0;
  std::unordered_map<std::uintptr_t, Chunk*> chunks_;  // start address → chunk, free or in use
  Bins arena_;                                         // free chunks of pool 0
  std::unordered_map<PoolId, Bins> pools_;             // free chunks of each open pool
  std::unordered_map<std::thread::id, PoolId> users_;  // thread → the pool it allocates from
  PoolId next_pool_ = 1;
  std::size_t pooled_free_ = 0;  // bytes of the free chunks in pools_
  std::vector<std::unique_ptr<Chunk>> chunk_storage_;
  std::vector<Chunk*> spare_chunks_;
  std::size_t current_ = 0;
  std::size_t peak_ = 0;
  std::size_t reserved_ = 0;
  std::int64_t num_allocs_ = 0;
  std::int64_t num_live_ = 0;
};

}  // namespace

std::unique_ptr<Allocator> make_bfc_allocator(std::unique_ptr<SubAllocator> sub, BFCOptions options) {
  const std::string& device =
      options.logical_device.empty() ? std::string("an unnamed device") : options.logical_device;
  CHORUS_REQUIRE(sub != nullptr, InvalidArgumentError, "make_bfc_allocator: the SubAllocator for ", device, " is null");
  CHORUS_REQUIRE(options.memory_limit >= kGranule, InvalidArgumentError, "make_bfc_allocator: the memory limit of ",
                 device, " is ", options.memory_limit, " bytes; it must be at least ", kGranule, " bytes");
  return std::make_unique<BFCAllocator>(std::move(sub), std::move(options));
}

}  // namespace chorus
