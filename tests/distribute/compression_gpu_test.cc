// Compressed all-reduce (distribute/communication_options.h) between two virtual GPUs carved out
// of GPU:0 (the virtual-GPU backend, float32 accumulation, k = 2 roundings): float16 and bfloat16
// results within the stated bound of the exact sum, really compressed (results exactly 16-bit
// values, half the bytes), and kNone bitwise the uncompressed path. Skips without a GPU (label
// gpu), with the CUDA runtime's reason.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include <chorus/core/config.h>
#include <chorus/core/gpu.h>
#include <chorus/core/runtime.h>
#include <chorus/distribute/mirrored_strategy.h>
#include <chorus/distribute/replica_context.h>
#include <chorus/ops/ops.h>

namespace chorus::distribute {
namespace {

class CompressionGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::device_count() == 0) GTEST_SKIP() << "no GPU: " << gpu::unavailable_reason();
    chorus::internal::reset_runtime_for_testing();
    config::set_logical_device_configuration(config::list_physical_devices("GPU")[0],
                                             {{.memory_limit_mb = 256}, {.memory_limit_mb = 256}});
  }
  void TearDown() override { chorus::internal::reset_runtime_for_testing(); }
};

// Replica r's values: magnitudes 2^-6 .. 2^6, both signs, full float32 mantissas.
std::vector<float> draw(int r, std::int64_t n) {
  std::mt19937 rng(static_cast<unsigned>(100 + r));
  std::uniform_real_distribution<float> m(1.0f, 2.0f);
  std::uniform_int_distribution<int> e(-6, 6), sign(0, 1);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = (sign(rng) ? -1.0f : 1.0f) * std::ldexp(m(rng), e(rng));
  return v;
}

// Every replica's all_reduce(kSum, {a, b}) of its draws, on the host (replica 0's; all equal).
std::vector<std::vector<float>> reduce(MirroredStrategy& s, const std::vector<std::int64_t>& sizes) {
  auto out = s.run([&] {
    auto* ctx = get_replica_context();
    const int r = ctx->replica_id_in_sync_group();
    std::vector<Tensor> in;
    for (std::size_t t = 0; t < sizes.size(); ++t)
      in.push_back(
          Tensor::from_vector<float>(draw(r * 10 + static_cast<int>(t), sizes[t]), "/gpu:" + std::to_string(r)));
    std::vector<std::vector<float>> host;
    for (const Tensor& y : ctx->all_reduce(ReduceOp::kSum, in)) host.push_back(y.to_vector<float>());
    return host;
  });
  EXPECT_EQ(out.values()[0], out.values()[1]) << "replicas disagree";
  return out.values()[0];
}

TEST_F(CompressionGpu, VirtualGpusStayWithinTheBoundAndMoveHalfTheBytes) {
  const std::vector<std::int64_t> sizes{100003, 517};
  MirroredStrategy plain({"/gpu:0", "/gpu:1"});
  const auto exact = reduce(plain, sizes);
  const auto plain_bytes = plain.read_and_reset_all_reduce_counters();
  MirroredStrategy none({"/gpu:0", "/gpu:1"}, {.communication_options = {.compression = Compression::kNone}});
  EXPECT_EQ(reduce(none, sizes), exact) << "kNone must be the uncompressed path, bit for bit";
  for (Compression c : {Compression::kFloat16, Compression::kBFloat16}) {
    SCOPED_TRACE(std::string(compression_name(c)));
    MirroredStrategy s({"/gpu:0", "/gpu:1"}, {.communication_options = {.compression = c}});
    const auto got = reduce(s, sizes);
    const auto counters = s.read_and_reset_all_reduce_counters();
    EXPECT_EQ(2 * counters.bytes, plain_bytes.bytes);
    const double factor = compression_error_bound(c, /*roundings=*/2, /*num_replicas=*/2);
    const DType dt = c == Compression::kFloat16 ? DType::kFloat16 : DType::kBFloat16;
    std::int64_t differ = 0;
    for (std::size_t t = 0; t < sizes.size(); ++t) {
      const auto a = draw(static_cast<int>(t), sizes[t]), b = draw(10 + static_cast<int>(t), sizes[t]);
      const Tensor as16 = ops::cast(ops::cast(Tensor::from_vector<float>(got[t]), dt), DType::kFloat32);
      EXPECT_EQ(as16.to_vector<float>(), got[t]) << "results must be 16-bit values";
      for (std::size_t i = 0; i < got[t].size(); ++i) {
        const double sum = static_cast<double>(a[i]) + b[i], mag = std::fabs(a[i]) + std::fabs(b[i]);
        ASSERT_LE(std::fabs(got[t][i] - sum), factor * mag) << "tensor " << t << " element " << i;
        differ += got[t][i] != exact[t][i];
      }
    }
    EXPECT_GT(differ, (sizes[0] + sizes[1]) / 2) << "compression did not change the results";
  }
}

}  // namespace
}  // namespace chorus::distribute
