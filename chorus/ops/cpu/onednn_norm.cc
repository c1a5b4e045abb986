// float32 softmax / log-softmax (last axis), batch normalization (training, inference,
// backward) and elementwise activations on oneDNN.
#ifdef CHORUS_WITH_DNNL

#include <algorithm>
#include <cstring>
#include <limits>

#include <chorus/ops/cpu/onednn.h>

namespace chorus::ops::cpu::onednn {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
constexpr auto kF32 = memory::data_type::f32;

template <typename Entry>
PrimitiveCache<Entry>& cache() {
  static auto& c = *new PrimitiveCache<Entry>;  // leaked: outlives static destruction order
  return c;
}

template <typename Pd, typename Prim>
struct Entry {
  Pd pd;
  Prim prim;
};

// ---- softmax --------------------------------------------------------------------------------

using SoftmaxFwd = Entry<dnnl::softmax_forward::primitive_desc, dnnl::softmax_forward>;
using LogSoftmaxFwd = Entry<dnnl::logsoftmax_forward::primitive_desc, dnnl::logsoftmax_forward>;
using SoftmaxBwd = Entry<dnnl::softmax_backward::primitive_desc, dnnl::softmax_backward>;
using LogSoftmaxBwd = Entry<dnnl::logsoftmax_backward::primitive_desc, dnnl::logsoftmax_backward>;

template <typename Fwd, typename FwdEntry>
void run_softmax_forward(const char* name, const float* x, float* y, std::int64_t rows, std::int64_t cols) {
  guarded(name, [&] {
    const memory::desc md({rows, cols}, kF32, tag::ab);
    FwdEntry e = cache<FwdEntry>().get({rows, cols}, [&] {
      typename Fwd::primitive_desc pd(typename Fwd::desc(dnnl::prop_kind::forward_inference, md, 1), default_attr(),
                                      engine());
      return FwdEntry{pd, Fwd(pd)};
    });
    execute(e.prim,
            {{DNNL_ARG_SRC, wrap(md, x)}, {DNNL_ARG_DST, wrap(md, y)}, {DNNL_ARG_SCRATCHPAD, scratchpad(e.pd)}});
  });
  // A row with NaN or +inf (or only -inf) has no softmax: TensorFlow's kernel (and chorus's
  // reference loops) make the whole row NaN, oneDNN 2.6 only some of it ([1, NaN, 0] → [0, NaN, 0],
  // measured). Such a row always has a NaN in oneDNN's output; this pass makes it all NaN.
#pragma omp parallel for schedule(static) if (rows * cols >= (1 << 16))
  for (std::int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * cols;
    bool nan = false;
    for (std::int64_t j = 0; j < cols; ++j) nan |= yr[j] != yr[j];
    if (nan) std::fill(yr, yr + cols, std::numeric_limits<float>::quiet_NaN());
  }
}

template <typename Fwd, typename Bwd, typename BwdEntry>
void run_softmax_backward(const char* name, const float* y, const float* dy, float* dx, std::int64_t rows,
                          std::int64_t cols) {
  guarded(name, [&] {
    const memory::desc md({rows, cols}, kF32, tag::ab);
    BwdEntry e = cache<BwdEntry>().get({rows, cols}, [&] {
      typename Fwd::primitive_desc hint(typename Fwd::desc(dnnl::prop_kind::forward_training, md, 1), default_attr(),
                                        engine());
      typename Bwd::primitive_desc pd(typename Bwd::desc(md, md, 1), default_attr(), engine(), hint);
      return BwdEntry{pd, Bwd(pd)};
    });
    execute(e.prim, {{DNNL_ARG_DST, wrap(md, y)},
                     {DNNL_ARG_DIFF_DST, wrap(md, dy)},
                     {DNNL_ARG_DIFF_SRC, wrap(md, dx)},
                     {DNNL_ARG_SCRATCHPAD, scratchpad(e.pd)}});
  });
}

// ---- batch normalization --------------------------------------------------------------------

using BnFwd = Entry<dnnl::batch_normalization_forward::primitive_desc, dnnl::batch_normalization_forward>;
using BnBwd = Entry<dnnl::batch_normalization_backward::primitive_desc, dnnl::batch_normalization_backward>;

// [rows, channels] as NHWC with H = W = 1: oneDNN 2.6 has JIT batch norm for the channels-last
// layout, while a 2-D "nc" tensor falls back to its plain C++ one (ncsp_bnorm; 2-3x slower here).
memory::desc bn_data_desc(std::int64_t rows, std::int64_t channels) {
  return memory::desc({rows, channels, 1, 1}, kF32, tag::nhwc);
}

std::int64_t epsilon_bits(float epsilon) {
  std::int32_t bits;
  std::memcpy(&bits, &epsilon, sizeof bits);
  return bits;
}

const auto kScaleShift = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;

BnFwd bn_forward(bool training, std::int64_t rows, std::int64_t channels, float epsilon) {
  const memory::desc md = bn_data_desc(rows, channels);
  const auto flags = training ? kScaleShift : kScaleShift | dnnl::normalization_flags::use_global_stats;
  const auto prop = training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  return cache<BnFwd>().get({training, rows, channels, epsilon_bits(epsilon)}, [&] {
    dnnl::batch_normalization_forward::primitive_desc pd(
        dnnl::batch_normalization_forward::desc(prop, md, epsilon, flags), default_attr(), engine());
    return BnFwd{pd, dnnl::batch_normalization_forward(pd)};
  });
}

// ---- eltwise ----------------------------------------------------------------------------------

using EltwiseFwd = Entry<dnnl::eltwise_forward::primitive_desc, dnnl::eltwise_forward>;

bool eltwise_algorithm(UnaryOp op, dnnl::algorithm& alg) {
  switch (op) {
    case UnaryOp::kRelu: alg = dnnl::algorithm::eltwise_relu; return true;
    case UnaryOp::kSigmoid: alg = dnnl::algorithm::eltwise_logistic; return true;
    case UnaryOp::kTanh: alg = dnnl::algorithm::eltwise_tanh; return true;
    case UnaryOp::kGelu: alg = dnnl::algorithm::eltwise_gelu_erf; return true;
    case UnaryOp::kExp: alg = dnnl::algorithm::eltwise_exp; return true;
    case UnaryOp::kLog: alg = dnnl::algorithm::eltwise_log; return true;
    case UnaryOp::kSqrt: alg = dnnl::algorithm::eltwise_sqrt; return true;
    case UnaryOp::kSquare: alg = dnnl::algorithm::eltwise_square; return true;
    case UnaryOp::kAbs: alg = dnnl::algorithm::eltwise_abs; return true;
    default: return false;
  }
}

}  // namespace

void softmax_forward(bool log, const float* x, float* y, std::int64_t rows, std::int64_t cols) {
  if (log) {
    run_softmax_forward<dnnl::logsoftmax_forward, LogSoftmaxFwd>("logsoftmax_forward", x, y, rows, cols);
  } else {
    run_softmax_forward<dnnl::softmax_forward, SoftmaxFwd>("softmax_forward", x, y, rows, cols);
  }
}

void softmax_backward(bool log, const float* y, const float* dy, float* dx, std::int64_t rows, std::int64_t cols) {
  if (log) {
    run_softmax_backward<dnnl::logsoftmax_forward, dnnl::logsoftmax_backward, LogSoftmaxBwd>("logsoftmax_backward", y,
                                                                                             dy, dx, rows, cols);
  } else {
    run_softmax_backward<dnnl::softmax_forward, dnnl::softmax_backward, SoftmaxBwd>("softmax_backward", y, dy, dx, rows,
                                                                                    cols);
  }
}

void batch_norm_training(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* var,
                         std::int64_t rows, std::int64_t channels, double epsilon) {
  guarded("batch_normalization_forward (training)", [&] {
    const memory::desc md = bn_data_desc(rows, channels);
    const memory::desc c_md({channels}, kF32, tag::a);
    BnFwd e = bn_forward(true, rows, channels, static_cast<float>(epsilon));
    execute(e.prim, {{DNNL_ARG_SRC, wrap(md, x)},
                     {DNNL_ARG_SCALE, wrap(c_md, gamma)},
                     {DNNL_ARG_SHIFT, wrap(c_md, beta)},
                     {DNNL_ARG_DST, wrap(md, y)},
                     {DNNL_ARG_MEAN, wrap(c_md, mean)},
                     {DNNL_ARG_VARIANCE, wrap(c_md, var)},
                     {DNNL_ARG_SCRATCHPAD, scratchpad(e.pd)}});
  });
}

void batch_norm_inference(const float* x, const float* gamma, const float* beta, const float* mean, const float* var,
                          float* y, std::int64_t rows, std::int64_t channels, double epsilon) {
  guarded("batch_normalization_forward (inference)", [&] {
    const memory::desc md = bn_data_desc(rows, channels);
    const memory::desc c_md({channels}, kF32, tag::a);
    BnFwd e = bn_forward(false, rows, channels, static_cast<float>(epsilon));
    execute(e.prim, {{DNNL_ARG_SRC, wrap(md, x)},
                     {DNNL_ARG_SCALE, wrap(c_md, gamma)},
                     {DNNL_ARG_SHIFT, wrap(c_md, beta)},
                     {DNNL_ARG_MEAN, wrap(c_md, mean)},
                     {DNNL_ARG_VARIANCE, wrap(c_md, var)},
                     {DNNL_ARG_DST, wrap(md, y)},
                     {DNNL_ARG_SCRATCHPAD, scratchpad(e.pd)}});
  });
}

void batch_norm_backward(const float* x, const float* dy, const float* gamma, const float* mean, const float* var,
                         float* dx, float* dgamma, float* dbeta, std::int64_t rows, std::int64_t channels,
                         double epsilon) {
  guarded("batch_normalization_backward", [&] {
    const memory::desc md = bn_data_desc(rows, channels);
    const memory::desc c_md({channels}, kF32, tag::a);
    const float eps = static_cast<float>(epsilon);
    BnBwd e = cache<BnBwd>().get({rows, channels, epsilon_bits(eps)}, [&] {
      const BnFwd hint = bn_forward(true, rows, channels, eps);
      dnnl::batch_normalization_backward::primitive_desc pd(
          dnnl::batch_normalization_backward::desc(dnnl::prop_kind::backward, md, md, eps, kScaleShift), default_attr(),
          engine(), hint.pd);
      return BnBwd{pd, dnnl::batch_normalization_backward(pd)};
    });
    execute(e.prim, {{DNNL_ARG_SRC, wrap(md, x)},
                     {DNNL_ARG_DIFF_DST, wrap(md, dy)},
                     {DNNL_ARG_SCALE, wrap(c_md, gamma)},
                     // oneDNN 2.6 insists on a SHIFT argument under use_shift although no
                     // gradient depends on beta's values; any channels-sized buffer does.
                     {DNNL_ARG_SHIFT, wrap(c_md, gamma)},
                     {DNNL_ARG_MEAN, wrap(c_md, mean)},
                     {DNNL_ARG_VARIANCE, wrap(c_md, var)},
                     {DNNL_ARG_DIFF_SRC, wrap(md, dx)},
                     {DNNL_ARG_DIFF_SCALE, wrap(c_md, dgamma)},
                     {DNNL_ARG_DIFF_SHIFT, wrap(c_md, dbeta)},
                     {DNNL_ARG_SCRATCHPAD, scratchpad(e.pd)}});
  });
}

bool eltwise_forward(UnaryOp op, DType dtype, const void* x, void* y, std::int64_t n) {
  dnnl::algorithm alg;
  if (!eltwise_algorithm(op, alg)) return false;
  guarded("eltwise_forward", [&] {
    const memory::desc md({n}, dtype == DType::kBFloat16 ? memory::data_type::bf16 : kF32, tag::a);
    EltwiseFwd e = cache<EltwiseFwd>().get({static_cast<std::int64_t>(op), n, static_cast<std::int64_t>(dtype)}, [&] {
      dnnl::eltwise_forward::primitive_desc pd(
          dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, alg, md, 0.f, 0.f), default_attr(), engine());
      return EltwiseFwd{pd, dnnl::eltwise_forward(pd)};
    });
    execute(e.prim,
            {{DNNL_ARG_SRC, wrap(md, x)}, {DNNL_ARG_DST, wrap(md, y)}, {DNNL_ARG_SCRATCHPAD, scratchpad(e.pd)}});
  });
  return true;
}

namespace {
struct EltwiseBwdEntry {
  dnnl::eltwise_backward::primitive_desc pd;
  dnnl::eltwise_backward prim;
  bool ok = false;  // a usable kernel (onednn.h's usable(); bfloat16: a JIT one)
};
}  // namespace

bool eltwise_backward(UnaryOp op, DType dtype, const void* x, const void* dy, void* dx, std::int64_t n) {
  dnnl::algorithm alg;
  if (op != UnaryOp::kGelu || !eltwise_algorithm(op, alg)) return false;
  return guarded("eltwise_backward", [&] {
    const memory::desc md({n}, data_type(dtype), tag::a);
    const EltwiseBwdEntry e =
        cache<EltwiseBwdEntry>().get({static_cast<std::int64_t>(op), n, static_cast<std::int64_t>(dtype)}, [&] {
          return make_entry<EltwiseBwdEntry>(dtype, [&] {
            const dnnl::eltwise_forward::primitive_desc hint(
                dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, alg, md, 0.f, 0.f), engine());
            dnnl::eltwise_backward::primitive_desc pd(dnnl::eltwise_backward::desc(alg, md, md, 0.f, 0.f),
                                                      default_attr(), engine(), hint);
            if (!usable(dtype, pd)) return EltwiseBwdEntry{};
            return EltwiseBwdEntry{pd, dnnl::eltwise_backward(pd), true};
          });
        });
    if (!e.ok) return false;
    if (x == nullptr) return true;  // probe (onednn.h)
    execute(e.prim, {{DNNL_ARG_SRC, wrap(md, x)},
                     {DNNL_ARG_DIFF_DST, wrap(md, dy)},
                     {DNNL_ARG_DIFF_SRC, wrap(md, dx)},
                     {DNNL_ARG_SCRATCHPAD, scratchpad(e.pd)}});
    return true;
  });
}

}  // namespace chorus::ops::cpu::onednn

#endif  // CHORUS_WITH_DNNL
