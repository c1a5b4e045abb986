#include <chorus/collective/wire_fingerprint.h>

#include <algorithm>
#include <cstring>

#include <chorus/core/error.h>

namespace chorus::collective {

using internal::str_cat;

WireFingerprint to_wire(const CollectiveCall& call, int rank) {
  const Fingerprint& fp = call.fp;
  WireFingerprint w;
  std::memset(&w, 0, sizeof w);
  w.sequence = fp.sequence;
  w.op = static_cast<std::int32_t>(call.kind);
  w.dtype = static_cast<std::int32_t>(fp.dtype);
  w.root = fp.root;
  w.reduce_op = fp.reduce_op;
  w.rank = rank;
  w.ndim = static_cast<std::int32_t>(fp.shape.size());
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the dims that do not fit
  for (std::size_t i = 0; i < fp.shape.size(); ++i) {
    if (i < kWireDims)
      w.dims[i] = fp.shape[i];
    else
      h = (h ^ static_cast<std::uint64_t>(fp.shape[i])) * 1099511628211ull;
  }
  w.tail_hash = fp.shape.size() > kWireDims ? h : 0;
  return w;
}

bool same_call(const WireFingerprint& a, const WireFingerprint& b) {
  return a.sequence == b.sequence && a.op == b.op && a.dtype == b.dtype && a.root == b.root &&
         a.reduce_op == b.reduce_op && a.ndim == b.ndim && a.tail_hash == b.tail_hash &&
         std::equal(a.dims, a.dims + kWireDims, b.dims);
}

std::string describe(const WireFingerprint& w) {
  // A dimension Shape refuses (negative) is garbage too (gloo_wire_fuzz found it throwing).
  const bool dims_ok =
      std::all_of(w.dims, w.dims + std::clamp(w.ndim, 0, kWireDims), [](std::int64_t d) { return d >= 0; });
  const bool known = w.op >= 0 && w.op < kNumCollectiveOps && w.dtype >= 0 && w.dtype < kNumDTypes &&
                     w.reduce_op >= -1 && w.reduce_op <= static_cast<int>(ReduceOp::kProd) && w.ndim >= 0 && dims_ok;
  if (!known) return str_cat("an unrecognised call (op ", w.op, ", dtype ", w.dtype, ", sequence ", w.sequence, ")");
  Fingerprint fp;
  fp.op = collective_op_name(static_cast<CollectiveOp>(w.op));
  fp.sequence = w.sequence;
  fp.dtype = static_cast<DType>(w.dtype);
  fp.shape.assign(w.dims, w.dims + std::clamp(w.ndim, 0, kWireDims));
  fp.root = w.root;
  fp.reduce_op = w.reduce_op;
  return fp.to_string() + (w.ndim > kWireDims ? " (first 8 dims shown)" : "");
}

}  // namespace chorus::collective
