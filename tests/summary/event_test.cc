// Event / Summary / TensorProto encoding: byte-identical to the TF2 record of docs/formats.md A8, and
// round trips of every modelled field.
#include <chorus/summary/event.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include <chorus/core/error.h>
#include <chorus/core/proto_wire.h>
#include <chorus/summary/record.h>
#include <chorus/summary/summary_values.h>

namespace chorus::summary {
namespace {

std::string hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(d[c >> 4]);
    out.push_back(d[c & 15]);
  }
  return out;
}

TEST(Event, ScalarRecordIsByteIdenticalToTf2) {
  // docs/formats.md A8.2: the full record for Event{wall_time=1700000001.25, step=1, loss=0.5}, built
  // from the bytes observed in real TF2 files (tensor{DT_FLOAT, shape {}, 4 content bytes} and
  // metadata{plugin_data{plugin_name "scalars"}}).
  const std::string expected =
      "2e00000000000000"
      "c5cb57fa"
      "0900005040fc54d941"
      "1001"
      "2a21"
      "0a1f"
      "0a046c6f7373"
      "420a0801120022040000003f"
      "4a0b0a090a077363616c617273"
      "32282f1c";
  Event e;
  e.wall_time = 1700000001.25;
  e.step = 1;
  e.summary = Summary{{scalar_value("loss", 0.5f)}};
  EXPECT_EQ(hex(frame_record(encode_event(e))), expected);
}

TEST(Event, HeaderEventMatchesTheObservedLayout) {
  // docs/formats.md A3: "09 <8-byte double> 1a 0d brain.Event:2", 24 bytes.
  Event e;
  e.wall_time = 1700677134.0;
  e.file_version = std::string(kFileVersion);
  const std::string bytes = encode_event(e);
  ASSERT_EQ(bytes.size(), 24u);
  EXPECT_EQ(static_cast<unsigned char>(bytes[0]), 0x09);
  double wt;
  std::memcpy(&wt, bytes.data() + 1, 8);
  EXPECT_EQ(wt, 1700677134.0);
  EXPECT_EQ(bytes.substr(9, 2), std::string("\x1a\x0d", 2));
  EXPECT_EQ(bytes.substr(11), "brain.Event:2");
}

TEST(Event, StepZeroIsOmittedAndNegativeStepsRoundTrip) {
  Event e;
  e.wall_time = 1.0;
  e.step = 0;
  EXPECT_EQ(encode_event(e).size(), 9u) << "proto3 omits step 0, as TF does";
  e.step = -5;
  EXPECT_EQ(decode_event(encode_event(e)).step, -5);
  e.step = 1LL << 40;
  EXPECT_EQ(decode_event(encode_event(e)).step, 1LL << 40);
}

TEST(Event, EveryModelledFieldRoundTrips) {
  SummaryValue hist;
  hist.tag = "legacy/histo";
  hist.histo = HistogramProto{
      .min = -1, .max = 2, .num = 3, .sum = 1, .sum_squares = 6, .bucket_limit = {0, 1, 2}, .bucket = {1, 1, 1}};
  SummaryValue img;
  img.tag = "legacy/image";
  img.image =
      SummaryImage{.height = 2, .width = 3, .colorspace = 3, .encoded_image_string = std::string("\x89PNG\0x", 6)};
  SummaryValue tensor;
  tensor.tag = "t";
  tensor.tensor = TensorProto{};
  tensor.tensor->dtype = tf_dtype::kInt64;
  tensor.tensor->shape = std::vector<std::int64_t>{2, 0, 3};
  tensor.tensor->int64_val = {1, -2, 3};
  tensor.tensor->string_val = {"a", std::string("\0b", 2)};
  tensor.tensor->float_val = {1.5f};
  tensor.tensor->double_val = {2.5};
  tensor.tensor->int_val = {-7};
  tensor.tensor->bool_val = {1, 0};
  tensor.metadata = SummaryMetadata{.plugin_data = {"custom", "content"},
                                    .display_name = "shown",
                                    .summary_description = "about",
                                    .data_class = DataClass::kTensor};
  SummaryValue simple;
  simple.tag = "simple";
  simple.simple_value = -0.125f;

  Event e;
  e.wall_time = 1700000000.5;
  e.step = 12;
  e.summary = Summary{{hist, img, tensor, simple}};
  const Event d = decode_event(encode_event(e));
  EXPECT_EQ(d.wall_time, e.wall_time);
  EXPECT_EQ(d.step, 12);
  EXPECT_EQ(d.what, event_what::kSummary);
  ASSERT_TRUE(d.summary.has_value());
  ASSERT_EQ(d.summary->value.size(), 4u);

  const HistogramProto& h = *d.summary->value[0].histo;
  EXPECT_EQ(d.summary->value[0].tag, "legacy/histo");
  EXPECT_EQ(h.min, -1);
  EXPECT_EQ(h.max, 2);
  EXPECT_EQ(h.num, 3);
  EXPECT_EQ(h.sum, 1);
  EXPECT_EQ(h.sum_squares, 6);
  EXPECT_EQ(h.bucket_limit, (std::vector<double>{0, 1, 2}));
  EXPECT_EQ(h.bucket, (std::vector<double>{1, 1, 1}));

  const SummaryImage& im = *d.summary->value[1].image;
  EXPECT_EQ(im.height, 2);
  EXPECT_EQ(im.width, 3);
  EXPECT_EQ(im.colorspace, 3);
  EXPECT_EQ(im.encoded_image_string, std::string("\x89PNG\0x", 6));

  const SummaryValue& tv = d.summary->value[2];
  EXPECT_EQ(tv.plugin_name(), "custom");
  EXPECT_EQ(tv.metadata->plugin_data.content, "content");
  EXPECT_EQ(tv.metadata->display_name, "shown");
  EXPECT_EQ(tv.metadata->summary_description, "about");
  EXPECT_EQ(tv.metadata->data_class, DataClass::kTensor);
  EXPECT_EQ(tv.tensor->dtype, tf_dtype::kInt64);
  EXPECT_EQ(*tv.tensor->shape, (std::vector<std::int64_t>{2, 0, 3}));
  EXPECT_EQ(tv.tensor->int64_val, (std::vector<std::int64_t>{1, -2, 3}));
  EXPECT_EQ(tv.tensor->string_val, (std::vector<std::string>{"a", std::string("\0b", 2)}));
  EXPECT_EQ(tv.tensor->float_val, std::vector<float>{1.5f});
  EXPECT_EQ(tv.tensor->double_val, std::vector<double>{2.5});
  EXPECT_EQ(tv.tensor->int_val, std::vector<std::int64_t>{-7});
  EXPECT_EQ(tv.tensor->bool_val, (std::vector<std::int64_t>{1, 0}));

  EXPECT_EQ(*d.summary->value[3].simple_value, -0.125f);
  EXPECT_EQ(d.summary->value[3].plugin_name(), "");

  Event log;
  log.step = 7;
  log.session_log = SessionLog{SessionStatus::kStart, "ckpt-7", "restarted"};
  const Event dl = decode_event(encode_event(log));
  EXPECT_EQ(dl.what, event_what::kSessionLog);
  EXPECT_EQ(dl.session_log->status, SessionStatus::kStart);
  EXPECT_EQ(dl.session_log->checkpoint_path, "ckpt-7");
  EXPECT_EQ(dl.session_log->msg, "restarted");
}

TEST(Event, DecoderSkipsFieldsItDoesNotModel) {
  wire::ProtoWriter w;
  w.add_double(1, 3.0);
  w.add_bytes(8, "a TaggedRunMetadata");  // tagged_run_metadata
  w.add_bytes(10, "source metadata");     // source_metadata, outside the oneof
  w.add_varint(2, 9);
  const Event e = decode_event(w.data());
  EXPECT_EQ(e.wall_time, 3.0);
  EXPECT_EQ(e.step, 9);
  EXPECT_EQ(e.what, event_what::kTaggedRunMetadata);
  EXPECT_FALSE(e.summary.has_value());
}

TEST(Event, OneofViolationsAreRejectedWhenEncoding) {
  Event e;
  e.file_version = "brain.Event:2";
  e.summary = Summary{};
  EXPECT_THROW(encode_event(e), InvalidArgumentError);
  SummaryValue v;
  v.tag = "x";
  v.simple_value = 1;
  v.tensor = TensorProto{};
  EXPECT_THROW(encode_summary_value(v), InvalidArgumentError);
}

TEST(Event, ALaterSummaryValueOneofMemberReplacesAnEarlierOne) {
  // protobuf keeps the last member of a oneof it meets; so does the decoder, and the value it
  // returns re-encodes (found by tests/fuzz/event_file_fuzz.cc: histo, then tensor).
  wire::ProtoWriter histo;
  histo.add_double(1, 0.0);  // min
  wire::ProtoWriter w;
  w.add_bytes(1, "accuracy");
  w.add_float(2, 0.5f);                // simple_value
  w.add_bytes(5, histo.data());        // histo replaces it
  w.add_bytes(8, std::string_view());  // tensor replaces that
  const SummaryValue v = decode_summary_value(w.data());
  EXPECT_FALSE(v.simple_value.has_value());
  EXPECT_FALSE(v.histo.has_value());
  ASSERT_TRUE(v.tensor.has_value());
  EXPECT_NO_THROW(encode_summary_value(v));
  wire::ProtoWriter audio;  // audio (6) is a member chorus does not model: it clears the rest
  audio.add_bytes(1, "x");
  audio.add_float(2, 1.0f);
  audio.add_bytes(6, "a serialized Audio");
  const SummaryValue a = decode_summary_value(audio.data());
  EXPECT_FALSE(a.simple_value.has_value());
  EXPECT_NO_THROW(encode_summary_value(a));
}

TEST(Event, MalformedEventThrowsDataLoss) {
  Event e;
  e.step = 3;
  e.summary = Summary{{scalar_value("loss", 1.0f)}};
  const std::string good = encode_event(e);
  // Cutting the message anywhere inside the summary leaves a length that runs past the end.
  for (std::size_t cut = 3; cut < good.size(); ++cut)
    EXPECT_THROW(decode_event(good.substr(0, cut)), DataLossError) << "cut at " << cut;
}

TEST(TensorProto, ToDoublesReadsContentAndTypedFields) {
  TensorProto f;
  f.dtype = tf_dtype::kFloat;
  f.shape = std::vector<std::int64_t>{2};
  const float fv[2] = {0.5f, -3.0f};
  f.tensor_content.assign(reinterpret_cast<const char*>(fv), sizeof fv);
  EXPECT_EQ(f.to_doubles(), (std::vector<double>{0.5, -3.0}));

  TensorProto d;
  d.dtype = tf_dtype::kDouble;
  d.shape = std::vector<std::int64_t>{1, 3};
  d.double_val = {7.0};  // one value broadcasts, as TF's FromProto does
  EXPECT_EQ(d.to_doubles(), (std::vector<double>{7, 7, 7}));

  TensorProto i;
  i.dtype = tf_dtype::kInt32;
  i.int_val = {-4};  // no shape: rank 0
  EXPECT_EQ(i.to_doubles(), std::vector<double>{-4});

  TensorProto empty;
  empty.dtype = tf_dtype::kFloat;
  empty.shape = std::vector<std::int64_t>{2};
  EXPECT_EQ(empty.to_doubles(), (std::vector<double>{0, 0}));

  TensorProto bad = f;
  bad.tensor_content.pop_back();
  EXPECT_THROW(bad.to_doubles(), DataLossError);
  TensorProto too_many = d;
  too_many.double_val = {1, 2, 3, 4};
  EXPECT_THROW(too_many.to_doubles(), DataLossError);
  TensorProto str;
  str.dtype = tf_dtype::kString;
  EXPECT_THROW(str.to_doubles(), InvalidArgumentError);
}

}  // namespace
}  // namespace chorus::summary
