// libFuzzer target: the TensorBoard event-file reader, summary/event_file_reader.h (read through
// EventFileReader: summary/record.h's framing with both CRCs, then summary/event.h's decode_event on
// every record). The reader takes a path, so the input is written to a scratch file.
//
// Input: either an event file, or "EVNT" + the bytes of ONE record's data: the target frames it
// with correct CRCs, so mutations reach decode_event instead of dying at the CRC check (the way
// the bundle target's "BLCK" inputs reach the block decoder).
//
// Contract: DataLossError naming the file and offset for a bad record or bytes that are not an
// Event. Oracles: every decoded tensor's to_doubles() throws only DataLossError or
// InvalidArgumentError; an Event that decoded re-encodes, and decoding that gives the same bytes
// again (encode ∘ decode is idempotent), as tools that copy events rely on.
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_util.h"
#include <chorus/summary/event.h>
#include <chorus/summary/event_file_reader.h>
#include <chorus/summary/record.h>

using chorus::fuzz::check;
namespace summary = chorus::summary;

namespace {

void visit_tensors(const summary::Event& e) {
  if (!e.summary) return;
  for (const summary::SummaryValue& v : e.summary->value) {
    if (!v.tensor) continue;
    try {
      const std::vector<double> values = v.tensor->to_doubles();
      check(static_cast<std::int64_t>(values.size()) == v.tensor->num_elements(), "to_doubles has num_elements values");
    } catch (const chorus::Error& err) {
      chorus::fuzz::expect_error<chorus::DataLossError, chorus::InvalidArgumentError>(err);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view in = chorus::fuzz::as_view(data, size);
  std::string framed;
  if (in.substr(0, 4) == "EVNT") {
    framed = summary::frame_record(in.substr(4));
    in = framed;
  }
  const std::string& path = chorus::fuzz::scratch_file().hold(in);
  summary::EventFileReader reader(path);
  try {
    while (auto e = reader.next()) {
      visit_tensors(*e);
      std::string bytes;
      try {
        bytes = summary::encode_event(*e);
      } catch (const chorus::Error& err) {
        std::fprintf(stderr, "a decoded Event does not re-encode: %s\n", err.what());
        __builtin_trap();
      }
      check(summary::encode_event(summary::decode_event(bytes)) == bytes, "encode(decode(encode(e))) == encode(e)");
    }
  } catch (const chorus::Error& e) {
    chorus::fuzz::expect_error<chorus::DataLossError>(e);
  }
  return 0;
}
