#include <chorus/ops/linalg.h>

#include <chorus/ops/cpu/dnn.h>
#include <chorus/ops/internal.h>
#include <chorus/ops/reduction.h>
#include <chorus/ops/shape_ops.h>
#include <chorus/ops/tape.h>
#if CHORUS_WITH_CUDA
#include <chorus/ops/cuda/libraries.h>
#endif

namespace chorus::ops {

Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  auto dev = internal::common_device("BatchMatMulV2", {a, b});
  internal::require_same_dtype("BatchMatMulV2", a, b);
  // Every floating dtype on both devices; CPU float16 only where oneDNN has kernels for it.
  internal::require_float("BatchMatMulV2", a, "a");
  if (!dev->is_gpu() && a.dtype() == DType::kFloat16 && !cpu::float16_supported())
    cpu::throw_float16_unsupported("BatchMatMulV2");
  const int ra = a.shape().rank(), rb = b.shape().rank();
  CHORUS_REQUIRE(ra >= 2 && rb >= 2, InvalidArgumentError, "BatchMatMulV2: both operands need rank >= 2, got ",
                 a.shape().to_string(), " and ", b.shape().to_string());
  const auto& da = a.shape().dims();
  const auto& db = b.shape().dims();
  const std::int64_t m = ta ? da[static_cast<std::size_t>(ra - 1)] : da[static_cast<std::size_t>(ra - 2)];
  const std::int64_t ka = ta ? da[static_cast<std::size_t>(ra - 2)] : da[static_cast<std::size_t>(ra - 1)];
  const std::int64_t kb = tb ? db[static_cast<std::size_t>(rb - 1)] : db[static_cast<std::size_t>(rb - 2)];
  const std::int64_t n = tb ? db[static_cast<std::size_t>(rb - 2)] : db[static_cast<std::size_t>(rb - 1)];
  CHORUS_REQUIRE(ka == kb, InvalidArgumentError, "Matrix size-incompatible: In[0]: ", a.shape().to_string(),
                 ", In[1]: ", b.shape().to_string(), (ta ? " (transpose_a)" : ""), (tb ? " (transpose_b)" : ""));
  const Shape batch_a(std::vector<std::int64_t>(da.begin(), da.end() - 2));
  const Shape batch_b(std::vector<std::int64_t>(db.begin(), db.end() - 2));
  const Shape batch = internal::broadcast_shape("BatchMatMulV2", batch_a, batch_b);
  const std::int64_t nbatch = batch.num_elements();
  // Each operand: its own batch (stride m*k), one matrix for all (stride 0), or materialized.
  auto prepare = [&](const Tensor& t, const Shape& tb_shape, std::int64_t rows, std::int64_t cols, Tensor& out,
                     std::int64_t& stride) {
    if (tb_shape.num_elements() == 1) {
      out = t;
      stride = 0;
    } else if (tb_shape.num_elements() == nbatch) {  // only size-1 dims were stretched: same layout
      out = t;
      stride = rows * cols;
    } else {
      std::vector<std::int64_t> full = batch.dims();
      full.push_back(t.shape().dims()[t.shape().dims().size() - 2]);
      full.push_back(t.shape().dims().back());
      out = broadcast_to(stop_gradient(t), Shape(full));
      stride = rows * cols;
    }
  };
  Tensor pa, pb;
  std::int64_t sa = 0, sb = 0;
  prepare(a, batch_a, m, ka, pa, sa);
  prepare(b, batch_b, ka, n, pb, sb);
  std::vector<std::int64_t> out_dims = batch.dims();
  out_dims.push_back(m);
  out_dims.push_back(n);
  Tensor c = internal::output(dev, Shape(out_dims), a.dtype());
  if (c.num_elements() > 0) {
    const std::int64_t k = ka;
    if (dev->is_gpu()) {
      CHORUS_IF_CUDA(cuda::gemm(*dev, a.dtype(), pa.data(), sa, pb.data(), sb, c.data(), nbatch, m, n, k, ta, tb));
    } else {
      internal::run_cpu(
          *dev, [&] { cpu::matmul(pa.dtype(), pa.data(), sa, pb.data(), sb, c.data(), nbatch, m, n, k, ta, tb); });
    }
  }
  if (internal::should_record({a, b})) {
    internal::record(
        "BatchMatMulV2", {a, b}, {c}, [a, b, ta, tb](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
          const Tensor& g = gs[0];
          const bool want_a = internal::wants_input_gradient(0);
          const bool want_b = internal::wants_input_gradient(1);
          Tensor ga, gb;
          if (!ta && !tb) {
            if (want_a) ga = matmul(g, b, false, true);
            if (want_b) gb = matmul(a, g, true, false);
          } else if (!ta && tb) {
            if (want_a) ga = matmul(g, b, false, false);
            if (want_b) gb = matmul(g, a, true, false);
          } else if (ta && !tb) {
            if (want_a) ga = matmul(b, g, false, true);
            if (want_b) gb = matmul(a, g, false, false);
          } else {
            if (want_a) ga = matmul(b, g, true, true);
            if (want_b) gb = matmul(g, a, true, true);
          }
          return {want_a ? sum_to_shape(ga, a.shape()) : Tensor(), want_b ? sum_to_shape(gb, b.shape()) : Tensor()};
        });
  }
  return c;
}

}  // namespace chorus::ops
