// The CUDA runtime, seen from host code. Everything GPU-specific that core/ needs goes through
// these functions, so the rest of core/ compiles the same with or without CUDA.
//
// Built without CUDA (CHORUS_WITH_CUDA undefined), device_count() is 0 and every other function
// throws UnavailableError("chorus was built without CUDA"). Built with CUDA on a machine without
// a usable GPU or driver, device_count() is 0 too and unavailable_reason() says why (the CUDA
// runtime's own error string, e.g. cudaErrorInsufficientDriver).
//
// Errors from the CUDA runtime become chorus errors through CHORUS_CUDA_CHECK (core/cuda/check.h):
// cudaErrorMemoryAllocation → ResourceExhaustedError, invalid values → InvalidArgumentError,
// everything else → InternalError, each naming the call, file, line and CUDA's error string.
// All functions are thread-safe (the CUDA runtime is).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <chorus/core/allocator.h>

namespace chorus::gpu {

// True when this build has CUDA compiled in.
bool compiled_with_cuda();

// Number of GPUs the CUDA runtime sees (after CUDA_VISIBLE_DEVICES). 0 on any error.
int device_count();
// Why device_count() is 0 ("" when it is not): "built without CUDA", or CUDA's error string.
std::string unavailable_reason();

// Host waits: how many times chorus has blocked a host thread on GPU work since the process
// started, over all threads — every synchronize_stream and synchronize_event below, which is what
// a stream or event synchronize, a blocking copy to the host and a read of a device value on the
// host come down to. Issue 42's "no host waits in a steady step" counts these per step (fit's
// timeline "train step" events carry the step's count as "host_waits"; bench_train_gpu prints it).
// 0 without CUDA. Thread-safe.
std::int64_t host_waits();

struct DeviceProperties {
  std::string name;              // "NVIDIA H200"
  std::string pci_bus_id;        // "0000:19:00.0": identifies the physical GPU across processes
  std::string uuid;              // "GPU-8f6c..."
  std::size_t total_memory = 0;  // bytes
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int multiprocessor_count = 0;
};
DeviceProperties device_properties(int ordinal);
// Free and total bytes on the device right now (cudaMemGetInfo).
void memory_info(int ordinal, std::size_t* free_bytes, std::size_t* total_bytes);

// cudaMalloc on `ordinal`: the SubAllocator of GPU logical devices.
std::unique_ptr<SubAllocator> make_cuda_sub_allocator(int ordinal);

// Opaque stream/event handles (cudaStream_t / cudaEvent_t) for host code.
using StreamHandle = void*;
using EventHandle = void*;
StreamHandle create_stream(int ordinal);
void destroy_stream(int ordinal, StreamHandle stream) noexcept;
void synchronize_stream(int ordinal, StreamHandle stream);
EventHandle create_event(int ordinal);
void destroy_event(int ordinal, EventHandle event) noexcept;
void record_event(int ordinal, EventHandle event, StreamHandle stream);
void stream_wait_event(int ordinal, StreamHandle stream, EventHandle event);
void synchronize_event(int ordinal, EventHandle event);
bool event_done(int ordinal, EventHandle event);

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };
// Asynchronous copy on `stream` of `ordinal` (for kDeviceToDevice across GPUs, cudaMemcpyPeerAsync
// is used when src_ordinal != ordinal). Host memory may be pageable; the call then may block.
void memcpy_async(int ordinal, StreamHandle stream, void* dst, const void* src, std::size_t bytes, CopyKind kind,
                  int src_ordinal = -1);

// Fills `count` elements of `element_size` bytes (1, 2, 4 or 8) at `dst` with the bit pattern
// of `value` (low bytes used), on `stream`. Kernel in core/cuda/fill.cu.
void fill_async(int ordinal, StreamHandle stream, void* dst, std::size_t count, std::size_t element_size,
                std::uint64_t value);

// CUDA graphs (core/graph_capture.h states the contract; these are its CUDA calls). A GraphHandle
// is an instantiated graph (cudaGraphExec_t).
using GraphHandle = void*;
// Puts `stream` into capture mode (cudaStreamCaptureModeThreadLocal: a call from this thread that
// cannot be captured, such as a synchronize, fails and invalidates the capture; other threads are
// unaffected).
void begin_capture(int ordinal, StreamHandle stream);
// Whether `stream`'s capture is still valid (false: invalidated by an operation it could not
// record). Throws when the stream is not capturing.
bool capture_valid(int ordinal, StreamHandle stream);
// Ends the capture begun on `stream` and instantiates it; returns nullptr with *why set when CUDA
// invalidated the capture or cannot instantiate the graph.
GraphHandle end_capture(int ordinal, StreamHandle stream, std::string* why);
// Enqueues one replay of `graph` on `stream` (cudaGraphLaunch).
void launch_graph(int ordinal, GraphHandle graph, StreamHandle stream);
void destroy_graph(int ordinal, GraphHandle graph) noexcept;

}  // namespace chorus::gpu
