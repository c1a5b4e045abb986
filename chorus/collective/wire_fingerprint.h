// The wire form of a Fingerprint, for the process backends (MPI, Gloo) that send every rank's call
// to its peers before a collective and compare them: fixed-size, trivially copyable bytes. Shapes
// of rank > 8 are compared through a hash (FNV-1a) of the dims past the 8th; messages then show the
// first 8. Internal to collective/.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include <chorus/collective/call.h>

namespace chorus::collective {

inline constexpr int kWireDims = 8;
struct WireFingerprint {
  std::uint64_t sequence;
  std::int32_t op, dtype, root, reduce_op, rank, ndim;  // op: the CollectiveOp
  std::int64_t dims[kWireDims];
  std::uint64_t tail_hash;
};
static_assert(std::is_trivially_copyable_v<WireFingerprint> && sizeof(WireFingerprint) == 104);

WireFingerprint to_wire(const CollectiveCall& call, int rank);
// The same call (everything but the sender's rank).
bool same_call(const WireFingerprint& a, const WireFingerprint& b);
// For messages. Tolerates garbage from a peer built from other sources: an unknown op, dtype or
// reduce op, a negative rank or dimension gives "an unrecognised call (...)", never an exception.
std::string describe(const WireFingerprint& w);

}  // namespace chorus::collective
