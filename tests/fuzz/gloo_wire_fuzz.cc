// libFuzzer target: what the ranks of a Gloo communicator read from each other outside Gloo's own
// protocol (collective/gloo/gloo_internal.h): the failure records and peer records of the store
// (decode_failure, decode_peer: another process wrote them, or a store answering garbage) and the
// 104-byte fingerprints every call exchanges (collective/wire_fingerprint.h: describe, same_call,
// shared with the MPI backend). Input: a selector byte (0 failure record, 1 peer record, 2
// fingerprint), then the bytes.
//
// Contract: none of them throws. A failure record that decodes re-encodes to a record that decodes
// to the same fields; a peer record gives a host (never empty) and a pid > 0, or host "unknown" and
// pid 0; a fingerprint of any bytes describes itself without reading past it, and equals itself.
#include <cstdint>
#include <cstring>
#include <string>

#include "tests/fuzz/fuzz_util.h"
#include <chorus/collective/gloo/gloo_internal.h>

using chorus::fuzz::check;
namespace g = chorus::collective::gloo_detail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      const auto r = g::decode_failure(bytes);
      if (!r) return 0;
      check(r->rank >= 0, "a record's rank is not negative");
      for (int m : r->missing) check(m >= 0, "missing ranks are not negative");
      const auto again = g::decode_failure(g::encode_failure(*r));
      check(again.has_value(), "a decoded record re-encodes to a record");
      check(again->kind == r->kind && again->sequence == r->sequence && again->rank == r->rank &&
                again->missing == r->missing && again->text == r->text,
            "decode(encode(decode(x))) = decode(x)");
      return 0;
    }
    case 1: {
      const g::Peer p = g::decode_peer(bytes);
      check(!p.host.empty(), "a host, or \"unknown\"");
      check(p.pid > 0 || (p.host == "unknown" && p.pid == 0), "a pid with every host, or neither");
      if (p.pid > 0) {
        const g::Peer again = g::decode_peer(g::encode_peer(p));
        check(again.host == p.host && again.pid == p.pid, "decode(encode(decode(x))) = decode(x)");
      }
      (void)p.to_string(1);
      return 0;
    }
    default: {
      chorus::collective::WireFingerprint w;
      std::memset(&w, 0, sizeof w);
      std::memcpy(&w, bytes.data(), std::min(bytes.size(), sizeof w));
      check(!chorus::collective::describe(w).empty(), "a description");
      check(chorus::collective::same_call(w, w), "a fingerprint equals itself");
      return 0;
    }
  }
}
