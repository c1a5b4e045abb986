// CHORUS_CUDA_CHECK(call): every CUDA runtime call in core/ goes through it (docs/style.md habit 5).
// A failing call throws the matching chorus error naming the call, file, line and CUDA's own
// error name and string. Only included by .cc/.cu files built with CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include <chorus/core/error.h>

namespace chorus::gpu::internal {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  std::string msg = ::chorus::internal::str_cat(call, " failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err),
                                                ") at ", file, ":", line);
  switch (err) {
    case cudaErrorMemoryAllocation: throw ResourceExhaustedError(msg);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer: throw InvalidArgumentError(msg);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver: throw UnavailableError(msg);
    default: throw InternalError(msg);
  }
}

}  // namespace chorus::gpu::internal

#define CHORUS_CUDA_CHECK(call)                                                                                        \
  do {                                                                                                                 \
    cudaError_t chorus_err_ = (call);                                                                                  \
    if (chorus_err_ != cudaSuccess) ::chorus::gpu::internal::throw_cuda_error(chorus_err_, #call, __FILE__, __LINE__); \
  } while (0)

namespace chorus::gpu::internal {

// Makes `ordinal` the calling thread's current device for its lifetime and restores the previous
// one afterwards, so chorus never leaves a replica thread on another GPU than its own.
class DeviceGuard {
 public:
  explicit DeviceGuard(int ordinal) {
    CHORUS_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != ordinal) {
      CHORUS_CUDA_CHECK(cudaSetDevice(ordinal));
      changed_ = true;
    }
  }
  ~DeviceGuard() {
    if (changed_ && cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

}  // namespace chorus::gpu::internal
