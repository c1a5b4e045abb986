#include <chorus/core/config.h>

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <thread>

#include <chorus/core/config_state.h>
#include <chorus/core/env.h>
#include <chorus/core/error.h>
#include <chorus/core/gpu.h>
#include <chorus/core/runtime.h>

namespace chorus::config {
namespace {

using chorus::internal::str_cat;

struct State {
  std::mutex mu;
  bool frozen = false;
  std::string frozen_by;
  bool visible_set = false;
  std::vector<std::string> visible;  // physical names, when visible_set
  std::map<std::string, std::vector<LogicalDeviceConfiguration>> logical;
  std::map<std::string, bool> growth;
  double fraction = 1.0;
  int intra_op_threads = 0;
};
State& state() {
  static State s;
  return s;
}
std::atomic<bool> g_soft_placement{true};
std::atomic<bool> g_log_placement{false};
// -1: not set, the default (enabled unless NVIDIA_TF32_OVERRIDE=0); else 0 or 1.
std::atomic<int> g_tf32{-1};

std::string normalize_type(std::string_view type) {
  std::string t;
  for (char c : type) t += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  CHORUS_REQUIRE(t.empty() || t == "CPU" || t == "GPU", InvalidArgumentError, "device type '", type,
                 "' is not valid: chorus has CPU and GPU devices (or \"\" for all)");
  return t;
}

std::size_t host_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) : 0;
}

// Discovered once: the hardware does not change under a running process.
const std::vector<PhysicalDevice>& all_physical() {
  static const std::vector<PhysicalDevice> devices = [] {
    std::vector<PhysicalDevice> out;
    utsname u{};
    uname(&u);
    PhysicalDevice cpu;
    cpu.name = canonical_physical_name("CPU", 0);
    cpu.device_type = "CPU";
    cpu.memory_bytes = host_memory_bytes();
    cpu.description =
        str_cat(u.machine, ", ", std::thread::hardware_concurrency(), " cores, ", cpu.memory_bytes >> 20, " MiB");
    out.push_back(cpu);
    for (int i = 0; i < gpu::device_count(); ++i) {
      gpu::DeviceProperties p = gpu::device_properties(i);
      PhysicalDevice g;
      g.name = canonical_physical_name("GPU", i);
      g.device_type = "GPU";
      g.index = i;
      g.memory_bytes = p.total_memory;
      g.pci_bus_id = p.pci_bus_id;
      g.description =
          str_cat(p.name, ", pci bus id ", p.pci_bus_id, ", compute capability ", p.compute_capability_major, ".",
                  p.compute_capability_minor, ", ", p.total_memory >> 20, " MiB");
      out.push_back(g);
    }
    return out;
  }();
  return devices;
}

std::string physical_list() {
  std::string s;
  for (const auto& d : all_physical()) s += (s.empty() ? "" : ", ") + d.name;
  return s;
}

const PhysicalDevice& lookup(const PhysicalDevice& device) {
  for (const auto& d : all_physical())
    if (d.name == device.name) return d;
  throw InvalidArgumentError(
      str_cat("unknown physical device '", device.name, "': this process has ", physical_list()));
}

void require_not_frozen(const State& s, std::string_view what) {
  if (s.frozen)
    throw FailedPreconditionError(
        str_cat(what, " must be set before devices are initialized; they were initialized by ", s.frozen_by,
                ". Configure devices at the start of the program, before any tensor, strategy or "
                "list_logical_devices()."));
}

}  // namespace

std::vector<PhysicalDevice> list_physical_devices(std::string_view device_type) {
  std::string t = normalize_type(device_type);
  std::vector<PhysicalDevice> out;
  for (const auto& d : all_physical())
    if (t.empty() || d.device_type == t) out.push_back(d);
  return out;
}

std::vector<PhysicalDevice> get_visible_devices(std::string_view device_type) {
  std::string t = normalize_type(device_type);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<PhysicalDevice> out;
  for (const auto& d : all_physical()) {
    if (!t.empty() && d.device_type != t) continue;
    bool visible = !s.visible_set || d.device_type == "CPU" ||
                   std::find(s.visible.begin(), s.visible.end(), d.name) != s.visible.end();
    if (visible) out.push_back(d);
  }
  return out;
}

void set_visible_devices(const std::vector<PhysicalDevice>& devices, std::string_view device_type) {
  std::string t = normalize_type(device_type);
  for (const auto& d : devices) {
    const PhysicalDevice& known = lookup(d);
    CHORUS_REQUIRE(t.empty() || known.device_type == t, InvalidArgumentError, "set_visible_devices: ", known.name,
                   " is not of the requested type ", t);
  }
  if (t == "CPU" || (t.empty() && devices.empty()))
    CHORUS_REQUIRE(false, InvalidArgumentError,
                   "set_visible_devices: the CPU cannot be hidden; to hide all GPUs pass an empty "
                   "list with device_type \"GPU\"");
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  require_not_frozen(s, "Visible devices");
  // Only GPUs can be hidden, so the visible list is the GPUs named (the CPU is always visible).
  s.visible.clear();
  for (const auto& d : devices)
    if (lookup(d).device_type == "GPU") s.visible.push_back(d.name);
  s.visible_set = true;
}

void set_logical_device_configuration(const PhysicalDevice& device,
                                      const std::vector<LogicalDeviceConfiguration>& configs) {
  const PhysicalDevice& d = lookup(device);
  CHORUS_REQUIRE(!configs.empty(), InvalidArgumentError, "set_logical_device_configuration(", d.name,
                 "): the list of logical devices is empty; give at least one LogicalDeviceConfiguration");
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  require_not_frozen(s, str_cat("The logical device configuration of ", d.name));
  std::int64_t sum_mb = 0;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    std::int64_t mb = configs[i].memory_limit_mb;
    CHORUS_REQUIRE(mb > 0 || (mb == -1 && configs.size() == 1), InvalidArgumentError,
                   "set_logical_device_configuration(", d.name, "): logical device ", i, " has memory_limit_mb=", mb,
                   "; each limit must be > 0 (or -1, no limit, for a "
                   "single logical device)");
    if (mb > 0) sum_mb += mb;
    CHORUS_REQUIRE(configs[i].intra_op_threads >= 0, InvalidArgumentError, "set_logical_device_configuration(", d.name,
                   "): logical device ", i, " has intra_op_threads=", configs[i].intra_op_threads,
                   "; use a count >= 0 (0 = an equal share of the cores)");
    CHORUS_REQUIRE(configs[i].intra_op_threads == 0 || d.device_type == "CPU", InvalidArgumentError,
                   "set_logical_device_configuration(", d.name, "): intra_op_threads applies to CPU devices only");
  }
  const double fraction = d.device_type == "GPU" ? s.fraction : 1.0;
  const auto budget_mb = static_cast<std::int64_t>(static_cast<double>(d.memory_bytes >> 20) * fraction);
  CHORUS_REQUIRE(sum_mb <= budget_mb, InvalidArgumentError, "set_logical_device_configuration(", d.name,
                 "): the memory limits add up to ", sum_mb, " MiB but the device has ", budget_mb, " MiB",
                 fraction < 1.0
                     ? str_cat(" (", fraction, " of ", d.memory_bytes >> 20, " MiB by per_process_gpu_memory_fraction)")
                     : std::string(),
                 "; lower the limits or use fewer logical devices");
  if (d.device_type == "GPU" && configs.size() > 1) {
    auto it = s.growth.find(d.name);
    CHORUS_REQUIRE(it == s.growth.end() || !it->second, InvalidArgumentError, "set_logical_device_configuration(",
                   d.name,
                   "): memory growth is enabled on this "
                   "GPU; virtual devices need fixed limits. Call set_memory_growth(device, false) or "
                   "configure a single logical device");
  }
  s.logical[d.name] = configs;
}

std::vector<LogicalDeviceConfiguration> get_logical_device_configuration(const PhysicalDevice& device) {
  const PhysicalDevice& d = lookup(device);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.logical.find(d.name);
  return it == s.logical.end() ? std::vector<LogicalDeviceConfiguration>{} : it->second;
}

std::vector<LogicalDevice> list_logical_devices(std::string_view device_type) {
  std::string t = normalize_type(device_type);
  std::vector<LogicalDevice> out;
  for (const auto& ctx : runtime::devices("list_logical_devices()"))
    if (t.empty() || ctx->device().device_type == t) out.push_back(ctx->device());
  return out;
}

void set_memory_growth(const PhysicalDevice& device, bool enable) {
  const PhysicalDevice& d = lookup(device);
  CHORUS_REQUIRE(d.device_type == "GPU", InvalidArgumentError, "set_memory_growth(", d.name,
                 "): memory growth applies to GPUs; CPU devices always grow on demand up to their limit");
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  require_not_frozen(s, str_cat("Memory growth of ", d.name));
  auto it = s.logical.find(d.name);
  CHORUS_REQUIRE(!enable || it == s.logical.end() || it->second.size() <= 1, InvalidArgumentError, "set_memory_growth(",
                 d.name, ", true): this GPU has ", it->second.size(),
                 " virtual devices with fixed memory limits; memory growth and virtual devices "
                 "exclude each other");
  s.growth[d.name] = enable;
}

bool get_memory_growth(const PhysicalDevice& device) {
  const PhysicalDevice& d = lookup(device);
  CHORUS_REQUIRE(d.device_type == "GPU", InvalidArgumentError, "get_memory_growth(", d.name,
                 "): memory growth applies to GPUs");
  if (runtime::initialized()) {  // what the devices were built with, not today's environment
    for (const auto& ctx : runtime::devices())
      if (ctx->device().physical_name == d.name) return ctx->device().memory_growth;
  }
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.growth.find(d.name);
  if (it != s.growth.end()) return it->second;
  auto logical = s.logical.find(d.name);
  if (logical != s.logical.end() && logical->second.size() > 1) return false;
  return env::get_bool("TF_FORCE_GPU_ALLOW_GROWTH").value_or(false);
}

void set_per_process_gpu_memory_fraction(double fraction) {
  CHORUS_REQUIRE(fraction > 0.0 && fraction <= 1.0, InvalidArgumentError, "per_process_gpu_memory_fraction=", fraction,
                 " is not valid: use 0 < fraction <= 1");
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  require_not_frozen(s, "per_process_gpu_memory_fraction");
  s.fraction = fraction;
}

double get_per_process_gpu_memory_fraction() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.fraction;
}

void set_intra_op_parallelism_threads(int n) {
  CHORUS_REQUIRE(n >= 0, InvalidArgumentError, "set_intra_op_parallelism_threads(", n,
                 "): use a thread count >= 0 (0 = one per core)");
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  require_not_frozen(s, "intra_op_parallelism_threads");
  s.intra_op_threads = n;
}

int get_intra_op_parallelism_threads() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.intra_op_threads;
}

void set_soft_device_placement(bool enabled) { g_soft_placement = enabled; }
bool get_soft_device_placement() { return g_soft_placement; }
void set_log_device_placement(bool enabled) { g_log_placement = enabled; }
bool get_log_device_placement() { return g_log_placement; }
void enable_tensor_float_32_execution(bool enabled) { g_tf32 = enabled ? 1 : 0; }
bool tensor_float_32_execution_enabled() {
  const int set = g_tf32.load(std::memory_order_relaxed);
  if (set >= 0) return set == 1;
  const char* override_env = std::getenv("NVIDIA_TF32_OVERRIDE");
  return override_env == nullptr || std::string_view(override_env) != "0";
}

MemoryInfo get_memory_info(std::string_view device) {
  auto ctx = runtime::find(device);
  // Settle the numbers: queued work may still hold storage that its tensors already let go of.
  // Waiting on an event (not synchronize()) leaves any pending error for the next data read.
  ctx->stream().record_event()->synchronize();
  return ctx->allocator().memory_info();
}

void reset_memory_stats(std::string_view device) { runtime::find(device)->allocator().reset_peak(); }

namespace internal {

FrozenConfig freeze(std::string_view first_use) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.frozen) {
    s.frozen = true;
    s.frozen_by = std::string(first_use);
  }
  FrozenConfig f;
  for (const auto& d : all_physical()) {
    bool visible = !s.visible_set || d.device_type == "CPU" ||
                   std::find(s.visible.begin(), s.visible.end(), d.name) != s.visible.end();
    if (visible) f.visible.push_back(d);
  }
  f.logical = s.logical;
  f.memory_growth = s.growth;
  f.gpu_memory_fraction = s.fraction;
  f.intra_op_threads = s.intra_op_threads;
  return f;
}

void unfreeze() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.frozen = false;
  s.frozen_by.clear();
}

void reset() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.frozen = false;
  s.frozen_by.clear();
  s.visible_set = false;
  s.visible.clear();
  s.logical.clear();
  s.growth.clear();
  s.fraction = 1.0;
  s.intra_op_threads = 0;
  g_soft_placement = true;
  g_log_placement = false;
  g_tf32 = -1;
}

}  // namespace internal
}  // namespace chorus::config
