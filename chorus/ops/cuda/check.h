// CHORUS_CUBLAS_CHECK(call) and CHORUS_CUDNN_CHECK(call): the cuBLAS and cuDNN twins of
// core/cuda/check.h's CHORUS_CUDA_CHECK (docs/style.md habit 5). A failing call throws the chorus error
// that matches the library status, naming the call, file, line and the library's own status
// string:
//   allocation failures                     → ResourceExhaustedError
//   bad parameters (cuBLAS INVALID_VALUE,
//   cuDNN's whole BAD_PARAM category)        → InvalidArgumentError
//   everything else                          → InternalError
// Host C++ only (ops/cuda/cublas.cc, ops/cuda/cudnn.cc); .cu files never include it. The cuDNN
// half is compiled only with CHORUS_WITH_CUDNN.
#pragma once

#include <cublas_v2.h>

#include <string>

#include <chorus/core/error.h>

#ifdef CHORUS_WITH_CUDNN
#include <cudnn.h>
#endif

namespace chorus::ops::cuda::internal {

[[noreturn]] inline void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  const std::string msg = ::chorus::internal::str_cat(call, " failed: ", cublasGetStatusName(status), " (",
                                                      cublasGetStatusString(status), ") at ", file, ":", line);
  switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED: throw ResourceExhaustedError(msg);
    case CUBLAS_STATUS_INVALID_VALUE: throw InvalidArgumentError(msg);
    default: throw InternalError(msg);
  }
}

#ifdef CHORUS_WITH_CUDNN
[[noreturn]] inline void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line) {
  const std::string msg = ::chorus::internal::str_cat(call, " failed: ", cudnnGetErrorString(status), " (status ",
                                                      static_cast<int>(status), ") at ", file, ":", line);
  // cuDNN 9 groups statuses by thousands (CUDNN_STATUS_CATEGORY); CUDNN_STATUS_ALLOC_FAILED is a
  // deprecated alias of the host-allocation code.
  if (status == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
      status == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
    throw ResourceExhaustedError(msg);
  if (CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_BAD_PARAM) throw InvalidArgumentError(msg);
  throw InternalError(msg);
}
#endif

}  // namespace chorus::ops::cuda::internal

#define CHORUS_CUBLAS_CHECK(call)                                                                   \
  do {                                                                                              \
    cublasStatus_t chorus_status_ = (call);                                                         \
    if (chorus_status_ != CUBLAS_STATUS_SUCCESS)                                                    \
      ::chorus::ops::cuda::internal::throw_cublas_error(chorus_status_, #call, __FILE__, __LINE__); \
  } while (0)

#ifdef CHORUS_WITH_CUDNN
#define CHORUS_CUDNN_CHECK(call)                                                                   \
  do {                                                                                             \
    cudnnStatus_t chorus_status_ = (call);                                                         \
    if (chorus_status_ != CUDNN_STATUS_SUCCESS)                                                    \
      ::chorus::ops::cuda::internal::throw_cudnn_error(chorus_status_, #call, __FILE__, __LINE__); \
  } while (0)
#endif
