// Internal (not installed for users' use): the frozen configuration handed from config.cc to
// runtime.cc when devices are initialized.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/core/device.h>

namespace chorus::config::internal {

struct FrozenConfig {
  std::vector<PhysicalDevice> visible;  // visible physical devices, CPU first
  // Logical configurations by physical device name (absent: one default logical device).
  std::map<std::string, std::vector<LogicalDeviceConfiguration>> logical;
  std::map<std::string, bool> memory_growth;  // GPUs: explicit set_memory_growth
  double gpu_memory_fraction = 1.0;
  int intra_op_threads = 0;  // 0: the number of cores
};

// Marks the configuration frozen (first caller wins the `first_use` label) and returns it.
FrozenConfig freeze(std::string_view first_use);
// Undoes freeze() after a failed initialization (the configuration stays as it was).
void unfreeze();
// Forgets everything (tests only; see internal::reset_runtime_for_testing).
void reset();

}  // namespace chorus::config::internal
