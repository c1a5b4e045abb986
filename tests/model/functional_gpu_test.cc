// The issue-43 layers on a GPU (skipped without one): a functional model with MultiHeadAttention
// (causal, key padding mask), Add, Concatenate and a nested model computes on GPU:0 what it computes
// on the CPU from the same weights (loaded with load_weights), in float32 and under mixed_bfloat16,
// and its gradients agree.
#include <gtest/gtest.h>

#include "tests/core/test_util.h"
#include <chorus/core/config.h>
#include <chorus/core/gpu.h>
#include <chorus/core/runtime.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/model/functional.h>
#include <chorus/model/layers.h>
#include <chorus/model/merge_layers.h>
#include <chorus/model/mixed_precision.h>
#include <chorus/model/multi_head_attention.h>
#include <chorus/ops/ops.h>

namespace chorus {
namespace {

using layers::KerasTensor;

std::unique_ptr<model::Functional> build() {
  auto x = layers::Input({6, 8}, DType::kFloat32, "x");
  auto pad = layers::Input({6}, DType::kBool, "pad");
  KerasTensor a =
      (*layers::MultiHeadAttention({.num_heads = 2, .key_dim = 4, .use_causal_mask = true}))({x, x, x, pad});
  KerasTensor h = (*layers::Add())({x, a});
  auto inner_in = layers::Input({6, 16});
  auto inner = std::make_shared<model::Functional>(std::vector<KerasTensor>{inner_in},
                                                   std::vector<KerasTensor>{(*layers::Dense(4, "gelu"))(inner_in)});
  KerasTensor y = (*inner)((*layers::Concatenate())({h, a}));
  return std::make_unique<model::Functional>(std::vector<KerasTensor>{x, pad}, std::vector<KerasTensor>{y});
}

TEST(FunctionalGpu, AttentionModelOnTheGpuEqualsTheCpu) {
  chorus::internal::reset_runtime_for_testing();
  if (config::list_physical_devices("GPU").empty()) GTEST_SKIP() << "no GPU visible: " << gpu::unavailable_reason();
  chorus::testing::TempDir tmp;
  const Tensor x = ops::stateless_random_uniform({3, 6, 8}, {1, 2}, {.minval = -1, .maxval = 1});
  std::vector<std::uint8_t> p(18, 1);
  p[6 + 5] = p[12 + 3] = p[12 + 4] = p[12 + 5] = 0;
  const Tensor pad = ops::cast(Tensor::from_vector<std::uint8_t>(p, {3, 6}), DType::kBool);
  for (const char* policy : {"float32", "mixed_bfloat16"}) {
    mixed_precision::set_global_policy(policy);
    std::vector<float> cpu, gpu;
    std::vector<std::vector<float>> cpu_grads, gpu_grads;
    for (const std::string device : {"/CPU:0", "/GPU:0"}) {
      distribute::OneDeviceStrategy strategy(device);
      auto scope = strategy.scope();
      auto m = build();
      if (device == "/CPU:0")
        m->save_weights(tmp / "w");
      else
        m->load_weights(tmp / "w").assert_consumed();
      ops::GradientTape tape;
      const Tensor y = ops::cast((*m)({x.to(device), pad.to(device)}, true)[0], DType::kFloat32);
      const auto g = tape.gradient(ops::reduce_sum(ops::square(y)), m->trainable_variables());
      (device == "/CPU:0" ? cpu : gpu) = y.to("/CPU:0").to_vector<float>();
      for (const Tensor& t : g)
        (device == "/CPU:0" ? cpu_grads : gpu_grads)
            .push_back(ops::cast(t, DType::kFloat32).to("/CPU:0").to_vector<float>());
    }
    const float tol = std::string(policy) == "float32" ? 1e-4f : 5e-2f;
    ASSERT_EQ(cpu.size(), gpu.size());
    for (std::size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], tol * (1 + std::abs(cpu[i]))) << policy;
    ASSERT_EQ(cpu_grads.size(), gpu_grads.size());
    for (std::size_t v = 0; v < cpu_grads.size(); ++v)
      for (std::size_t i = 0; i < cpu_grads[v].size(); ++i)
        EXPECT_NEAR(gpu_grads[v][i], cpu_grads[v][i], 4 * tol * (1 + std::abs(cpu_grads[v][i])))
            << policy << " grad " << v;
  }
  mixed_precision::set_global_policy("float32");
}

}  // namespace
}  // namespace chorus
