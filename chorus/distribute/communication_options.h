// CommunicationOptions (tf.distribute.experimental.CommunicationOptions): how a list of tensors
// (gradients) is all-reduced across replicas.
//
// Packing: the tensors are grouped into packs of consecutive tensors of one dtype whose sizes add
// up to at most bytes_per_pack (a larger tensor is a pack of its own), formed from the end of the
// list — the last layers' gradients, final first in the backward pass — with the first pack formed
// held to at most 1 MiB (PyTorch DDP's first bucket; distribute/all_reduce_packs.h); each pack is
// flattened into one buffer, all-reduced with one collective, and split back. The packs depend
// only on the list's shapes, dtypes and which entries are defined, so they are identical on every
// replica (the SPMD contract of collective/communicator.h), and the same whether they are reduced
// during the backward pass (docs/overlap.md) or after it.
// Fewer, larger collectives amortize each call's fixed cost (PyTorch DDP's buckets, Horovod's
// fusion buffer); 0 selects the default, 25 MiB (DDP's bucket size). bytes_per_pack counts the
// tensors' own bytes (before compression).
//
// Where the options come from (TF's CommunicationOptions.merge): a strategy holds default options
// (MirroredStrategyOptions / MultiWorkerMirroredStrategyOptions::communication_options, TF's
// `communication_options=` argument). StrategyReplicaContext::all_reduce(op, values) — the list
// form that Optimizer::apply_gradients, and so Model::fit, uses — applies them; the overload with
// explicit options takes each field that is set (non-zero, not kAuto, compression not nullopt)
// from the explicit options and the rest from the strategy's. The single-tensor form
// all_reduce(op, value) (metric sums, SyncBatchNorm statistics) is never compressed.
//
// Compression (Horovod's `hvd.Compression.none / .fp16`; bfloat16 as in TF's and PyTorch DDP's
// bf16 compress hooks): with kFloat16 or kBFloat16 every pack of float32 or float64 tensors is
// cast (round to nearest even) to the 16-bit type, all-reduced in that type (half the bytes of
// float32, a quarter of float64) and cast back to its own dtype. Packs of other dtypes (int32,
// int64, tensors that already are float16/bfloat16) are all-reduced as they are, never cast.
// kNone is bitwise the uncompressed path.
//
// What each backend accumulates in, for float16/bfloat16 (collective/communicator.h):
//   shared_memory, virtual_gpu   float32; one rounding to 16 bits per element (host_reduce.cc,
//                                cuda/fused_reduce.cu)
//   MPI                          16-bit on the wire; each rank reduces its 1/size block of all
//                                ranks' 16-bit inputs in float32 and rounds once, then the blocks
//                                are all-gathered (collective/mpi/mpi.h)
//   hierarchical                 each level as its backend: the local reduce rounds to 16 bits,
//                                the cross-process all-reduce rounds again (two roundings)
//   NCCL                         the 16-bit type itself at every hop (ncclFloat16/ncclBfloat16
//                                sum in 16 bits; NCCL has no wider accumulator for them)
//   reduction_to_one_device      float32 (host_reduce.cc), one rounding
//
// Error bound. Replicas i = 1..n contribute g_i (one element), u is the 16-bit type's unit
// roundoff (bfloat16: 2^-8, 8 significant bits; float16: 2^-11, 11 bits), e = 2^-24 float32's.
// Each rounding of a value x to 16 bits changes it by at most u·|x|; every partial sum is bounded
// by Σ|g_i| (times (1+u) per earlier rounding), so with k roundings on an element's path
//     |compressed_sum − Σ g_i| ≤ ((1 + u)^k − 1 + 2·n·e) · Σ|g_i|      (≈ (k·u + 2·n·e)·Σ|g_i|)
// where k = 2 (the input cast + one rounding of the float32 sum: shared_memory, MPI, virtual_gpu,
// reduction_to_one_device), k = 3 (hierarchical), k = n (NCCL: the cast + n−1 per-hop roundings
// of a ring; n + 1 for MEAN, as ncclAvg scales each input by 1/n first). The 2·n·e term covers
// float32's own accumulation (and MEAN's division); MEAN's bound is the sum's divided by n. The
// bound is relative to Σ|g_i|, not |Σ g_i|: when replicas' gradients cancel, the relative error
// of the sum can be large.
// Range: the bound holds for |g| inside the 16-bit type's normal range. float16's largest finite
// value is 65504: a |g_i| or a sum that rounds above it becomes ±Inf (NaN when +Inf meets −Inf);
// a LossScaleOptimizer sees the non-finite all-reduced gradient, skips that step on every replica
// and halves its loss scale. Magnitudes below 2^-14 (float16's smallest normal) keep fewer bits
// and those below 2^-25 flush to 0, an absolute error up to 2^-25 per rounding. Gradients reach
// the all-reduce already unscaled by LossScaleOptimizer, so small ones are at risk in float16:
// bfloat16 has float32's range and is the safer choice for gradients; float16 has 3 bits more
// precision.
//
// Validation (InvalidArgumentError, at the strategy's constructor for its defaults and at the
// call for explicit options): bytes_per_pack < 0, timeout_seconds < 0 or not finite, an
// implementation other than kAuto that differs from the strategy's choice, a compression value
// that is not one of the enumerators.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include <chorus/distribute/cross_device_ops.h>

namespace chorus::distribute {

inline constexpr std::int64_t kDefaultBytesPerPack = 25LL << 20;

// hvd.Compression.none / .fp16, and bfloat16.
enum class Compression { kNone, kFloat16, kBFloat16 };

// "none", "float16", "bfloat16"; "Compression(<int>)" for a value that is none of them.
std::string_view compression_name(Compression compression);

struct CommunicationOptions {
  std::int64_t bytes_per_pack = 0;  // 0: the strategy's (default kDefaultBytesPerPack); must be >= 0
  double timeout_seconds = 0;       // 0: the strategy's timeout (collective/communicator.h's default)
  // kAuto: the strategy's choice. Anything else must equal the strategy's choice
  // (InvalidArgumentError otherwise: the communicators are chosen when the strategy is built).
  CrossDeviceOps implementation = CrossDeviceOps::kAuto;
  // nullopt: the strategy's (kNone unless its options say otherwise). See "Compression" above.
  std::optional<Compression> compression;
};

// What the strategy's all-reduces moved, summed over this process's replicas since the strategy
// was built (or the last read_and_reset), both forms of StrategyReplicaContext::all_reduce.
// `bytes` are those handed to the communicators, in the dtype they reduce (after compression):
// what each backend moves per participant, up to its algorithm's factor (a ring moves about
// 2·(n−1)/n of it). `uncompressed_bytes` are the same tensors in their own dtypes, so
// bytes / uncompressed_bytes is 0.5 for float32 gradients under 16-bit compression.
// Multi-process strategies count this process's replicas only. Thread-safe (atomic counters).
struct AllReduceCounters {
  std::int64_t collectives = 0;  // communicator all_reduce calls (one per pack per replica)
  std::int64_t bytes = 0;
  std::int64_t uncompressed_bytes = 0;
  // Of `collectives`, those run during the backward pass by the replicas' communication threads
  // (overlap: MirroredStrategyOptions::overlap_gradient_all_reduce, docs/overlap.md).
  std::int64_t overlapped = 0;
};

// The factor of the bound above, (1 + u)^roundings − 1 + 2·num_replicas·2^-24, with u of
// `compression` (kNone: u = 0, float32's own term only). roundings: 2, 3 or n as listed above.
double compression_error_bound(Compression compression, int roundings, int num_replicas);

namespace internal {
// Throws InvalidArgumentError (prefixed by `where`) for the rules under "Validation" that need no
// strategy: bytes_per_pack, timeout_seconds, compression.
void validate_communication_options(const CommunicationOptions& options, std::string_view where);
// `explicit_options`' set fields over `defaults` (TF's CommunicationOptions.merge).
CommunicationOptions merge_communication_options(const CommunicationOptions& defaults,
                                                 const CommunicationOptions& explicit_options);
}  // namespace internal

}  // namespace chorus::distribute
