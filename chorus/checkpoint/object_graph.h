// TF's TrackableObjectGraph proto (tensorflow/core/protobuf/trackable_object_graph.proto), the
// `_CHECKPOINTABLE_OBJECT_GRAPH` entry of an object-based checkpoint: which object is whose
// child, which checkpoint keys hold each object's attributes, and where optimizer slots hang.
// Internal to checkpoint/. Field numbers: docs/formats.md B5.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace chorus::train::internal {

inline constexpr const char* kObjectGraphKey = "_CHECKPOINTABLE_OBJECT_GRAPH";
inline constexpr const char* kVariableValue = "VARIABLE_VALUE";

struct ObjectGraphNode {
  struct Child {
    int node_id = 0;
    std::string local_name;
  };
  struct Attribute {
    std::string name;       // "VARIABLE_VALUE", or an object's own attribute name
    std::string full_name;  // the variable's name
    std::string checkpoint_key;
  };
  struct Slot {
    int original_variable_node_id = 0;
    std::string slot_name;
    int slot_variable_node_id = 0;
  };
  std::vector<Child> children;
  std::vector<Attribute> attributes;
  std::vector<Slot> slot_variables;

  // The checkpoint key of attribute `name`, or nullptr.
  const Attribute* attribute(std::string_view name) const;
};

struct ObjectGraph {
  std::vector<ObjectGraphNode> nodes;  // nodes[0] is the root
};

std::string serialize_object_graph(const ObjectGraph& graph);
// Untrusted bytes: malformed protobuf or node ids out of range → DataLossError naming `file`.
ObjectGraph parse_object_graph(std::string_view bytes, const std::string& file);

}  // namespace chorus::train::internal
