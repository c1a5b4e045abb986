// Device names: parsing every form TensorFlow documents, and printing the canonical full name.
//
// Accepted (the device type is case-insensitive; "device:" may be omitted):
//   "/cpu:0"  "/GPU:1"  "GPU:0"  "gpu"  "/device:GPU:0"  "/device:gpu:0"
//   "/job:localhost/replica:0/task:0/device:GPU:0"   "/job:worker/task:1/gpu:2"
//   "/physical_device:GPU:0"  (names a physical device, not a logical one)
// A spec may leave fields out (no index = any index). Canonical full names of logical devices are
// "/job:localhost/replica:0/task:0/device:GPU:0"; of physical ones "/physical_device:GPU:0".
// Device types are upper-cased on parse: "CPU" and "GPU" are the types chorus has.
//
// Errors: parse() throws InvalidArgumentError quoting the string, the offending part, and the
// accepted forms. Thread-safe (pure functions).
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <string_view>

namespace chorus {

struct DeviceSpec {
  std::optional<std::string> job;  // "localhost", "worker"
  std::optional<int> replica;
  std::optional<int> task;
  std::optional<std::string> type;  // upper case: "CPU", "GPU"
  std::optional<int> index;
  bool physical = false;  // "/physical_device:..." form

  static DeviceSpec parse(std::string_view text);

  // True when every field set in `*this` equals the field in `other` (unset fields match anything)
  // and `physical` agrees: logical and physical names never match each other.
  bool matches(const DeviceSpec& other) const;
  // Fills unset fields from `defaults` (TF's DeviceSpec.make_merged_spec, inverse priority:
  // fields already set here win; field by field, so "/gpu" merged with "/cpu:1" is GPU:1 as in TF).
  // The result is physical when either side is.
  DeviceSpec merged_with(const DeviceSpec& defaults) const;
  // The shortest form of what is set: "/job:worker/task:1/device:GPU:0", "/device:CPU:*".
  std::string to_string() const;
  bool operator==(const DeviceSpec&) const = default;
};

std::ostream& operator<<(std::ostream& os, const DeviceSpec& spec);

// "/job:localhost/replica:0/task:0/device:<type>:<index>" (task from the process rank).
std::string canonical_logical_name(std::string_view type, int index, int task = 0);
// "/physical_device:<type>:<index>"
std::string canonical_physical_name(std::string_view type, int index);

}  // namespace chorus
