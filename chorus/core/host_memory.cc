#include <chorus/core/host_memory.h>

#include <unistd.h>

#include <map>
#include <mutex>
#include <string>
#include <utility>

#include <chorus/core/error.h>
#include <chorus/core/stream.h>

namespace chorus::runtime {

using chorus::internal::str_cat;

namespace {

struct HostMemoryDevices {
  std::mutex mu;
  std::map<std::pair<bool, int>, std::shared_ptr<DeviceContext>> devices;  // (pinned, index)
};
HostMemoryDevices& registry() {
  // Never destroyed, as the runtime's devices (core/runtime.cc): pinned memory must not be freed
  // after the CUDA runtime unloaded at exit.
  static auto* r = new HostMemoryDevices;
  return *r;
}

std::size_t host_ram_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page)
                               : static_cast<std::size_t>(1) << 40;
}

std::string_view job_of(bool pinned) { return pinned ? kPinnedHostMemoryJob : kHostMemoryJob; }

}  // namespace

std::shared_ptr<DeviceContext> host_memory(int index, bool pinned, int intra_op_threads) {
  CHORUS_REQUIRE(index >= 0, InvalidArgumentError, "host_memory: index must be >= 0, got ", index);
  CHORUS_REQUIRE(intra_op_threads >= 1, InvalidArgumentError, "host_memory: intra_op_threads must be >= 1, got ",
                 intra_op_threads);
  HostMemoryDevices& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::shared_ptr<DeviceContext>& slot = r.devices[{pinned, index}];
  if (slot) return slot;
  LogicalDevice d;
  d.device_type = "CPU";
  d.index = index;
  d.name = str_cat("/job:", job_of(pinned), "/replica:0/task:0/device:CPU:", index);
  d.physical_name = "/physical_device:CPU:0";
  d.physical_index = 0;
  d.memory_limit = host_ram_bytes();
  d.memory_growth = true;
  d.intra_op_threads = intra_op_threads;
  BFCOptions opts;
  opts.logical_device = d.name;
  opts.physical_device = d.physical_name;
  opts.memory_limit = d.memory_limit;
  opts.allow_growth = true;
  auto sub = pinned ? internal::make_pinned_host_sub_allocator() : make_host_sub_allocator();
  auto stream = make_cpu_stream("stream of " + d.name);
  slot = std::make_shared<DeviceContext>(d, make_bfc_allocator(std::move(sub), std::move(opts)), std::move(stream), -1);
  return slot;
}

bool is_host_memory(std::string_view device) {
  return device.find(str_cat("/job:", kHostMemoryJob, "/")) == 0 ||
         device.find(str_cat("/job:", kPinnedHostMemoryJob, "/")) == 0;
}

namespace internal {

std::optional<std::shared_ptr<DeviceContext>> match_host_memory(const DeviceSpec& spec) {
  if (!spec.job || (*spec.job != kHostMemoryJob && *spec.job != kPinnedHostMemoryJob)) return std::nullopt;
  const bool pinned = *spec.job == kPinnedHostMemoryJob;
  if ((spec.type && *spec.type != "CPU") || (spec.replica && *spec.replica != 0) || (spec.task && *spec.task != 0))
    return std::shared_ptr<DeviceContext>();
  HostMemoryDevices& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.devices.find({pinned, spec.index.value_or(0)});
  return it == r.devices.end() ? std::shared_ptr<DeviceContext>() : it->second;
}

#ifndef CHORUS_WITH_CUDA
namespace {
class NoPinnedSubAllocator final : public SubAllocator {
 public:
  void* alloc(std::size_t) override {
    throw UnavailableError("pinned host memory needs CUDA: chorus was built without CUDA");
  }
  void free(void*, std::size_t) override {}
  std::string describe() const override { return "pinned host memory (unavailable: built without CUDA)"; }
};
}  // namespace
std::unique_ptr<SubAllocator> make_pinned_host_sub_allocator() { return std::make_unique<NoPinnedSubAllocator>(); }
#endif

}  // namespace internal

}  // namespace chorus::runtime
