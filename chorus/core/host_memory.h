// Host memory devices: host RAM that is NOT a logical device's memory budget, for state a strategy
// offloads from its replicas' devices (ZeRO-Offload / FSDP's CPUOffloadPolicy: optimizer slots,
// distribute/optimizer_offload.h).
//
//   std::shared_ptr<chorus::DeviceContext> h = chorus::runtime::host_memory(r, /*pinned=*/true);
//   chorus::Tensor m = chorus::Tensor::zeros({1024}, chorus::DType::kFloat32, h->name());
//
// Each is a CPU DeviceContext of its own — an allocator, a stream, an intra-op thread share — so
// that ops (the optimizer's CPU kernels) run on tensors there like on any CPU device, and tensors
// copy to and from it with Tensor::to / copy_from. They are not logical devices: they are not
// listed by config::list_logical_devices() or counted by placement, but their names resolve
// everywhere a device name does (runtime::find, Tensor::to, config::get_memory_info):
//   "/job:host_memory/replica:0/task:0/device:CPU:<i>"          pageable host memory;
//   "/job:pinned_host_memory/replica:0/task:0/device:CPU:<i>"   page-locked (cudaHostAlloc,
//                                                                portable to every GPU), so that
//                                                                copies with a GPU are DMA and
//                                                                asynchronous.
// `i` tells independent users apart (a strategy uses its local replica index): each (i, pinned)
// is one device, created at its first use and alive until the process ends.
// Memory: the allocator is the same best-fit arena as a logical CPU device's, with no limit but the
// host's RAM (config::get_memory_info reports limit = the host's RAM); running out raises
// ResourceExhaustedError naming the device, as on any device.
// Threads: ops on device i run with `intra_op_threads` OpenMP threads, fixed by the first call.
// Errors: pinned without CUDA (or without a GPU) → UnavailableError at the first allocation;
// i < 0 or intra_op_threads < 1 → InvalidArgumentError. Thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string_view>

#include <chorus/core/device_spec.h>
#include <chorus/core/runtime.h>

namespace chorus::runtime {

inline constexpr std::string_view kHostMemoryJob = "host_memory";
inline constexpr std::string_view kPinnedHostMemoryJob = "pinned_host_memory";

// Host memory device `index` (see above), created at the first call.
std::shared_ptr<DeviceContext> host_memory(int index, bool pinned, int intra_op_threads);

// True when `device` names a host memory device (either job). For messages and tests.
bool is_host_memory(std::string_view device);

namespace internal {
// runtime::match's lookup for specs whose job is one of the two above: the device already created
// with that job and index (nullptr when none). Other specs → std::nullopt (not a host memory spec).
std::optional<std::shared_ptr<DeviceContext>> match_host_memory(const DeviceSpec& spec);
// Page-locked host memory (cudaHostAlloc, portable): core/cuda/pinned_sub_allocator.cc with CUDA,
// else a SubAllocator whose alloc throws UnavailableError.
std::unique_ptr<SubAllocator> make_pinned_host_sub_allocator();
}  // namespace internal

}  // namespace chorus::runtime
