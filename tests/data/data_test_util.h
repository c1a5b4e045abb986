// Shared helpers for the data/ tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <unistd.h>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/runtime.h"
#include "data/dataset.h"
#include "tests/core/test_util.h"

namespace chorus::data::testing {

// The first component of up to `limit` elements as int64s, flattened (the datasets under test hold
// scalars or, batched, vectors).
inline std::vector<std::int64_t> first_components(Iterator& it, std::int64_t limit = 1'000'000) {
  std::vector<std::int64_t> out;
  for (std::int64_t n = 0; n < limit; ++n) {
    auto e = it.next();
    if (!e) break;
    for (std::int64_t v : (*e)[0].to_vector<std::int64_t>()) out.push_back(v);
  }
  return out;
}
inline std::vector<std::int64_t> values(const Dataset& ds, std::int64_t limit = 1'000'000) {
  auto it = ds.make_iterator();
  return first_components(it, limit);
}
inline std::vector<std::int64_t> iota(std::int64_t begin, std::int64_t end) {
  std::vector<std::int64_t> v;
  for (std::int64_t i = begin; i < end; ++i) v.push_back(i);
  return v;
}

// A fresh directory under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            ("chorus_data_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Two logical CPU devices (CPU:0, CPU:1) and no GPU, so placement is predictable.
inline void make_two_cpus() {
  chorus::internal::reset_runtime_for_testing();
  config::set_visible_devices({}, "GPU");
  config::set_logical_device_configuration(config::list_physical_devices("CPU")[0],
                                           {LogicalDeviceConfiguration{.memory_limit_mb = 512},
                                            LogicalDeviceConfiguration{.memory_limit_mb = 512}});
}

}  // namespace chorus::data::testing
