// What the ranks of a Gloo communicator tell each other outside Gloo's algorithms, besides the
// fingerprints (collective/wire_fingerprint.h): who each rank is (published in the store at
// creation), and the failure records of the store (gloo_internal.h).
#include <algorithm>
#include <charconv>
#include <cstring>

#include <chorus/collective/gloo/gloo_internal.h>
#include <chorus/core/error.h>

namespace chorus::collective::gloo_detail {

using internal::str_cat;

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
