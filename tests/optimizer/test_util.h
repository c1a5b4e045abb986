// Shared helpers for the optimizer tests: logical CPU devices, host copies of variables, and a
// float64 reference for each formula (written from Keras's formulas, independently of the code
// under test).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/core/test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/runtime.h>
#include <chorus/core/tensor.h>
#include <chorus/core/variable.h>
#include <chorus/distribute/mirrored_variable.h>
#include <chorus/ops/ops.h>

namespace chorus::optimizers::testing {

// A fresh runtime with `n` logical CPU devices of 128 MiB each (1: the default single CPU), no GPU.
inline void make_cpus(int n) {
  chorus::internal::reset_runtime_for_testing();
  config::set_visible_devices({}, "GPU");
  if (n > 1) {
    std::vector<LogicalDeviceConfiguration> cfgs(static_cast<std::size_t>(n),
                                                 LogicalDeviceConfiguration{.memory_limit_mb = 128});
    config::set_logical_device_configuration(config::list_physical_devices("CPU")[0], cfgs);
  }
}

inline std::vector<std::string> cpus(int n) {
  std::vector<std::string> d;
  for (int i = 0; i < n; ++i) d.push_back("/cpu:" + std::to_string(i));
  return d;
}

// Test fixture: one CPU device, fresh runtime per test.
class OptimizerTest : public ::testing::Test {
 protected:
  void SetUp() override { make_cpus(1); }
  void TearDown() override { chorus::internal::reset_runtime_for_testing(); }
};

inline Tensor f64(const std::vector<double>& v) { return Tensor::from_vector<double>(v); }

inline std::vector<double> host(const Variable& v) { return v.read_value().to_vector<double>(); }

// A gradient sequence that changes sign and magnitude from step to step: g_k[i] = sin(1.3·k + 0.7·i + 0.2)·(1 + i).
inline std::vector<double> gradient_at(int k, std::size_t n) {
  std::vector<double> g(n);
  for (std::size_t i = 0; i < n; ++i)
    g[i] = std::sin(1.3 * k + 0.7 * static_cast<double>(i) + 0.2) * (1.0 + static_cast<double>(i));
  return g;
}

inline void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double rel,
                            const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], rel * std::max(1.0, std::abs(want[i]))) << what << " [" << i << "]";
}

// The raw bytes of every component of a MirroredVariable, to compare replicas bit for bit.
inline std::vector<std::vector<unsigned char>> component_bytes(const Variable& v) {
  std::vector<std::vector<unsigned char>> out;
  auto* mv = dynamic_cast<const distribute::MirroredVariable*>(v.impl().get());
  if (mv == nullptr) return out;
  for (const Variable& c : mv->components()) {
    Tensor t = c.read_value();
    std::vector<unsigned char> bytes(t.nbytes());
    t.copy_to_host(bytes.data());
    out.push_back(std::move(bytes));
  }
  return out;
}

}  // namespace chorus::optimizers::testing
