#include <chorus/launch/build_info.h>

#include <string>

#include <chorus/core/error.h>
#include <chorus/core/gpu.h>

#if defined(CHORUS_WITH_CUDA)
#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <library_types.h>
#endif
#if defined(CHORUS_WITH_CUDNN)
#include <cudnn.h>
#endif
#if defined(CHORUS_WITH_NCCL)
#include <nccl.h>
#endif
#if defined(CHORUS_WITH_MPI)
#include <mpi.h>
#endif
#if defined(CHORUS_WITH_DNNL)
#include <oneapi/dnnl/dnnl.h>
#endif

namespace chorus::launch {
namespace {

using internal::str_cat;

ComponentInfo not_built(const char* name, const char* why) { return {name, false, "", why}; }

ComponentInfo query_cuda() {
#if defined(CHORUS_WITH_CUDA)
  ComponentInfo c{"CUDA", true, "", ""};
  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess)
    c.version = "runtime " + cuda_version_string(runtime);
  else
    c.version = "runtime unknown";
  int driver = 0;
  const cudaError_t rc = cudaDriverGetVersion(&driver);
  if (rc == cudaSuccess && driver > 0)
    c.version += ", driver " + cuda_version_string(driver);
  else
    c.version += ", driver none";
  c.detail = str_cat("compiled against ", CUDART_VERSION / 1000, ".", (CUDART_VERSION % 1000) / 10);
  return c;
#else
  return not_built("CUDA", "configured without CUDA: GPU devices off (CPU-only build)");
#endif
}

ComponentInfo query_cudnn() {
#if defined(CHORUS_WITH_CUDNN)
  const std::string loaded = cudnn_version_string(static_cast<long>(cudnnGetVersion()));
  const std::string header = cudnn_version_string(CUDNN_VERSION);
  return {"cuDNN", true, loaded, loaded == header ? "" : "compiled against " + header};
#elif defined(CHORUS_WITH_CUDA)
  return not_built("cuDNN", "cudnn.h / libcudnn not found at configure time (set CUDNN_HOME)");
#else
  return not_built("cuDNN", "configured without CUDA");
#endif
}

ComponentInfo query_cublas() {
#if defined(CHORUS_WITH_CUDA)
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS)
    return {"cuBLAS", true, "unknown", "cublasGetProperty failed"};
  return {"cuBLAS", true, str_cat(major, ".", minor, ".", patch), ""};
#else
  return not_built("cuBLAS", "configured without CUDA");
#endif
}

ComponentInfo query_nccl() {
#if defined(CHORUS_WITH_NCCL)
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return {"NCCL", true, "unknown", "ncclGetVersion failed"};
  const std::string loaded = nccl_version_string(version);
  const std::string header = nccl_version_string(NCCL_VERSION_CODE);
  return {"NCCL", true, loaded, loaded == header ? "" : "compiled against " + header};
#elif defined(CHORUS_WITH_CUDA)
  return not_built("NCCL", "nccl.h / libnccl not found at configure time (set NCCL_HOME)");
#else
  return not_built("NCCL", "configured without CUDA");
#endif
}

ComponentInfo query_mpi() {
#if defined(CHORUS_WITH_MPI)
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  if (MPI_Get_library_version(text, &length) != MPI_SUCCESS)
    return {"MPI", true, "unknown", "MPI_Get_library_version failed"};
  std::string library(text, static_cast<std::size_t>(length > 0 ? length : 0));
  // Open MPI's string is one line ending in '\0' or '\n'; MPICH's spans several: keep the first.
  library = library.substr(0, library.find_first_of("\n\r"));
  while (!library.empty() && (library.back() == ' ' || library.back() == '\0')) library.pop_back();
  int major = 0, minor = 0;
  MPI_Get_version(&major, &minor);
  return {"MPI", true, library, str_cat("MPI standard ", major, ".", minor)};
#else
  return not_built("MPI", "configured without MPI: multi-process off (apt-get install libopenmpi-dev openmpi-bin)");
#endif
}

ComponentInfo query_dnnl() {
#if defined(CHORUS_WITH_DNNL)
  const dnnl_version_t* v = dnnl_version();
  return {"oneDNN", true, str_cat(v->major, ".", v->minor, ".", v->patch), str_cat("git ", v->hash)};
#else
  return not_built("oneDNN", "configured without oneDNN: plain C++ CPU kernels (apt-get install libdnnl-dev)");
#endif
}

ComponentInfo query_gpus() {
  const int count = gpu::device_count();
  return {"GPUs visible", gpu::compiled_with_cuda(), std::to_string(count),
          count == 0 ? gpu::unavailable_reason() : ""};
}

}  // namespace

std::string cuda_version_string(int version) { return str_cat(version / 1000, ".", (version % 1000) / 10); }

std::string cudnn_version_string(long version) {
  if (version >= 10000) return str_cat(version / 10000, ".", (version % 10000) / 100, ".", version % 100);
  return str_cat(version / 1000, ".", (version % 1000) / 100, ".", version % 100);
}

std::string nccl_version_string(int version) {
  if (version >= 10000) return str_cat(version / 10000, ".", (version % 10000) / 100, ".", version % 100);
  return str_cat(version / 1000, ".", (version % 1000) / 100, ".", version % 100);
}

std::vector<ComponentInfo> query_build_info() {
  return {query_cuda(), query_cudnn(), query_cublas(), query_nccl(), query_mpi(), query_dnnl(), query_gpus()};
}

std::string format_component(const ComponentInfo& c) {
  std::string line = c.name + ": ";
  if (c.name == "GPUs visible" || c.compiled_in)
    line += c.version;
  else
    line += "not built";
  if (!c.detail.empty()) line += " (" + c.detail + ")";
  return line;
}

}  // namespace chorus::launch
