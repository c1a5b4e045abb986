// libFuzzer target: the TCP store's wire protocol (collective/store/store_protocol.h), what a
// store client reads from a server and the server from every client — bytes from the network.
// Input: a byte stream of frames; the first byte picks the chunk size the stream is fed in (1..64
// bytes, or all at once for 0).
//
// Contract: StoreFrameDecoder::next() and check_request/check_reply throw DataLossError only. A
// decoded message re-encodes to exactly the bytes it was decoded from; feeding the stream whole or
// in chunks gives the same messages and fails at the same message; nothing is allocated for a
// length before the bytes are there (-malloc_limit_mb catches a trusted length).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_util.h"
#include <chorus/collective/store/store_protocol.h>

namespace sp = chorus::collective::store_protocol;
using chorus::fuzz::check;

namespace {

struct Decoded {
  std::vector<sp::StoreMessage> messages;
  bool failed = false;
};

Decoded decode(std::string_view bytes, std::size_t chunk) {
  Decoded out;
  sp::StoreFrameDecoder d("fuzz peer");
  try {
    for (std::size_t at = 0; at < bytes.size(); at += chunk) {
      d.feed(bytes.substr(at, chunk));
      while (std::optional<sp::StoreMessage> m = d.next()) out.messages.push_back(std::move(*m));
    }
  } catch (const chorus::Error& e) {
    chorus::fuzz::expect_error<chorus::DataLossError>(e);
    out.failed = true;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t chunk = data[0] % 65 == 0 ? size : data[0] % 65;
  const std::string_view stream = chorus::fuzz::as_view(data + 1, size - 1);
  const Decoded whole = decode(stream, stream.size() + 1);
  const Decoded pieces = decode(stream, chunk);
  check(whole.messages == pieces.messages && whole.failed == pieces.failed, "chunking does not change the result");
  std::string again;
  for (const sp::StoreMessage& m : whole.messages) {
    again += sp::encode(m);
    for (const sp::StoreOp op :
         {sp::StoreOp::kSet, sp::StoreOp::kGet, sp::StoreOp::kAdd, sp::StoreOp::kWait, sp::StoreOp::kCheck}) {
      try {
        sp::check_reply(m, op, "fuzz peer");
      } catch (const chorus::Error& e) {
        chorus::fuzz::expect_error<chorus::DataLossError>(e);
      }
    }
    try {
      sp::check_request(m, "fuzz peer");
    } catch (const chorus::Error& e) {
      chorus::fuzz::expect_error<chorus::DataLossError>(e);
    }
  }
  check(stream.substr(0, again.size()) == again, "decoded messages re-encode to the bytes they came from");
  check(whole.failed || again.size() <= stream.size(), "no more bytes consumed than given");
  return 0;
}
