// Host-side CUDA runtime calls. One file with both builds in it (rather than a stub .cc picked by
// the linker, which docs/style.md warns against): without CHORUS_WITH_CUDA every call but the queries
// throws UnavailableError.
#include <chorus/core/gpu.h>

#include <atomic>
#include <cstdio>
#include <mutex>

#include <chorus/core/cuda/kernels.h>
#include <chorus/core/error.h>

#ifdef CHORUS_WITH_CUDA
#include <cuda_runtime_api.h>

#include <chorus/core/cuda/check.h>
#endif

namespace chorus::gpu {

#ifdef CHORUS_WITH_CUDA

namespace {
struct Probe {
  int count = 0;
  std::string reason;
};
// cudaGetDeviceCount is probed once: its answer cannot change within a process (the driver
// reads CUDA_VISIBLE_DEVICES at initialization).
const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      r.reason = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
      return r;
    }
    r.count = n;
    if (n == 0) r.reason = "the CUDA runtime reports 0 devices (check CUDA_VISIBLE_DEVICES)";
    return r;
  }();
  return p;
}
using internal::DeviceGuard;
}  // namespace

bool compiled_with_cuda() { return true; }
int device_count() { return probe().count; }
std::string unavailable_reason() { return probe().reason; }

DeviceProperties device_properties(int ordinal) {
  CHORUS_REQUIRE(ordinal >= 0 && ordinal < device_count(), InvalidArgumentError, "GPU ordinal ", ordinal,
                 " is out of range: this process sees ", device_count(), " GPU(s)");
  cudaDeviceProp prop{};
  CHORUS_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
  DeviceProperties out;
  out.name = prop.name;
  char bus[32];
  CHORUS_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, ordinal));
  out.pci_bus_id = bus;
  char uuid[64];
  const auto* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
  std::snprintf(uuid, sizeof uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  out.uuid = uuid;
  out.total_memory = prop.totalGlobalMem;
  out.compute_capability_major = prop.major;
  out.compute_capability_minor = prop.minor;
  out.multiprocessor_count = prop.multiProcessorCount;
  return out;
}

void memory_info(int ordinal, std::size_t* free_bytes, std::size_t* total_bytes) {
  DeviceGuard guard(ordinal);
  CHORUS_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
}

StreamHandle create_stream(int ordinal) {
  DeviceGuard guard(ordinal);
  cudaStream_t s = nullptr;
  CHORUS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}
// Destruction paths never throw; errors are cleared so they do not resurface as the "last error"
// of an unrelated later call. `destroy` is the CUDA call, on `ordinal`.
template <typename Destroy>
void destroy_quietly(int ordinal, Destroy destroy) noexcept {
  try {
    DeviceGuard guard(ordinal);
    if (destroy() != cudaSuccess) (void)cudaGetLastError();
  } catch (...) {
    (void)cudaGetLastError();
  }
}
void destroy_stream(int ordinal, StreamHandle stream) noexcept {
  destroy_quietly(ordinal, [&] { return cudaStreamDestroy(static_cast<cudaStream_t>(stream)); });
}
std::atomic<std::int64_t> g_host_waits{0};

std::int64_t host_waits() { return g_host_waits.load(std::memory_order_relaxed); }

void synchronize_stream(int ordinal, StreamHandle stream) {
  g_host_waits.fetch_add(1, std::memory_order_relaxed);
  DeviceGuard guard(ordinal);
  CHORUS_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}
EventHandle create_event(int ordinal) {
  DeviceGuard guard(ordinal);
  cudaEvent_t e = nullptr;
  CHORUS_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}
void destroy_event(int ordinal, EventHandle event) noexcept {
  destroy_quietly(ordinal, [&] { return cudaEventDestroy(static_cast<cudaEvent_t>(event)); });
}
void record_event(int ordinal, EventHandle event, StreamHandle stream) {
  DeviceGuard guard(ordinal);
  CHORUS_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
}
void stream_wait_event(int ordinal, StreamHandle stream, EventHandle event) {
  DeviceGuard guard(ordinal);
  CHORUS_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0));
}
void synchronize_event(int ordinal, EventHandle event) {
  g_host_waits.fetch_add(1, std::memory_order_relaxed);
  DeviceGuard guard(ordinal);
  CHORUS_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}
bool event_done(int ordinal, EventHandle event) {
  DeviceGuard guard(ordinal);
  cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();  // not an error: keep it from surfacing in the next launch check
    return false;
  }
  CHORUS_CUDA_CHECK(err);
  return true;
}

void memcpy_async(int ordinal, StreamHandle stream, void* dst, const void* src, std::size_t bytes, CopyKind kind,
                  int src_ordinal) {
  if (bytes == 0) return;
  DeviceGuard guard(ordinal);
  auto s = static_cast<cudaStream_t>(stream);
  switch (kind) {
    case CopyKind::kHostToDevice: CHORUS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s)); break;
    case CopyKind::kDeviceToHost: CHORUS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s)); break;
    case CopyKind::kDeviceToDevice:
      if (src_ordinal >= 0 && src_ordinal != ordinal) {
        CHORUS_CUDA_CHECK(cudaMemcpyPeerAsync(dst, ordinal, src, src_ordinal, bytes, s));
      } else {
        CHORUS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
      }
      break;
  }
}

void begin_capture(int ordinal, StreamHandle stream) {
  DeviceGuard guard(ordinal);
  CHORUS_CUDA_CHECK(cudaStreamBeginCapture(static_cast<cudaStream_t>(stream), cudaStreamCaptureModeThreadLocal));
}
bool capture_valid(int ordinal, StreamHandle stream) {
  DeviceGuard guard(ordinal);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CHORUS_CUDA_CHECK(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status));
  CHORUS_REQUIRE(status != cudaStreamCaptureStatusNone, FailedPreconditionError,
                 "capture_valid: the stream is not capturing");
  return status == cudaStreamCaptureStatusActive;
}
GraphHandle end_capture(int ordinal, StreamHandle stream, std::string* why) {
  DeviceGuard guard(ordinal);
  cudaGraph_t graph = nullptr;
  cudaError_t err = cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &graph);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // capture errors are not sticky; leave nothing for the next check
    if (graph != nullptr) (void)cudaGraphDestroy(graph);  // unchecked: the capture already failed
    *why = std::string("CUDA ended the capture with ") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
    return nullptr;
  }
  cudaGraphExec_t exec = nullptr;
  err = cudaGraphInstantiateWithFlags(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);  // unchecked: the executable graph keeps what it needs
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    *why = std::string("cudaGraphInstantiate failed with ") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
    return nullptr;
  }
  return exec;
}
void launch_graph(int ordinal, GraphHandle graph, StreamHandle stream) {
  DeviceGuard guard(ordinal);
  CHORUS_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), static_cast<cudaStream_t>(stream)));
}
void destroy_graph(int ordinal, GraphHandle graph) noexcept {
  destroy_quietly(ordinal, [&] { return cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph)); });
}

#else  // !CHORUS_WITH_CUDA

namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw UnavailableError(std::string(what) +
                         ": chorus was built without CUDA (reconfigure with the CUDA toolkit installed)");
}
}  // namespace

bool compiled_with_cuda() { return false; }
int device_count() { return 0; }
std::string unavailable_reason() { return "chorus was built without CUDA"; }
std::int64_t host_waits() { return 0; }
DeviceProperties device_properties(int) { no_cuda("device_properties"); }
void memory_info(int, std::size_t*, std::size_t*) { no_cuda("memory_info"); }
std::unique_ptr<SubAllocator> make_cuda_sub_allocator(int) { no_cuda("make_cuda_sub_allocator"); }
StreamHandle create_stream(int) { no_cuda("create_stream"); }
void destroy_stream(int, StreamHandle) noexcept {}
void synchronize_stream(int, StreamHandle) { no_cuda("synchronize_stream"); }
EventHandle create_event(int) { no_cuda("create_event"); }
void destroy_event(int, EventHandle) noexcept {}
void record_event(int, EventHandle, StreamHandle) { no_cuda("record_event"); }
void stream_wait_event(int, StreamHandle, EventHandle) { no_cuda("stream_wait_event"); }
void synchronize_event(int, EventHandle) { no_cuda("synchronize_event"); }
bool event_done(int, EventHandle) { no_cuda("event_done"); }
void memcpy_async(int, StreamHandle, void*, const void*, std::size_t, CopyKind, int) { no_cuda("memcpy_async"); }
void fill_async(int, StreamHandle, void*, std::size_t, std::size_t, std::uint64_t) { no_cuda("fill_async"); }
void add_inplace_async(int, StreamHandle, DType, void*, const void*, std::size_t) { no_cuda("add_inplace_async"); }
void begin_capture(int, StreamHandle) { no_cuda("begin_capture"); }
bool capture_valid(int, StreamHandle) { no_cuda("capture_valid"); }
GraphHandle end_capture(int, StreamHandle, std::string*) { no_cuda("end_capture"); }
void launch_graph(int, GraphHandle, StreamHandle) { no_cuda("launch_graph"); }
void destroy_graph(int, GraphHandle) noexcept {}

#endif

}  // namespace chorus::gpu
