// The device runtime: the initialized logical devices, each with its allocator and stream.
//
// Devices are created once, at first use (TF's "devices are initialized"), from the configuration
// made through core/config.h, which is frozen from then on. A DeviceContext lives as long as
// anything holds it (tensors hold their device), so memory is never freed into a dead arena.
//
// Thread-safety: all functions are thread-safe; DeviceContext's allocator and stream are too.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/core/allocator.h>
#include <chorus/core/device.h>
#include <chorus/core/device_spec.h>
#include <chorus/core/stream.h>

namespace chorus {

class DeviceContext {
 public:
  DeviceContext(LogicalDevice device, std::unique_ptr<Allocator> allocator, std::unique_ptr<Stream> stream,
                int gpu_ordinal);
  const LogicalDevice& device() const { return device_; }
  const std::string& name() const { return device_.name; }
  bool is_gpu() const { return gpu_ordinal_ >= 0; }
  int gpu_ordinal() const { return gpu_ordinal_; }  // CUDA ordinal, -1 for CPU devices
  Allocator& allocator() const { return *allocator_; }
  Stream& stream() const { return *stream_; }
  // A GPU device's second stream, for collectives that run beside its compute (the all-reduce
  // overlapped with the backward pass, docs/overlap.md; collective/communicator.h's
  // AllReduceOptions::side_stream), made at the first call; work on it is ordered against
  // stream() with events only. A CPU device's is stream() itself. Thread-safe.
  Stream& side_stream() const;
  // A GPU device's stream for input copies from the host (TF's host_to_device stream: the
  // distributed dataset's uploads, distribute/input_upload.h), made at the first call, so that a
  // batch's copy runs beside the step before it; ordered against stream() with events only. A
  // CPU device's is stream() itself. Thread-safe.
  Stream& host_to_device_stream() const;
  // Held by CapturedGraph::capture (core/graph_capture.h) while stream() is being captured. A
  // thread other than the capturing one that enqueues on stream() — an input upload's ordering
  // event — takes it first, so that nothing of its work is recorded into the graph.
  std::mutex& capture_mutex() const { return capture_mu_; }

 private:
  LogicalDevice device_;
  std::unique_ptr<Allocator> allocator_;
  std::unique_ptr<Stream> stream_;
  int gpu_ordinal_;
  mutable std::once_flag side_once_;
  mutable std::unique_ptr<Stream> side_stream_;
  mutable std::once_flag host_to_device_once_;
  mutable std::unique_ptr<Stream> host_to_device_stream_;
  mutable std::mutex capture_mu_;
};

namespace runtime {

// All logical devices, CPUs first, initializing them on the first call. `first_use` names the
// caller for the FailedPreconditionError later setters raise ("list_logical_devices()").
const std::vector<std::shared_ptr<DeviceContext>>& devices(std::string_view first_use = "a device's first use");
bool initialized();

// The first device matching `spec` (unset fields match anything), or nullptr.
std::shared_ptr<DeviceContext> match(const DeviceSpec& spec);
// The device named by `text` (any DeviceSpec form, must name exactly a type; a missing index
// means 0). Throws InvalidArgumentError listing the devices that exist when there is none.
std::shared_ptr<DeviceContext> find(std::string_view text);
// "/job:localhost/replica:0/task:0/device:CPU:0, .../device:GPU:0, ..." for error messages.
std::string device_list();

}  // namespace runtime

namespace internal {
// Tests only: forgets the initialized devices and the whole configuration, as if the process had
// just started. Tensors still alive keep their (now detached) devices until they die.
void reset_runtime_for_testing();
}  // namespace internal

}  // namespace chorus
