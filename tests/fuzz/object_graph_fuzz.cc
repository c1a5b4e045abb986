// libFuzzer target: the TrackableObjectGraph decoder (checkpoint/object_graph.h,
// parse_object_graph), which reads the `_CHECKPOINTABLE_OBJECT_GRAPH` entry of any checkpoint a
// user restores. Input: the serialized proto. Contract: DataLossError for malformed bytes or node
// ids out of range; an accepted graph has every child and slot id inside it, and survives
// serialize → parse unchanged.
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_util.h"
#include <chorus/checkpoint/object_graph.h>

using chorus::fuzz::check;
namespace internal = chorus::train::internal;

namespace {

bool same(const internal::ObjectGraph& a, const internal::ObjectGraph& b) {
  if (a.nodes.size() != b.nodes.size()) return false;
  for (std::size_t i = 0; i < a.nodes.size(); ++i) {
    const auto &x = a.nodes[i], &y = b.nodes[i];
    if (x.children.size() != y.children.size() || x.attributes.size() != y.attributes.size() ||
        x.slot_variables.size() != y.slot_variables.size())
      return false;
    for (std::size_t j = 0; j < x.children.size(); ++j)
      if (x.children[j].node_id != y.children[j].node_id || x.children[j].local_name != y.children[j].local_name)
        return false;
    for (std::size_t j = 0; j < x.attributes.size(); ++j)
      if (x.attributes[j].name != y.attributes[j].name || x.attributes[j].full_name != y.attributes[j].full_name ||
          x.attributes[j].checkpoint_key != y.attributes[j].checkpoint_key)
        return false;
    for (std::size_t j = 0; j < x.slot_variables.size(); ++j)
      if (x.slot_variables[j].original_variable_node_id != y.slot_variables[j].original_variable_node_id ||
          x.slot_variables[j].slot_name != y.slot_variables[j].slot_name ||
          x.slot_variables[j].slot_variable_node_id != y.slot_variables[j].slot_variable_node_id)
        return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  internal::ObjectGraph graph;
  try {
    graph = internal::parse_object_graph(chorus::fuzz::as_view(data, size), "fuzz.index");
  } catch (const chorus::Error& e) {
    chorus::fuzz::expect_error<chorus::DataLossError>(e);
    return 0;
  }
  const int n = static_cast<int>(graph.nodes.size());
  check(n > 0, "an accepted graph has a root");
  for (const auto& node : graph.nodes) {
    for (const auto& c : node.children) check(c.node_id >= 0 && c.node_id < n, "child id in range");
    for (const auto& s : node.slot_variables)
      check(s.original_variable_node_id >= 0 && s.original_variable_node_id < n && s.slot_variable_node_id >= 0 &&
                s.slot_variable_node_id < n,
            "slot ids in range");
    if (const auto* a = node.attribute(internal::kVariableValue))
      check(a->name == internal::kVariableValue, "attribute()");
  }
  // What BundleReader's restore does with it next is walk it; a round trip must be lossless.
  check(same(internal::parse_object_graph(internal::serialize_object_graph(graph), "re.index"), graph),
        "parse(serialize(graph)) == graph");
  return 0;
}
