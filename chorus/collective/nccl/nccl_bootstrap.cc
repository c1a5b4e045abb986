#include <chorus/collective/nccl/nccl_bootstrap.h>

#include <algorithm>
#include <cstring>

#include <chorus/collective/call.h>
#include <chorus/core/error.h>
#include <chorus/core/strings.h>

namespace chorus::collective {
namespace {

using internal::str_cat;

constexpr std::size_t kHostBytes = 256, kBusBytes = 32, kDeviceBytes = 96;
static_assert(kHostBytes + kBusBytes + kDeviceBytes == kGpuClaimWords * sizeof(std::int64_t));

void put(const std::string& s, char* field, std::size_t size) {
  std::memset(field, 0, size);
  std::memcpy(field, s.data(), std::min(s.size(), size - 1));  // always NUL-terminated
}

std::string get(const char* field, std::size_t size) { return std::string(field, strnlen(field, size)); }

constexpr int kWireDims = 8;
// Word positions in a packed fingerprint.
enum : int { kOp, kSequence, kDType, kRoot, kReduceOp, kRank, kNdim, kDims, kTailHash = kDims + kWireDims };
static_assert(kTailHash + 1 == kFingerprintWords);

std::string describe(const std::int64_t* w) {
  const bool known = w[kOp] >= 0 && w[kOp] < kNumCollectiveOps && w[kDType] >= 0 && w[kDType] < kNumDTypes &&
                     w[kReduceOp] >= -1 && w[kReduceOp] <= static_cast<int>(ReduceOp::kProd) && w[kNdim] >= 0;
  if (!known)
    return str_cat("an unrecognised call (op ", w[kOp], ", dtype ", w[kDType], ", sequence ", w[kSequence], ")");
  Fingerprint fp;
  fp.op = collective_op_name(static_cast<CollectiveOp>(w[kOp]));
  fp.sequence = static_cast<std::uint64_t>(w[kSequence]);
  fp.dtype = static_cast<DType>(w[kDType]);
  fp.shape.assign(w + kDims, w + kDims + std::min<std::int64_t>(w[kNdim], kWireDims));
  fp.root = static_cast<int>(w[kRoot]);
  fp.reduce_op = static_cast<int>(w[kReduceOp]);
  return fp.to_string() + (w[kNdim] > kWireDims ? " (first 8 dims shown)" : "");
}

bool same_call(const std::int64_t* a, const std::int64_t* b) {
  for (int i = 0; i < kFingerprintWords; ++i)
    if (i != kRank && a[i] != b[i]) return false;
  return true;
}

}  // namespace

std::vector<std::int64_t> pack_claim(const GpuClaim& claim) {
  std::vector<std::int64_t> words(kGpuClaimWords);
  char* bytes = reinterpret_cast<char*>(words.data());
  put(claim.host, bytes, kHostBytes);
  put(claim.pci_bus_id, bytes + kHostBytes, kBusBytes);
  put(claim.device, bytes + kHostBytes + kBusBytes, kDeviceBytes);
  return words;
}

GpuClaim unpack_claim(const std::int64_t* words, int rank) {
  const char* bytes = reinterpret_cast<const char*>(words);
  return {.rank = rank,
          .host = get(bytes, kHostBytes),
          .pci_bus_id = get(bytes + kHostBytes, kBusBytes),
          .device = get(bytes + kHostBytes + kBusBytes, kDeviceBytes)};
}

std::vector<std::int64_t> pack_fingerprint(const Fingerprint& fp, int rank) {
  std::vector<std::int64_t> w(kFingerprintWords, 0);
  const std::optional<CollectiveOp> op = collective_op_from_name(fp.op);
  w[kOp] = op ? static_cast<std::int64_t>(*op) : -1;
  w[kSequence] = static_cast<std::int64_t>(fp.sequence);
  w[kDType] = static_cast<std::int64_t>(fp.dtype);
  w[kRoot] = fp.root;
  w[kReduceOp] = fp.reduce_op;
  w[kRank] = rank;
  w[kNdim] = static_cast<std::int64_t>(fp.shape.size());
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the dims that do not fit, as mpi.cc does
  for (std::size_t i = 0; i < fp.shape.size(); ++i) {
    if (i < kWireDims)
      w[kDims + i] = fp.shape[i];
    else
      h = (h ^ static_cast<std::uint64_t>(fp.shape[i])) * 1099511628211ull;
  }
  w[kTailHash] = fp.shape.size() > kWireDims ? static_cast<std::int64_t>(h) : 0;
  return w;
}

std::string compare_fingerprints(const std::vector<std::int64_t>& all, int size) {
  CHORUS_ENFORCE_EQ(all.size(), static_cast<std::size_t>(size) * kFingerprintWords);
  const std::int64_t* first = all.data();
  for (int r = 1; r < size; ++r) {
    const std::int64_t* other = first + static_cast<std::size_t>(r) * kFingerprintWords;
    if (same_call(first, other)) continue;
    return str_cat("participants called different collectives: rank 0 called ", describe(first), " but rank ", r,
                   " called ", describe(other),
                   ". Every process must call the same collectives in the same order "
                   "with the same shapes and dtypes.");
  }
  return "";
}

}  // namespace chorus::collective
