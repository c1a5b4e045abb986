#include <chorus/distribute/input_upload.h>

#include <cstring>
#include <mutex>

#include <chorus/core/error.h>
#include <chorus/core/gpu.h>
#include <chorus/core/logging.h>
#include <chorus/distribute/optimizer_offload.h>

namespace chorus::distribute::internal {

void hand_over(const std::vector<UploadWait>& waits) {
  for (const UploadWait& w : waits) w.device->stream().wait_event(w.event);
}

InputUpload::~InputUpload() {
  // The DMA reads the staging buffers: they may go back to their arena only after it ran. A
  // destructor must not throw; a failed wait leaves the buffers to the dying arena's owner.
  for (Staged& s : in_flight_) {
    try {
      if (s.done != nullptr)
        s.done->synchronize();
      else
        s.device.device_context().host_to_device_stream().synchronize();  // the event itself failed
    } catch (...) {
    }
  }
}

void InputUpload::reap() {
  while (!in_flight_.empty() && in_flight_.front().done != nullptr && in_flight_.front().done->query())
    in_flight_.pop_front();
}

Tensor InputUpload::rows(const Tensor& t, std::int64_t at, std::int64_t len, const std::string& device, int replica,
                         std::vector<UploadWait>* waits) {
  if (!t.defined() || t.is_string() || t.shape().rank() == 0 || t.device_context().is_gpu()) return Tensor();
  std::vector<std::int64_t> dims = t.shape().dims();
  CHORUS_REQUIRE(at >= 0 && len >= 0 && at + len <= dims[0], InvalidArgumentError, "input upload: rows [", at, ", ",
                 at + len, ") of a tensor with ", dims[0], " rows");
  const std::size_t row_bytes = dims[0] == 0 ? 0 : t.nbytes() / static_cast<std::size_t>(dims[0]);
  const std::size_t bytes = row_bytes * static_cast<std::size_t>(len);
  dims[0] = len;
  Tensor out = Tensor::empty(Shape(dims), t.dtype(), device);
  if (bytes == 0) return out;
  t.device_context().stream().synchronize();  // host work still writing t (none for a pipeline's output)
  const char* from = static_cast<const char*>(t.data()) + static_cast<std::size_t>(at) * row_bytes;
  DeviceContext& target = out.device_context();
  if (!target.is_gpu()) {
    std::memcpy(out.data(), from, bytes);  // a fresh buffer: no work of its stream can touch it yet
    return out;
  }
  reap();
  // Fenced now, before the staging memcpy: the copy follows only the work queued when its memory
  // was taken, not what the running step queues meanwhile.
  Stream& copies = target.host_to_device_stream();
  {
    // Not while the replica's stream is being captured (core/graph_capture.h): the event would
    // be recorded into the graph.
    std::lock_guard<std::mutex> not_captured(target.capture_mutex());
    copies.wait_event(target.stream().record_event());
  }
  Tensor pinned;
  try {
    pinned = Tensor::empty(Shape(dims), t.dtype(), offload_device(device, replica));
  } catch (const ResourceExhaustedError& e) {
    // No page-locked memory to be had (cudaHostAlloc refused): the op path copies from pageable
    // memory, slower but working. Nothing was queued into `out` yet.
    static std::once_flag once;
    std::call_once(once, [&] {
      CHORUS_LOG(WARNING) << "input upload: no pinned host memory (" << e.what()
                          << "); input copies to GPUs go through pageable memory";
    });
    return Tensor();
  }
  std::memcpy(pinned.data(), from, bytes);
  // In flight from here: `out` and `pinned` are kept until the copy is seen done, so that a
  // dropped batch (an error, an iterator destroyed) never frees bytes the DMA still touches.
  in_flight_.push_back(Staged{nullptr, pinned, out});
  gpu::memcpy_async(target.gpu_ordinal(), copies.native_handle(), out.data(), pinned.data(), bytes,
                    gpu::CopyKind::kHostToDevice);
  std::shared_ptr<Event> done = copies.record_event();
  in_flight_.back().done = done;
  // One wait per device: its copies run in order on one stream, so the latest covers the others.
  bool replaced = false;
  for (UploadWait& w : *waits) {
    if (w.device.get() != &target) continue;
    w.event = done;
    replaced = true;
  }
  if (!replaced) waits->push_back(UploadWait{out.buffer()->device_ptr(), done});
  return out;
}

}  // namespace chorus::distribute::internal
