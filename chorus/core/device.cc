#include <chorus/core/device.h>

namespace chorus {

std::ostream& operator<<(std::ostream& os, const PhysicalDevice& d) {
  return os << "PhysicalDevice(name='" << d.name << "', device_type='" << d.device_type << "')";
}

std::ostream& operator<<(std::ostream& os, const LogicalDevice& d) {
  return os << "LogicalDevice(name='" << d.name << "', device_type='" << d.device_type << "')";
}

}  // namespace chorus
