// Runs one function per rank on its own thread, each on its own logical CPU device, as replicas do.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include <chorus/collective/communicator.h>
#include <chorus/core/config.h>
#include <chorus/core/runtime.h>

namespace chorus::testing {

// Configures `k` logical CPU devices (fresh runtime) and returns.
inline void use_cpu_devices(int k) {
  internal::reset_runtime_for_testing();
  config::set_visible_devices({}, "GPU");
  std::vector<LogicalDeviceConfiguration> cfgs(k, LogicalDeviceConfiguration{.memory_limit_mb = 256});
  config::set_logical_device_configuration(config::list_physical_devices("CPU")[0], cfgs);
}

// Calls fn(rank, comm) on k threads; returns the exception each rank threw (nullptr if none).
inline std::vector<std::exception_ptr> run_ranks(std::vector<std::unique_ptr<collective::Communicator>>& comms,
                                                 const std::function<void(int, collective::Communicator&)>& fn) {
  const int k = static_cast<int>(comms.size());
  std::vector<std::exception_ptr> errors(k);
  std::vector<std::thread> threads;
  for (int r = 0; r < k; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r, *comms[r]);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

inline void rethrow_first(const std::vector<std::exception_ptr>& errors) {
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace chorus::testing
