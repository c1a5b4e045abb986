// One GPU per rank: the check that NCCL's ranks (processes, or workers of a multi-worker strategy)
// do not share a physical GPU, made on every process from the same all-gathered claims before NCCL
// is touched (NCCL would fail with "Duplicate GPU detected" or hang). Pure logic: no MPI, NCCL or
// GPU needed, so it is unit-tested anywhere.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace chorus::collective {

// One rank's claim on one physical GPU. A rank that uses several GPUs (a worker with several local
// devices) makes one claim per GPU; claims of one rank on the same GPU (virtual GPUs carved out of
// it) are one claim.
struct GpuClaim {
  int rank = 0;
  std::string host;        // gethostname()
  std::string pci_bus_id;  // "0000:19:00.0" (core/gpu.h); "" when unknown (never conflicts)
  std::string device;      // the logical device, for messages (may be empty)
};

// Throws InvalidArgumentError when ranks claim the same PCI bus id (case-insensitive) on the same
// host: "ranks 0 and 1 both use GPU 0000:19:00.0 on host node7: NCCL needs one GPU per rank; give
// each process its own GPU (e.g. <how>) or use virtual GPUs in one process". Every such group is
// listed (three or more ranks: "ranks 0, 2 and 3 all use ..."; groups joined by "; "). Every
// process checks the same gathered claims, so all of them throw the same error, or none does.
// `how` says how to give each process its own GPU in the caller's terms.
void check_distinct_gpus(const std::vector<GpuClaim>& claims, std::string_view how = "by local rank");

}  // namespace chorus::collective
