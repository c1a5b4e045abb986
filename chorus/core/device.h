// Physical and logical devices, as `tf.config` describes them.
//
// A PhysicalDevice is what the machine has: "/physical_device:CPU:0" and one
// "/physical_device:GPU:<i>" per GPU the CUDA runtime sees (after CUDA_VISIBLE_DEVICES).
// A LogicalDevice is what programs place work on: by default one per visible physical device,
// or several carved out of one with memory limits (virtual devices). Logical GPUs are numbered
// consecutively across physical GPUs in order; logical CPUs likewise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>

namespace chorus {

struct PhysicalDevice {
  std::string name;              // "/physical_device:GPU:0"
  std::string device_type;       // "CPU" or "GPU"
  int index = 0;                 // position among physical devices of this type
  std::size_t memory_bytes = 0;  // host RAM for the CPU, global memory for a GPU
  // Details for people and for telling devices apart: "NVIDIA H200, pci bus id 0000:19:00.0,
  // compute capability 9.0" or "x86_64, 2 cores".
  std::string description;
  std::string pci_bus_id;  // GPUs only; the same physical GPU has the same id in every process
  bool operator==(const PhysicalDevice& o) const { return name == o.name; }
};

// One logical device to carve out of a physical one (TF's tf.config.LogicalDeviceConfiguration).
struct LogicalDeviceConfiguration {
  // Memory this logical device may use, in MiB (TF calls it memory_limit, also in MB).
  // -1: no explicit limit (a CPU device may then use the host's RAM; a GPU device, what the GPU
  // had free at initialization, scaled by per_process_gpu_memory_fraction if set).
  std::int64_t memory_limit_mb = -1;
  // CPU devices only: threads this device's ops (oneDNN, OpenMP) may use. 0: an equal share of
  // config::get_intra_op_parallelism_threads() among the logical CPU devices (at least 1), so that
  // replicas on logical CPU devices do not oversubscribe the cores. Must be >= 0.
  int intra_op_threads = 0;
};

struct LogicalDevice {
  std::string name;           // "/job:localhost/replica:0/task:0/device:GPU:1"
  std::string device_type;    // "CPU" or "GPU"
  int index = 0;              // the N in device:GPU:N
  std::string physical_name;  // "/physical_device:GPU:0": the device it is carved from
  int physical_index = 0;
  std::size_t memory_limit = 0;  // bytes enforced by its allocator
  bool memory_growth = false;    // arena grows on demand (true) or reserves the limit at first use
  int intra_op_threads = 1;      // CPU devices: threads its ops use (see LogicalDeviceConfiguration)
  bool operator==(const LogicalDevice& o) const { return name == o.name; }
};

std::ostream& operator<<(std::ostream& os, const PhysicalDevice& d);
std::ostream& operator<<(std::ostream& os, const LogicalDevice& d);

}  // namespace chorus
