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

#include "tests/core/test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/runtime.h>
#include <chorus/data/dataset.h>
#include <chorus/data/tfrecord.h>

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

// For k = 0 .. records: an iterator of build() that has read k elements, saved and restored into
// a fresh one, yields the same rest as the original (record_string of the first component), and
// that rest has records - k elements.
template <typename Build>
void expect_resumes_after_every_element(Build build, std::size_t records) {
  for (std::size_t k = 0; k <= records; ++k) {
    auto it = build().make_iterator();
    for (std::size_t i = 0; i < k; ++i) it.next();
    IteratorState state = it.save();
    auto resumed = build().make_iterator();
    resumed.restore(state);
    std::vector<std::string> a, b;
    while (auto e = it.next()) a.push_back(record_string((*e)[0]));
    while (auto e = resumed.next()) b.push_back(record_string((*e)[0]));
    EXPECT_EQ(a, b) << "after " << k;
    EXPECT_EQ(a.size(), records - k);
  }
}

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
