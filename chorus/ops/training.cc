#include <chorus/ops/training.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>

#include <chorus/core/gpu.h>

#include <chorus/ops/cpu/clones.h>
#include <chorus/ops/internal.h>
#include <chorus/ops/update_rules.h>
#if CHORUS_WITH_CUDA
#include <chorus/ops/cuda/kernels.h>
#endif

namespace chorus::ops {
namespace {

// One variable's storage: weight, gradient, the rule's slots in kernels.h's order (s0, s1, s2:
// null where the rule has none), element count and decay.
template <typename T>
struct Raw {
  T* w;
  const T* g;
  T* s0;
  T* s1;
  T* s2;
  std::int64_t n;
  T decay;
  bool decays;
};

// Adam on one element: every input read before any output is written (g may share storage with
// w or a slot). The build does not contract a*b+c into fma (ISO C++, no -ffast-math; the clones
// below exclude FMA targets), so this matches the ops bitwise.
template <typename T>
inline void adam_element(T* w, T* m, T* v, const T* g, std::int64_t i, const update_rules::Scalars<T>& s) {
  T wi = w[i], mi = m[i], vi = v[i];
  update_rules::adam(wi, mi, vi, g[i], s);
  m[i] = mi;
  v[i] = vi;
  w[i] = wi;
}

// The update of a large model is bound by sqrt and division when scalar (~10 cycles a
// parameter): blocks of 16 with a fixed trip count, over storage that does not alias (checked by
// the caller), are vectorized (this file is built with -fno-math-errno, so std::sqrt is a plain
// vsqrtps; SIMD sqrt and division round exactly as the scalar ones), and compiled for AVX2 and
// the baseline (CHORUS_CPU_CLONES_NO_FMA: nothing is contracted; under TSan the baseline loop).
template <typename T>
CHORUS_CPU_CLONES_NO_FMA void adam_blocks(T* __restrict w, T* __restrict m, T* __restrict v, const T* __restrict g,
                                          std::int64_t n, update_rules::Scalars<T> s) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (std::int64_t j = 0; j < 16; ++j) adam_element(w, m, v, g, i + j, s);
  for (; i < n; ++i) adam_element(w, m, v, g, i, s);
}

// Any rule on one element, the decay first.
template <typename T>
inline void fused_element(const FusedUpdate& u, const Raw<T>& r, std::int64_t i, const update_rules::Scalars<T>& s) {
  T w = r.w[i];
  const T g = r.g[i];
  if (r.decays) w = update_rules::decayed(w, r.decay);
  switch (u.rule) {
    case FusedRule::kAdam: update_rules::adam(w, r.s0[i], r.s1[i], g, s); break;
    case FusedRule::kSgd: update_rules::sgd(w, r.s0 != nullptr ? &r.s0[i] : nullptr, g, u.nesterov, s); break;
    case FusedRule::kRMSprop:
      update_rules::rmsprop(w, r.s0[i], r.s1 != nullptr ? &r.s1[i] : nullptr, r.s2 != nullptr ? &r.s2[i] : nullptr, g,
                            s);
      break;
  }
  r.w[i] = w;
}

// Elements [b, b + len) of one variable: Adam without decay over unaliased storage vectorized,
// anything else element by element.
template <typename T>
void fused_range(const FusedUpdate& u, const Raw<T>& r, std::int64_t b, std::int64_t len,
                 const update_rules::Scalars<T>& s) {
  const bool aliased = static_cast<const void*>(r.g) == r.w || static_cast<const void*>(r.g) == r.s0 ||
                       static_cast<const void*>(r.g) == r.s1 || r.w == r.s0 || r.w == r.s1 || r.s0 == r.s1;
  if (u.rule == FusedRule::kAdam && !r.decays && !aliased) {
    adam_blocks(r.w + b, r.s0 + b, r.s1 + b, r.g + b, len, s);
    return;
  }
  for (std::int64_t i = b; i < b + len; ++i) fused_element(u, r, i, s);
}

// `block`: null, or the scalar block (training.h), read when the update runs in stream order.
template <typename T>
void run_fused_cpu(DeviceContext& dev, const FusedUpdate& u, std::vector<Raw<T>> vars, const double* block) {
  internal::run_cpu(dev, [&] {
    const update_rules::Scalars<T> s =
        block != nullptr ? update_rules::scalars_of_block<T>(block) : update_rules::scalars_of<T>(u.scalars);
    if (block != nullptr)
      for (Raw<T>& r : vars) r.decay = static_cast<T>(block[update_rules::kBlockDecay]);
    // Each variable split over the device's OpenMP threads (set by run_cpu): every element's
    // update is independent, so the result is the same bits for any split.
    constexpr std::int64_t kGrain = 1 << 16;
    for (const Raw<T>& r : vars) {
      const std::int64_t chunks = (r.n + kGrain - 1) / kGrain;
#pragma omp parallel for schedule(static) if (chunks > 1)
      for (std::int64_t c = 0; c < chunks; ++c) {
        const std::int64_t b = c * kGrain;
        fused_range(u, r, b, std::min(r.n, b + kGrain) - b, s);
      }
    }
  });
}

std::size_t slot_count(const FusedUpdate& u) {
  switch (u.rule) {
    case FusedRule::kAdam: return 2;
    case FusedRule::kSgd: return u.momentum_slot ? 1 : 0;
    case FusedRule::kRMSprop: return 1 + (u.momentum_slot ? 1 : 0) + (u.centered ? 1 : 0);
  }
  return 0;
}

// The slots in kernels.h's order (s0, s1, s2).
std::array<void*, 3> slot_pointers(const FusedUpdate& u, const FusedVariable& v) {
  std::array<void*, 3> p{nullptr, nullptr, nullptr};
  if (u.rule == FusedRule::kRMSprop) {
    p[0] = v.slots[0].data();
    std::size_t next = 1;
    if (u.momentum_slot) p[1] = v.slots[next++].data();
    if (u.centered) p[2] = v.slots[next].data();
    return p;
  }
  for (std::size_t k = 0; k < v.slots.size(); ++k) p[k] = v.slots[k].data();
  return p;
}

// Whether the group can be fused (see training.h); its device when it can.
DeviceContext* fusable(const FusedUpdate& u, const std::vector<FusedVariable>& group) {
  if (group.empty()) return nullptr;
  const std::size_t slots = slot_count(u);
  const DType dt = group.front().weight.defined() ? group.front().weight.dtype() : DType::kFloat32;
  if (dt != DType::kFloat32 && dt != DType::kFloat64) return nullptr;
  DeviceContext* dev = nullptr;
  std::set<const Buffer*> written;
  for (const FusedVariable& v : group) {
    if (!v.weight.defined() || !v.gradient.defined() || v.slots.size() != slots) return nullptr;
    std::vector<const Tensor*> all{&v.weight, &v.gradient};
    for (const Tensor& s : v.slots) all.push_back(&s);
    for (const Tensor* t : all) {
      if (!t->defined() || t->dtype() != dt || !(t->shape() == v.weight.shape())) return nullptr;
      if (dev == nullptr) dev = &t->device_context();
      if (&t->device_context() != dev) return nullptr;
    }
    // Storage shared across variables would make the result depend on the order.
    std::set<const Buffer*> mine;
    for (const Tensor* t : all) mine.insert(t->buffer().get());
    for (const Buffer* b : mine)
      if (written.count(b) != 0) return nullptr;
    written.insert(mine.begin(), mine.end());
  }
  return dev;
}

template <typename T>
std::vector<Raw<T>> raw_of(const FusedUpdate& u, const std::vector<FusedVariable>& group) {
  std::vector<Raw<T>> out;
  for (const FusedVariable& v : group) {
    const std::array<void*, 3> p = slot_pointers(u, v);
    out.push_back({static_cast<T*>(v.weight.data()), static_cast<const T*>(v.gradient.data()), static_cast<T*>(p[0]),
                   static_cast<T*>(p[1]), static_cast<T*>(p[2]), v.weight.num_elements(), static_cast<T>(v.decay),
                   v.decays});
  }
  return out;
}

// The scalar block's shape, dtype and (when `dev` is given) device; InvalidArgumentError naming `op`.
void check_block(const Tensor& block, const DeviceContext* dev, const char* op) {
  CHORUS_REQUIRE(block.defined() && block.dtype() == DType::kFloat64 && block.shape() == Shape{kFusedScalarSlots},
                 InvalidArgumentError, op, ": the scalar block must be a float64 tensor of shape [", kFusedScalarSlots,
                 "], got ", block.defined() ? dtype_name(block.dtype()) : "an undefined tensor",
                 block.defined() ? " " + block.shape().to_string() : std::string());
  CHORUS_REQUIRE(dev == nullptr || &block.device_context() == dev, InvalidArgumentError, op,
                 ": the scalar block is on ", block.device_context().name(), ", the variables on ", dev->name());
}

}  // namespace

void write_fused_scalars(Tensor& block, const FusedScalars& scalars, double decay) {
  check_block(block, nullptr, "write_fused_scalars");
  const std::array<double, kFusedScalarSlots> values{scalars.learning_rate,
                                                     scalars.alpha,
                                                     scalars.one_minus_beta_1,
                                                     scalars.one_minus_beta_2,
                                                     scalars.epsilon,
                                                     scalars.momentum,
                                                     scalars.rho,
                                                     scalars.one_minus_rho,
                                                     decay};
  DeviceContext& dev = block.device_context();
  block.buffer()->await_writable();
  if (dev.is_gpu()) {
    // Pageable memory: CUDA stages the 72 bytes before returning and copies them in stream order.
    gpu::memcpy_async(dev.gpu_ordinal(), dev.stream().native_handle(), block.data(), values.data(), sizeof values,
                      gpu::CopyKind::kHostToDevice);
    return;
  }
  internal::run_cpu(dev, [&] { std::memcpy(block.data(), values.data(), sizeof values); });
}

bool apply_fused_update(const FusedUpdate& update, std::vector<FusedVariable>& group) {
  DeviceContext* dev = fusable(update, group);
  if (dev == nullptr) return false;
  const bool from_block = update.scalars_on_device.defined();
  if (from_block) check_block(update.scalars_on_device, dev, "apply_fused_update");
  const auto* block = from_block ? static_cast<const double*>(update.scalars_on_device.data()) : nullptr;
  for (const FusedVariable& v : group) {  // an async checkpoint's copy first
    v.weight.buffer()->await_writable();
    for (const Tensor& s : v.slots) s.buffer()->await_writable();
  }
  const DType dt = group.front().weight.dtype();
  if (dev->is_gpu()) {
#if CHORUS_WITH_CUDA
    std::vector<cuda::FusedTensors> vars;
    for (const FusedVariable& v : group) {
      const std::array<void*, 3> p = slot_pointers(update, v);
      vars.push_back(
          {v.weight.data(), v.gradient.data(), p[0], p[1], p[2], v.weight.num_elements(), v.decay, v.decays});
    }
    cuda::fused_update(dev->gpu_ordinal(), dev->stream().native_handle(), update.rule, dt, update.nesterov,
                       update.scalars, vars.data(), static_cast<int>(vars.size()), block);
    return true;
#else
    internal::no_cuda();
#endif
  }
  if (dt == DType::kFloat32)
    run_fused_cpu<float>(*dev, update, raw_of<float>(update, group), block);
  else
    run_fused_cpu<double>(*dev, update, raw_of<double>(update, group), block);
  return true;
}

}  // namespace chorus::ops
