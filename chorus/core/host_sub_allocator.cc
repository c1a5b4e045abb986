// The SubAllocator of CPU logical devices: aligned host memory.
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>

#include <chorus/core/allocator.h>

namespace chorus {
namespace {

// 256 bytes matches what cudaMalloc guarantees, so host and GPU arenas hand out pointers with
// the same alignment and kernels written for one work on the other (e.g. vectorised loads).
constexpr std::size_t kHostAlignment = 256;

class HostSubAllocator final : public SubAllocator {
 public:
  void* alloc(std::size_t bytes) override {
    // std::aligned_alloc requires the size to be a multiple of the alignment; a size that
    // would overflow when rounded cannot be satisfied anyway, so report it as "no memory".
    if (bytes > std::numeric_limits<std::size_t>::max() - (kHostAlignment - 1)) return nullptr;
    std::size_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    if (rounded == 0) rounded = kHostAlignment;  // aligned_alloc(…, 0) may return nullptr
    return std::aligned_alloc(kHostAlignment, rounded);
  }

  void free(void* ptr, std::size_t /*bytes*/) override { std::free(ptr); }

  std::string describe() const override { return "host memory"; }
};

}  // namespace

std::unique_ptr<SubAllocator> make_host_sub_allocator() { return std::make_unique<HostSubAllocator>(); }

}  // namespace chorus
