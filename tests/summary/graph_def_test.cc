// summary/graph_def.h: the GraphDef encoder writes the bytes protobuf would (checked field by field
// against hand-computed encodings of graph.proto / node_def.proto / attr_value.proto), the decoder
// reads them back and also accepts what other writers may do (unpacked lists, fields in another
// order, unknown fields), validation refuses graphs TensorBoard would draw wrongly, and malformed
// bytes are DataLossError. TensorFlow's own parser reads the bytes in
// tests/model/trace_tensorboard_test.cc.
#include <gtest/gtest.h>

#include <string>

#include <chorus/core/error.h>
#include <chorus/core/proto_wire.h>
#include <chorus/summary/event.h>
#include <chorus/summary/graph_def.h>

namespace chorus::summary {
namespace {

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int c : b) s += static_cast<char>(c);
  return s;
}

TEST(GraphDef, OneNodeIsTheProtobufEncoding) {
  GraphDef g;
  g.node.push_back({.name = "a", .op = "B"});
  // GraphDef.node (1, LEN 6) { NodeDef.name (1, LEN 1) "a", NodeDef.op (2, LEN 1) "B" }
  EXPECT_EQ(encode_graph_def(g), bytes({0x0a, 0x06, 0x0a, 0x01, 'a', 0x12, 0x01, 'B'}));
}

TEST(GraphDef, InputDeviceAndAttrsAreEncodedInFieldOrder) {
  GraphDef g;
  g.node.push_back({.name = "x", .op = "Placeholder"});
  g.node.push_back({.name = "d",
                    .op = "Dense",
                    .input = {"x"},
                    .device = "/cpu:0",
                    .attr = {{"_output_shapes", AttrValue::shapes({{-1, 2}})}, {"T", AttrValue::dtype(1)}}});
  g.producer = 7;
  const std::string enc = encode_graph_def(g);
  // The second node: name, op, input, device, then the attrs sorted by key ("T" < "_output_shapes").
  const std::string shape = bytes({0x12, 0x0b, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,  //
                                   0x12, 0x02, 0x08, 0x02});                            // dim{size -1} dim{size 2}
  const std::string list = bytes({0x3a, static_cast<int>(shape.size())}) + shape;       // ListValue.shape (7)
  const std::string attr_shapes = bytes({0x0a, static_cast<int>(list.size())}) + list;  // AttrValue.list (1)
  const std::string entry_shapes =
      bytes({0x0a, 0x0e}) + "_output_shapes" + bytes({0x12, static_cast<int>(attr_shapes.size())}) + attr_shapes;
  const std::string entry_t = bytes({0x0a, 0x01, 'T', 0x12, 0x02, 0x30, 0x01});  // AttrValue.type (6) = 1
  const std::string node = bytes({0x0a, 0x01, 'd', 0x12, 0x05}) + "Dense" + bytes({0x1a, 0x01, 'x', 0x22, 0x06}) +
                           "/cpu:0" + bytes({0x2a, static_cast<int>(entry_t.size())}) + entry_t +
                           bytes({0x2a, static_cast<int>(entry_shapes.size())}) + entry_shapes;
  const std::string first = bytes({0x0a, 0x01, 'x', 0x12, 0x0b}) + "Placeholder";
  const std::string expected = bytes({0x0a, static_cast<int>(first.size())}) + first +
                               bytes({0x0a, static_cast<int>(node.size())}) + node +
                               bytes({0x22, 0x02, 0x08, 0x07});  // versions { producer: 7 }
  EXPECT_EQ(enc, expected);
  EXPECT_EQ(decode_graph_def(enc), g);
}

TEST(GraphDef, EveryAttrKindRoundTrips) {
  GraphDef g;
  NodeDef n{.name = "scope/n.1-x", .op = "Op"};
  n.attr["s"] = AttrValue::str(std::string("text\0with nul", 13));
  n.attr["i"] = AttrValue::integer(-3);
  n.attr["zero"] = AttrValue::integer(0);  // a set member at its default is still written
  n.attr["f"] = AttrValue{.f = 0.5f};
  n.attr["b"] = AttrValue{.b = false};
  n.attr["type"] = AttrValue::dtype(tf_data_type(DType::kBFloat16));
  n.attr["shape"] = AttrValue::tensor_shape({{3, 0, -1}});
  n.attr["unknown"] = AttrValue::tensor_shape({{}, true});
  n.attr["list"] = AttrValue{
      .list = AttrList{
          .s = {"a", ""}, .i = {1, -2}, .f = {1.5f}, .b = {true, false}, .type = {1, 9}, .shape = {{{1}}, {{}}}}};
  g.node.push_back(n);
  const GraphDef back = decode_graph_def(encode_graph_def(g));
  EXPECT_EQ(back, g);
  EXPECT_EQ(back.node[0].attr.at("zero").i, 0);
  EXPECT_EQ(back.node[0].attr.at("b").b, false);
  EXPECT_EQ(back.node[0].attr.at("type").type, 14);
}

TEST(GraphDef, DecoderAcceptsUnpackedListsOtherOrdersAndUnknownFields) {
  wire::ProtoWriter list;
  list.add_int64(3, 5);  // unpacked ListValue.i
  list.add_int64(3, 6);
  list.add_bool(5, true);  // unpacked ListValue.b
  wire::ProtoWriter attr;
  attr.add_message(1, list);
  wire::ProtoWriter entry;
  entry.add_message(2, attr);  // value before key
  entry.add_bytes(1, "k");
  wire::ProtoWriter node;
  node.add_bytes(4, "/gpu:0");  // device before name
  node.add_bytes(99, "unknown field");
  node.add_message(5, entry);
  node.add_bytes(1, "n");
  node.add_bytes(2, "Op");
  wire::ProtoWriter g;
  g.add_message(1, node);
  g.add_bytes(2, "a FunctionDefLibrary, skipped");
  const GraphDef back = decode_graph_def(g.data());
  ASSERT_EQ(back.node.size(), 1u);
  EXPECT_EQ(back.node[0].name, "n");
  EXPECT_EQ(back.node[0].device, "/gpu:0");
  EXPECT_EQ(back.node[0].attr.at("k").list->i, (std::vector<std::int64_t>{5, 6}));
  EXPECT_EQ(back.node[0].attr.at("k").list->b, (std::vector<bool>{true}));
}

TEST(GraphDef, ValidationRefusesWhatTensorBoardWouldDrawWrongly) {
  auto refuses = [](GraphDef g, const std::string& what) {
    try {
      encode_graph_def(g);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refuses(GraphDef{.node = {{.name = "", .op = "X"}}}, "node name ''");
  refuses(GraphDef{.node = {{.name = "_hidden", .op = "X"}}}, "node name '_hidden'");
  refuses(GraphDef{.node = {{.name = "a b", .op = "X"}}}, "node name 'a b'");
  refuses(GraphDef{.node = {{.name = "a", .op = ""}}}, "has no op");
  refuses(GraphDef{.node = {{.name = "a", .op = "X"}, {.name = "a", .op = "Y"}}}, "two nodes are named 'a'");
  refuses(GraphDef{.node = {{.name = "a", .op = "X", .input = {"b"}}}}, "input 'b' of node 'a'");
  refuses(GraphDef{.node = {{.name = "a", .op = "X", .input = {"a:x"}}}}, "input 'a:x'");
  refuses(GraphDef{.node = {{.name = "a", .op = "X", .attr = {{"k", AttrValue{}}}}}}, "sets 0 values");
  refuses(GraphDef{.node = {{.name = "a", .op = "X", .attr = {{"k", AttrValue{.i = 1, .b = true}}}}}}, "sets 2 values");
  // Inputs that name nodes: plain, an output index, a control edge, a later node.
  EXPECT_NO_THROW(encode_graph_def(
      GraphDef{.node = {{.name = "a", .op = "X", .input = {"b", "b:1", "^b"}}, {.name = "b", .op = "Y"}}}));
}

TEST(GraphDef, MalformedBytesAreDataLoss) {
  GraphDef g;
  g.node.push_back({.name = "abc", .op = "Op", .attr = {{"s", AttrValue::shapes({{1, 2, 3}})}}});
  const std::string good = encode_graph_def(g);
  for (std::size_t cut = 1; cut < good.size(); ++cut)
    EXPECT_THROW(decode_graph_def(good.substr(0, cut)), DataLossError) << "cut at " << cut;
  EXPECT_THROW(decode_graph_def(bytes({0x0b})), DataLossError);        // wire type 3 (a group)
  EXPECT_THROW(decode_graph_def(bytes({0x08, 0x01})), DataLossError);  // node as a varint
}

TEST(GraphDef, EventCarriesItInFieldFour) {
  Event e;
  e.step = 3;
  e.graph_def = "xyz";
  const std::string enc = encode_event(e);
  EXPECT_EQ(enc, bytes({0x10, 0x03, 0x22, 0x03, 'x', 'y', 'z'}));
  const Event back = decode_event(enc);
  EXPECT_EQ(back.what, event_what::kGraphDef);
  EXPECT_EQ(back.graph_def, "xyz");
  e.file_version = "brain.Event:2";
  EXPECT_THROW(encode_event(e), InvalidArgumentError);  // two members of the oneof
}

TEST(GraphDef, DataTypeNumbersAreTensorFlows) {
  EXPECT_EQ(tf_data_type(DType::kFloat32), 1);
  EXPECT_EQ(tf_data_type(DType::kFloat64), 2);
  EXPECT_EQ(tf_data_type(DType::kInt32), 3);
  EXPECT_EQ(tf_data_type(DType::kUInt8), 4);
  EXPECT_EQ(tf_data_type(DType::kString), 7);
  EXPECT_EQ(tf_data_type(DType::kInt64), 9);
  EXPECT_EQ(tf_data_type(DType::kBool), 10);
  EXPECT_EQ(tf_data_type(DType::kBFloat16), 14);
  EXPECT_EQ(tf_data_type(DType::kFloat16), 19);
}

}  // namespace
}  // namespace chorus::summary
