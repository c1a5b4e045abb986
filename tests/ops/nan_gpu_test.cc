// NaN and Inf on a GPU (issue 39's GPU side): the ops of tests/ops/nan_test.cc (relu and the other
// activations with their gradients, maximum/minimum, the reductions and their gradients,
// arg-max/min, max pooling and its gradient, softmax, log-softmax and the fused sparse softmax
// cross-entropy) run on GPU:0 must follow the rules that nan_test checks against the real
// TensorFlow on the CPU (tests/ops/nan_cases.h, docs/ops.md "NaN and Inf"): the CUDA kernels and
// cuDNN (pooling, softmax) keep TF's semantics, not their own. float32 and float64. Skips without
// a GPU.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "tests/ops/nan_cases.h"
#include <chorus/core/gpu.h>
#include <chorus/core/runtime.h>

namespace chorus {
namespace {
using namespace nan_cases;  // NOLINT: the shared cases

TEST(NanGpu, Float32AndFloat64FollowTensorFlowsRulesOnTheGpu) {
  if (gpu::device_count() == 0) GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason();
  internal::reset_runtime_for_testing();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const auto got = chorus_outputs(dtype, "/GPU:0");
    for (const auto& [name, want] : analytic()) {
      ASSERT_TRUE(got.count(name)) << name;
      EXPECT_NE(got.at(name).device_name().find("GPU"), std::string::npos)
          << name << " ran on " << got.at(name).device_name();
      std::vector<double> w = want;
      if (dtype == DType::kFloat64)  // as nan_test: float64 max pooling starts from float64's lowest
        for (double& v : w)
          if (v == kLowest) v = std::numeric_limits<double>::lowest();
      expect_same(got.at(name), w, std::string(dtype_name(dtype)) + " on GPU:0 " + name);
    }
  }
  internal::reset_runtime_for_testing();
}

}  // namespace
}  // namespace chorus
