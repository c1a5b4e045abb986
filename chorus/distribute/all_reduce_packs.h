// The packs of StrategyReplicaContext::all_reduce(op, list): which gradients travel together and
// how a pack is built and taken apart. One rule for the direct call and for the all-reduce
// overlapped with the backward pass (distribute/overlapped_reduction.h), so that both move the
// same packs and give the same bits on every backend (MPI picks its algorithm by message size).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <chorus/core/tensor.h>

namespace chorus::distribute::internal {

// PyTorch DDP's first bucket: the pack formed first — the one holding the end of the list, the
// last layers' gradients, which the backward pass finishes first — is kept this small, so that
// its all-reduce can start early.
inline constexpr std::int64_t kFirstPackBytes = 1 << 20;

// The packs, in list order, formed from the end of the list (DDP's reverse order of use): runs of
// consecutive defined values of one dtype whose bytes add up to at most `pack_bytes` — at most
// min(pack_bytes, kFirstPackBytes) for the first run formed — a larger value going alone; an
// undefined value ends a run and is in none. Depends only on which values are defined, their
// dtypes and sizes — the same on every replica.
std::vector<std::vector<std::size_t>> plan_all_reduce_packs(const std::vector<Tensor>& values, std::int64_t pack_bytes);

// One pack on its way: `send` (the members flattened and concatenated, or the one member as it
// is; cast to the wire dtype when compressed) is all-reduced into `out` (a fresh buffer, or
// `send` itself when compressed).
struct Pack {
  std::vector<std::size_t> members;
  std::vector<Shape> shapes;      // each member's
  DType dtype = DType::kFloat32;  // the members' (the wire dtype is send's)
  std::int64_t value_bytes = 0;   // the members' bytes, uncompressed
  Tensor send, out;
  // GPU packs reduced beside the compute (docs/overlap.md): `send` is complete at `ready` (an
  // event of the device's stream), `out` at `done` (of the collective's stream). nullptr: none.
  std::shared_ptr<Event> ready, done;
};

// Builds the pack of `members` of `values` on `device` (a member elsewhere is copied there).
Pack make_pack(const std::vector<Tensor>& values, std::vector<std::size_t> members, DType wire,
               const std::string& device);
// The reduced members into `reduced[member]` (cast back from the wire dtype, split, reshaped).
void unpack(const Pack& pack, std::vector<Tensor>& reduced);

}  // namespace chorus::distribute::internal
