// CUDA graphs of one logical device's work: captured once, replayed many times (issue 42: the
// captured step; torch.cuda.graph and TF's XLA-compiled tf.function are the models).
//
// CapturedGraph::capture(dev, body) runs `body` on the calling thread with dev's stream in capture
// mode and dev's allocator drawing from a graph pool of its own (core/allocator.h): the kernels,
// copies and events `body` enqueues on that stream (and on streams that join it through events)
// are recorded, not run. replay() enqueues the recorded work on dev's stream with the addresses of
// the capture: a replay reads the memory the capture read and writes the memory it wrote, whatever
// it holds by then. So a replay's inputs are changed by overwriting, in place, the tensors the
// capture read (torch.cuda.graph's static inputs), and its results are read from the tensors the
// capture produced, which every replay overwrites (static outputs).
//
// Warm up first. Run the same work once eagerly before capturing it: libraries (cuBLAS, cuDNN)
// make their handles, plans and workspaces at a first call, some of it not capturable.
//
// What cannot be captured: anything that makes the host wait for the GPU (a synchronize, a
// blocking copy to the host, reading a device value), work on a CPU device, another thread's work
// on dev's stream during the capture (it would be recorded too: the caller keeps other threads off
// it). Then capture() ends the capture and returns no graph, with the reason, and `body`'s device
// work has NOT run (its host side has: the caller runs the work again eagerly, or undoes the host
// side). An exception of `body` for any other reason ends the capture and propagates.
//
// Memory: the pool keeps everything allocated or freed during the capture for as long as the
// graph lives; tensors the capture returned stay valid while their owners hold them. Destroying
// the graph releases the pool (the stream-order rule of core/tensor.h orders reuse after the
// graph's last replay).
//
// Thread-safety: one thread at a time captures or replays a given graph; other threads may use
// other devices, and dev's allocator (their allocations never come from the pool).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <chorus/core/allocator.h>
#include <chorus/core/gpu.h>

namespace chorus {

class DeviceContext;

class CapturedGraph {
 public:
  struct Capture {
    std::unique_ptr<CapturedGraph> graph;  // null when the work could not be captured
    std::string why_not;                   // then: the reason, naming the call CUDA refused
  };
  // InvalidArgumentError for a CPU device; UnavailableError without CUDA.
  static Capture capture(DeviceContext& dev, const std::function<void()>& body);

  ~CapturedGraph();
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  // Enqueues one replay on the device's stream; returns without waiting for it.
  void replay();
  DeviceContext& device() const { return dev_; }

 private:
  CapturedGraph(DeviceContext& dev, gpu::GraphHandle graph, Allocator::PoolId pool)
      : dev_(dev), graph_(graph), pool_(pool) {}

  DeviceContext& dev_;
  gpu::GraphHandle graph_;
  Allocator::PoolId pool_;
};

}  // namespace chorus
