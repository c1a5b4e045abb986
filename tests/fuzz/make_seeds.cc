// Writes the seed corpora of tests/fuzz/corpus/<target>/ with chorus's own writers (the object
// graph serializer, checkpoint_state_to_text, the event encoder and record framing,
// serialize_digit_example) and by hand where chorus has no writer (IDX headers, TF_CONFIG, argv).
// Seeds are small valid inputs (a few KB at most) that reach every branch a valid file takes;
// libFuzzer mutates them into the invalid ones. Rebuild and rerun after a format change:
//   scripts/fuzz.sh --seeds        (runs: make -f tests/fuzz/Makefile ... seeds; bin/make_seeds tests/fuzz/corpus)
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <chorus/checkpoint/checkpoint_state.h>
#include <chorus/checkpoint/object_graph.h>
#include <chorus/collective/store/store_protocol.h>
#include <chorus/core/proto_wire.h>
#include <chorus/data/io/example.h>
#include <chorus/launch/tfrecord_digits.h>
#include <chorus/summary/event.h>
#include <chorus/summary/graph_def.h>
#include <chorus/summary/record.h>

namespace fs = std::filesystem;
namespace summary = chorus::summary;
namespace internal = chorus::train::internal;

namespace {

fs::path g_root;

void put(const std::string& target, const std::string& name, const std::string& bytes) {
  const fs::path dir = g_root / target;
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  std::printf("%-24s %-28s %6zu bytes\n", target.c_str(), name.c_str(), bytes.size());
}

std::string argv_bytes(const std::vector<std::string>& args) {
  std::string out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (i) out.push_back('\0');
    out += args[i];
  }
  return out;
}

std::vector<std::uint8_t> digit_pixels(int seed) {
  std::vector<std::uint8_t> p(chorus::launch::kDigitPixels);
  for (std::size_t i = 0; i < p.size(); ++i)
    p[i] = static_cast<std::uint8_t>((i * 7 + static_cast<std::size_t>(seed) * 31) % 256);
  return p;
}

void object_graphs() {
  internal::ObjectGraph root_only;
  root_only.nodes.resize(1);
  put("object_graph_fuzz", "root_only", internal::serialize_object_graph(root_only));

  // A Keras-style model + Adam: root → model, optimizer; model → dense → kernel, bias (variables
  // with VARIABLE_VALUE); optimizer → iter, and m/v slots of each variable.
  internal::ObjectGraph g;
  g.nodes.resize(8);
  g.nodes[0].children = {{1, "model"}, {2, "optimizer"}};
  g.nodes[1].children = {{3, "layer_with_weights-0"}};
  g.nodes[3].children = {{4, "kernel"}, {5, "bias"}};
  g.nodes[4].attributes = {
      {"VARIABLE_VALUE", "dense/kernel", "model/layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE"}};
  g.nodes[5].attributes = {
      {"VARIABLE_VALUE", "dense/bias", "model/layer_with_weights-0/bias/.ATTRIBUTES/VARIABLE_VALUE"}};
  g.nodes[2].children = {{6, "iter"}};
  g.nodes[6].attributes = {{"VARIABLE_VALUE", "iter", "optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE"}};
  g.nodes[2].slot_variables = {{4, "m", 7}, {5, "m", 7}};
  g.nodes[7].attributes = {
      {"VARIABLE_VALUE", "m",
       "model/layer_with_weights-0/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE"}};
  put("object_graph_fuzz", "model_and_adam", internal::serialize_object_graph(g));

  // Fields chorus does not model (TrackableObject's registered_saver, has_checkpoint_values, ...)
  // are skipped: a node with unknown fields of every wire type.
  chorus::wire::ProtoWriter node, top;
  chorus::wire::ProtoWriter child;
  child.add_int64(1, 0);
  child.add_bytes(2, "self");
  node.add_message(1, child);
  node.add_varint(7, 1);
  node.add_double(8, 2.5);
  node.add_float(9, 1.5f);
  node.add_bytes(10, "registered_saver");
  top.add_message(1, node);
  top.add_varint(2, 99);
  put("object_graph_fuzz", "unknown_fields", top.release());
}

void checkpoint_states() {
  chorus::train::CheckpointState s;
  s.model_checkpoint_path = "ckpt-3";
  s.all_model_checkpoint_paths = {"ckpt-1", "ckpt-2", "ckpt-3"};
  s.all_model_checkpoint_timestamps = {1763712000.5, 1763712060.25, 1763712120.125};
  s.last_preserved_timestamp = 1763711999.0;
  put("checkpoint_state_fuzz", "manager", chorus::train::checkpoint_state_to_text(s));

  chorus::train::CheckpointState odd;
  odd.model_checkpoint_path = "/abs/dir with \"quotes\"/ckpt-\\1\n\x01\xff";
  odd.all_model_checkpoint_paths = {odd.model_checkpoint_path};
  put("checkpoint_state_fuzz", "escapes", chorus::train::checkpoint_state_to_text(odd));

  // As TF's text format may have it: comments, single quotes, blank lines, CRLF, an unknown field.
  put("checkpoint_state_fuzz", "tf_text_format",
      "# written by TF\r\nmodel_checkpoint_path: 'model.ckpt-100'\r\n\r\n"
      "all_model_checkpoint_paths: \"model.ckpt-100\"\n  all_model_checkpoint_timestamps: 1.5e9\n"
      "last_preserved_timestamp: -0.0\nsome_future_field: 3\n");
}

void tfrecords() {
  put("tfrecord_fuzz", "empty", "");
  put("tfrecord_fuzz", "one_record", summary::frame_record("hello"));
  std::string three = summary::frame_record("");
  three += summary::frame_record(chorus::launch::serialize_digit_example(digit_pixels(1), 4));
  three += summary::frame_record(std::string(40, '\x5a'));
  put("tfrecord_fuzz", "three_records", three);
  // Compressed files: "ZLIB" or "GZIP", then the file (tfrecord_fuzz.cc).
  for (const bool gzip : {false, true}) {
    z_stream z{};
    deflateInit2(&z, 6, Z_DEFLATED, gzip ? 31 : 15, 9, Z_DEFAULT_STRATEGY);
    std::string out(deflateBound(&z, static_cast<uLong>(three.size())), '\0');
    z.next_in = reinterpret_cast<Bytef*>(three.data());
    z.avail_in = static_cast<uInt>(three.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    deflate(&z, Z_FINISH);
    out.resize(z.total_out);
    deflateEnd(&z);
    put("tfrecord_fuzz", gzip ? "gzip_three_records" : "zlib_three_records", (gzip ? "GZIP" : "ZLIB") + out);
  }
}

std::string deflated(const std::string& bytes, bool gzip) {
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, gzip ? 31 : 15, 9, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, static_cast<uLong>(bytes.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// text_line_fuzz.cc: a mode byte (0 in memory, 1 plain file, 2 GZIP, 3 ZLIB), then the file.
void text_lines() {
  const std::string text = std::string("first\nsecond\r\n\nlone\rcr\n") + std::string("nul\0byte\n", 9) + "last";
  put("text_line_fuzz", "memory", '\0' + text);
  put("text_line_fuzz", "memory_long_line", '\0' + std::string(70, 'x') + "\nshort\n");
  put("text_line_fuzz", "plain_file", '\1' + text);
  put("text_line_fuzz", "gzip_file", '\2' + deflated(text, true));
  put("text_line_fuzz", "gzip_two_members", '\2' + deflated("one\ntw", true) + deflated("o\nthree\n", true));
  put("text_line_fuzz", "zlib_file", '\3' + deflated(text, false));
}

// csv_fuzz.cc: an options byte, a columns byte, a select/exclude byte, then the file.
void csv_files() {
  // Options byte: delimiter (bits 0-1), quotes off (4), header (8), na_value "NA" (16).
  put("csv_fuzz", "quoted", std::string("\x00\x33\x00") + "1,2.5,\"a,\"\"b\"\"\",7\r\n-3,,\"multi\nline\",8\n");
  put("csv_fuzz", "numbers",
      std::string("\x10\xf3\x00") +
          " 12 ,nan,0x1p-3,NA\n+4,-inf,1e39,-0\n2147483648,1.5e-45,inf,9223372036854775807\n");
  put("csv_fuzz", "header_semicolon", std::string("\x09\x21\x00") + "h1;h2\n1;x\n2;\"y;z\"\n");
  put("csv_fuzz", "no_quotes_tab", std::string("\x06\x11\x00") + "a\"b\t1\n\tc\n");
  put("csv_fuzz", "select", std::string("\x00\x31\x2b") + "1,2,3,4,5,6,7,8\n9,8,7,6,5,4,3,2\n");
  put("csv_fuzz", "exclude", std::string("\x00\x31\x0e") + "1,2,3,4\n5,6,7,8\n");
  put("csv_fuzz", "bad_quotes", std::string("\x00\x02\x00") + "\"a\"x,b\n\"c,d\n");
}

void tf_examples() {
  put("tf_example_fuzz", "bytes_image", chorus::launch::serialize_digit_example(digit_pixels(0), 7));

  // "image" as a float_list (packed), "label" as an unpacked int64, and an extra feature first.
  using chorus::wire::ProtoWriter;
  std::vector<float> floats(chorus::launch::kDigitPixels);
  for (std::size_t i = 0; i < floats.size(); ++i) floats[i] = static_cast<float>(i % 256) / 255.0f;
  ProtoWriter float_list, image;
  float_list.add_packed_floats(1, floats);
  image.add_message(2, float_list);
  ProtoWriter int64_list, label;
  int64_list.add_int64(1, 3);
  label.add_message(3, int64_list);
  ProtoWriter extra_list, extra;
  extra_list.add_bytes(1, "train");
  extra.add_message(1, extra_list);
  const auto entry = [](const char* key, const ProtoWriter& value) {
    ProtoWriter e;
    e.add_bytes(1, key);
    e.add_message(2, value);
    return e;
  };
  ProtoWriter features;
  features.add_message(1, entry("split", extra));
  features.add_message(1, entry("image", image));
  features.add_message(1, entry("label", label));
  ProtoWriter example;
  example.add_message(1, features);
  put("tf_example_fuzz", "float_image", example.release());
}

// example_fuzz: a selector byte, then an Example (tests/fuzz/example_fuzz.cc). Every kind, packed
// and unpacked, empty lists, an empty Feature, a repeated name, special floats and extreme ints.
void examples() {
  namespace io = chorus::data::io;
  using chorus::wire::ProtoWriter;
  const auto list = [](io::ListKind kind) {
    io::FeatureList l;
    l.kind = kind;
    return l;
  };
  io::FeatureList f = list(io::ListKind::kFloat), i = list(io::ListKind::kInt64), b = list(io::ListKind::kBytes);
  f.floats = {1.5f, -0.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  i.int64s = {0, -1, std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()};
  b.bytes = {"", std::string("\x00\xff", 2), "text"};
  const std::string all = io::serialize_example(
      {{"f", f}, {"i", i}, {"s", b}, {"e", list(io::ListKind::kFloat)}, {"none", io::FeatureList{}}});
  for (const char selector : {'\x00', '\x55', '\xaa', '\xff'})
    put("example_fuzz", "all_kinds_" + std::to_string(static_cast<unsigned char>(selector)), selector + all);
  // Unpacked floats and int64s, an unknown field, and the same name twice.
  ProtoWriter fl, ff, il, iff;
  fl.add_float(1, 2.5f);
  fl.add_float(1, -3.0f);
  ff.add_message(2, fl);
  il.add_int64(1, 7);
  il.add_int64(1, -7);
  iff.add_message(3, il);
  const auto entry = [](const char* key, const ProtoWriter& value) {
    ProtoWriter e;
    e.add_bytes(1, key);
    e.add_message(2, value);
    return e;
  };
  ProtoWriter features;
  features.add_message(1, entry("u", ff));
  features.add_message(1, entry("v", iff));
  features.add_message(1, entry("u", ff));
  features.add_varint(9, 1);
  ProtoWriter example;
  example.add_message(1, features);
  put("example_fuzz", "unpacked_and_repeated", std::string("\x16") + example.release());
  put("example_fuzz", "empty_example", std::string("\x80"));
}

// cache(filename) files (data/cache_file_internal.h), written by hand: header, element records
// ('E', u32 components, per component u8 dtype, u8 rank, u64 dims, bytes), a footer ('F', u64
// count, u64 its own offset), each framed as a TFRecord.
std::string le(std::uint64_t v, int bytes) {
  std::string s;
  for (int i = 0; i < bytes; ++i) s.push_back(static_cast<char>(v >> (8 * i) & 0xFF));
  return s;
}
std::string cache_file(const std::vector<std::string>& elements) {
  std::string out = summary::frame_record("chorus.data.cache/1\n");
  for (const auto& e : elements) out += summary::frame_record(e);
  return out + summary::frame_record("F" + le(elements.size(), 8) + le(out.size(), 8));
}
void cache_files() {
  put("cache_file_fuzz", "empty_cache", cache_file({}));
  // (int64 scalar 7)
  const std::string scalar = "E" + le(1, 4) + le(5, 1) + le(0, 1) + le(7, 8);
  put("cache_file_fuzz", "one_scalar", cache_file({scalar}));
  // (int32 [2, 3] 0..5, bool [] true, uint8 [0]), twice, then the scalar
  std::string mixed = "E" + le(3, 4) + le(4, 1) + le(2, 1) + le(2, 8) + le(3, 8);
  for (int i = 0; i < 6; ++i) mixed += le(static_cast<std::uint64_t>(i), 4);
  mixed += le(7, 1) + le(0, 1) + le(1, 1);
  mixed += le(6, 1) + le(1, 1) + le(0, 8);
  put("cache_file_fuzz", "mixed", cache_file({mixed, mixed, scalar}));
}

void idx_files() {
  put("idx_fuzz", "labels", std::string("\0\0\x08\x01\0\0\0\x05", 8) + std::string("\x07\x02\x01\x00\x04", 5));
  std::string images("\0\0\x08\x03\0\0\0\x02\0\0\0\x04\0\0\0\x04", 16);
  for (int i = 0; i < 32; ++i) images.push_back(static_cast<char>(i * 8));
  put("idx_fuzz", "images", images);
  put("idx_fuzz", "scalar", std::string("\0\0\x08\x00\x2a", 5));
}

void event_files() {
  summary::Event version;
  version.wall_time = 1763712000.25;
  version.file_version = std::string(summary::kFileVersion);

  summary::Event scalar;
  scalar.wall_time = 1763712001.5;
  scalar.step = 3;
  summary::SummaryValue simple;
  simple.tag = "loss";
  simple.simple_value = 0.25f;
  summary::SummaryValue tensor;
  tensor.tag = "accuracy";
  tensor.metadata = summary::SummaryMetadata{{"scalars", ""}, "", "", summary::DataClass::kScalar};
  tensor.tensor = summary::TensorProto{};
  tensor.tensor->dtype = summary::tf_dtype::kFloat;
  tensor.tensor->shape = std::vector<std::int64_t>{};
  tensor.tensor->float_val = {0.875f};
  scalar.summary = summary::Summary{{simple, tensor}};

  summary::Event rich;
  rich.wall_time = 1763712002.0;
  rich.step = 1000000;
  summary::SummaryValue histo;
  histo.tag = "weights";
  histo.histo = summary::HistogramProto{-1, 2, 4, 3, 6, {-0.5, 0.5, 2}, {1, 2, 1}};
  summary::SummaryValue image;
  image.tag = "digit";
  image.image = summary::SummaryImage{2, 2, 1, std::string("\x89PNG\r\n\x1a\n", 8)};
  summary::SummaryValue content;
  content.tag = "matrix";
  content.metadata =
      summary::SummaryMetadata{{"histograms", "\x08\x01"}, "matrix", "a 2x3 int32", summary::DataClass::kTensor};
  content.tensor = summary::TensorProto{};
  content.tensor->dtype = summary::tf_dtype::kInt32;
  content.tensor->shape = std::vector<std::int64_t>{2, 3};
  for (std::int32_t v : {1, -2, 3, -4, 5, -6})
    content.tensor->tensor_content.append(reinterpret_cast<const char*>(&v), 4);
  summary::SummaryValue text;
  text.tag = "note";
  text.tensor = summary::TensorProto{};
  text.tensor->dtype = summary::tf_dtype::kString;
  text.tensor->shape = std::vector<std::int64_t>{1};
  text.tensor->string_val = {"hello"};
  rich.summary = summary::Summary{{histo, image, content, text}};

  summary::Event session;
  session.wall_time = 1763712003.0;
  session.session_log = summary::SessionLog{summary::SessionStatus::kCheckpoint, "/tmp/ckpt-1", "saved"};

  std::string file;
  for (const summary::Event* e : {&version, &scalar, &rich, &session})
    summary::append_record(file, summary::encode_event(*e));
  put("event_file_fuzz", "events.tfevents", file);
  put("event_file_fuzz", "EVNT_scalar", "EVNT" + summary::encode_event(scalar));
  put("event_file_fuzz", "EVNT_rich", "EVNT" + summary::encode_event(rich));
  put("event_file_fuzz", "EVNT_session_log", "EVNT" + summary::encode_event(session));
}

void tf_configs() {
  put("tf_config_fuzz", "workers",
      R"({"cluster": {"worker": ["host0:2222", "host1:2222"]}, "task": {"type": "worker", "index": 1}})");
  put("tf_config_fuzz", "chief_ps_evaluator",
      "{\n  \"cluster\": {\n    \"chief\": [\"h0:1\"],\n    \"worker\": [\"h0:2\", \"h1:2\"],\n    \"ps\": "
      "[\"h2:3\"],\n"
      "    \"evaluator\": [\"h3:4\"]\n  },\n  \"task\": {\"type\": \"evaluator\", \"index\": 0.0},\n"
      "  \"environment\": \"cloud\", \"rpc_layer\": null, \"x\": [true, false, -1.5e3, {}]\n}");
  put("tf_config_fuzz", "escapes",
      R"({"cluster": {"chief": ["h\u00e9\ud83d\ude00:1"], "worker": ["a\/b\"c\\d\b\f\n\r\t:2"]}, "task": {"type": "chief"}})");
}

// TCP store frames (collective/store/store_protocol.h); the first byte is the fuzz target's chunk size.
void store_frames() {
  namespace sp = chorus::collective::store_protocol;
  const auto op = [](sp::StoreOp o, std::int64_t n, std::vector<std::string> f) {
    return sp::encode({.kind = static_cast<std::uint8_t>(o), .number = n, .fields = std::move(f)});
  };
  const auto reply = [](sp::StoreReply r, std::int64_t n, std::vector<std::string> f) {
    return sp::encode({.kind = static_cast<std::uint8_t>(r), .number = n, .fields = std::move(f)});
  };
  put("store_protocol_fuzz", "requests",
      std::string(1, '\0') + op(sp::StoreOp::kSet, 0, {"attempt/0/rdzv/rank/1/1", "rank=1\nsize=2\n"}) +
          op(sp::StoreOp::kGet, 30000, {"k"}) + op(sp::StoreOp::kAdd, -1, {"n"}) +
          op(sp::StoreOp::kWait, 100, {"a", "b"}) + op(sp::StoreOp::kCheck, 0, {"a"}));
  put("store_protocol_fuzz", "replies",
      std::string(1, '\x03') + reply(sp::StoreReply::kOk, 0, {}) + reply(sp::StoreReply::kValue, 0, {"v"}) +
          reply(sp::StoreReply::kNumber, 7, {}) + reply(sp::StoreReply::kTimeout, 0, {"missing"}) +
          reply(sp::StoreReply::kError, 3, {"store: add on key \"w\""}));
  put("store_protocol_fuzz", "truncated", std::string(1, '\x01') + op(sp::StoreOp::kGet, 1, {"key"}).substr(0, 15));
}

void command_lines() {
  put("run_command_line_fuzz", "np", argv_bytes({"-np", "2", "--", "./chorus-train", "--epochs", "1"}));
  put("run_command_line_fuzz", "hosts",
      argv_bytes({"-H", "node1:2,node2", "--bind-to=socket", "--oversubscribe", "-x", "NCCL_DEBUG=INFO", "-x", "FOO",
                  "--dry-run", "prog", "-np", "9"}));
  put("run_command_line_fuzz", "help", argv_bytes({"--np=4", "--host=a:4", "-n", "4", "-host", "a:4", "-h"}));
  put("run_command_line_fuzz", "check_build", argv_bytes({"--check-build"}));
  put("run_command_line_fuzz", "remote",
      argv_bytes({"--rsh-agent", "ssh -p 2222", "--network-interface=eth1,10.0.0.0/24", "--mca", "btl", "tcp,self",
                  "--no-host-check", "-H", "a:2,b:2", "--", "prog"}));

  put("hostfile_fuzz", "cluster", "# two GPU nodes\nnode1 slots=4\nnode2 slots=4 max_slots=4\n");
  put("hostfile_fuzz", "plain", "a\nb  # one slot each\r\n\n\tc slots=2 max-slots=3");

  put("train_options_fuzz", "defaults", "");
  put("train_options_fuzz", "all_flags",
      argv_bytes({"--model",
                  "mlp",
                  "--strategy=one_device",
                  "--devices",
                  "/cpu:0",
                  "--virtual-devices",
                  "2",
                  "--memory-limit-mb",
                  "512",
                  "--epochs",
                  "3",
                  "--batch",
                  "64",
                  "--learning-rate",
                  "0.05",
                  "--optimizer",
                  "sgd",
                  "--tfrecord",
                  "a-*.tfrecord,b.tfrecord",
                  "--tfrecord",
                  "c",
                  "--train",
                  "100",
                  "--test",
                  "10",
                  "--seed",
                  "7",
                  "--checkpoint-dir",
                  "/tmp/c",
                  "--no-resume",
                  "--no-terminate-on-nan",
                  "--log-dir",
                  "/tmp/l",
                  "--min-accuracy",
                  "0.5",
                  "--quiet"}));
  put("train_options_fuzz", "mirrored",
      argv_bytes({"--strategy", "mirrored", "--devices=/gpu:0,/gpu:1", "--data-dir", "/data/mnist", "-h"}));
}

// A model's graph as Model::graph_def() writes it, and one with every attribute kind.
void graph_defs() {
  using summary::AttrValue;
  summary::GraphDef model;
  std::string previous;
  const std::vector<std::pair<std::string, std::vector<std::int64_t>>> layers = {
      {"Placeholder", {-1, 8, 8, 1}}, {"Conv2D", {-1, 6, 6, 4}}, {"Flatten", {-1, 144}}, {"Dense", {-1, 10}}};
  for (const auto& [op, shape] : layers) {
    summary::NodeDef n{.name = "net/" + op, .op = op, .device = "/job:localhost/replica:0/task:0/device:CPU:0"};
    if (!previous.empty()) n.input.push_back(previous);
    n.attr["_output_shapes"] = AttrValue::shapes({shape});
    n.attr["T"] = AttrValue::dtype(summary::tf_dtype::kFloat);
    n.attr["_replica_devices"] = AttrValue::strings({"/device:CPU:0", "/device:CPU:1"});
    model.node.push_back(n);
    previous = n.name;
  }
  model.producer = 1882;
  put("graph_def_fuzz", "model", summary::encode_graph_def(model));
  summary::GraphDef kinds;
  summary::NodeDef n{.name = "a", .op = "Op", .input = {"b:1", "^b"}};
  n.attr["s"] = AttrValue::str("text");
  n.attr["i"] = AttrValue::integer(-3);
  n.attr["f"] = AttrValue{.f = 0.5f};
  n.attr["b"] = AttrValue{.b = true};
  n.attr["shape"] = AttrValue::tensor_shape({{}, true});
  n.attr["list"] = AttrValue{
      .list = summary::AttrList{.s = {"x"}, .i = {1, 2}, .f = {1.5f}, .b = {false}, .type = {1, 9}, .shape = {{{3}}}}};
  kinds.node = {n, {.name = "b", .op = "Other"}};
  put("graph_def_fuzz", "attr_kinds", summary::encode_graph_def(kinds));
}

}  // namespace

// gloo_wire_fuzz: a selector byte, then a failure record (0), a peer record (1) or a fingerprint (2).
void gloo_wire() {
  put("gloo_wire_fuzz", "timeout",
      std::string("\0", 1) + "timeout 7 0 1,2\nall_reduce #7 float32(8,) op=sum timed out");
  put("gloo_wire_fuzz", "abort", std::string("\0", 1) + "abort 0 2 -\nrank 2 aborted the communicator: NaN loss");
  put("gloo_wire_fuzz", "lost", std::string("\0", 1) + "lost 3 1 -\nrank 0 (host vm, pid 7): connection closed");
  put("gloo_wire_fuzz", "peer", std::string("\1", 1) + "node7\n4242");
  std::string fp(1 + 104, '\0');
  fp[0] = 2;
  fp[1] = 5;   // sequence 5
  fp[13] = 3;  // dtype
  fp[29] = 1;  // ndim 1
  fp[33] = 8;  // dims[0] = 8
  put("gloo_wire_fuzz", "fingerprint", fp);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus root, e.g. tests/fuzz/corpus>\n", argv[0]);
    return 2;
  }
  g_root = argv[1];
  object_graphs();
  checkpoint_states();
  tfrecords();
  tf_examples();
  examples();
  text_lines();
  csv_files();
  idx_files();
  cache_files();
  event_files();
  graph_defs();
  tf_configs();
  store_frames();
  command_lines();
  gloo_wire();
  return 0;
}
