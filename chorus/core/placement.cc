#include <chorus/core/placement.h>

#include <mutex>
#include <set>
#include <string>

#include <chorus/core/config.h>
#include <chorus/core/error.h>
#include <chorus/core/logging.h>

namespace chorus {
namespace {

thread_local DeviceSpec t_spec;
thread_local bool t_spec_set = false;

// Soft-placement warnings are logged once per distinct (op, request, chosen) triple: a training
// loop would otherwise repeat the same line every step.
void warn_once(const std::string& key, const std::string& message) {
  static std::mutex mu;
  static std::set<std::string> seen;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!seen.insert(key).second) return;
  }
  CHORUS_LOG(WARNING) << message;
}

std::shared_ptr<DeviceContext> first_of_type(std::string_view type) {
  DeviceSpec s;
  s.type = std::string(type);
  return runtime::match(s);
}

}  // namespace

DeviceScope::DeviceScope(std::string_view device) : saved_(t_spec), saved_set_(t_spec_set) {
  DeviceSpec spec = DeviceSpec::parse(device);
  CHORUS_REQUIRE(!spec.physical, InvalidArgumentError, "DeviceScope(\"", device,
                 "\"): a physical device cannot be used for placement; use a logical device such as \"/GPU:0\"");
  t_spec = spec.merged_with(t_spec);
  t_spec_set = true;
}

DeviceScope::~DeviceScope() {
  t_spec = saved_;
  t_spec_set = saved_set_;
}

DeviceSpec current_device_spec() { return t_spec_set ? t_spec : DeviceSpec{}; }

std::shared_ptr<DeviceContext> place_op(std::string_view op_name, std::string_view device, bool has_gpu_kernel) {
  DeviceSpec spec = current_device_spec();
  if (!device.empty()) {
    DeviceSpec explicit_spec = DeviceSpec::parse(device);
    CHORUS_REQUIRE(!explicit_spec.physical, InvalidArgumentError, "op ", op_name, ": '", device,
                   "' is a physical device; use a logical device such as \"/GPU:0\"");
    spec = explicit_spec.merged_with(spec);
  }
  std::shared_ptr<DeviceContext> chosen;
  if (!spec.type) {
    chosen = has_gpu_kernel ? first_of_type("GPU") : nullptr;
    if (!chosen) chosen = first_of_type("CPU");
  } else {
    DeviceSpec want = spec;
    if (!want.index) want.index = 0;
    std::shared_ptr<DeviceContext> found = runtime::match(want);
    const bool kernel_ok = !found || !found->is_gpu() || has_gpu_kernel;
    if (found && kernel_ok) {
      chosen = found;
    } else {
      const std::string why =
          !found ? "does not exist" : "has no " + found->device().device_type + " kernel for this op";
      if (!config::get_soft_device_placement()) {
        throw InvalidArgumentError(
            internal::str_cat("Could not satisfy device specification '", want.to_string(), "' for op ", op_name,
                              ": the device ", why, ". The devices are ", runtime::device_list(),
                              ". Enable set_soft_device_placement(true) to fall back to an existing device."));
      }
      chosen = (found && !kernel_ok) ? nullptr : first_of_type(*want.type);
      if (!chosen || (chosen->is_gpu() && !has_gpu_kernel)) chosen = first_of_type("CPU");
      warn_once(std::string(op_name) + "|" + want.to_string() + "|" + chosen->name(),
                internal::str_cat("soft placement: op ", op_name, " requested '", want.to_string(), "', which ", why,
                                  "; running it on ", chosen->name(), " instead"));
    }
  }
  if (config::get_log_device_placement())
    CHORUS_LOG(INFO) << "Executing op " << op_name << " in device " << chosen->name();
  return chosen;
}

}  // namespace chorus
