// Page-locked host memory (cudaHostAlloc, portable to every GPU) as the SubAllocator of the pinned
// host memory devices (core/host_memory.h). Built only with CUDA.
#include <cuda_runtime_api.h>

#include <chorus/core/cuda/check.h>
#include <chorus/core/gpu.h>
#include <chorus/core/host_memory.h>

namespace chorus::runtime::internal {
namespace {

class PinnedSubAllocator final : public SubAllocator {
 public:
  void* alloc(std::size_t bytes) override {
    CHORUS_REQUIRE(gpu::device_count() > 0, UnavailableError,
                   "pinned host memory needs a GPU: ", gpu::unavailable_reason());
    void* p = nullptr;
    cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;  // the arena turns this into a ResourceExhaustedError with context
    }
    CHORUS_CUDA_CHECK(err);
    return p;  // page-aligned
  }

  void free(void* ptr, std::size_t) override {
    if (cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();  // called from destructors: never throws
  }

  std::string describe() const override { return "pinned host memory (cudaHostAlloc)"; }
};

}  // namespace

std::unique_ptr<SubAllocator> make_pinned_host_sub_allocator() { return std::make_unique<PinnedSubAllocator>(); }

}  // namespace chorus::runtime::internal
