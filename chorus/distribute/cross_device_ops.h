// Choosing how replicas' gradients are reduced (TF's `cross_device_ops`), from the physical
// device behind each logical device — not from device counts, which is where TensorFlow's
// heuristic misfires when GPUs are merely hidden (tensorflow#44797).
//
//   devices                                         automatic choice
//   all logical CPU devices                          shared_memory (replica threads, host memory)
//   logical GPUs on distinct physical GPUs           nccl
//   logical GPUs all carved out of one physical GPU  virtual_gpu (NCCL refuses two ranks on one
//                                                    GPU; TF would fall back to reduction to one
//                                                    device — logged once, like TF's warning)
//   anything else (CPU+GPU mixed; GPUs of which only
//   some share a physical GPU)                       reduction_to_one_device
//
// A user may force an implementation; forcing one that cannot work on these devices is an error
// raised here, before any replica runs — never a hang: NCCL on virtual GPUs, virtual_gpu on
// distinct GPUs or CPUs, shared_memory on GPUs → InvalidArgumentError; NCCL without NCCL in the
// build → UnavailableError. The choice carries a sentence saying why, which strategies expose.
// Thread-safe (pure functions; logging aside).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/collective/communicator.h>
#include <chorus/core/device.h>

namespace chorus::distribute {

enum class CrossDeviceOps { kAuto, kSharedMemory, kVirtualGpu, kNccl, kReductionToOneDevice };

// "auto", "shared_memory", "virtual_gpu", "nccl", "reduction_to_one_device".
std::string_view cross_device_ops_name(CrossDeviceOps ops);

struct CrossDeviceChoice {
  CrossDeviceOps ops = CrossDeviceOps::kAuto;  // never kAuto once chosen
  std::string reason;                          // "4 logical GPUs on 4 distinct physical GPUs: NCCL"
};

// Decides for the replicas on `devices` (in replica order). Empty list → InvalidArgumentError.
CrossDeviceChoice choose_cross_device_ops(const std::vector<LogicalDevice>& devices,
                                          CrossDeviceOps requested = CrossDeviceOps::kAuto);

// One communicator per device (element r for the replica on devices[r]) implementing `choice`.
// reduction_to_one_device works on any devices (GPU tensors through host copies).
std::vector<std::unique_ptr<collective::Communicator>> make_cross_device_communicators(
    const std::vector<LogicalDevice>& devices, const CrossDeviceChoice& choice);

}  // namespace chorus::distribute
