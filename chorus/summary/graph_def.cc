#include <chorus/summary/graph_def.h>

#include <set>

#include <chorus/core/error.h>
#include <chorus/core/proto_wire.h>
#include <chorus/summary/event.h>

namespace chorus::summary {

using wire::ProtoReader;
using wire::ProtoWriter;

AttrValue AttrValue::shapes(const std::vector<std::vector<std::int64_t>>& v) {
  AttrList l;
  for (const auto& dims : v) l.shape.push_back({dims});
  return AttrValue{.list = std::move(l)};
}

int tf_data_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return tf_dtype::kFloat;
    case DType::kFloat64: return tf_dtype::kDouble;
    case DType::kFloat16: return tf_dtype::kHalf;
    case DType::kBFloat16: return tf_dtype::kBFloat16;
    case DType::kInt32: return tf_dtype::kInt32;
    case DType::kInt64: return tf_dtype::kInt64;
    case DType::kUInt8: return tf_dtype::kUInt8;
    case DType::kUInt16: return tf_dtype::kUInt16;
    case DType::kBool: return tf_dtype::kBool;
    case DType::kString: return tf_dtype::kString;
  }
  return tf_dtype::kInvalid;
}

namespace {

// TF's node-name rule (graph/graph_constructor.cc IsValidNodeName).
bool valid_node_name(std::string_view s) {
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); };
  if (s.empty() || !(alnum(s[0]) || s[0] == '.')) return false;
  for (const char c : s.substr(1))
    if (!(alnum(c) || c == '_' || c == '.' || c == '-' || c == '/' || c == '>')) return false;
  return true;
}

// "^name" → "name", "name:3" → "name"; "" when the suffix after ':' is not a number.
std::string input_node(std::string_view in) {
  if (!in.empty() && in[0] == '^') in.remove_prefix(1);
  if (const auto colon = in.rfind(':'); colon != std::string_view::npos) {
    const std::string_view k = in.substr(colon + 1);
    if (k.empty() || k.find_first_not_of("0123456789") != std::string_view::npos) return "";
    in = in.substr(0, colon);
  }
  return std::string(in);
}

int members_set(const AttrValue& a) {
  return int(a.list.has_value()) + int(a.s.has_value()) + int(a.i.has_value()) + int(a.f.has_value()) +
         int(a.b.has_value()) + int(a.type.has_value()) + int(a.shape.has_value());
}

std::string encode_shape(const TensorShape& shape) {
  ProtoWriter w;
  for (const std::int64_t d : shape.dims) {
    ProtoWriter dim;
    if (d != 0) dim.add_int64(1, d);
    w.add_message(2, dim);
  }
  if (shape.unknown_rank) w.add_bool(3, true);
  return w.release();
}

std::string encode_list(const AttrList& l) {
  ProtoWriter w;
  for (const std::string& s : l.s) w.add_bytes(2, s);
  w.add_packed_varints(3, l.i);
  w.add_packed_floats(4, l.f);
  std::vector<std::int64_t> bools(l.b.begin(), l.b.end()), types(l.type.begin(), l.type.end());
  w.add_packed_varints(5, bools);
  w.add_packed_varints(6, types);
  for (const TensorShape& s : l.shape) w.add_bytes(7, encode_shape(s));
  return w.release();
}

std::string encode_attr(const AttrValue& a) {
  // A set member is written even when it holds its default (0, "", false): the oneof says which.
  ProtoWriter w;
  if (a.list) w.add_bytes(1, encode_list(*a.list));
  if (a.s) w.add_bytes(2, *a.s);
  if (a.i) w.add_int64(3, *a.i);
  if (a.f) w.add_float(4, *a.f);
  if (a.b) w.add_bool(5, *a.b);
  if (a.type) w.add_int64(6, *a.type);
  if (a.shape) w.add_bytes(7, encode_shape(*a.shape));
  return w.release();
}

std::string encode_node(const NodeDef& n) {
  ProtoWriter w;
  w.add_bytes(1, n.name);
  w.add_bytes(2, n.op);
  for (const std::string& in : n.input) w.add_bytes(3, in);
  if (!n.device.empty()) w.add_bytes(4, n.device);
  for (const auto& [key, value] : n.attr) {
    ProtoWriter entry;
    entry.add_bytes(1, key);
    entry.add_bytes(2, encode_attr(value));
    w.add_message(5, entry);
  }
  return w.release();
}

TensorShape decode_shape(std::string_view bytes) {
  TensorShape s;
  ProtoReader r(bytes, "TensorShapeProto");
  while (r.next()) {
    if (r.field() == 2) {
      std::int64_t size = 0;
      ProtoReader d(r.read_bytes(), "TensorShapeProto.Dim");
      while (d.next())
        if (d.field() == 1)
          size = d.read_int64();
        else
          d.skip();
      s.dims.push_back(size);
    } else if (r.field() == 3) {
      s.unknown_rank = r.read_bool();
    } else {
      r.skip();
    }
  }
  return s;
}

AttrList decode_list(std::string_view bytes) {
  AttrList l;
  ProtoReader r(bytes, "AttrValue.ListValue");
  std::vector<std::int64_t> ints;
  while (r.next()) {
    switch (r.field()) {
      case 2: l.s.emplace_back(r.read_bytes()); break;
      case 3: wire::read_repeated_int64s(r, l.i); break;
      case 4: wire::read_repeated_floats(r, l.f); break;
      case 5:
        ints.clear();
        wire::read_repeated_int64s(r, ints);
        for (const std::int64_t v : ints) l.b.push_back(v != 0);
        break;
      case 6:
        ints.clear();
        wire::read_repeated_int64s(r, ints);
        for (const std::int64_t v : ints) l.type.push_back(static_cast<int>(v));
        break;
      case 7: l.shape.push_back(decode_shape(r.read_bytes())); break;
      default: r.skip();
    }
  }
  return l;
}

AttrValue decode_attr(std::string_view bytes) {
  AttrValue a;
  ProtoReader r(bytes, "AttrValue");
  while (r.next()) {
    const int f = r.field();
    if (f >= 1 && f <= 7) a = AttrValue{};  // a oneof: the last member wins, as in protobuf
    switch (f) {
      case 1: a.list = decode_list(r.read_bytes()); break;
      case 2: a.s = std::string(r.read_bytes()); break;
      case 3: a.i = r.read_int64(); break;
      case 4: a.f = r.read_float(); break;
      case 5: a.b = r.read_bool(); break;
      case 6: a.type = static_cast<int>(r.read_int64()); break;
      case 7: a.shape = decode_shape(r.read_bytes()); break;
      default: r.skip();
    }
  }
  return a;
}

NodeDef decode_node(std::string_view bytes) {
  NodeDef n;
  ProtoReader r(bytes, "NodeDef");
  while (r.next()) {
    switch (r.field()) {
      case 1: n.name = std::string(r.read_bytes()); break;
      case 2: n.op = std::string(r.read_bytes()); break;
      case 3: n.input.emplace_back(r.read_bytes()); break;
      case 4: n.device = std::string(r.read_bytes()); break;
      case 5: {
        std::string key;
        AttrValue value;
        ProtoReader e(r.read_bytes(), "NodeDef.AttrEntry");
        while (e.next())
          if (e.field() == 1)
            key = std::string(e.read_bytes());
          else if (e.field() == 2)
            value = decode_attr(e.read_bytes());
          else
            e.skip();
        n.attr[key] = std::move(value);  // a repeated key: the last wins, as for a protobuf map
        break;
      }
      default: r.skip();
    }
  }
  return n;
}

}  // namespace

void validate_graph_def(const GraphDef& graph) {
  std::set<std::string_view> names;
  for (const NodeDef& n : graph.node) {
    CHORUS_REQUIRE(valid_node_name(n.name), InvalidArgumentError, "GraphDef: node name '", n.name,
                   "' is not valid: it must match [A-Za-z0-9.][A-Za-z0-9_.\\-/>]*");
    CHORUS_REQUIRE(!n.op.empty(), InvalidArgumentError, "GraphDef: node '", n.name, "' has no op");
    CHORUS_REQUIRE(names.insert(n.name).second, InvalidArgumentError, "GraphDef: two nodes are named '", n.name,
                   "'; node names must be unique");
    for (const auto& [key, value] : n.attr) {
      CHORUS_REQUIRE(!key.empty(), InvalidArgumentError, "GraphDef: node '", n.name,
                     "' has an attr with an empty name");
      CHORUS_REQUIRE(members_set(value) == 1, InvalidArgumentError, "GraphDef: attr '", key, "' of node '", n.name,
                     "' sets ", members_set(value), " values; an AttrValue holds exactly one");
    }
  }
  for (const NodeDef& n : graph.node)
    for (const std::string& in : n.input) {
      const std::string target = input_node(in);
      CHORUS_REQUIRE(!target.empty() && names.count(target) != 0, InvalidArgumentError, "GraphDef: input '", in,
                     "' of node '", n.name, "' names no node of the graph (forms: 'node', 'node:k', '^node')");
    }
}

std::string encode_graph_def(const GraphDef& graph) {
  validate_graph_def(graph);
  ProtoWriter w;
  for (const NodeDef& n : graph.node) w.add_bytes(1, encode_node(n));
  if (graph.producer != 0 || graph.min_consumer != 0) {
    ProtoWriter v;
    if (graph.producer != 0) v.add_int64(1, graph.producer);
    if (graph.min_consumer != 0) v.add_int64(2, graph.min_consumer);
    w.add_message(4, v);
  }
  return w.release();
}

GraphDef decode_graph_def(std::string_view bytes) {
  GraphDef g;
  ProtoReader r(bytes, "GraphDef");
  while (r.next()) {
    if (r.field() == 1) {
      g.node.push_back(decode_node(r.read_bytes()));
    } else if (r.field() == 4) {
      ProtoReader v(r.read_bytes(), "VersionDef");
      while (v.next())
        if (v.field() == 1)
          g.producer = static_cast<int>(v.read_int64());
        else if (v.field() == 2)
          g.min_consumer = static_cast<int>(v.read_int64());
        else
          v.skip();
    } else {
      r.skip();
    }
  }
  return g;
}

}  // namespace chorus::summary
