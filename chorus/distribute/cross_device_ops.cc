#include <chorus/distribute/cross_device_ops.h>

#include <atomic>
#include <set>

#include <chorus/collective/nccl/nccl.h>
#include <chorus/collective/reference.h>
#include <chorus/collective/shared_memory.h>
#include <chorus/collective/virtual_gpu.h>
#include <chorus/core/error.h>
#include <chorus/core/logging.h>

namespace chorus::distribute {
namespace {

using internal::str_cat;

struct Census {
  int cpus = 0;
  int gpus = 0;
  std::set<std::string> physical_gpus;
};

Census count(const std::vector<LogicalDevice>& devices) {
  Census c;
  for (const auto& d : devices) {
    if (d.device_type == "GPU") {
      ++c.gpus;
      c.physical_gpus.insert(d.physical_name);
    } else {
      ++c.cpus;
    }
  }
  return c;
}

CrossDeviceChoice automatic(const Census& c, std::size_t k) {
  if (c.gpus == 0)
    return {CrossDeviceOps::kSharedMemory,
            str_cat(k, " logical CPU device(s): shared-memory all-reduce between replica threads")};
  if (c.cpus > 0)
    return {CrossDeviceOps::kReductionToOneDevice,
            str_cat("CPU and GPU devices mixed (", c.cpus, " CPU, ", c.gpus, " GPU): reduction to one device")};
  if (c.physical_gpus.size() == static_cast<std::size_t>(c.gpus)) {
    if (c.gpus == 1)
      return {CrossDeviceOps::kVirtualGpu, "a single GPU replica: the virtual-GPU backend (no NCCL needed)"};
    if (!collective::nccl_version().empty())
      return {CrossDeviceOps::kNccl, str_cat(c.gpus, " logical GPUs on ", c.gpus, " distinct physical GPUs: NCCL")};
    return {CrossDeviceOps::kReductionToOneDevice,
            str_cat(c.gpus, " distinct physical GPUs but this build has no NCCL: reduction to one device")};
  }
  if (c.physical_gpus.size() == 1) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      CHORUS_LOG(WARNING) << "NCCL is not supported when using virtual GPUs; using chorus's fused virtual-GPU "
                             "all-reduce instead (TensorFlow would fall back to reduction to one device)";
    return {CrossDeviceOps::kVirtualGpu,
            str_cat(c.gpus, " logical GPUs on one physical GPU (", *c.physical_gpus.begin(),
                    "): NCCL refuses two ranks on one GPU, so the fused virtual-GPU all-reduce")};
  }
  return {CrossDeviceOps::kReductionToOneDevice, str_cat(c.gpus, " logical GPUs on ", c.physical_gpus.size(),
                                                         " physical GPUs, some shared: reduction to one device")};
}

}  // namespace

std::string_view cross_device_ops_name(CrossDeviceOps ops) {
  switch (ops) {
    case CrossDeviceOps::kAuto: return "auto";
    case CrossDeviceOps::kSharedMemory: return "shared_memory";
    case CrossDeviceOps::kVirtualGpu: return "virtual_gpu";
    case CrossDeviceOps::kNccl: return "nccl";
    case CrossDeviceOps::kReductionToOneDevice: return "reduction_to_one_device";
  }
  return "?";
}

CrossDeviceChoice choose_cross_device_ops(const std::vector<LogicalDevice>& devices, CrossDeviceOps requested) {
  CHORUS_REQUIRE(!devices.empty(), InvalidArgumentError, "choose_cross_device_ops: no devices");
  const Census c = count(devices);
  const std::string forced = str_cat("cross_device_ops=", cross_device_ops_name(requested), " was requested");
  switch (requested) {
    case CrossDeviceOps::kAuto: return automatic(c, devices.size());
    case CrossDeviceOps::kSharedMemory:
      CHORUS_REQUIRE(c.gpus == 0, InvalidArgumentError, forced, " but ", c.gpus,
                     " of the devices are GPUs; shared "
                     "memory reduces host memory of logical CPU devices");
      return {requested, forced};
    case CrossDeviceOps::kVirtualGpu:
      CHORUS_REQUIRE(c.cpus == 0 && c.physical_gpus.size() == 1, InvalidArgumentError, forced, " but the devices are ",
                     c.cpus, " CPU(s) and GPUs on ", c.physical_gpus.size(),
                     " physical GPU(s); the virtual-GPU "
                     "backend needs logical GPUs of one physical GPU");
      return {requested, forced};
    case CrossDeviceOps::kNccl:
      CHORUS_REQUIRE(!collective::nccl_version().empty(), UnavailableError, forced, " but this build has no NCCL");
      CHORUS_REQUIRE(c.cpus == 0, InvalidArgumentError, forced, " but ", c.cpus, " of the devices are CPUs");
      CHORUS_REQUIRE(c.physical_gpus.size() == static_cast<std::size_t>(c.gpus), InvalidArgumentError, forced, " but ",
                     c.gpus, " logical GPUs share ", c.physical_gpus.size(),
                     " physical GPU(s): NCCL refuses two ranks on one GPU (it would fail or hang); use virtual_gpu");
      return {requested, forced};
    case CrossDeviceOps::kReductionToOneDevice: return {requested, forced};
  }
  throw InternalError("unknown CrossDeviceOps");
}

std::vector<std::unique_ptr<collective::Communicator>> make_cross_device_communicators(
    const std::vector<LogicalDevice>& devices, const CrossDeviceChoice& choice) {
  std::vector<std::string> names;
  for (const auto& d : devices) names.push_back(d.name);
  const int k = static_cast<int>(devices.size());
  switch (choice.ops) {
    case CrossDeviceOps::kSharedMemory: return collective::make_shared_memory_group(k);
    case CrossDeviceOps::kVirtualGpu: return collective::make_virtual_gpu_group(names);
    case CrossDeviceOps::kNccl: return collective::make_nccl_group(names);
    case CrossDeviceOps::kReductionToOneDevice:
      // Any devices, mixed too: GPU tensors travel through host copies (collective/reference.h).
      return collective::make_reference_group(k);
    case CrossDeviceOps::kAuto: break;
  }
  throw InvalidArgumentError(
      "make_cross_device_communicators: the choice is still 'auto'; call choose_cross_device_ops first");
}

}  // namespace chorus::distribute
