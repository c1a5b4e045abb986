// What the ranks of a Gloo communicator tell each other outside Gloo's algorithms: the wire form
// of a fingerprint (compared before every collective), who each rank is (published in the store
// at creation), and the failure records of the store (gloo_internal.h).
#include <algorithm>
#include <charconv>
#include <cstring>

#include <chorus/collective/gloo/gloo_internal.h>
#include <chorus/core/error.h>

namespace chorus::collective::gloo_detail {

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

std::string Peer::to_string(int rank) const {
  std::string s = str_cat("rank ", rank, " (host ", host);
  if (pid > 0) s += str_cat(", pid ", pid);
  if (!address.empty()) s += ", " + address;
  return s + ")";
}

std::string encode_peer(const Peer& p) { return str_cat(p.host, "\n", p.pid); }

Peer decode_peer(const std::string& s) {
  Peer p;
  const auto nl = s.find('\n');
  if (nl == std::string::npos || nl == 0 || nl > 255) return p;
  long pid = 0;
  const char* end = s.data() + s.size();
  if (std::from_chars(s.data() + nl + 1, end, pid).ptr != end || pid <= 0) return p;
  p.host = s.substr(0, nl);
  p.pid = pid;
  return p;
}

namespace {
constexpr const char* kKindNames[] = {"timeout", "abort", "lost"};
}

std::string encode_failure(const FailureRecord& r) {
  std::string missing;
  for (int m : r.missing) missing += str_cat(missing.empty() ? "" : ",", m);
  return str_cat(kKindNames[static_cast<int>(r.kind)], " ", r.sequence, " ", r.rank, " ",
                 missing.empty() ? "-" : missing, "\n", r.text);
}

namespace {
// "1,2" or "-" (none); false for anything else.
bool parse_ranks(std::string_view s, std::vector<int>* out) {
  if (s == "-") return true;
  while (!s.empty()) {
    const auto comma = s.find(',');
    const std::string_view item = s.substr(0, comma);
    int r = -1;
    if (item.empty() || std::from_chars(item.data(), item.data() + item.size(), r).ptr != item.data() + item.size() ||
        r < 0)
      return false;
    out->push_back(r);
    if (comma == std::string_view::npos) return true;
    s.remove_prefix(comma + 1);
    if (s.empty()) return false;
  }
  return false;
}
}  // namespace

std::optional<FailureRecord> decode_failure(const std::string& s) {
  const auto nl = s.find('\n');
  if (nl == std::string::npos) return std::nullopt;
  const std::string head = s.substr(0, nl);
  FailureRecord r;
  const auto sp1 = head.find(' ');
  const auto sp2 = sp1 == std::string::npos ? sp1 : head.find(' ', sp1 + 1);
  const auto sp3 = sp2 == std::string::npos ? sp2 : head.find(' ', sp2 + 1);
  if (sp3 == std::string::npos || !parse_ranks(std::string_view(head).substr(sp3 + 1), &r.missing)) return std::nullopt;
  const std::string kind = head.substr(0, sp1);
  const auto* k = std::find(std::begin(kKindNames), std::end(kKindNames), kind);
  if (k == std::end(kKindNames)) return std::nullopt;
  r.kind = static_cast<FailureKind>(k - std::begin(kKindNames));
  const char* a = head.data() + sp1 + 1;
  const char* b = head.data() + sp2;
  const char* e = head.data() + sp3;
  if (std::from_chars(a, b, r.sequence).ptr != b || std::from_chars(b + 1, e, r.rank).ptr != e || r.rank < 0)
    return std::nullopt;
  r.text = s.substr(nl + 1);
  return r;
}

}  // namespace chorus::collective::gloo_detail
