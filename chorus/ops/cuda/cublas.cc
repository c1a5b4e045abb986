// gemm through cuBLAS (ops/cuda/libraries.h).
//
// Row-major to column-major: cuBLAS reads a row-major r×c matrix as its column-major c×r
// transpose, so C = op(A)·op(B) (row-major) is computed as C^T = op(B)^T · op(A)^T (column-major)
// by passing B first and A second with the same transpose flags; ldc = n.
//
// Precision: float32 with CUBLAS_COMPUTE_32F_FAST_TF32 while TensorFloat-32 is enabled (core/
// config.h; cuBLAS uses TF32 tensor cores on compute capability 8.0+ only), else CUBLAS_COMPUTE_32F
// (results comparable to the CPU kernel), float16/bfloat16 with CUBLAS_COMPUTE_32F (float accumulation, rounded once),
// float64 with CUBLAS_COMPUTE_64F. cuBLAS uses its own default workspace pool; with one stream per
// handle its results are bitwise reproducible run to run (cuBLAS's reproducibility rule).
#include <cublas_v2.h>
#include <library_types.h>

#include <climits>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include <chorus/core/config.h>
#include <chorus/core/cuda/check.h>
#include <chorus/core/error.h>
#include <chorus/core/gpu.h>
#include <chorus/ops/cuda/check.h>
#include <chorus/ops/cuda/libraries.h>

namespace chorus::ops::cuda {
namespace {

using ::chorus::internal::str_cat;

// One handle per logical device, created on its GPU and never destroyed (handles outlive every
// caller; destroying them at exit would race the CUDA runtime's own teardown). The mutex
// serializes calls on the handle: cuBLAS handles are not safe to share between threads that set
// streams concurrently.
struct CublasHandle {
  std::mutex mu;
  cublasHandle_t handle = nullptr;
};

// Keyed by (DeviceContext*, ordinal): a context created after a runtime reset at a reused address
// on another GPU gets its own handle.
CublasHandle& handle_for(DeviceContext& dev) {
  static std::mutex registry_mu;
  static std::map<std::pair<const DeviceContext*, int>, std::unique_ptr<CublasHandle>> registry;
  std::lock_guard<std::mutex> lock(registry_mu);
  auto& slot = registry[{&dev, dev.gpu_ordinal()}];
  if (!slot) {
    auto h = std::make_unique<CublasHandle>();
    gpu::internal::DeviceGuard guard(dev.gpu_ordinal());
    CHORUS_CUBLAS_CHECK(cublasCreate(&h->handle));
    slot = std::move(h);
  }
  return *slot;
}

int to_int(std::int64_t v, const char* what) {
  CHORUS_REQUIRE(v >= 0 && v <= INT_MAX, InvalidArgumentError, "matmul: ", what, " = ", v,
                 " is outside cuBLAS's int range [0, ", INT_MAX, "]");
  return static_cast<int>(v);
}

}  // namespace

void gemm(DeviceContext& dev, DType dtype, const void* a, std::int64_t a_batch_stride, const void* b,
          std::int64_t b_batch_stride, void* c, std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k,
          bool trans_a, bool trans_b) {
  CHORUS_REQUIRE(dev.is_gpu(), InvalidArgumentError, "matmul: cuBLAS needs a GPU device, got ", dev.name());
  cudaDataType_t type;
  cublasComputeType_t compute;
  switch (dtype) {
    case DType::kFloat32:
      type = CUDA_R_32F;
      compute = config::tensor_float_32_execution_enabled() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
      break;
    case DType::kFloat64:
      type = CUDA_R_64F;
      compute = CUBLAS_COMPUTE_64F;
      break;
    case DType::kFloat16:
      type = CUDA_R_16F;
      compute = CUBLAS_COMPUTE_32F;
      break;
    case DType::kBFloat16:
      type = CUDA_R_16BF;
      compute = CUBLAS_COMPUTE_32F;
      break;
    default:
      throw InvalidArgumentError(str_cat("matmul on GPU: dtype ", dtype_name(dtype),
                                         " is not supported (float32, float64, float16, bfloat16)"));
  }
  CHORUS_REQUIRE(a_batch_stride >= 0 && b_batch_stride >= 0, InvalidArgumentError, "matmul: negative batch stride (",
                 a_batch_stride, ", ", b_batch_stride, ")");
  const int ib = to_int(batch, "batch"), im = to_int(m, "m"), in = to_int(n, "n"), ik = to_int(k, "k");
  if (ib == 0 || im == 0 || in == 0) return;
  const int ordinal = dev.gpu_ordinal();
  auto stream = dev.stream().native_handle();
  if (ik == 0) {
    // An empty sum: C = 0 (no cuBLAS call; its k == 0 behaviour is not worth relying on).
    gpu::fill_async(ordinal, stream, c, static_cast<std::size_t>(batch * m * n), dtype_size(dtype), 0);
    return;
  }
  // Column-major operands: first = B (col-major n×k when not transposed, ld n; k×n stored when
  // trans_b, ld k), second = A (col-major k×m, ld k; m×k stored when trans_a, ld m).
  const cublasOperation_t op_first = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int ld_first = trans_b ? ik : in;
  const int ld_second = trans_a ? im : ik;
  const int ldc = in;
  const long long stride_c = static_cast<long long>(m) * n;

  const float alpha_f = 1.0f, beta_f = 0.0f;
  const double alpha_d = 1.0, beta_d = 0.0;
  const void* alpha = compute == CUBLAS_COMPUTE_64F ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = compute == CUBLAS_COMPUTE_64F ? static_cast<const void*>(&beta_d) : &beta_f;

  CublasHandle& h = handle_for(dev);
  std::lock_guard<std::mutex> lock(h.mu);
  gpu::internal::DeviceGuard guard(ordinal);
  CHORUS_CUBLAS_CHECK(cublasSetStream(h.handle, static_cast<cudaStream_t>(stream)));
  CHORUS_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h.handle, op_first, op_second, in, im, ik, alpha, b, type, ld_first,
                                                 static_cast<long long>(b_batch_stride), a, type, ld_second,
                                                 static_cast<long long>(a_batch_stride), beta, c, type, ldc, stride_c,
                                                 ib, compute, CUBLAS_GEMM_DEFAULT));
}

}  // namespace chorus::ops::cuda
