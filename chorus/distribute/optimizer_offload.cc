#include <chorus/distribute/optimizer_offload.h>

#include <algorithm>
#include <memory>
#include <thread>

#include <chorus/core/config.h>
#include <chorus/core/error.h>
#include <chorus/core/gpu.h>
#include <chorus/core/host_memory.h>
#include <chorus/core/runtime.h>
#include <chorus/core/stream.h>

namespace chorus::distribute {

std::string offload_device(const std::string& replica_device, int local_replica) {
  const std::shared_ptr<DeviceContext> device = runtime::find(replica_device);
  if (!device->is_gpu())
    return runtime::host_memory(local_replica, /*pinned=*/false, device->device().intra_op_threads)->name();
  int gpus = 0;
  for (const auto& d : runtime::devices()) gpus += d->is_gpu() ? 1 : 0;
  const int configured = config::get_intra_op_parallelism_threads();  // 0: every core
  const int budget = configured > 0 ? configured : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int threads = std::max(1, budget / std::max(1, gpus));
  return runtime::host_memory(local_replica, /*pinned=*/true, threads)->name();
}

namespace internal {
namespace {

// The host memory device of `job`'s slots, or nullptr when the job is updated in place.
std::shared_ptr<DeviceContext> offload_host(const UpdateJob& job) {
  if (job.slots.empty()) return nullptr;
  const Tensor& slot = job.slots.front();
  if (&slot.device_context() == &job.target.device_context() || !runtime::is_host_memory(slot.device_name()))
    return nullptr;
  for (const Tensor& s : job.slots)
    CHORUS_ENFORCE(&s.device_context() == &slot.device_context(), "offloaded slots on ", slot.device_name(), " and ",
                   s.device_name());
  return slot.buffer()->device_ptr();
}

// A job's host copies: the gradient and the weight slice the optimizer updates there.
struct HostCopies {
  Tensor gradient;
  Tensor target;
  std::shared_ptr<Event> landed;  // GPU: the device-to-host copies of both are done
};

// Logical CPU device: the copies are memcpy (Tensor::copy_from, in stream order).
void update_on_host_from_cpu(UpdateJob& job, const std::shared_ptr<DeviceContext>& host,
                             const StepPolicy::UpdateFn& fn) {
  Tensor g = Tensor::empty_on(host, job.gradient.shape(), job.gradient.dtype());
  g.copy_from(job.gradient);
  job.gradient = Tensor();  // the device's copy goes now: only the host's is needed
  Tensor w = Tensor::empty_on(host, job.target.shape(), job.target.dtype());
  w.copy_from(job.target);
  fn(job.index, g, w, job.slots);
  job.target.copy_from(w);
}

// GPU: asynchronous copies on the device's side stream from and into pinned host memory.
void enqueue_copy(DeviceContext& device, void* dst, const void* src, std::size_t bytes, gpu::CopyKind kind) {
  if (bytes == 0) return;
  gpu::memcpy_async(device.gpu_ordinal(), device.side_stream().native_handle(), dst, src, bytes, kind);
}

void update_on_host_from_gpu(std::vector<UpdateJob>& jobs, const std::vector<std::shared_ptr<DeviceContext>>& hosts,
                             const StepPolicy::UpdateFn& fn) {
  DeviceContext& device = jobs.front().target.device_context();
  Stream& side = device.side_stream();
  // The side stream starts after everything the compute stream queued (the backward pass, the
  // reductions that produced the gradients, the slice copies of the targets).
  side.wait_event(device.stream().record_event());
  std::vector<HostCopies> copies(jobs.size());
  for (std::size_t j = 0; j < jobs.size(); ++j) {  // every device-to-host copy at once
    if (!hosts[j]) continue;
    CHORUS_ENFORCE(&jobs[j].gradient.device_context() == &device && &jobs[j].target.device_context() == &device,
                   "offloaded update: gradient on ", jobs[j].gradient.device_name(), ", weight on ",
                   jobs[j].target.device_name(), ", replica device ", device.name());
    HostCopies& c = copies[j];
    c.gradient = Tensor::empty_on(hosts[j], jobs[j].gradient.shape(), jobs[j].gradient.dtype());
    c.target = Tensor::empty_on(hosts[j], jobs[j].target.shape(), jobs[j].target.dtype());
    enqueue_copy(device, c.gradient.data(), jobs[j].gradient.data(), c.gradient.nbytes(), gpu::CopyKind::kDeviceToHost);
    enqueue_copy(device, c.target.data(), jobs[j].target.data(), c.target.nbytes(), gpu::CopyKind::kDeviceToHost);
    c.landed = side.record_event();
  }
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    UpdateJob& job = jobs[j];
    if (!hosts[j]) {
      fn(job.index, job.gradient, job.target, job.slots);
      job.gradient = Tensor();
      continue;
    }
    HostCopies& c = copies[j];
    c.landed->synchronize();  // this variable's copies; the later ones are still in flight
    job.gradient = Tensor();  // freed for later work of the compute stream, which is past it
    fn(job.index, c.gradient, c.target, job.slots);
    hosts[j]->stream().synchronize();  // the host update's work (and its errors) first
    job.target.buffer()->await_writable();
    enqueue_copy(device, job.target.data(), c.target.data(), c.target.nbytes(), gpu::CopyKind::kHostToDevice);
    c.gradient = Tensor();
  }
  // The compute stream reads the weights only after the last host-to-device copy; the host copies
  // stay alive until then.
  std::shared_ptr<Event> done = side.record_event();
  device.stream().wait_event(done);
  done->synchronize();
}

}  // namespace

void run_updates(std::vector<UpdateJob>& jobs, const StepPolicy::UpdateFn& fn) {
  std::vector<std::shared_ptr<DeviceContext>> hosts(jobs.size());
  bool gpu = false;
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    hosts[j] = offload_host(jobs[j]);
    gpu = gpu || (hosts[j] != nullptr && jobs[j].target.device_context().is_gpu());
  }
  if (gpu) {
    update_on_host_from_gpu(jobs, hosts, fn);
    return;
  }
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    UpdateJob& job = jobs[j];
    if (hosts[j]) {
      update_on_host_from_cpu(job, hosts[j], fn);
    } else {
      fn(job.index, job.gradient, job.target, job.slots);
    }
    job.gradient = Tensor();
  }
}

}  // namespace internal

}  // namespace chorus::distribute
