// 2-D convolution on oneDNN (float32, bfloat16, float16: every tensor of the call in that type,
// float32 accumulation inside oneDNN): forward, backward data, backward weights. Activations are
// NHWC (format_tag::nhwc over oneDNN's logical NCHW dims), filters HWIO (format_tag::hwio over
// logical OIHW); oneDNN's dilation counts the gaps between taps, so TF's dilation d is d - 1.
//
// The forward takes an optional epilogue (ConvEpilogue, ops/cpu/dnn.h): the bias as the
// convolution's own bias argument (TensorFlow's _FusedConv2D), and ReLU as chorus's loop over y
// afterwards (bias_activation_forward). Not oneDNN's eltwise_relu post-op: oneDNN 2.6 maps NaN to 0
// there (every JIT ISA, measured), where TensorFlow's relu keeps NaN (docs/ops.md, NaN and Inf).
//
// The weights are described as format_tag::any: with HWIO fixed, oneDNN 2.6 falls back to its
// im2col+GEMM convolution, while with the format of its choice it picks the direct JIT kernels
// (seed-CNN conv2 forward on AVX-512: 5.0 ms vs 0.63 ms). The filter is small, so each call
// reorders it into a per-thread buffer (forward, backward data) or out of one (backward weights).
//
// Grouped convolution (g.groups > 1, ops/geometry.h): oneDNN's grouped weights, logical dims
// (G, O/G, I/G, KH, KW). TF's filter [kh, kw, in_c / G, out_c] puts output channel o of group gi at
// gi·(out_c / G) + o, so that layout is those dims with explicit strides (no format tag names it).
#ifdef CHORUS_WITH_DNNL

#include <utility>

#include <chorus/ops/cpu/onednn.h>

namespace chorus::ops::cpu::onednn {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

struct ConvDescs {
  memory::desc src, hwio, any_weights, dst;
  memory::dims strides, dilates, pad_l, pad_r;
};

// The caller's filter (HWIO) and the convolution's weights of oneDNN's choice (tag::any).
std::pair<memory::desc, memory::desc> weights_descs(memory::data_type dt, const Conv2dGeometry& g) {
  if (g.groups == 1) {
    const memory::dims weights{g.out_c, g.in_c, g.k_h, g.k_w};
    return {memory::desc(weights, dt, tag::hwio), memory::desc(weights, dt, tag::any)};
  }
  const std::int64_t og = g.out_c / g.groups, ic = g.filter_in_c();
  const memory::dims weights{g.groups, og, ic, g.k_h, g.k_w};
  const memory::dims hwio_strides{og, 1, g.out_c, g.k_w * ic * g.out_c, ic * g.out_c};
  return {memory::desc(weights, dt, hwio_strides), memory::desc(weights, dt, tag::any)};
}

ConvDescs conv_descs(DType dtype, const Conv2dGeometry& g) {
  const memory::data_type dt = data_type(dtype);
  auto [hwio, any_weights] = weights_descs(dt, g);
  return ConvDescs{memory::desc({g.n, g.in_c, g.in_h, g.in_w}, dt, tag::nhwc),
                   hwio,
                   any_weights,
                   memory::desc({g.n, g.out_c, g.out_h, g.out_w}, dt, tag::nhwc),
                   {g.stride_h, g.stride_w},
                   {g.dilation_h - 1, g.dilation_w - 1},
                   {g.pad_top, g.pad_left},
                   {g.pad_bottom, g.pad_right}};
}

CacheKey conv_key(DType dtype, const Conv2dGeometry& g) {
  return {static_cast<std::int64_t>(dtype),
          g.n,
          g.in_h,
          g.in_w,
          g.in_c,
          g.k_h,
          g.k_w,
          g.out_c,
          g.stride_h,
          g.stride_w,
          g.dilation_h,
          g.dilation_w,
          g.pad_top,
          g.pad_left,
          g.pad_bottom,
          g.pad_right,
          g.out_h,
          g.out_w,
          g.groups};
}

// The forward primitive descriptor; also the hint the backward ones need (no epilogue there).
dnnl::convolution_forward::primitive_desc forward_pd(const ConvDescs& d, dnnl::prop_kind prop, bool bias = false) {
  const dnnl::primitive_attr attr = default_attr();
  if (bias) {
    const memory::desc b({d.dst.dims()[1]}, d.dst.data_type(), tag::a);
    return dnnl::convolution_forward::primitive_desc(
        dnnl::convolution_forward::desc(prop, dnnl::algorithm::convolution_direct, d.src, d.any_weights, b, d.dst,
                                        d.strides, d.dilates, d.pad_l, d.pad_r),
        attr, engine());
  }
  return dnnl::convolution_forward::primitive_desc(
      dnnl::convolution_forward::desc(prop, dnnl::algorithm::convolution_direct, d.src, d.any_weights, d.dst, d.strides,
                                      d.dilates, d.pad_l, d.pad_r),
      attr, engine());
}

// Converts weights between the caller's HWIO and the layout the convolution chose; a no-op when
// they are the same.
struct WeightsReorder {
  memory::desc from, to;
  bool needed = false;
  dnnl::reorder::primitive_desc pd;
  dnnl::reorder prim;

  static WeightsReorder make(const memory::desc& from, const memory::desc& to) {
    WeightsReorder r;
    r.from = from;
    r.to = to;
    r.needed = from != to;
    if (r.needed) {
      r.pd = dnnl::reorder::primitive_desc(engine(), from, engine(), to, default_attr());
      r.prim = dnnl::reorder(r.pd);
    }
    return r;
  }
  void run(const void* src, void* dst) const {
    execute(prim,
            {{DNNL_ARG_FROM, wrap(from, src)}, {DNNL_ARG_TO, wrap(to, dst)}, {DNNL_ARG_SCRATCHPAD, scratchpad(pd)}});
  }
  // The convolution's weights memory: the caller's pointer, or the per-thread buffer.
  void* buffer(const void* user) const {
    return needed ? thread_buffer(BufferSlot::kWeights, to.get_size()) : const_cast<void*>(user);
  }
};

struct ForwardEntry {
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward prim;
  WeightsReorder weights;  // hwio → pd.weights_desc()
  bool ok = false;         // false: no usable kernel for this 16-bit dtype (make_entry)
};
struct BackwardDataEntry {
  dnnl::convolution_backward_data::primitive_desc pd;
  dnnl::convolution_backward_data prim;
  WeightsReorder weights;  // hwio → pd.weights_desc()
  bool ok = false;
};
struct BackwardWeightsEntry {
  dnnl::convolution_backward_weights::primitive_desc pd;
  dnnl::convolution_backward_weights prim;
  WeightsReorder weights;  // pd.diff_weights_desc() → hwio
  bool ok = false;
};

template <typename Entry>
PrimitiveCache<Entry>& cache() {
  static auto& c = *new PrimitiveCache<Entry>;  // leaked: outlives static destruction order
  return c;
}

}  // namespace

bool conv2d_forward(DType dtype, const Conv2dGeometry& g, const void* x, const void* w, void* y,
                    const ConvEpilogue& epilogue) {
  return guarded("convolution_forward", [&] {
    const ConvDescs d = conv_descs(dtype, g);
    const bool bias = epilogue.bias != nullptr;
    CacheKey key = conv_key(dtype, g);
    key.push_back(bias);
    const ForwardEntry e = cache<ForwardEntry>().get(key, [&] {
      return make_entry<ForwardEntry>(dtype, [&] {
        auto pd = forward_pd(d, dnnl::prop_kind::forward_inference, bias);
        if (!usable(dtype, pd)) return ForwardEntry{};
        return ForwardEntry{pd, dnnl::convolution_forward(pd), WeightsReorder::make(d.hwio, pd.weights_desc()), true};
      });
    });
    if (!e.ok) return false;
    if (x == nullptr) return true;  // probe (onednn.h)
    void* weights = e.weights.buffer(w);
    if (e.weights.needed) e.weights.run(w, weights);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, wrap(d.src, x)},
                                         {DNNL_ARG_WEIGHTS, wrap(e.weights.to, weights)},
                                         {DNNL_ARG_DST, wrap(d.dst, y)},
                                         {DNNL_ARG_SCRATCHPAD, scratchpad(e.pd)}};
    if (bias) args.emplace(DNNL_ARG_BIAS, wrap(e.pd.bias_desc(), epilogue.bias));
    execute(e.prim, args);
    if (epilogue.relu) bias_activation_forward(dtype, true, y, nullptr, g.output_elements() / g.out_c, g.out_c);
    return true;
  });
}

bool conv2d_backward_data(DType dtype, const Conv2dGeometry& g, const void* dy, const void* w, void* dx) {
  return guarded("convolution_backward_data", [&] {
    const ConvDescs d = conv_descs(dtype, g);
    const BackwardDataEntry e = cache<BackwardDataEntry>().get(conv_key(dtype, g), [&] {
      return make_entry<BackwardDataEntry>(dtype, [&] {
        dnnl::convolution_backward_data::primitive_desc pd(
            dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, d.src, d.any_weights, d.dst,
                                                  d.strides, d.dilates, d.pad_l, d.pad_r),
            default_attr(), engine(), forward_pd(d, dnnl::prop_kind::forward_training));
        if (!usable(dtype, pd)) return BackwardDataEntry{};
        return BackwardDataEntry{pd, dnnl::convolution_backward_data(pd),
                                 WeightsReorder::make(d.hwio, pd.weights_desc()), true};
      });
    });
    if (!e.ok) return false;
    if (dy == nullptr) return true;  // probe (onednn.h)
    void* weights = e.weights.buffer(w);
    if (e.weights.needed) e.weights.run(w, weights);
    execute(e.prim, {{DNNL_ARG_DIFF_DST, wrap(d.dst, dy)},
                     {DNNL_ARG_WEIGHTS, wrap(e.weights.to, weights)},
                     {DNNL_ARG_DIFF_SRC, wrap(d.src, dx)},
                     {DNNL_ARG_SCRATCHPAD, scratchpad(e.pd)}});
    return true;
  });
}

bool conv2d_backward_filter(DType dtype, const Conv2dGeometry& g, const void* x, const void* dy, void* dw) {
  return guarded("convolution_backward_weights", [&] {
    const ConvDescs d = conv_descs(dtype, g);
    const BackwardWeightsEntry e = cache<BackwardWeightsEntry>().get(conv_key(dtype, g), [&] {
      return make_entry<BackwardWeightsEntry>(dtype, [&] {
        dnnl::convolution_backward_weights::primitive_desc pd(
            dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, d.src, d.any_weights, d.dst,
                                                     d.strides, d.dilates, d.pad_l, d.pad_r),
            default_attr(), engine(), forward_pd(d, dnnl::prop_kind::forward_training));
        if (!usable(dtype, pd)) return BackwardWeightsEntry{};
        return BackwardWeightsEntry{pd, dnnl::convolution_backward_weights(pd),
                                    WeightsReorder::make(pd.diff_weights_desc(), d.hwio), true};
      });
    });
    if (!e.ok) return false;
    if (x == nullptr) return true;  // probe (onednn.h)
    // Here the reorder runs after the convolution, from its layout (`from`) into the caller's.
    void* weights = e.weights.needed ? thread_buffer(BufferSlot::kWeights, e.weights.from.get_size()) : dw;
    execute(e.prim, {{DNNL_ARG_SRC, wrap(d.src, x)},
                     {DNNL_ARG_DIFF_DST, wrap(d.dst, dy)},
                     {DNNL_ARG_DIFF_WEIGHTS, wrap(e.weights.from, weights)},
                     {DNNL_ARG_SCRATCHPAD, scratchpad(e.pd)}});
    if (e.weights.needed) e.weights.run(weights, dw);
    return true;
  });
}

}  // namespace chorus::ops::cpu::onednn

#endif  // CHORUS_WITH_DNNL
