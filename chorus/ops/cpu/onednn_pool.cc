// 2-D max / average pooling on oneDNN (NHWC; float32, bfloat16 or float16, averages accumulated in
// float32 by oneDNN). Average pooling is
// pooling_avg_exclude_padding: it divides by the in-bounds taps, TF's behaviour under SAME.
// Max pooling's backward needs the forward's workspace (where each maximum was): a training
// forward keeps it (pool2d_forward_training, float32) for pool2d_backward_with_workspace; otherwise
// pool2d_backward runs forward_training first into temporaries. oneDNN records the first maximum of
// each window, which is where TF routes the gradient too.
#ifdef CHORUS_WITH_DNNL

#include <cstddef>
#include <vector>

#include <chorus/ops/cpu/onednn.h>

namespace chorus::ops::cpu::onednn {
namespace {

using dnnl::memory;

struct PoolDescs {
  dnnl::algorithm alg;
  memory::desc src, dst;
  memory::dims strides, kernel, pad_l, pad_r;
};

PoolDescs pool_descs(PoolKind kind, DType dtype, const Conv2dGeometry& g) {
  const memory::data_type dt = data_type(dtype);
  return PoolDescs{kind == PoolKind::kMax ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_exclude_padding,
                   memory::desc({g.n, g.in_c, g.in_h, g.in_w}, dt, memory::format_tag::nhwc),
                   memory::desc({g.n, g.out_c, g.out_h, g.out_w}, dt, memory::format_tag::nhwc),
                   {g.stride_h, g.stride_w},
                   {g.k_h, g.k_w},
                   {g.pad_top, g.pad_left},
                   {g.pad_bottom, g.pad_right}};
}

CacheKey pool_key(PoolKind kind, DType dtype, const Conv2dGeometry& g) {
  return {static_cast<std::int64_t>(kind),
          static_cast<std::int64_t>(dtype),
          g.n,
          g.in_h,
          g.in_w,
          g.in_c,
          g.k_h,
          g.k_w,
          g.stride_h,
          g.stride_w,
          g.pad_top,
          g.pad_left,
          g.pad_bottom,
          g.pad_right,
          g.out_h,
          g.out_w};
}

dnnl::pooling_forward::primitive_desc forward_pd(const PoolDescs& d, dnnl::prop_kind prop) {
  return dnnl::pooling_forward::primitive_desc(
      dnnl::pooling_forward::desc(prop, d.alg, d.src, d.dst, d.strides, d.kernel, d.pad_l, d.pad_r), default_attr(),
      engine());
}

struct ForwardEntry {
  dnnl::pooling_forward::primitive_desc pd;
  dnnl::pooling_forward prim;
  bool ok = false;  // false: no usable kernel for this 16-bit dtype (make_entry)
};
// Backward, plus (max only) the forward_training primitive that fills the workspace.
struct BackwardEntry {
  dnnl::pooling_forward::primitive_desc fwd_pd;
  dnnl::pooling_forward fwd;
  dnnl::pooling_backward::primitive_desc pd;
  dnnl::pooling_backward prim;
  bool ok = false;
};

template <typename Entry>
PrimitiveCache<Entry>& cache() {
  static auto& c = *new PrimitiveCache<Entry>;  // leaked: outlives static destruction order
  return c;
}

}  // namespace

bool pool2d_forward(PoolKind kind, DType dtype, const Conv2dGeometry& g, const void* x, void* y) {
  return guarded("pooling_forward", [&] {
    const PoolDescs d = pool_descs(kind, dtype, g);
    const ForwardEntry e = cache<ForwardEntry>().get(pool_key(kind, dtype, g), [&] {
      return make_entry<ForwardEntry>(dtype, [&] {
        auto pd = forward_pd(d, dnnl::prop_kind::forward_inference);
        return usable(dtype, pd) ? ForwardEntry{pd, dnnl::pooling_forward(pd), true} : ForwardEntry{};
      });
    });
    if (!e.ok) return false;
    if (x == nullptr) return true;  // probe (onednn.h)
    execute(e.prim,
            {{DNNL_ARG_SRC, wrap(d.src, x)}, {DNNL_ARG_DST, wrap(d.dst, y)}, {DNNL_ARG_SCRATCHPAD, scratchpad(e.pd)}});
    return true;
  });
}

namespace {
BackwardEntry backward_entry(PoolKind kind, DType dtype, const Conv2dGeometry& g, const PoolDescs& d) {
  return cache<BackwardEntry>().get(pool_key(kind, dtype, g), [&] {
    return make_entry<BackwardEntry>(dtype, [&] {
      auto fwd_pd = forward_pd(d, dnnl::prop_kind::forward_training);
      dnnl::pooling_backward::primitive_desc pd(
          dnnl::pooling_backward::desc(d.alg, d.src, d.dst, d.strides, d.kernel, d.pad_l, d.pad_r), default_attr(),
          engine(), fwd_pd);
      if (!usable(dtype, fwd_pd) || !usable(dtype, pd)) return BackwardEntry{};
      return BackwardEntry{fwd_pd, dnnl::pooling_forward(fwd_pd), pd, dnnl::pooling_backward(pd), true};
    });
  });
}
}  // namespace

std::size_t pool2d_workspace_bytes(const Conv2dGeometry& g) {
  return guarded("pooling_forward", [&] {
    const PoolDescs d = pool_descs(PoolKind::kMax, DType::kFloat32, g);
    return backward_entry(PoolKind::kMax, DType::kFloat32, g, d).fwd_pd.workspace_desc().get_size();
  });
}

void pool2d_forward_training(const Conv2dGeometry& g, const void* x, void* y, void* workspace) {
  guarded("pooling_forward", [&] {
    const PoolDescs d = pool_descs(PoolKind::kMax, DType::kFloat32, g);
    const BackwardEntry e = backward_entry(PoolKind::kMax, DType::kFloat32, g, d);
    execute(e.fwd, {{DNNL_ARG_SRC, wrap(d.src, x)},
                    {DNNL_ARG_DST, wrap(d.dst, y)},
                    {DNNL_ARG_WORKSPACE, wrap(e.fwd_pd.workspace_desc(), workspace)},
                    {DNNL_ARG_SCRATCHPAD, scratchpad(e.fwd_pd)}});
  });
}

void pool2d_backward_with_workspace(const Conv2dGeometry& g, const void* dy, const void* workspace, void* dx) {
  guarded("pooling_backward", [&] {
    const PoolDescs d = pool_descs(PoolKind::kMax, DType::kFloat32, g);
    const BackwardEntry e = backward_entry(PoolKind::kMax, DType::kFloat32, g, d);
    execute(e.prim, {{DNNL_ARG_DIFF_DST, wrap(d.dst, dy)},
                     {DNNL_ARG_WORKSPACE, wrap(e.fwd_pd.workspace_desc(), workspace)},
                     {DNNL_ARG_DIFF_SRC, wrap(d.src, dx)},
                     {DNNL_ARG_SCRATCHPAD, scratchpad(e.pd)}});
  });
}

bool pool2d_backward(PoolKind kind, DType dtype, const Conv2dGeometry& g, const void* x, const void* dy, void* dx) {
  return guarded("pooling_backward", [&] {
    const PoolDescs d = pool_descs(kind, dtype, g);
    const BackwardEntry e = backward_entry(kind, dtype, g, d);
    if (!e.ok) return false;
    if (dy == nullptr) return true;  // probe (onednn.h)
    if (kind == PoolKind::kMax) {
      // The workspace and the forward output exist only for this call.
      const memory::desc ws_md = e.fwd_pd.workspace_desc();
      std::vector<std::byte> y(d.dst.get_size());
      std::vector<std::byte> ws(ws_md.get_size());
      const memory ws_mem = wrap(ws_md, ws.data());
      execute(e.fwd, {{DNNL_ARG_SRC, wrap(d.src, x)},
                      {DNNL_ARG_DST, wrap(d.dst, y.data())},
                      {DNNL_ARG_WORKSPACE, ws_mem},
                      {DNNL_ARG_SCRATCHPAD, scratchpad(e.fwd_pd)}});
      execute(e.prim, {{DNNL_ARG_DIFF_DST, wrap(d.dst, dy)},
                       {DNNL_ARG_WORKSPACE, ws_mem},
                       {DNNL_ARG_DIFF_SRC, wrap(d.src, dx)},
                       {DNNL_ARG_SCRATCHPAD, scratchpad(e.pd)}});
    } else {
      execute(e.prim, {{DNNL_ARG_DIFF_DST, wrap(d.dst, dy)},
                       {DNNL_ARG_DIFF_SRC, wrap(d.src, dx)},
                       {DNNL_ARG_SCRATCHPAD, scratchpad(e.pd)}});
    }
    return true;
  });
}

}  // namespace chorus::ops::cpu::onednn

#endif  // CHORUS_WITH_DNNL
