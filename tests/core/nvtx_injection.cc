// A minimal NVTX injection library for core_nvtx_test (the mechanism Nsight Systems uses): the
// NVTX loader dlopens the library named by NVTX_INJECTION64_PATH and calls its
// InitializeInjectionNvtx2, which replaces the core module's RangePushA and RangePop with functions
// that record the labels and count the pops, read back by chorus_nvtx_test_read.
#include <nvtx3/nvToolsExt.h>

#include <mutex>
#include <string>
#include <vector>

namespace {

std::mutex g_mu;
std::vector<std::string> g_pushed;
int g_pops = 0;

int NVTX_API push_a(const char* message) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_pushed.emplace_back(message != nullptr ? message : "");
  return static_cast<int>(g_pushed.size()) - 1;
}

int NVTX_API pop() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_pops++;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  if (callbacks == nullptr) return 0;
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) || table == nullptr ||
      size <= NVTX_CBID_CORE_RangePop)
    return 0;
  *table[NVTX_CBID_CORE_RangePushA] = reinterpret_cast<NvtxFunctionPointer>(&push_a);
  *table[NVTX_CBID_CORE_RangePop] = reinterpret_cast<NvtxFunctionPointer>(&pop);
  return 1;
}

extern "C" __attribute__((visibility("default"))) void chorus_nvtx_test_read(std::vector<std::string>* pushed,
                                                                             int* pops) {
  std::lock_guard<std::mutex> lock(g_mu);
  *pushed = g_pushed;
  *pops = g_pops;
}
