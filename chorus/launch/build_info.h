// What this build of chorus contains, asked of the libraries themselves (chorus-run --check-build):
// the CUDA runtime and driver, cuDNN, cuBLAS, NCCL, MPI, oneDNN, and how many GPUs are visible.
//
//   for (const auto& c : chorus::launch::query_build_info()) std::cout << format_component(c) << "\n";
//   // CUDA: runtime 13.0, driver none (CUDA driver version is insufficient for CUDA runtime version)
//   // cuDNN: 9.19.0
//   // ...
//   // GPUs visible: 0 (CUDA driver version is insufficient for CUDA runtime version)
//
// A library this build was configured without is reported as "not built" with the reason
// (`compiled_in` false); the others report the version the *loaded* library returns at run time
// (cudaRuntimeGetVersion, cudaDriverGetVersion, cudnnGetVersion, cublasGetProperty,
// ncclGetVersion, MPI_Get_library_version, dnnl_version), which is what a user debugging a
// mismatched LD_LIBRARY_PATH needs, plus the header version it was compiled against where it
// differs. None of these calls needs a GPU or MPI_Init (MPI_Get_library_version may be called
// before MPI_Init). No GPU is not an error: "GPUs visible: 0" and the CUDA runtime's reason.
//
// Thread-safe; never throws for a missing device or driver (those are facts to print). Each query
// is one cheap call; nothing is initialized beyond what the CUDA runtime does on its first call.
#pragma once

#include <string>
#include <vector>

namespace chorus::launch {

struct ComponentInfo {
  std::string name;          // "CUDA", "cuDNN", "cuBLAS", "NCCL", "MPI", "oneDNN", "GPUs visible"
  bool compiled_in = false;  // false: this build has no support for it
  std::string version;       // e.g. "9.19.0"; for "GPUs visible" the count; "" when not built
  std::string detail;        // one line: the reason it is missing, or extra facts (driver, vendor)
};

// The components in the order above. "GPUs visible" is always present (compiled_in = CUDA's).
std::vector<ComponentInfo> query_build_info();

// "name: version (detail)" or "name: not built (detail)"; "GPUs visible: N[ (reason)]".
std::string format_component(const ComponentInfo& info);

// Decodes the integer versions the libraries return (major*1000+minor*10 for CUDA: 13000 → "13.0";
// cuDNN 9+: major*10000+minor*100+patch, cuDNN 8: major*1000+minor*100+patch; NCCL >= 2.9:
// major*10000+minor*100+patch, older: major*1000+minor*100+patch). Exposed for tests.
std::string cuda_version_string(int version);
std::string cudnn_version_string(long version);
std::string nccl_version_string(int version);

}  // namespace chorus::launch
