// float32 batched matmul on oneDNN's matmul primitive. Transposes are strides in the memory
// descriptors (no copies); a batch stride of 0 is a batch dimension of 1, which oneDNN broadcasts.
#ifdef CHORUS_WITH_DNNL

#include <algorithm>
#include <cstring>

#include "ops/cpu/onednn.h"

namespace chorus::ops::cpu::onednn {
namespace {

using dnnl::memory;

struct MatmulEntry {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
};

PrimitiveCache<MatmulEntry>& matmul_cache() {
  static auto& cache = *new PrimitiveCache<MatmulEntry>;  // leaked: outlives static destruction order
  return cache;
}

}  // namespace

void matmul(const float* a, std::int64_t a_batch_stride, const float* b, std::int64_t b_batch_stride, float* c,
            std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a, bool trans_b) {
  // Both operands broadcast: compute one product and copy it to every batch entry.
  const std::int64_t run_batch = (a_batch_stride == 0 && b_batch_stride == 0) ? 1 : batch;
  const std::int64_t a_batch = a_batch_stride == 0 ? 1 : run_batch;
  const std::int64_t b_batch = b_batch_stride == 0 ? 1 : run_batch;
  const std::int64_t sa = a_batch == 1 ? m * k : a_batch_stride;
  const std::int64_t sb = b_batch == 1 ? k * n : b_batch_stride;

  const CacheKey key{run_batch, m, n, k, trans_a, trans_b, a_batch, b_batch, sa, sb};
  guarded("matmul", [&] {
    const memory::desc a_md({a_batch, m, k}, memory::data_type::f32,
                            trans_a ? memory::dims{sa, 1, m} : memory::dims{sa, k, 1});
    const memory::desc b_md({b_batch, k, n}, memory::data_type::f32,
                            trans_b ? memory::dims{sb, 1, k} : memory::dims{sb, n, 1});
    const memory::desc c_md({run_batch, m, n}, memory::data_type::f32, memory::format_tag::abc);
    MatmulEntry e = matmul_cache().get(key, [&] {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), default_attr(), engine());
      return MatmulEntry{pd, dnnl::matmul(pd)};
    });
    execute(e.prim, {{DNNL_ARG_SRC, wrap(a_md, a)},
                     {DNNL_ARG_WEIGHTS, wrap(b_md, b)},
                     {DNNL_ARG_DST, wrap(c_md, c)},
                     {DNNL_ARG_SCRATCHPAD, scratchpad(e.pd)}});
  });
  for (std::int64_t i = 1; i < batch && run_batch == 1; ++i)
    std::memcpy(c + i * m * n, c, static_cast<std::size_t>(m * n) * sizeof(float));
}

}  // namespace chorus::ops::cpu::onednn

#endif  // CHORUS_WITH_DNNL
