// core/graph_capture.h with chorus's own ops on GPU:0: a captured matmul + add + relu replays with
// new inputs written in place, a host read inside the capture is refused with its reason (and the
// pool given back), and the graph's pool goes back when the graph dies. The CPU-device error runs
// everywhere; the rest skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include <chorus/core/error.h>
#include <chorus/core/gpu.h>
#include <chorus/core/graph_capture.h>
#include <chorus/core/runtime.h>
#include <chorus/core/stream.h>
#include <chorus/core/tensor.h>
#include <chorus/ops/ops.h>

namespace chorus {
namespace {

TEST(GraphCaptureTest, ACpuDeviceIsAnInvalidArgument) {
  std::shared_ptr<DeviceContext> cpu = runtime::match(DeviceSpec::parse("/CPU:0"));
  ASSERT_NE(cpu, nullptr);
  bool ran = false;
  EXPECT_THROW((void)CapturedGraph::capture(*cpu, [&] { ran = true; }), InvalidArgumentError);
  EXPECT_FALSE(ran);
}

class GraphCaptureGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::device_count() == 0) GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason();
  }
};

constexpr std::int64_t kRows = 4, kIn = 8, kOut = 3;

std::vector<float> values(std::size_t n, float scale, float shift) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(static_cast<int>(i % 7) - 3) + shift;
  return v;
}

// relu(x w + b) on the host, in float (small integers: exact).
std::vector<float> reference(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b) {
  std::vector<float> y(static_cast<std::size_t>(kRows * kOut));
  for (std::int64_t r = 0; r < kRows; ++r) {
    for (std::int64_t o = 0; o < kOut; ++o) {
      float sum = b[static_cast<std::size_t>(o)];
      for (std::int64_t k = 0; k < kIn; ++k)
        sum += x[static_cast<std::size_t>(r * kIn + k)] * w[static_cast<std::size_t>(k * kOut + o)];
      y[static_cast<std::size_t>(r * kOut + o)] = std::max(sum, 0.0f);
    }
  }
  return y;
}

TEST_F(GraphCaptureGpuTest, AReplayReadsInputsOverwrittenInPlace) {
  const auto hx = values(kRows * kIn, 1, 0), hw = values(kIn * kOut, 0.5f, 0.5f), hb = values(kOut, 1, -1);
  Tensor x = Tensor::from_vector<float>(hx, Shape{kRows, kIn}, "/GPU:0");
  Tensor w = Tensor::from_vector<float>(hw, Shape{kIn, kOut}, "/GPU:0");
  Tensor b = Tensor::from_vector<float>(hb, Shape{kOut}, "/GPU:0");
  DeviceContext& dev = x.device_context();
  auto step = [&] { return ops::relu(ops::add(ops::matmul(x, w), b)); };
  EXPECT_EQ(step().to_vector<float>(), reference(hx, hw, hb));  // the warm-up, eagerly

  Tensor y;
  CapturedGraph::Capture c = CapturedGraph::capture(dev, [&] { y = step(); });
  ASSERT_NE(c.graph, nullptr) << c.why_not;
  c.graph->replay();
  EXPECT_EQ(y.to_vector<float>(), reference(hx, hw, hb));

  for (int round = 1; round <= 3; ++round) {
    const auto hx2 = values(kRows * kIn, static_cast<float>(round + 1), static_cast<float>(-round));
    Tensor staged = Tensor::from_vector<float>(hx2, Shape{kRows, kIn}, "/GPU:0");
    gpu::memcpy_async(dev.gpu_ordinal(), dev.stream().native_handle(), x.data(), staged.data(),
                      static_cast<std::size_t>(kRows * kIn) * sizeof(float), gpu::CopyKind::kDeviceToDevice);
    c.graph->replay();
    EXPECT_EQ(y.to_vector<float>(), reference(hx2, hw, hb)) << "round " << round;
  }
  c.graph.reset();
  y = Tensor();
  EXPECT_EQ(dev.allocator().memory_info().pooled_free, 0u);
}

TEST_F(GraphCaptureGpuTest, AHostReadInsideIsRefusedWithItsReasonAndNothingRuns) {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4}, Shape{4}, "/GPU:0");
  DeviceContext& dev = x.device_context();
  (void)ops::add(x, x).to_vector<float>();  // warm-up
  Tensor doubled;
  CapturedGraph::Capture c = CapturedGraph::capture(dev, [&] {
    doubled = ops::add(x, x);
    (void)doubled.to_vector<float>();  // waits for the GPU on the host: not capturable
  });
  EXPECT_EQ(c.graph, nullptr);
  EXPECT_FALSE(c.why_not.empty());
  doubled = Tensor();
  EXPECT_EQ(dev.allocator().memory_info().pooled_free, 0u);
  // The device is usable after the refused capture.
  EXPECT_EQ(ops::add(x, x).to_vector<float>(), (std::vector<float>{2, 4, 6, 8}));
}

TEST_F(GraphCaptureGpuTest, AnErrorOfTheBodyPropagatesAfterTheCaptureEnds) {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4}, Shape{4}, "/GPU:0");
  DeviceContext& dev = x.device_context();
  EXPECT_THROW((void)CapturedGraph::capture(dev, [&] { throw InvalidArgumentError("the body's own error"); }),
               InvalidArgumentError);
  EXPECT_EQ(dev.allocator().memory_info().pooled_free, 0u);
  EXPECT_EQ(ops::add(x, x).to_vector<float>(), (std::vector<float>{2, 4, 6, 8}));
}

}  // namespace
}  // namespace chorus
