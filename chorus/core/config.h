// The device configuration API: TensorFlow's `tf.config`, name for name, in C++.
//
//   auto gpus = chorus::config::list_physical_devices("GPU");
//   chorus::config::set_logical_device_configuration(gpus[0], {{.memory_limit_mb = 2048},
//                                                              {.memory_limit_mb = 2048}});
//   auto logical = chorus::config::list_logical_devices("GPU");   // GPU:0 and GPU:1
//
// Lifecycle (as in TF): the configuration may be changed until devices are initialized, which
// happens at their first use — list_logical_devices(), placing a tensor, get_memory_info(), a
// strategy. After that every setter of device configuration throws FailedPreconditionError
// ("... must be set before devices are initialized"), naming what initialized them.
// Placement settings (soft placement, placement logging) may change at any time.
//
// Device type arguments ("CPU", "GPU", "" for all) are case-insensitive; any other type throws
// InvalidArgumentError. All functions are thread-safe.
#pragma once

#include <string_view>
#include <vector>

#include <chorus/core/allocator.h>
#include <chorus/core/device.h>

namespace chorus::config {

// Physical devices of `device_type` ("" = all): CPU:0 first, then GPUs in CUDA order. Does not
// initialize devices.
std::vector<PhysicalDevice> list_physical_devices(std::string_view device_type = "");

// The physical devices the runtime will use (default: all). set_visible_devices replaces the
// visible devices of the given type ("" = of every type named in `devices`); the CPU cannot be
// hidden (InvalidArgumentError), as in TF.
std::vector<PhysicalDevice> get_visible_devices(std::string_view device_type = "");
void set_visible_devices(const std::vector<PhysicalDevice>& devices, std::string_view device_type = "");

// Carves `configs.size()` logical devices out of `device` (GPU or CPU). Errors:
//   - unknown device → InvalidArgumentError listing physical devices;
//   - empty list, or a memory_limit_mb <= 0 with more than one device, or limits summing past the
//     device's memory (or the per-process fraction of it) → InvalidArgumentError with the numbers;
//   - on a GPU with memory growth enabled, more than one device → InvalidArgumentError (growth
//     and virtual devices exclude each other);
//   - after initialization → FailedPreconditionError.
void set_logical_device_configuration(const PhysicalDevice& device,
                                      const std::vector<LogicalDeviceConfiguration>& configs);
// The configuration set for `device`; empty when none was set.
std::vector<LogicalDeviceConfiguration> get_logical_device_configuration(const PhysicalDevice& device);

// Logical devices of `device_type` ("" = all). Initializes devices (freezing the configuration).
std::vector<LogicalDevice> list_logical_devices(std::string_view device_type = "");

// Memory growth for a GPU: its arena grows on demand instead of reserving its limit at first use.
// TF_FORCE_GPU_ALLOW_GROWTH=true turns it on for every GPU without virtual devices. Errors: a CPU
// device or unknown device → InvalidArgumentError; a GPU with several logical devices →
// InvalidArgumentError; after initialization → FailedPreconditionError.
void set_memory_growth(const PhysicalDevice& device, bool enable);
bool get_memory_growth(const PhysicalDevice& device);

// Caps the memory chorus takes from each GPU at fraction × total (TF's
// per_process_gpu_memory_fraction). 0 < fraction <= 1, else InvalidArgumentError. Applies to GPUs
// without an explicit limit; explicit limits must fit under it. Before initialization only.
void set_per_process_gpu_memory_fraction(double fraction);
double get_per_process_gpu_memory_fraction();  // 1.0 unless set

// Threads the ops of all logical CPU devices together may use (tf.config.threading.
// set_intra_op_parallelism_threads). 0 (default): the number of cores. Each logical CPU device gets
// an equal share unless its LogicalDeviceConfiguration says otherwise. n < 0 → InvalidArgumentError;
// after initialization → FailedPreconditionError.
void set_intra_op_parallelism_threads(int n);
int get_intra_op_parallelism_threads();

// When true (TF2's default), a placement request for a device that does not exist falls back to
// an existing one (with a warning); when false it throws InvalidArgumentError listing devices.
void set_soft_device_placement(bool enabled);
bool get_soft_device_placement();
// When true, every op logs "Executing op <Op> in device <canonical name>" at INFO.
void set_log_device_placement(bool enabled);
bool get_log_device_placement();

// TensorFloat-32 (tf.config.experimental.enable_tensor_float_32_execution and
// tensor_float_32_execution_enabled). Enabled (the default, as in TF): float32 matmuls (cuBLAS with
// CUBLAS_COMPUTE_32F_FAST_TF32) and convolutions (cuDNN, CUDNN_DEFAULT_MATH) on GPUs of compute
// capability 8.0 and newer (Ampere, Hopper) may round their inputs to TF32 — 10 mantissa bits
// instead of 23 — and accumulate in float32: a product's relative error grows from about 6e-8 to
// about 5e-4 (docs/devices.md, "TensorFloat-32"). Disabled: full float32 (cuBLAS
// CUBLAS_COMPUTE_32F, cuDNN CUDNN_FMA_MATH first). CPUs and older GPUs always compute in full
// float32; float16/bfloat16/float64 are not affected. NVIDIA_TF32_OVERRIDE=0 in the environment
// (NVIDIA's switch, which cuBLAS and cuDNN obey whatever a program asks) makes the default
// disabled, so that the default says what the libraries do (an explicit enable is then recorded
// but the libraries still compute in full float32). May change at any time, also after devices are
// initialized; ops enqueued after the call follow it (convolution algorithms are chosen and cached
// per setting). reset with the configuration by internal::reset_runtime_for_testing.
void enable_tensor_float_32_execution(bool enabled);
bool tensor_float_32_execution_enabled();

// Memory statistics of a logical device ("GPU:0", "/device:CPU:1", any form DeviceSpec accepts):
// current and peak bytes, limit, reserved, largest free block (TF's
// tf.config.experimental.get_memory_info). Waits for work queued on the device first, so storage
// of tensors that died is counted as free. Initializes devices. Unknown device →
// InvalidArgumentError listing devices.
MemoryInfo get_memory_info(std::string_view device);
// Resets the peak to the current usage (tf.config.experimental.reset_memory_stats).
void reset_memory_stats(std::string_view device);

}  // namespace chorus::config
