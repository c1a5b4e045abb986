// Fused multi-tensor optimizer updates on the GPU (ops/cuda/kernels.h's fused_update): one launch
// updates up to kMaxVariables variables, grid-striding over their concatenated elements, with the
// elementwise rules of ops/update_rules.h. Compiled with --fmad=false (ops/CMakeLists.txt): nothing
// is contracted, so each variable's result is bitwise that of its optimizer's op sequence, whose
// kernels round every op.
#include <chorus/ops/cuda/common.cuh>
#include <chorus/ops/cuda/kernels.h>
#include <chorus/ops/update_rules.h>

namespace chorus::ops::cuda {

namespace {

using detail::grid_for;
using detail::i64;
using detail::kThreads;

// Variables per launch: the argument block stays well under CUDA's 4 KiB kernel-parameter limit
// (24 · (5 pointers + 2 counts + a decay) ≈ 1.6 KiB for double).
constexpr int kMaxVariables = 24;

template <typename T>
struct Batch {
  int count = 0;
  T* w[kMaxVariables];
  const T* g[kMaxVariables];
  T* s0[kMaxVariables];  // Adam m; SGD momentum (or null); RMSprop velocity
  T* s1[kMaxVariables];  // Adam v; RMSprop momentum (or null)
  T* s2[kMaxVariables];  // RMSprop average (or null)
  T decay[kMaxVariables];
  unsigned char decays[kMaxVariables];
  i64 start[kMaxVariables + 1];  // prefix sums of the element counts
};

// `block`: null, or the scalar block (ops/training.h), read here in place of `s` and the decays.
template <typename T>
__global__ void fused_update_kernel(FusedRule rule, bool nesterov, Batch<T> b, update_rules::Scalars<T> s,
                                    const double* block) {
  constexpr int kDecay = update_rules::kBlockDecay;
  if (block != nullptr) s = update_rules::scalars_of_block<T>(block);
  const i64 total = b.start[b.count];
  int k = 0;
  for (i64 idx = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<i64>(gridDim.x) * blockDim.x) {
    while (idx >= b.start[k + 1]) ++k;  // indices only grow along a thread's loop
    const i64 i = idx - b.start[k];
    T w = b.w[k][i];
    const T g = b.g[k][i];
    if (b.decays[k]) w = update_rules::decayed(w, block != nullptr ? static_cast<T>(block[kDecay]) : b.decay[k]);
    switch (rule) {
      case FusedRule::kAdam: update_rules::adam(w, b.s0[k][i], b.s1[k][i], g, s); break;
      case FusedRule::kSgd: update_rules::sgd(w, b.s0[k] != nullptr ? &b.s0[k][i] : nullptr, g, nesterov, s); break;
      case FusedRule::kRMSprop:
        update_rules::rmsprop(w, b.s0[k][i], b.s1[k] != nullptr ? &b.s1[k][i] : nullptr,
                              b.s2[k] != nullptr ? &b.s2[k][i] : nullptr, g, s);
        break;
    }
    b.w[k][i] = w;
  }
}

template <typename T>
void launch_all(cudaStream_t stream, FusedRule rule, bool nesterov, const FusedScalars& h,
                const FusedTensors* variables, int n, const double* block) {
  const update_rules::Scalars<T> s = update_rules::scalars_of<T>(h);
  Batch<T> b;
  auto flush = [&] {
    if (b.count == 0) return;
    const i64 total = b.start[b.count];
    if (total > 0) fused_update_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(rule, nesterov, b, s, block);
    CHORUS_CUDA_CHECK(cudaGetLastError());
    b.count = 0;
  };
  for (int v = 0; v < n; ++v) {
    const FusedTensors& t = variables[v];
    if (t.n == 0) continue;
    if (b.count == 0) b.start[0] = 0;
    const int k = b.count++;
    b.w[k] = static_cast<T*>(t.w);
    b.g[k] = static_cast<const T*>(t.g);
    b.s0[k] = static_cast<T*>(t.s0);
    b.s1[k] = static_cast<T*>(t.s1);
    b.s2[k] = static_cast<T*>(t.s2);
    b.decay[k] = static_cast<T>(t.decay);
    b.decays[k] = t.decays ? 1 : 0;
    b.start[k + 1] = b.start[k] + t.n;
    if (b.count == kMaxVariables) flush();
  }
  flush();
}

}  // namespace

void fused_update(int ordinal, StreamHandle stream, FusedRule rule, DType dtype, bool nesterov,
                  const FusedScalars& scalars, const FusedTensors* variables, int count, const double* block) {
  CHORUS_REQUIRE(dtype == DType::kFloat32 || dtype == DType::kFloat64, InvalidArgumentError,
                 "fused optimizer update: float32 or float64 variables, got ", dtype);
  if (count <= 0) return;
  gpu::internal::DeviceGuard guard(ordinal);
  auto s = static_cast<cudaStream_t>(stream);
  if (dtype == DType::kFloat32)
    launch_all<float>(s, rule, nesterov, scalars, variables, count, block);
  else
    launch_all<double>(s, rule, nesterov, scalars, variables, count, block);
}

}  // namespace chorus::ops::cuda
