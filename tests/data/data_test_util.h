// Shared helpers for the data/ tests.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
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

using TempDir = chorus::testing::TempDir;  // tests/core/test_util.h

// A file's bytes, and a file made of `bytes` (truncating it).
inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
inline void spit(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Two logical CPU devices (CPU:0, CPU:1) and no GPU, so placement is predictable.
inline void make_two_cpus() {
  chorus::internal::reset_runtime_for_testing();
  config::set_visible_devices({}, "GPU");
  config::set_logical_device_configuration(
      config::list_physical_devices("CPU")[0],
      {LogicalDeviceConfiguration{.memory_limit_mb = 512}, LogicalDeviceConfiguration{.memory_limit_mb = 512}});
}

}  // namespace chorus::data::testing
