#include <chorus/core/runtime.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include <chorus/core/config_state.h>
#include <chorus/core/env.h>
#include <chorus/core/error.h>
#include <chorus/core/gpu.h>
#include <chorus/core/host_memory.h>
#include <chorus/core/logging.h>
#include <chorus/core/timeline.h>

namespace chorus {

using internal::str_cat;

DeviceContext::DeviceContext(LogicalDevice device, std::unique_ptr<Allocator> allocator, std::unique_ptr<Stream> stream,
                             int gpu_ordinal)
    : device_(std::move(device)),
      allocator_(std::move(allocator)),
      stream_(std::move(stream)),
      gpu_ordinal_(gpu_ordinal) {}

Stream& DeviceContext::side_stream() const {
  if (gpu_ordinal_ < 0) return *stream_;
  std::call_once(side_once_, [this] { side_stream_ = make_gpu_stream(gpu_ordinal_, "side stream of " + name()); });
  return *side_stream_;
}

Stream& DeviceContext::host_to_device_stream() const {
  if (gpu_ordinal_ < 0) return *stream_;
  std::call_once(host_to_device_once_, [this] {
    host_to_device_stream_ = make_gpu_stream(gpu_ordinal_, "host-to-device stream of " + name());
  });
  return *host_to_device_stream_;
}

namespace runtime {
namespace {

// Headroom left on a GPU without an explicit limit, for the CUDA context's own needs and
// libraries' workspaces (cuBLAS, cuDNN, NCCL) that do not allocate through chorus: the larger of
// 512 MiB and 5% of what is free (TensorFlow keeps max(300 MiB, 5%)).
std::size_t gpu_reserve_bytes(std::size_t free_bytes) { return std::max(std::size_t{512} << 20, free_bytes / 20); }

struct Runtime {
  std::mutex mu;
  bool initialized = false;
  std::vector<std::shared_ptr<DeviceContext>> devices;
};
Runtime& rt() {
  // Never destroyed: at exit the CUDA runtime may already be unloaded, and streams and cudaFree
  // must not run after it (TensorFlow and PyTorch leak their device state for the same reason).
  static Runtime* r = new Runtime;
  return *r;
}

std::vector<std::shared_ptr<DeviceContext>> build(std::string_view first_use) {
  config::internal::FrozenConfig cfg = config::internal::freeze(first_use);
  std::vector<std::shared_ptr<DeviceContext>> out;
  int next_cpu = 0;
  int next_gpu = 0;
  bool any_gpu = false;
  for (const PhysicalDevice& phys : cfg.visible) any_gpu = any_gpu || phys.device_type == "GPU";
  // Read only when it matters: a malformed value must not break CPU-only programs.
  const bool env_growth = any_gpu && env::get_bool("TF_FORCE_GPU_ALLOW_GROWTH").value_or(false);
  // Threads for the ops of each logical CPU device: an equal share of the intra-op budget.
  int logical_cpus = 0;
  for (const PhysicalDevice& phys : cfg.visible) {
    if (phys.device_type != "CPU") continue;
    auto it = cfg.logical.find(phys.name);
    logical_cpus += it != cfg.logical.end() ? static_cast<int>(it->second.size()) : 1;
  }
  const int budget = cfg.intra_op_threads > 0 ? cfg.intra_op_threads
                                              : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int cpu_share = std::max(1, budget / std::max(1, logical_cpus));
  for (const PhysicalDevice& phys : cfg.visible) {
    auto it = cfg.logical.find(phys.name);
    std::vector<LogicalDeviceConfiguration> configs =
        it != cfg.logical.end() ? it->second : std::vector<LogicalDeviceConfiguration>{{}};
    const bool is_gpu = phys.device_type == "GPU";
    bool growth = true;  // host arenas always grow on demand
    std::size_t default_limit = phys.memory_bytes;
    if (is_gpu) {
      auto g = cfg.memory_growth.find(phys.name);
      growth = g != cfg.memory_growth.end() ? g->second : env_growth;
      if (growth && configs.size() > 1) {
        CHORUS_LOG(WARNING) << "TF_FORCE_GPU_ALLOW_GROWTH is ignored for " << phys.name << ": it has " << configs.size()
                            << " virtual devices with fixed memory limits";
        growth = false;
      }
      std::size_t free_bytes = 0, total_bytes = 0;
      gpu::memory_info(phys.index, &free_bytes, &total_bytes);
      const auto by_fraction = static_cast<std::size_t>(static_cast<double>(total_bytes) * cfg.gpu_memory_fraction);
      const std::size_t reserve = gpu_reserve_bytes(free_bytes);
      default_limit = std::min(by_fraction, free_bytes > reserve ? free_bytes - reserve : 0);
      const bool explicit_limits = it != cfg.logical.end() && configs.front().memory_limit_mb > 0;
      CHORUS_REQUIRE(explicit_limits || default_limit >= (std::size_t{1} << 20), ResourceExhaustedError, phys.name,
                     " has only ", free_bytes >> 20, " MiB free of ", total_bytes >> 20,
                     " MiB (other processes hold the "
                     "rest; chorus keeps ",
                     reserve >> 20,
                     " MiB for the CUDA context and libraries): free the GPU, hide it "
                     "with set_visible_devices, or give it an explicit memory_limit_mb");
    }
    for (const LogicalDeviceConfiguration& c : configs) {
      LogicalDevice ld;
      ld.device_type = phys.device_type;
      ld.index = is_gpu ? next_gpu++ : next_cpu++;
      ld.name = canonical_logical_name(ld.device_type, ld.index);
      ld.physical_name = phys.name;
      ld.physical_index = phys.index;
      ld.memory_limit = c.memory_limit_mb > 0 ? static_cast<std::size_t>(c.memory_limit_mb) << 20 : default_limit;
      ld.memory_growth = growth;
      ld.intra_op_threads = is_gpu ? 1 : (c.intra_op_threads > 0 ? c.intra_op_threads : cpu_share);
      BFCOptions opts;
      opts.logical_device = ld.name;
      opts.physical_device = phys.name;
      opts.memory_limit = ld.memory_limit;
      opts.allow_growth = growth;
      auto sub = is_gpu ? gpu::make_cuda_sub_allocator(phys.index) : make_host_sub_allocator();
      auto stream =
          is_gpu ? make_gpu_stream(phys.index, "stream of " + ld.name) : make_cpu_stream("stream of " + ld.name);
      CHORUS_LOG(DEBUG) << "Created device " << ld.name << " with " << (ld.memory_limit >> 20) << " MB memory"
                        << (growth && is_gpu ? " (growth)" : "") << ": -> " << phys.name << " (" << phys.description
                        << ")";
      out.push_back(std::make_shared<DeviceContext>(ld, make_bfc_allocator(std::move(sub), std::move(opts)),
                                                    std::move(stream), is_gpu ? phys.index : -1));
    }
  }
  return out;
}

}  // namespace

const std::vector<std::shared_ptr<DeviceContext>>& devices(std::string_view first_use) {
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.initialized) {
    try {
      r.devices = build(first_use);
    } catch (...) {
      // A failed initialization leaves the configuration changeable, so the user can follow the
      // error's advice (hide a GPU, set a limit) and try again.
      config::internal::unfreeze();
      throw;
    }
    r.initialized = true;
    timeline::start_from_environment();  // CHORUS_TIMELINE (core/timeline.h): from the first device use
  }
  return r.devices;
}

bool initialized() {
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.initialized;
}

std::shared_ptr<DeviceContext> match(const DeviceSpec& spec) {
  // Host memory devices (core/host_memory.h) are no logical devices: their own job names them.
  if (auto host = internal::match_host_memory(spec)) return *host;
  for (const auto& d : devices()) {
    if (spec.job && *spec.job != "localhost") continue;
    if (spec.replica && *spec.replica != 0) continue;
    if (spec.task && *spec.task != 0) continue;
    if (spec.type && *spec.type != d->device().device_type) continue;
    if (spec.index && *spec.index != d->device().index) continue;
    return d;
  }
  return nullptr;
}

std::string device_list() {
  std::string s;
  for (const auto& d : devices()) s += (s.empty() ? "" : ", ") + d->name();
  return s;
}

std::shared_ptr<DeviceContext> find(std::string_view text) {
  DeviceSpec spec = DeviceSpec::parse(text);
  CHORUS_REQUIRE(!spec.physical, InvalidArgumentError, "'", text,
                 "' names a physical device; give a logical device such as \"GPU:0\" (devices: ", device_list(), ")");
  CHORUS_REQUIRE(spec.type.has_value(), InvalidArgumentError, "'", text,
                 "' names no device type; give one such as \"CPU:0\" or \"GPU:1\" (devices: ", device_list(), ")");
  if (!spec.index) spec.index = 0;
  auto d = match(spec);
  CHORUS_REQUIRE(d != nullptr, InvalidArgumentError, "unknown device '", text, "': the devices are ", device_list());
  return d;
}

}  // namespace runtime

namespace internal {
void reset_runtime_for_testing() {
  auto& r = runtime::rt();
  std::vector<std::shared_ptr<DeviceContext>> old;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    old.swap(r.devices);
    r.initialized = false;
    config::internal::reset();
  }
  old.clear();  // streams drain here, outside the lock: their work may call into the runtime
}
}  // namespace internal

}  // namespace chorus
