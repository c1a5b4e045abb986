#include <chorus/checkpoint/object_graph.h>

#include <chorus/core/error.h>
#include <chorus/core/proto_wire.h>

namespace chorus::train::internal {

using ::chorus::internal::str_cat;

namespace wire = wire;

const ObjectGraphNode::Attribute* ObjectGraphNode::attribute(std::string_view name) const {
  for (const Attribute& a : attributes) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

std::string serialize_object_graph(const ObjectGraph& graph) {
  wire::ProtoWriter out;
  for (const ObjectGraphNode& node : graph.nodes) {
    wire::ProtoWriter n;
    for (const auto& c : node.children) {
      wire::ProtoWriter ref;
      ref.add_int64(1, c.node_id);
      ref.add_bytes(2, c.local_name);
      n.add_message(1, ref);
    }
    for (const auto& a : node.attributes) {
      wire::ProtoWriter attr;
      attr.add_bytes(1, a.name);
      attr.add_bytes(2, a.full_name);
      attr.add_bytes(3, a.checkpoint_key);
      n.add_message(2, attr);
    }
    for (const auto& s : node.slot_variables) {
      wire::ProtoWriter slot;
      slot.add_int64(1, s.original_variable_node_id);
      slot.add_bytes(2, s.slot_name);
      slot.add_int64(3, s.slot_variable_node_id);
      n.add_message(3, slot);
    }
    out.add_message(1, n);
  }
  return out.release();
}

namespace {

int node_id(wire::ProtoReader& r, const std::string& file) {
  const std::uint64_t id = r.read_varint();
  CHORUS_REQUIRE(id < (1u << 30), DataLossError, "checkpoint '", file, "': object graph node id ", id,
                 " is out of range");
  return static_cast<int>(id);
}

}  // namespace

ObjectGraph parse_object_graph(std::string_view bytes, const std::string& file) {
  ObjectGraph graph;
  wire::ProtoReader top(bytes, "TrackableObjectGraph");
  while (top.next()) {
    if (top.field() != 1) {
      top.skip();
      continue;
    }
    ObjectGraphNode node;
    wire::ProtoReader n(top.read_bytes(), "TrackableObject");
    while (n.next()) {
      switch (n.field()) {
        case 1: {
          ObjectGraphNode::Child c;
          wire::ProtoReader r(n.read_bytes(), "ObjectReference");
          while (r.next()) {
            if (r.field() == 1)
              c.node_id = node_id(r, file);
            else if (r.field() == 2)
              c.local_name = std::string(r.read_bytes());
            else
              r.skip();
          }
          node.children.push_back(std::move(c));
          break;
        }
        case 2: {
          ObjectGraphNode::Attribute a;
          wire::ProtoReader r(n.read_bytes(), "SerializedTensor");
          while (r.next()) {
            if (r.field() == 1)
              a.name = std::string(r.read_bytes());
            else if (r.field() == 2)
              a.full_name = std::string(r.read_bytes());
            else if (r.field() == 3)
              a.checkpoint_key = std::string(r.read_bytes());
            else
              r.skip();
          }
          node.attributes.push_back(std::move(a));
          break;
        }
        case 3: {
          ObjectGraphNode::Slot s;
          wire::ProtoReader r(n.read_bytes(), "SlotVariableReference");
          while (r.next()) {
            if (r.field() == 1)
              s.original_variable_node_id = node_id(r, file);
            else if (r.field() == 2)
              s.slot_name = std::string(r.read_bytes());
            else if (r.field() == 3)
              s.slot_variable_node_id = node_id(r, file);
            else
              r.skip();
          }
          node.slot_variables.push_back(std::move(s));
          break;
        }
        default: n.skip();
      }
    }
    graph.nodes.push_back(std::move(node));
  }
  const auto count = static_cast<int>(graph.nodes.size());
  CHORUS_REQUIRE(count > 0, DataLossError, "checkpoint '", file, "': the object graph has no nodes");
  for (const ObjectGraphNode& node : graph.nodes) {
    for (const auto& c : node.children) {
      CHORUS_REQUIRE(c.node_id < count, DataLossError, "checkpoint '", file, "': object graph child '", c.local_name,
                     "' refers to node ", c.node_id, " of ", count);
    }
    for (const auto& s : node.slot_variables) {
      CHORUS_REQUIRE(s.original_variable_node_id < count && s.slot_variable_node_id < count, DataLossError,
                     "checkpoint '", file, "': object graph slot '", s.slot_name, "' refers to a node out of range");
    }
  }
  return graph;
}

}  // namespace chorus::train::internal
