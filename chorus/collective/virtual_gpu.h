// Collectives between virtual GPUs: logical GPU devices carved out of one physical GPU.
//
//   auto gpu = chorus::config::list_physical_devices("GPU")[0];
//   chorus::config::set_logical_device_configuration(gpu, {{.memory_limit_mb = 4096}, {.memory_limit_mb = 4096}});
//   auto comms = chorus::collective::make_virtual_gpu_group({"/gpu:0", "/gpu:1"});
//   // replica thread r, tensors on /gpu:r:
//   comms[r]->all_reduce(grad, grad)->wait();
//
// Why a backend of its own: NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), and
// TensorFlow's fallback for virtual GPUs copies everything to one device and back. Here, after
// the participants meet on the host, rank 0's stream waits for every participant's stream (events
// recorded when they called), then ONE fused kernel reads the k inputs and writes the k outputs
// (2·k·N bytes of device memory traffic, the minimum); every participant's stream then waits for
// that kernel's event. Nothing is copied to the host and no participant's data travels twice.
// broadcast and all_gather are device-to-device copies on rank 0's stream; reduce and
// reduce_scatter are the same fused kernel with one output per launch.
//
// Streams and blocking: the call returns as soon as the work is enqueued (after the host-side
// meeting); the returned Work completes with the kernel. Later work on each participant's stream
// is ordered after the collective, so its tensors may be used and freed right away in stream
// order. Work::wait(timeout) blocks the host until completion.
//
// Requirements: every participant's tensors live on its own logical GPU (devices[rank]); all those
// devices share one physical GPU (distinct GPUs → use NCCL: InvalidArgumentError says so); at
// most 16 participants. Contract, errors, timeouts: communicator.h and in_process.h.
// Built without CUDA, make_virtual_gpu_group throws UnavailableError.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <chorus/collective/communicator.h>

namespace chorus::collective {

// One communicator per device in `devices` (logical GPU names, any DeviceSpec form); element r is
// rank r's.
std::vector<std::unique_ptr<Communicator>> make_virtual_gpu_group(const std::vector<std::string>& devices,
                                                                  const std::string& name = "virtual_gpu");

}  // namespace chorus::collective
