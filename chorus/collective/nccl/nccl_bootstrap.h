// Internal to collective/: the host-side logic of the multi-process NCCL backend (nccl_mpi.h) —
// what its processes tell each other over MPI, and the checks made on it (the one-GPU-per-rank
// check itself is gpu_claim.h's). Pure logic without MPI,
// NCCL or a GPU, so it is unit-tested on any machine (tests/collective/nccl_bootstrap_test.cc).
//
// Everything travels as int64 words because that is the narrowest dtype the MPI communicator's
// collectives move (communicator.h has no byte dtype). Strings are packed NUL-padded and cut at
// their field's size; what is cut only shortens error messages (host names past 255 bytes could
// in principle make two hosts look equal: none seen in practice).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <chorus/collective/fingerprint.h>
#include <chorus/collective/gpu_claim.h>  // GpuClaim, check_distinct_gpus

namespace chorus::collective {

// The fixed-size wire form of a GpuClaim (host 256 bytes, bus id 32, device 96).
inline constexpr int kGpuClaimWords = 48;
std::vector<std::int64_t> pack_claim(const GpuClaim& claim);
// Reads kGpuClaimWords words; `rank` is the block the words came from (not trusted from the wire).
GpuClaim unpack_claim(const std::int64_t* words, int rank);

// The fixed-size wire form of a Fingerprint: op, sequence, dtype, root, reduce op, rank, the first
// 8 dims and a hash of the dims past the 8th (as the MPI backend compares them).
inline constexpr int kFingerprintWords = 16;
std::vector<std::int64_t> pack_fingerprint(const Fingerprint& fp, int rank);
// `all` holds `size` packed fingerprints, rank order. "" when all describe the same call, else
// "participants called different collectives: rank 0 called all_reduce #0 float32(4,) op=sum but
// rank 1 called all_reduce #0 float32(5,) op=sum. Every process must ..." (the first mismatch
// with rank 0). Tolerates garbage (a peer built from other sources): it is described, not trusted.
std::string compare_fingerprints(const std::vector<std::int64_t>& all, int size);

}  // namespace chorus::collective
