#include <chorus/distribute/optimizer_offload.h>

#include <algorithm>
#include <cstring>
#include <functional>
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
// GPU: asynchronous copies on the device's side stream from and into pinned host memory.
void enqueue_copy(DeviceContext& device, void* dst, const void* src, std::size_t bytes, gpu::CopyKind kind) {
  if (bytes == 0) return;
  gpu::memcpy_async(device.gpu_ordinal(), device.side_stream().native_handle(), dst, src, bytes, kind);
}
}  // namespace

void start_host_copy(const Tensor& src, std::int64_t offset, const Tensor& dst, const std::shared_ptr<Event>& ready) {
  CHORUS_ENFORCE(src.dtype() == dst.dtype() && offset >= 0 && offset + dst.num_elements() <= src.num_elements(),
                 "start_host_copy: ", dst.num_elements(), " elements from ", offset, " of ", src.num_elements(), " (",
                 src.dtype(), " to ", dst.dtype(), ")");
  const std::size_t bytes = dst.nbytes();
  if (bytes == 0) return;
  DeviceContext& device = src.device_context();
  Stream& host = dst.device_context().stream();
  const std::size_t at = static_cast<std::size_t>(offset) * dtype_size(src.dtype());
  std::shared_ptr<Buffer> from = src.buffer(), to = dst.buffer();
  if (!device.is_gpu()) {
    // After the work the source's stream has queued so far; the memcpy runs on the host stream's
    // worker thread, not the caller's.
    host.wait_event(ready != nullptr ? ready : device.stream().record_event());
    host.enqueue_host(
        [from, to, at, bytes] { std::memcpy(to->data(), static_cast<const char*>(from->data()) + at, bytes); });
    return;
  }
  Stream& side = device.side_stream();
  side.wait_event(ready != nullptr ? ready : device.stream().record_event());
  enqueue_copy(device, to->data(), static_cast<const char*>(from->data()) + at, bytes, gpu::CopyKind::kDeviceToHost);
  host.wait_event(side.record_event());
  host.enqueue_host([from, to] {});  // the storages live until the copy landed
}

void HostStaging::add(const void* variable, const Tensor& gradient, Tensor host) {
  CHORUS_ENFORCE(gradient.defined() && host.defined() && gradient.num_elements() == host.num_elements() &&
                     gradient.dtype() == host.dtype(),
                 "HostStaging::add: a staged copy of ", host.num_elements(), " elements for ", gradient.num_elements());
  staged_.emplace(gradient.buffer().get(), Staged{variable, gradient.buffer(), std::move(host)});
}

std::unordered_set<const void*> HostStaging::untaken() const {
  std::unordered_set<const void*> out;
  for (const auto& [storage, s] : staged_) out.insert(s.variable);
  return out;
}

Tensor HostStaging::take(const Tensor& gradient) {
  // ops::stop_gradient and reshapes give the gradient new ids, not new storage.
  auto [first, last] = staged_.equal_range(gradient.buffer().get());
  for (auto it = first; it != last; ++it) {
    const Staged& s = it->second;
    if (s.source.lock() != gradient.buffer() || s.host.num_elements() != gradient.num_elements() ||
        s.host.dtype() != gradient.dtype())
      continue;
    Tensor host = s.host.reshape(gradient.shape());
    staged_.erase(it);
    return host;
  }
  return Tensor();
}

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

// The job's staged gradient copy when it is on `host` (else undefined: copied at the update).
Tensor staged_on(const UpdateJob& job, const std::shared_ptr<DeviceContext>& host) {
  return job.staged.defined() && &job.staged.device_context() == host.get() ? job.staged : Tensor();
}

// The optimizer's update of one variable (a one-item group) on the tensors given.
void update_one(const UpdateJob& job, const Tensor& gradient, const Tensor& weight, const StepPolicy::UpdateFn& fn) {
  std::vector<StepPolicy::UpdateItem> one{{job.index, gradient, weight, job.slots}};
  fn(one);
}

// Logical CPU device: the copies are memcpy (Tensor::copy_from, in stream order).
void update_on_host_from_cpu(UpdateJob& job, const std::shared_ptr<DeviceContext>& host,
                             const StepPolicy::UpdateFn& fn) {
  Tensor g = staged_on(job, host);
  if (!g.defined()) {
    g = Tensor::empty_on(host, job.gradient.shape(), job.gradient.dtype());
    g.copy_from(job.gradient);
  }
  job.gradient = Tensor();  // the device's copy goes now: only the host's is needed
  Tensor w = Tensor::empty_on(host, job.target.shape(), job.target.dtype());
  w.copy_from(job.target);
  update_one(job, g, w, fn);
  job.target.copy_from(w);
}

// `in_place` runs the update of the jobs that stay on the device, on its compute stream, once the
// device-to-host copies of the others are queued (so they overlap).
void update_on_host_from_gpu(std::vector<UpdateJob>& jobs, const std::vector<std::shared_ptr<DeviceContext>>& hosts,
                             const StepPolicy::UpdateFn& fn, const std::function<void()>& in_place) {
  DeviceContext* gpu = nullptr;
  for (std::size_t j = 0; j < jobs.size() && gpu == nullptr; ++j)
    if (hosts[j]) gpu = &jobs[j].target.device_context();
  DeviceContext& device = *gpu;
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
    c.gradient = staged_on(jobs[j], hosts[j]);  // staged: its host stream waits for its copy
    if (!c.gradient.defined()) {
      c.gradient = Tensor::empty_on(hosts[j], jobs[j].gradient.shape(), jobs[j].gradient.dtype());
      enqueue_copy(device, c.gradient.data(), jobs[j].gradient.data(), c.gradient.nbytes(),
                   gpu::CopyKind::kDeviceToHost);
    }
    c.target = Tensor::empty_on(hosts[j], jobs[j].target.shape(), jobs[j].target.dtype());
    enqueue_copy(device, c.target.data(), jobs[j].target.data(), c.target.nbytes(), gpu::CopyKind::kDeviceToHost);
    c.landed = side.record_event();
  }
  // From here an exception (the in-place update, a host update, a check) must not free the host
  // copies, nor let the caller free the device tensors, while the side stream still copies them.
  struct DrainOnThrow {
    Stream& side;
    bool armed = true;
    ~DrainOnThrow() {
      if (!armed) return;
      try {
        side.synchronize();
      } catch (...) {  // the first error is what propagates
      }
    }
  } drain{side};
  in_place();
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    if (!hosts[j]) continue;
    UpdateJob& job = jobs[j];
    HostCopies& c = copies[j];
    c.landed->synchronize();  // this variable's copies; the later ones are still in flight
    job.gradient = Tensor();  // freed for later work of the compute stream, which is past it
    update_one(job, c.gradient, c.target, fn);
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
  drain.armed = false;
}

}  // namespace

OffloadCounters run_updates(std::vector<UpdateJob>& jobs, const StepPolicy::UpdateFn& fn) {
  std::vector<std::shared_ptr<DeviceContext>> hosts(jobs.size());
  OffloadCounters counted;
  bool gpu = false;
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    hosts[j] = offload_host(jobs[j]);
    jobs[j].on_host = hosts[j] != nullptr;
    if (!jobs[j].on_host) continue;
    gpu = gpu || jobs[j].target.device_context().is_gpu();
    ++(staged_on(jobs[j], hosts[j]).defined() ? counted.staged : counted.copied);
  }
  // The jobs that stay where they live, as one group (the optimizer may update them together).
  auto in_place = [&] {
    std::vector<StepPolicy::UpdateItem> items;
    for (std::size_t j = 0; j < jobs.size(); ++j)
      if (!hosts[j]) items.push_back({jobs[j].index, std::move(jobs[j].gradient), jobs[j].target, jobs[j].slots});
    if (!items.empty()) fn(items);
  };
  if (gpu) {
    update_on_host_from_gpu(jobs, hosts, fn, in_place);
  } else {
    in_place();
    for (std::size_t j = 0; j < jobs.size(); ++j)
      if (hosts[j]) update_on_host_from_cpu(jobs[j], hosts[j], fn);
  }
  for (UpdateJob& job : jobs) {
    job.gradient = Tensor();
    job.staged = Tensor();
  }
  return counted;
}

}  // namespace internal

}  // namespace chorus::distribute
