#include <chorus/core/graph_capture.h>

#include <exception>
#include <mutex>
#include <utility>

#include <chorus/core/error.h>
#include <chorus/core/runtime.h>
#include <chorus/core/stream.h>

namespace chorus {

CapturedGraph::Capture CapturedGraph::capture(DeviceContext& dev, const std::function<void()>& body) {
  CHORUS_REQUIRE(dev.is_gpu(), InvalidArgumentError, "CapturedGraph::capture: CUDA graphs need a GPU device, got ",
                 dev.name());
  const int ordinal = dev.gpu_ordinal();
  gpu::StreamHandle stream = dev.stream().native_handle();
  Allocator& allocator = dev.allocator();
  const Allocator::PoolId pool = allocator.create_pool();
  std::string why;
  gpu::GraphHandle graph = nullptr;
  try {
    std::lock_guard<std::mutex> no_other_thread(dev.capture_mutex());
    PoolUse use(allocator, pool);
    gpu::begin_capture(ordinal, stream);
    try {
      body();
    } catch (const std::exception& e) {
      // CUDA refused a call of body's (the capture is invalidated): a reason, not an error.
      // Anything else is body's own error, which propagates once the capture has ended.
      const bool refused = !gpu::capture_valid(ordinal, stream);
      std::string ignored;
      gpu::GraphHandle partial = gpu::end_capture(ordinal, stream, &ignored);
      if (partial != nullptr) gpu::destroy_graph(ordinal, partial);
      if (!refused) throw;
      why = e.what();
    }
    if (why.empty()) graph = gpu::end_capture(ordinal, stream, &why);
  } catch (...) {
    allocator.release_pool(pool);
    throw;
  }
  if (graph == nullptr) {
    allocator.release_pool(pool);
    return {nullptr, why};
  }
  return {std::unique_ptr<CapturedGraph>(new CapturedGraph(dev, graph, pool)), ""};
}

CapturedGraph::~CapturedGraph() {
  gpu::destroy_graph(dev_.gpu_ordinal(), graph_);
  try {
    dev_.allocator().release_pool(pool_);
  } catch (...) {  // a destructor never throws; the pool's memory then stays reserved
  }
}

void CapturedGraph::replay() { gpu::launch_graph(dev_.gpu_ordinal(), graph_, dev_.stream().native_handle()); }

}  // namespace chorus
