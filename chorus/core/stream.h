// Streams and events: in-order work queues per logical device, one interface for CPU and GPU.
//
// A GPU logical device's stream is a CUDA stream (non-blocking). A CPU logical device's stream is
// an in-order queue served by one worker thread of its own: work enqueued from any thread runs
// in enqueue order, never concurrently with other work of the same stream.
//
// Events mark a point in a stream. `record_event()` returns an event that completes when all work
// enqueued before it has run; `wait_event(e)` makes work enqueued afterwards wait for `e` (an event
// of any stream, CPU or GPU: a GPU stream waiting on a CPU event blocks the calling thread until
// the event completes, since CUDA cannot wait on host work; a CPU stream waiting on a GPU event
// enqueues a host-side cudaEventSynchronize).
//
// Errors: an exception thrown by CPU work puts the stream into an error state: later *work* is
// skipped (it would read garbage), but events still complete, so nothing waits forever. The next
// synchronize() rethrows the first error and clears the state. CUDA errors are thrown by the call
// that sees them.
//
// Thread-safety: all methods may be called from any thread. Destruction waits for queued work.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <chorus/core/gpu.h>

namespace chorus {

class Event {
 public:
  virtual ~Event() = default;
  // Blocks until the event completes.
  virtual void synchronize() = 0;
  // True when the event has completed (non-blocking).
  virtual bool query() = 0;
};

class Stream {
 public:
  virtual ~Stream() = default;
  // Blocks until all work enqueued so far has completed; rethrows the first error of CPU work.
  virtual void synchronize() = 0;
  // An event that completes after all work enqueued so far.
  virtual std::shared_ptr<Event> record_event() = 0;
  // Work enqueued after this call starts only after `event` completes.
  virtual void wait_event(const std::shared_ptr<Event>& event) = 0;
  // Runs `fn` on the host, in stream order: on the CPU stream's worker thread; for a GPU stream
  // after the preceding GPU work (the calling thread waits for it first, then runs fn: CUDA host
  // callbacks may not call CUDA, and chorus host work often must).
  virtual void enqueue_host(std::function<void()> fn) = 0;
  // Runs `fn` on the calling thread, in stream order, and returns when it is done: waits for the
  // work enqueued before (rethrowing its error, as synchronize() does; no wait and no hand-off when
  // the stream is idle, the usual case), then runs fn, whose exception propagates to the caller.
  // TF's eager CPU ops run so; it lets each replica thread drive its own OpenMP threads, and no
  // CPU kernel outlives the op call (queued kernels running while the process exits crashed in
  // oneDNN's torn-down globals). Called from inside this stream's work, fn runs at once. Work that
  // another thread enqueues meanwhile may run concurrently with fn: it cannot depend on fn's
  // results, which nobody has yet. GPU streams: synchronize(), then fn.
  virtual void execute_host(std::function<void()> fn) = 0;
  // cudaStream_t of a GPU stream; nullptr for a CPU stream.
  virtual gpu::StreamHandle native_handle() const = 0;
  // GPU ordinal of a GPU stream; -1 for a CPU stream.
  virtual int gpu_ordinal() const = 0;
  // For messages: "stream of /job:localhost/replica:0/task:0/device:CPU:1".
  virtual const std::string& name() const = 0;
};

// An in-order queue with its own worker thread (started lazily at the first enqueue).
std::unique_ptr<Stream> make_cpu_stream(std::string name);
// A CUDA stream on GPU `ordinal`. Throws UnavailableError without CUDA.
std::unique_ptr<Stream> make_gpu_stream(int ordinal, std::string name);

}  // namespace chorus
