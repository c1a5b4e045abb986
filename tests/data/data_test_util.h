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

// The first component of an element, a scalar string (a record, a file name).
inline std::string first_string(const Element& e) { return e.at(0).item<std::string>(); }

// For k = 0 .. records: an iterator of build() that has read k elements, saved and restored into
// a fresh one, yields the same rest as the original (the first component, a string scalar), and
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
    while (auto e = it.next()) a.push_back(first_string(*e));
    while (auto e = resumed.next()) b.push_back(first_string(*e));
    EXPECT_EQ(a, b) << "after " << k;
    EXPECT_EQ(a.size(), records - k);
  }
}

// An element as text, the form the TF interop script prints (numpy's dtype name, the shape and the
// flattened values of each component, components joined by " ; "): "int64[2][3, 4] ; int64[][7]".
// Integer, bool and string dtypes (strings: "string[2]['61', '']", each value's bytes in hex).
inline std::string describe(const Element& e) {
  std::string out;
  for (std::size_t c = 0; c < e.size(); ++c) {
    const Tensor& t = e[c];
    if (c) out += " ; ";
    out += std::string(dtype_name(t.dtype())) + "[";
    for (std::size_t d = 0; d < t.shape().dims().size(); ++d)
      out += (d ? ", " : "") + std::to_string(t.shape().dims()[d]);
    out += "][";
    std::vector<std::string> vals;
    switch (t.dtype()) {
      case DType::kInt64:
        for (auto v : t.to_vector<std::int64_t>()) vals.push_back(std::to_string(v));
        break;
      case DType::kInt32:
        for (auto v : t.to_vector<std::int32_t>()) vals.push_back(std::to_string(v));
        break;
      case DType::kUInt8:
        for (auto v : t.to_vector<std::uint8_t>()) vals.push_back(std::to_string(v));
        break;
      case DType::kBool:
        for (bool v : t.to_vector<bool>()) vals.push_back(v ? "True" : "False");
        break;
      case DType::kString:
        for (const std::string& v : t.strings()) {
          static constexpr char kHex[] = "0123456789abcdef";
          std::string hex = "'";
          for (unsigned char b : v) hex += {kHex[b >> 4], kHex[b & 15]};
          vals.push_back(hex + "'");
        }
        break;
      default: vals.push_back("?");
    }
    for (std::size_t i = 0; i < vals.size(); ++i) out += (i ? ", " : "") + vals[i];
    out += "]";
  }
  return out;
}
// The rest of an iterator's elements, described.
inline std::vector<std::string> describe_rest(Iterator& it, std::size_t limit = 100000) {
  std::vector<std::string> out;
  while (out.size() < limit) {
    auto e = it.next();
    if (!e) break;
    out.push_back(describe(*e));
  }
  return out;
}
inline std::vector<std::string> describe_all(const Dataset& ds, std::size_t limit = 100000) {
  auto it = ds.make_iterator();
  return describe_rest(it, limit);
}

// For k = 0 .. all: an iterator of build() that has read k elements, saved, and restored into a
// fresh iterator of a new build(), yields the same rest as the original; and the original's whole
// sequence equals a plain pass's.
template <typename Build>
void expect_resumes_anywhere(Build build) {
  const std::vector<std::string> all = describe_all(build());
  for (std::size_t k = 0; k <= all.size(); ++k) {
    auto it = build().make_iterator();
    std::vector<std::string> head;
    for (std::size_t i = 0; i < k; ++i) head.push_back(describe(*it.next()));
    IteratorState state = it.save();
    auto resumed = build().make_iterator();
    resumed.restore(state);
    const std::vector<std::string> a = describe_rest(it), b = describe_rest(resumed);
    EXPECT_EQ(a, b) << "after " << k;
    head.insert(head.end(), a.begin(), a.end());
    EXPECT_EQ(head, all) << "saving after " << k << " changed the sequence";
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
