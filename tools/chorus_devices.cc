// chorus-devices: lists physical and logical devices, carves two virtual devices out of the first
// GPU (or the CPU when there is none), places a small computation on each with placement logging
// on, checks the result on the host, and prints every device's memory statistics.
//
//   chorus-devices [--memory-limit-mb N]     (default 256 MiB per virtual device)
#include <chorus/chorus.h>

#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <numeric>

namespace cx = chorus;

namespace {

std::string mib(std::size_t bytes) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(2) << static_cast<double>(bytes) / (1 << 20) << " MiB";
  return os.str();
}

int run(int argc, char** argv) {
  std::cout << std::unitbuf;  // keep our lines in order with the placement log on stderr
  std::int64_t limit_mb = 256;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--memory-limit-mb") == 0 && i + 1 < argc) {
      limit_mb = std::atoll(argv[++i]);
    } else {
      return chorus::launch::usage_error("chorus-devices", argv[i], "usage: chorus-devices [--memory-limit-mb N]\n");
    }
  }

  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  std::cout << "CUDA_VISIBLE_DEVICES=" << (visible ? visible : "(unset)") << "\n";
  std::cout << "Physical devices:\n";
  for (const auto& d : cx::config::list_physical_devices())
    std::cout << "  " << d.name << "  (" << d.description << ")\n";
  auto gpus = cx::config::list_physical_devices("GPU");
  if (gpus.empty())
    std::cout << "No GPU: " << cx::gpu::unavailable_reason() << "; carving virtual devices out of the CPU.\n";
  const cx::PhysicalDevice base = gpus.empty() ? cx::config::list_physical_devices("CPU")[0] : gpus[0];
  const std::string type = base.device_type;

  cx::config::set_logical_device_configuration(base, {{.memory_limit_mb = limit_mb}, {.memory_limit_mb = limit_mb}});
  cx::config::set_log_device_placement(true);

  std::cout << "\nLogical devices:\n";
  auto logical = cx::config::list_logical_devices();
  for (const auto& d : logical)
    std::cout << "  " << d.name << "  -> " << d.physical_name << ", limit " << mib(d.memory_limit)
              << (d.memory_growth ? ", growth" : "") << "\n";

  // The computation: on each virtual device, x = iota(n), y = ones(n); y += x; then copy y to the
  // other virtual device and back to the host, and check sum(y) = n(n-1)/2 + n.
  const std::int64_t n = 1 << 20;
  std::vector<float> host(n);
  std::iota(host.begin(), host.end(), 0.0f);
  const double expected = static_cast<double>(n) * (n - 1) / 2 + static_cast<double>(n);
  bool ok = true;
  std::cout << "\nPlacing a computation on each " << type << " virtual device:\n";
  for (int i = 0; i < 2; ++i) {
    const std::string dev = type + ":" + std::to_string(i);
    const std::string other = type + ":" + std::to_string(1 - i);
    cx::Tensor y;
    {
      cx::DeviceScope scope(dev);
      cx::Tensor x = cx::Tensor::from_vector(host);
      y = cx::Tensor::ones({n});
      y.add_inplace(x);
    }
    cx::Tensor moved = y.to(other);
    std::vector<float> back = moved.to_vector<float>();
    const double sum = std::accumulate(back.begin(), back.end(), 0.0);
    const bool good = sum == expected;
    ok = ok && good;
    std::cout << "  " << dev << ": sum(ones + iota) = " << std::setprecision(15) << sum << " (expected " << expected
              << ") " << (good ? "OK" : "WRONG") << ", copied to " << moved.device_name() << "\n";
  }

  std::cout << "\nMemory per logical device:\n";
  std::cout << "  " << std::left << std::setw(48) << "device" << std::setw(14) << "current" << std::setw(14) << "peak"
            << std::setw(14) << "limit"
            << "reserved\n";
  for (const auto& d : logical) {
    cx::MemoryInfo m = cx::config::get_memory_info(d.name);
    std::cout << "  " << std::setw(48) << d.name << std::setw(14) << mib(m.current) << std::setw(14) << mib(m.peak)
              << std::setw(14) << mib(m.limit) << mib(m.reserved) << "\n";
  }
  std::cout << (ok ? "\nAll devices computed the expected result.\n" : "\nA device computed a WRONG result.\n");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (auto rc = chorus::launch::answer_help_or_version(
          argc, argv, "chorus-devices",
          "usage: chorus-devices [--memory-limit-mb N]\n  lists the devices, carves two virtual devices out of the first GPU (or the CPU), runs a check on each\n"))
    return *rc;
  try {
    return run(argc, argv);
  } catch (const cx::Error& e) {
    std::cerr << "chorus-devices: " << e.what() << "\n";
    return 1;
  }
}
