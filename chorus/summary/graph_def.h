// tensorflow.GraphDef, the message TensorBoard's Graphs tab draws, as plain structs with an
// encoder and a decoder (no protobuf library; core/proto_wire.h).
//
//   GraphDef g;
//   g.node.push_back({.name = "sequential/input", .op = "Placeholder", .device = "/device:CPU:0",
//                     .attr = {{"_output_shapes", AttrValue::shapes({{-1, 28, 28, 1}})}}});
//   g.node.push_back({.name = "sequential/dense", .op = "Dense", .input = {"sequential/input"}, ...});
//   std::string bytes = encode_graph_def(g);       // Event.graph_def (summary/event.h)
//
// model::Model::graph_def() fills one from a model (layers as nodes; model/ sits above summary/ in
// DESIGN.md, so summary/ never sees a layer). summary/trace.h writes it into an event file, where
// TensorBoard's EventAccumulator(...).Graph() and the Graphs tab read it.
//
// The messages (tensorflow/core/framework/{graph,node_def,attr_value,tensor_shape,versions}.proto):
//   GraphDef        node = 1 (repeated NodeDef), versions = 4 (VersionDef{producer = 1, min_consumer = 2})
//   NodeDef         name = 1, op = 2, input = 3 (repeated), device = 4, attr = 5 (map<string, AttrValue>:
//                   repeated entries {key = 1, value = 2}, written sorted by key as TF's deterministic
//                   serialization does)
//   AttrValue       oneof: list = 1, s = 2, i = 3, f = 4, b = 5, type = 6, shape = 7
//   ListValue       s = 2, i = 3 (packed), f = 4 (packed), b = 5 (packed), type = 6 (packed), shape = 7
//   TensorShapeProto dim = 2 ({size = 1}; -1 is an unknown dimension), unknown_rank = 3
// Fields chorus does not model (tensor, func, experimental_*, library, debug_info) are skipped by
// the decoder, as a protobuf parser does.
//
// Errors: encode_graph_def throws InvalidArgumentError for a graph TensorBoard would draw wrongly
// (validate_graph_def); decode_graph_def throws DataLossError on malformed bytes. Pure functions:
// thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/core/dtype.h>

namespace chorus::summary {

// A TensorShapeProto: dims, -1 for an unknown one (the batch dimension of a model).
struct TensorShape {
  std::vector<std::int64_t> dims;
  bool unknown_rank = false;
  bool operator==(const TensorShape&) const = default;
};

// AttrValue.ListValue: the repeated kinds chorus uses.
struct AttrList {
  std::vector<std::string> s;
  std::vector<std::int64_t> i;
  std::vector<float> f;
  std::vector<bool> b;
  std::vector<int> type;  // tensorflow.DataType numbers (summary/event.h tf_dtype)
  std::vector<TensorShape> shape;
  bool operator==(const AttrList&) const = default;
};

// AttrValue: set exactly one member (encode_graph_def refuses none or several).
struct AttrValue {
  std::optional<AttrList> list;      // 1
  std::optional<std::string> s;      // 2
  std::optional<std::int64_t> i;     // 3
  std::optional<float> f;            // 4
  std::optional<bool> b;             // 5
  std::optional<int> type;           // 6
  std::optional<TensorShape> shape;  // 7
  bool operator==(const AttrValue&) const = default;

  static AttrValue str(std::string v) { return AttrValue{.s = std::move(v)}; }
  static AttrValue integer(std::int64_t v) { return AttrValue{.i = v}; }
  static AttrValue dtype(int tf_type) { return AttrValue{.type = tf_type}; }
  static AttrValue tensor_shape(TensorShape v) { return AttrValue{.shape = std::move(v)}; }
  static AttrValue strings(std::vector<std::string> v) { return AttrValue{.list = AttrList{.s = std::move(v)}}; }
  // list(shape): the form of "_output_shapes", one shape per output of the node.
  static AttrValue shapes(const std::vector<std::vector<std::int64_t>>& v);
};

struct NodeDef {
  std::string name;                       // 1: unique in the graph; "/" separates name scopes
  std::string op;                         // 2: "Placeholder", or a layer's class ("Dense")
  std::vector<std::string> input;         // 3: "node", "node:k" (output k) or "^node" (control)
  std::string device;                     // 4: "/job:localhost/replica:0/task:0/device:CPU:0", or ""
  std::map<std::string, AttrValue> attr;  // 5
  bool operator==(const NodeDef&) const = default;
};

struct GraphDef {
  std::vector<NodeDef> node;  // 1
  int producer = 0;           // versions.producer (4.1); 0: no VersionDef written
  int min_consumer = 0;       // versions.min_consumer (4.2)
  bool operator==(const GraphDef&) const = default;
};

// The tensorflow.DataType number of a chorus dtype (DT_FLOAT 1, DT_DOUBLE 2, DT_HALF 19,
// DT_BFLOAT16 14, DT_INT32 3, DT_INT64 9, DT_UINT8 4, DT_BOOL 10).
int tf_data_type(DType dtype);

// InvalidArgumentError unless: every node has a name matching TF's node-name rule
// ([A-Za-z0-9.][A-Za-z0-9_.\-/>]*) and an op, names are unique, every input names a node of the
// graph ("name", "name:k", "^name"), and every AttrValue sets exactly one member. The message
// names the node and what is wrong.
void validate_graph_def(const GraphDef& graph);

// Serialized tensorflow.GraphDef (validated first).
std::string encode_graph_def(const GraphDef& graph);
// Parses a serialized tensorflow.GraphDef; DataLossError on malformed bytes.
GraphDef decode_graph_def(std::string_view bytes);

}  // namespace chorus::summary
