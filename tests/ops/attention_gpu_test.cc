// ops::scaled_dot_product_attention on the GPU (chorus's fused CUDA kernel, ops/cuda/attention.h)
// against the same op on the CPU (itself tested against the composed ops in attention_test.cc):
// forward and gradients for every mask kind, Tq != Tk, odd head dims, rows with every key masked,
// dropout (the same Philox mask on both devices, so the same result), NaN propagation, in
// float32, float64, bfloat16 and float16. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/core/test_util.h"
#include "tests/ops/gradient_check.h"
#include <chorus/core/gpu.h>
#include <chorus/ops/attention.h>
#include <chorus/ops/ops.h>

namespace chorus::ops {
namespace {

using chorus::testing::random_tensor;

class AttentionGpu : public chorus::testing::CoreTest {
 protected:
  void SetUp() override {
    CoreTest::SetUp();
    if (gpu::device_count() == 0) GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason();
  }
};

struct Result {
  std::vector<double> out, dq, dk, dv;
};

// Output and gradients of sum(w * attention(q, k, v)) with every tensor on `device`.
Result run(const std::vector<Tensor>& host, const Tensor& mask, const AttentionOptions& o, const std::string& device) {
  std::vector<Tensor> in;
  for (const Tensor& t : host) in.push_back(t.to(device));
  Tensor m = mask.defined() ? mask.to(device) : Tensor();
  GradientTape tape;
  for (int i = 0; i < 3; ++i) tape.watch(in[static_cast<std::size_t>(i)]);
  Tensor out = scaled_dot_product_attention(in[0], in[1], in[2], m, o);
  std::vector<Tensor> g = tape.gradient(reduce_sum(mul(out, in[3])), {in[0], in[1], in[2]});
  return {out.to_vector<double>(), g[0].to_vector<double>(), g[1].to_vector<double>(), g[2].to_vector<double>()};
}

void expect_near(const std::vector<double>& gpu, const std::vector<double>& cpu, double atol, double rtol,
                 const char* what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  int bad = 0;
  for (std::size_t e = 0; e < gpu.size() && bad < 10; ++e) {
    const double g = gpu[e], c = cpu[e];
    const bool ok = std::isnan(c)   ? std::isnan(g)
                    : std::isinf(c) ? g == c
                                    : std::abs(g - c) <= atol + rtol * std::abs(c);
    if (!ok) {
      ADD_FAILURE() << what << "[" << e << "]: GPU " << g << " vs CPU " << c;
      ++bad;
    }
  }
}

struct Case {
  std::int64_t b, h, tq, tk, d, dv;
  bool causal;
  bool mask;  // a random [B, 1, Tq, Tk] mask (some rows with no key)
  double dropout;
};

void compare(const Case& c, DType dtype, double atol, double rtol, std::uint32_t seed) {
  std::vector<Tensor> host = {cast(random_tensor({c.b, c.h, c.tq, c.d}, seed, -1.5, 1.5), dtype),
                              cast(random_tensor({c.b, c.h, c.tk, c.d}, seed + 1, -1.5, 1.5), dtype),
                              cast(random_tensor({c.b, c.h, c.tk, c.dv}, seed + 2), dtype),
                              cast(random_tensor({c.b, c.h, c.tq, c.dv}, seed + 3), dtype)};
  Tensor mask;
  if (c.mask) {
    std::mt19937 gen(seed);
    std::vector<bool> m(static_cast<std::size_t>(c.b * c.tq * c.tk));
    for (auto&& x : m) x = gen() % 3 != 0;
    for (std::int64_t j = 0; j < c.tk; ++j) m[static_cast<std::size_t>(j)] = false;  // batch 0, query 0: no key
    mask = Tensor::from_vector(m, Shape{c.b, 1, c.tq, c.tk}, "/CPU:0");
  }
  AttentionOptions o{.causal = c.causal, .dropout_rate = c.dropout, .seed = std::array<std::int64_t, 2>{4, 5}};
  const Result gpu = run(host, mask, o, "/GPU:0");
  const Result cpu = run(host, mask, o, "/CPU:0");
  SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " " << c.b << "x" << c.h << " Tq " << c.tq << " Tk " << c.tk
                                    << " D " << c.d << " Dv " << c.dv << " causal " << c.causal << " mask " << c.mask
                                    << " dropout " << c.dropout);
  expect_near(gpu.out, cpu.out, atol, rtol, "out");
  expect_near(gpu.dq, cpu.dq, atol, rtol, "dq");
  expect_near(gpu.dk, cpu.dk, atol, rtol, "dk");
  expect_near(gpu.dv, cpu.dv, atol, rtol, "dv");
}

const Case kCases[] = {
    {2, 3, 37, 70, 13, 7, false, false, 0}, {2, 2, 70, 70, 64, 64, true, false, 0},
    {1, 2, 40, 130, 8, 9, true, true, 0},   {1, 2, 100, 40, 128, 32, true, false, 0},
    {2, 2, 35, 67, 6, 6, false, true, 0.2}, {2, 2, 65, 65, 300, 40, true, true, 0.1},
};

TEST_F(AttentionGpu, MatchesCpuFloat64) {
  for (const Case& c : kCases) compare(c, DType::kFloat64, 1e-12, 1e-10, 1);
}
TEST_F(AttentionGpu, MatchesCpuFloat32) {
  for (const Case& c : kCases) compare(c, DType::kFloat32, 2e-5, 1e-4, 2);
}
// 16-bit: both sides compute in float32 and round once; they may round a value differently.
TEST_F(AttentionGpu, MatchesCpuBFloat16) {
  for (const Case& c : kCases) compare(c, DType::kBFloat16, 1e-2, 1.0 / 64, 3);
}
TEST_F(AttentionGpu, MatchesCpuFloat16) {
  for (const Case& c : kCases) compare(c, DType::kFloat16, 2e-3, 1.0 / 256, 4);
}

TEST_F(AttentionGpu, NanPropagatesAsOnTheCpu) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int input = 0; input < 3; ++input) {
    std::vector<Tensor> host = {random_tensor({1, 2, 40, 8}, 1), random_tensor({1, 2, 70, 8}, 2),
                                random_tensor({1, 2, 70, 4}, 3), random_tensor({1, 2, 40, 4}, 4)};
    std::vector<double> x = host[static_cast<std::size_t>(input)].to_vector<double>();
    x[60] = nan;
    host[static_cast<std::size_t>(input)] =
        Tensor::from_vector(x, host[static_cast<std::size_t>(input)].shape(), "/CPU:0");
    AttentionOptions o{.causal = true};
    const Result gpu = run(host, Tensor(), o, "/GPU:0");
    const Result cpu = run(host, Tensor(), o, "/CPU:0");
    SCOPED_TRACE(::testing::Message() << "NaN in input " << input);
    expect_near(gpu.out, cpu.out, 1e-12, 1e-10, "out");
    expect_near(gpu.dq, cpu.dq, 1e-12, 1e-10, "dq");
    expect_near(gpu.dk, cpu.dk, 1e-12, 1e-10, "dk");
    expect_near(gpu.dv, cpu.dv, 1e-12, 1e-10, "dv");
  }
}

}  // namespace
}  // namespace chorus::ops
