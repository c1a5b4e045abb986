// Input rows copied from host memory onto a replica's device ahead of the step that reads them:
// the distributed dataset's half of TF's prefetch_to_device / experimental_fetch_to_device
// (PyTorch: pin_memory plus non_blocking copies). Used by distribute/distributed_dataset.cc on its
// producer thread, one step ahead of the replicas.
//
//   InputUpload upload;
//   std::vector<UploadWait> waits;
//   Tensor x = upload.rows(global_x, at, len, "/GPU:1", /*replica=*/1, &waits);   // producer thread
//   ...
//   hand_over(waits);   // consumer thread, before the step that reads x is enqueued
//
// rows() takes rows [at, at + len) of a numeric tensor on a host device (axis 0; tensors are
// row-major and contiguous, so they are one byte range) and gives them on the replica's device:
// - CPU replica: one memcpy on the calling thread into the device's memory (no op slice and copy,
//   no stream hand-off); the tensor is complete when rows() returns and adds no wait.
// - GPU replica: one memcpy into a page-locked staging buffer (pinned host memory,
//   core/host_memory.h, the replica's own pinned device, shared with the optimizer offload), then
//   an asynchronous DMA on the device's host_to_device_stream (core/runtime.h). The copy first waits
//   (by event) for the work the replica's stream had queued when its memory was allocated — the
//   allocator hands out bytes that queued work of that stream may still use — and so runs beside
//   the rest of the step before. It adds an UploadWait: hand_over() makes the replica's stream wait
//   for the copy by event. No host thread waits for the GPU, and the step's count of host waits
//   (core/gpu.h) does not move.
// The staging buffer and the destination of each copy are also held here until the copy has run:
// each rows() call lets go of those whose copy is done (an event query, not a wait); the
// destructor waits for the rest. So a batch dropped before its copies ran (an error mid-batch, an
// iterator destroyed with a batch not taken) frees nothing the DMA still touches.
// Not applicable (rows() returns an undefined Tensor and the caller slices with ops): a string
// tensor, a scalar, one on a GPU (a dataset of device tensors), or no pinned memory to be had
// (cudaHostAlloc refused: logged once).
//
// Waits: a step must not read a GPU tensor from rows() before hand_over() of its wait ran.
// Thread-safety: one InputUpload per producer thread; hand_over() from any thread.
// Errors: CUDA errors propagate as the gpu layer raises them (core/gpu.h); running out of device
// or pinned memory → ResourceExhaustedError naming the device.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <chorus/core/runtime.h>
#include <chorus/core/stream.h>
#include <chorus/core/tensor.h>

namespace chorus::distribute::internal {

// The replica device's stream must wait for `event` before a step reads the uploaded tensors.
struct UploadWait {
  std::shared_ptr<DeviceContext> device;
  std::shared_ptr<Event> event;
};

// Makes each device's stream wait for its event (no host wait). Clears nothing; waiting twice is
// harmless.
void hand_over(const std::vector<UploadWait>& waits);

class InputUpload {
 public:
  InputUpload() = default;
  ~InputUpload();
  InputUpload(const InputUpload&) = delete;
  InputUpload& operator=(const InputUpload&) = delete;

  // Rows [at, at + len) of `t` on `device`, replica `replica` (this process's index, which picks
  // the pinned staging device); adds to `waits` (one entry per device, the latest copy) when the
  // copy is still in flight. Undefined Tensor when not applicable (see above). A range outside
  // t's rows → InvalidArgumentError.
  Tensor rows(const Tensor& t, std::int64_t at, std::int64_t len, const std::string& device, int replica,
              std::vector<UploadWait>* waits);

  // Staging buffers whose copies have not been seen complete yet (for tests).
  std::size_t in_flight() const { return in_flight_.size(); }

 private:
  // A copy in flight: its staging buffer and its destination live until `done` is seen complete.
  struct Staged {
    std::shared_ptr<Event> done;  // null only if recording it failed (the destructor then syncs the stream)
    Tensor pinned;
    Tensor device;
  };
  void reap();

  std::deque<Staged> in_flight_;
};

}  // namespace chorus::distribute::internal
