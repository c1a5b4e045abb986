// Fixture of the gpu tests that run on two virtual GPUs carved out of GPU:0:
//
//   class CnnFitGpu : public chorus::testing::TwoVirtualGpusTest<1024> {};   // 1 GiB each
//
// SetUp skips the test without a GPU (GTEST_SKIP with the CUDA runtime's reason), else resets the
// device runtime and configures /gpu:0 and /gpu:1 with MemoryLimitMb each; TearDown resets the
// runtime again. A subclass that configures more calls TwoVirtualGpusTest::SetUp() first and
// returns when IsSkipped().
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include <chorus/core/config.h>
#include <chorus/core/gpu.h>
#include <chorus/core/runtime.h>

namespace chorus::testing {

template <std::int64_t MemoryLimitMb>
class TwoVirtualGpusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::device_count() == 0) GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason();
    chorus::internal::reset_runtime_for_testing();
    config::set_logical_device_configuration(config::list_physical_devices("GPU")[0],
                                             {{.memory_limit_mb = MemoryLimitMb}, {.memory_limit_mb = MemoryLimitMb}});
  }
  void TearDown() override { chorus::internal::reset_runtime_for_testing(); }
};

}  // namespace chorus::testing
