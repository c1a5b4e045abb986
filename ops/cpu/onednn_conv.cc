// float32 2-D convolution on oneDNN: forward, backward data, backward weights. Activations are
// NHWC (format_tag::nhwc over oneDNN's logical NCHW dims), filters HWIO (format_tag::hwio over
// logical OIHW); oneDNN's dilation counts the gaps between taps, so TF's dilation d is d - 1.
#ifdef CHORUS_WITH_DNNL

#include "ops/cpu/onednn.h"

namespace chorus::ops::cpu::onednn {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

struct ConvDescs {
  memory::desc src, weights, dst;
  memory::dims strides, dilates, pad_l, pad_r;
};

ConvDescs conv_descs(const Conv2dGeometry& g) {
  const auto f32 = memory::data_type::f32;
  return ConvDescs{memory::desc({g.n, g.in_c, g.in_h, g.in_w}, f32, tag::nhwc),
                   memory::desc({g.out_c, g.in_c, g.k_h, g.k_w}, f32, tag::hwio),
                   memory::desc({g.n, g.out_c, g.out_h, g.out_w}, f32, tag::nhwc),
                   {g.stride_h, g.stride_w},
                   {g.dilation_h - 1, g.dilation_w - 1},
                   {g.pad_top, g.pad_left},
                   {g.pad_bottom, g.pad_right}};
}

CacheKey conv_key(const Conv2dGeometry& g) {
  return {g.n,        g.in_h,       g.in_w,       g.in_c,    g.k_h,      g.k_w,     g.out_c,
          g.stride_h, g.stride_w,   g.dilation_h, g.dilation_w, g.pad_top, g.pad_left, g.pad_bottom,
          g.pad_right, g.out_h,     g.out_w};
}

// The forward primitive descriptor; also the hint the backward ones need.
dnnl::convolution_forward::primitive_desc forward_pd(const ConvDescs& d, dnnl::prop_kind prop) {
  return dnnl::convolution_forward::primitive_desc(
      dnnl::convolution_forward::desc(prop, dnnl::algorithm::convolution_direct, d.src, d.weights, d.dst, d.strides,
                                      d.dilates, d.pad_l, d.pad_r),
      default_attr(), engine());
}

struct ForwardEntry {
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward prim;
};
struct BackwardDataEntry {
  dnnl::convolution_backward_data::primitive_desc pd;
  dnnl::convolution_backward_data prim;
};
struct BackwardWeightsEntry {
  dnnl::convolution_backward_weights::primitive_desc pd;
  dnnl::convolution_backward_weights prim;
};

template <typename Entry>
PrimitiveCache<Entry>& cache() {
  static auto& c = *new PrimitiveCache<Entry>;  // leaked: outlives static destruction order
  return c;
}

}  // namespace

void conv2d_forward(const Conv2dGeometry& g, const float* x, const float* w, float* y) {
  guarded("convolution_forward", [&] {
    const ConvDescs d = conv_descs(g);
    ForwardEntry e = cache<ForwardEntry>().get(conv_key(g), [&] {
      auto pd = forward_pd(d, dnnl::prop_kind::forward_inference);
      return ForwardEntry{pd, dnnl::convolution_forward(pd)};
    });
    e.prim.execute(stream(), {{DNNL_ARG_SRC, wrap(d.src, x)},
                              {DNNL_ARG_WEIGHTS, wrap(d.weights, w)},
                              {DNNL_ARG_DST, wrap(d.dst, y)},
                              {DNNL_ARG_SCRATCHPAD, scratchpad(e.pd)}});
    stream().wait();
  });
}

void conv2d_backward_data(const Conv2dGeometry& g, const float* dy, const float* w, float* dx) {
  guarded("convolution_backward_data", [&] {
    const ConvDescs d = conv_descs(g);
    BackwardDataEntry e = cache<BackwardDataEntry>().get(conv_key(g), [&] {
      dnnl::convolution_backward_data::primitive_desc pd(
          dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, d.src, d.weights, d.dst,
                                                d.strides, d.dilates, d.pad_l, d.pad_r),
          default_attr(), engine(), forward_pd(d, dnnl::prop_kind::forward_training));
      return BackwardDataEntry{pd, dnnl::convolution_backward_data(pd)};
    });
    e.prim.execute(stream(), {{DNNL_ARG_DIFF_DST, wrap(d.dst, dy)},
                              {DNNL_ARG_WEIGHTS, wrap(d.weights, w)},
                              {DNNL_ARG_DIFF_SRC, wrap(d.src, dx)},
                              {DNNL_ARG_SCRATCHPAD, scratchpad(e.pd)}});
    stream().wait();
  });
}

void conv2d_backward_filter(const Conv2dGeometry& g, const float* x, const float* dy, float* dw) {
  guarded("convolution_backward_weights", [&] {
    const ConvDescs d = conv_descs(g);
    BackwardWeightsEntry e = cache<BackwardWeightsEntry>().get(conv_key(g), [&] {
      dnnl::convolution_backward_weights::primitive_desc pd(
          dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, d.src, d.weights, d.dst,
                                                   d.strides, d.dilates, d.pad_l, d.pad_r),
          default_attr(), engine(), forward_pd(d, dnnl::prop_kind::forward_training));
      return BackwardWeightsEntry{pd, dnnl::convolution_backward_weights(pd)};
    });
    e.prim.execute(stream(), {{DNNL_ARG_SRC, wrap(d.src, x)},
                              {DNNL_ARG_DIFF_DST, wrap(d.dst, dy)},
                              {DNNL_ARG_DIFF_WEIGHTS, wrap(d.weights, dw)},
                              {DNNL_ARG_SCRATCHPAD, scratchpad(e.pd)}});
    stream().wait();
  });
}

}  // namespace chorus::ops::cpu::onednn

#endif  // CHORUS_WITH_DNNL
