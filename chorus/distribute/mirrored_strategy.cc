#include <chorus/distribute/mirrored_strategy.h>

#include <chorus/core/config.h>
#include <chorus/core/error.h>
#include <chorus/core/logging.h>
#include <chorus/core/runtime.h>
#include <chorus/core/strings.h>

namespace chorus::distribute {
namespace {

std::vector<std::string> default_devices(std::vector<std::string> devices) {
  if (!devices.empty()) return devices;
  std::vector<std::string> gpus, cpus;
  for (const auto& d : runtime::devices("MirroredStrategy")) (d->is_gpu() ? gpus : cpus).push_back(d->name());
  return gpus.empty() ? cpus : gpus;
}

// Validates options.sharding before the base constructor starts replica threads.
const MirroredStrategyOptions& checked(const MirroredStrategyOptions& options) {
  check_sharding(options.sharding, "MirroredStrategy");
  return options;
}

}  // namespace

MirroredStrategy::MirroredStrategy(std::vector<std::string> devices, const MirroredStrategyOptions& options)
    : Strategy("MirroredStrategy", default_devices(std::move(devices)), checked(options).cross_device_ops, true,
               options.timeout) {
  sharding_stage_ = options.sharding.stage;
  offload_optimizer_state_ = options.sharding.offload_optimizer_state;
  prefetch_limit_ = options.sharding.prefetch_limit;
  set_communication_options(options.communication_options);
  set_overlap(options.overlap_gradient_all_reduce);
  CHORUS_LOG(INFO) << "Using MirroredStrategy with devices ("
                   << chorus::internal::join(replica_devices(), {.quote = "'"})
                   << "); cross-device ops: " << cross_device_ops_name(cross_device_ops().ops) << " ("
                   << cross_device_ops().reason << ")"
                   << (*communication_options().compression == Compression::kNone
                           ? ""
                           : chorus::internal::str_cat("; gradient compression: ",
                                                       compression_name(*communication_options().compression)))
                   << sharding_description(sharding_stage_, num_replicas_in_sync())
                   << offload_description(offload_optimizer_state_)
                   << "; all-reduce overlapped with backward: " << overlap_reason();
}

OneDeviceStrategy::OneDeviceStrategy(const std::string& device, std::chrono::milliseconds timeout)
    : Strategy("OneDeviceStrategy", {device}, CrossDeviceOps::kAuto, false, timeout) {
  mirrored_variables_ = false;
}

}  // namespace chorus::distribute
