// libFuzzer target: the GraphDef decoder, summary/graph_def.h's decode_graph_def (TensorBoard's
// Graphs tab reads the same bytes from Event.graph_def; chorus reads them back in its tests and in
// tools that copy events).
//
// Input: the bytes of one serialized tensorflow.GraphDef.
// Contract: DataLossError for bytes that are not a GraphDef. Oracles: a decoded graph either
// fails validation with InvalidArgumentError or encodes, and decoding that encoding gives a graph
// that encodes to the same bytes (encode ∘ decode is stable; compared as bytes, so NaN
// attribute floats compare equal).
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_util.h"
#include <chorus/summary/graph_def.h>

using chorus::fuzz::check;
namespace summary = chorus::summary;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in = chorus::fuzz::as_view(data, size);
  summary::GraphDef graph;
  try {
    graph = summary::decode_graph_def(in);
  } catch (const chorus::Error& e) {
    chorus::fuzz::expect_error<chorus::DataLossError>(e);
    return 0;
  }
  std::string bytes;
  try {
    bytes = summary::encode_graph_def(graph);
  } catch (const chorus::Error& e) {
    chorus::fuzz::expect_error<chorus::InvalidArgumentError>(e);
    return 0;
  }
  check(summary::encode_graph_def(summary::decode_graph_def(bytes)) == bytes, "encode(decode(encode(g))) == encode(g)");
  return 0;
}
