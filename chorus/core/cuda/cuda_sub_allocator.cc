// cudaMalloc as the SubAllocator of GPU logical devices (built only with CUDA).
#include <cuda_runtime_api.h>

#include <chorus/core/cuda/check.h>
#include <chorus/core/gpu.h>

namespace chorus::gpu {
namespace {

class CudaSubAllocator final : public SubAllocator {
 public:
  explicit CudaSubAllocator(int ordinal) : ordinal_(ordinal) {}

  void* alloc(std::size_t bytes) override {
    internal::DeviceGuard guard(ordinal_);
    void* p = nullptr;
    // A region may be reserved while this thread captures a CUDA graph (core/graph_capture.h).
    // cudaMalloc is not stream-ordered, so a capture in thread-local mode forbids it; the region
    // outlives every graph (regions go back only when the allocator dies), so it is safe in
    // relaxed mode, which this call switches to and back.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    CHORUS_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    cudaError_t err = cudaMalloc(&p, bytes);
    (void)cudaThreadExchangeStreamCaptureMode(&mode);  // unchecked: it succeeded one call ago
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear the sticky-free error so later calls are unaffected
      return nullptr;            // the arena turns this into a ResourceExhaustedError with context
    }
    CHORUS_CUDA_CHECK(err);
    return p;  // cudaMalloc aligns to at least 256 bytes
  }

  void free(void* ptr, std::size_t) override {
    // Called from destructors: a failure here is logged by the caller's context, never thrown.
    try {
      internal::DeviceGuard guard(ordinal_);
      if (cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
    } catch (...) {
      (void)cudaGetLastError();
    }
  }

  std::string describe() const override { return "cudaMalloc on GPU:" + std::to_string(ordinal_); }

 private:
  int ordinal_;
};

}  // namespace

std::unique_ptr<SubAllocator> make_cuda_sub_allocator(int ordinal) {
  return std::make_unique<CudaSubAllocator>(ordinal);
}

}  // namespace chorus::gpu
