// Batched matmul (float32, bfloat16, float16) on oneDNN's matmul primitive. Transposes are strides
// in the memory descriptors (no copies); a batch stride of 0 is a batch dimension of 1, which
// oneDNN broadcasts. For bfloat16 on avx512_core_bf16, oneDNN 2.6 picks its brgemm kernel
// ("brg:avx512_core_bf16") with these plain layouts: it packs B itself, so no reorder is needed here.
#ifdef CHORUS_WITH_DNNL

#include <algorithm>
#include <cstddef>
#include <cstring>

#include <chorus/ops/cpu/onednn.h>

namespace chorus::ops::cpu::onednn {
namespace {

using dnnl::memory;

struct MatmulEntry {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  bool ok = false;  // false: no usable kernel for this 16-bit dtype (make_entry)
};

PrimitiveCache<MatmulEntry>& matmul_cache() {
  static auto& cache = *new PrimitiveCache<MatmulEntry>;  // leaked: outlives static destruction order
  return cache;
}

}  // namespace

bool matmul(DType dtype, const void* a, std::int64_t a_batch_stride, const void* b, std::int64_t b_batch_stride,
            void* c, std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a, bool trans_b) {
  // Both operands broadcast: compute one product and copy it to every batch entry.
  const std::int64_t run_batch = (a_batch_stride == 0 && b_batch_stride == 0) ? 1 : batch;
  const std::int64_t a_batch = a_batch_stride == 0 ? 1 : run_batch;
  const std::int64_t b_batch = b_batch_stride == 0 ? 1 : run_batch;
  const std::int64_t sa = a_batch == 1 ? m * k : a_batch_stride;
  const std::int64_t sb = b_batch == 1 ? k * n : b_batch_stride;
  const memory::data_type dt = data_type(dtype);

  const CacheKey key{static_cast<std::int64_t>(dtype), run_batch, m, n, k, trans_a, trans_b, a_batch, b_batch, sa, sb};
  const bool ran = guarded("matmul", [&] {
    const memory::desc a_md({a_batch, m, k}, dt, trans_a ? memory::dims{sa, 1, m} : memory::dims{sa, k, 1});
    const memory::desc b_md({b_batch, k, n}, dt, trans_b ? memory::dims{sb, 1, k} : memory::dims{sb, n, 1});
    const memory::desc c_md({run_batch, m, n}, dt, memory::format_tag::abc);
    const MatmulEntry e = matmul_cache().get(key, [&] {
      return make_entry<MatmulEntry>(dtype, [&] {
        dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), default_attr(), engine());
        return usable(dtype, pd) ? MatmulEntry{pd, dnnl::matmul(pd), true} : MatmulEntry{};
      });
    });
    if (!e.ok) return false;
    if (a == nullptr) return true;  // probe (onednn.h)
    execute(e.prim, {{DNNL_ARG_SRC, wrap(a_md, a)},
                     {DNNL_ARG_WEIGHTS, wrap(b_md, b)},
                     {DNNL_ARG_DST, wrap(c_md, c)},
                     {DNNL_ARG_SCRATCHPAD, scratchpad(e.pd)}});
    return true;
  });
  if (!ran || a == nullptr) return ran;
  const std::size_t bytes = static_cast<std::size_t>(m * n) * dtype_size(dtype);
  auto* out = static_cast<std::byte*>(c);
  for (std::int64_t i = 1; i < batch && run_batch == 1; ++i) std::memcpy(out + i * bytes, out, bytes);
  return true;
}

}  // namespace chorus::ops::cpu::onednn

#endif  // CHORUS_WITH_DNNL
