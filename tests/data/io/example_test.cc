// tf.Example parsing (data/io/example.h): FixedLenFeature (scalar and shaped, with and without a
// default), VarLenFeature and RaggedFeature for float32 and int64, packed and unpacked lists, empty
// lists, batches and single records, the wire layer with bytes lists, TF's wire corner cases
// (repeated names, a Feature with two lists, an empty Feature), the errors, and example_parser in
// a pipeline. Expected values are written out from TF's documented layouts; the same layouts are
// compared with real TF, element by element, in example_interop_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/data/data_test_util.h"
#include <chorus/core/error.h>
#include <chorus/core/proto_wire.h>
#include <chorus/data/io/example.h>

namespace chorus::data::io {
namespace {

using I = std::vector<std::int64_t>;
using F = std::vector<float>;
using S = std::vector<std::string>;

FeatureList floats(F v) {
  FeatureList l;
  l.kind = ListKind::kFloat;
  l.floats = std::move(v);
  return l;
}
FeatureList int64s(I v) {
  FeatureList l;
  l.kind = ListKind::kInt64;
  l.int64s = std::move(v);
  return l;
}
FeatureList bytes(S v) {
  FeatureList l;
  l.kind = ListKind::kBytes;
  l.bytes = std::move(v);
  return l;
}
std::string example(const std::map<std::string, FeatureList>& f) { return serialize_example(f); }

// An Example with one feature whose Feature message is `feature` (raw bytes).
std::string raw_example(std::string_view key, const wire::ProtoWriter& feature) {
  wire::ProtoWriter entry, features, ex;
  entry.add_bytes(1, key);
  entry.add_message(2, feature);
  features.add_message(1, entry);
  ex.add_message(1, features);
  return ex.release();
}

// The message of what `fn` throws as E (fails the test when it throws nothing or another class).
template <typename E, typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.message();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw another class: " << e.what();
    return "";
  }
  ADD_FAILURE() << "threw nothing";
  return "";
}
#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

TEST(ParseExample, FixedLenScalarsAndShapesWithDefaults) {
  const std::vector<std::string> batch = {
      example({{"f", floats({1.5f})}, {"i", int64s({-3})}, {"m", floats({1, 2, 3, 4, 5, 6})}}),
      example({{"i", int64s({7})}, {"m", floats({6, 5, 4, 3, 2, 1})}}),
  };
  const FeatureSpecs spec{
      {"f", FixedLenFeature{Shape{}, DType::kFloat32, Tensor::scalar(-1.0f)}},
      {"i", FixedLenFeature{Shape{}, DType::kInt64}},
      {"m", FixedLenFeature{Shape{2, 3}, DType::kFloat32}},
      {"d", FixedLenFeature{Shape{2}, DType::kInt64, Tensor::from_vector<std::int64_t>({8, 9})}},
  };
  const ParsedFeatures p = parse_example(batch, spec);
  EXPECT_EQ(p.features.size(), 4u);
  EXPECT_EQ(p.dense("f").shape(), (Shape{2}));
  EXPECT_EQ(p.dense("f").to_vector<float>(), (F{1.5f, -1.0f}));
  EXPECT_EQ(p.dense("i").dtype(), DType::kInt64);
  EXPECT_EQ(p.dense("i").to_vector<std::int64_t>(), (I{-3, 7}));
  EXPECT_EQ(p.dense("m").shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(p.dense("m").to_vector<float>(), (F{1, 2, 3, 4, 5, 6, 6, 5, 4, 3, 2, 1}));
  EXPECT_EQ(p.dense("d").shape(), (Shape{2, 2}));
  EXPECT_EQ(p.dense("d").to_vector<std::int64_t>(), (I{8, 9, 8, 9}));

  const ParsedFeatures one = parse_single_example(batch[1], spec);
  EXPECT_EQ(one.dense("f").shape(), Shape{});
  EXPECT_EQ(one.dense("f").item<float>(), -1.0f);
  EXPECT_EQ(one.dense("m").shape(), (Shape{2, 3}));
  EXPECT_EQ(one.dense("d").to_vector<std::int64_t>(), (I{8, 9}));
}

TEST(ParseExample, DefaultOfAnyShapeWithTheRightCount) {
  // TF reshapes the default to the feature's shape: [4] for [2, 2] is fine, a scalar for [2] is not.
  const FeatureSpecs spec{
      {"m", FixedLenFeature{Shape{2, 2}, DType::kFloat32, Tensor::from_vector<float>({1, 2, 3, 4})}}};
  EXPECT_EQ(parse_single_example(example({}), spec).dense("m").to_vector<float>(), (F{1, 2, 3, 4}));
  const FeatureSpecs bad{{"m", FixedLenFeature{Shape{2}, DType::kInt64, Tensor::scalar<std::int64_t>(5)}}};
  EXPECT_HAS(error_of<InvalidArgumentError>([&] { parse_single_example(example({}), bad); }), "must hold 2 int64");
  const FeatureSpecs wrong_dtype{{"m", FixedLenFeature{Shape{}, DType::kInt64, Tensor::scalar(5.0f)}}};
  EXPECT_THROW(parse_example(std::vector<std::string>{}, wrong_dtype), InvalidArgumentError);
}

TEST(ParseExample, VarLenIsTfsSparseLayout) {
  const std::vector<std::string> batch = {
      example({{"v", floats({1, 2, 3})}, {"k", int64s({10})}}),
      example({}),
      example({{"v", floats({})}, {"k", int64s({20, 21})}}),
      example({{"v", floats({4})}}),
  };
  const FeatureSpecs spec{{"v", VarLenFeature{DType::kFloat32}}, {"k", VarLenFeature{DType::kInt64}}};
  const ParsedFeatures p = parse_example(batch, spec);
  const SparseTensor& v = p.sparse("v");
  EXPECT_EQ(v.indices().shape(), (Shape{4, 2}));
  EXPECT_EQ(v.indices().to_vector<std::int64_t>(), (I{0, 0, 0, 1, 0, 2, 3, 0}));
  EXPECT_EQ(v.values().to_vector<float>(), (F{1, 2, 3, 4}));
  EXPECT_EQ(v.dense_shape(), (Shape{4, 3}));
  EXPECT_EQ(v.to_dense().to_vector<float>(), (F{1, 2, 3, 0, 0, 0, 0, 0, 0, 4, 0, 0}));
  const SparseTensor& k = p.sparse("k");
  EXPECT_EQ(k.indices().to_vector<std::int64_t>(), (I{0, 0, 2, 0, 2, 1}));
  EXPECT_EQ(k.values().to_vector<std::int64_t>(), (I{10, 20, 21}));
  EXPECT_EQ(k.dense_shape(), (Shape{4, 2}));

  const ParsedFeatures one = parse_single_example(batch[0], spec);
  EXPECT_EQ(one.sparse("v").indices().shape(), (Shape{3, 1}));
  EXPECT_EQ(one.sparse("v").indices().to_vector<std::int64_t>(), (I{0, 1, 2}));
  EXPECT_EQ(one.sparse("v").dense_shape(), (Shape{3}));
  const ParsedFeatures none = parse_single_example(batch[1], spec);
  EXPECT_EQ(none.sparse("v").indices().shape(), (Shape{0, 1}));
  EXPECT_EQ(none.sparse("v").dense_shape(), (Shape{0}));
  // An empty batch: TF's dense_shape [0, 0].
  const ParsedFeatures empty = parse_example(std::vector<std::string>{}, spec);
  EXPECT_EQ(empty.sparse("v").indices().shape(), (Shape{0, 2}));
  EXPECT_EQ(empty.sparse("v").dense_shape(), (Shape{0, 0}));
}

TEST(ParseExample, RaggedRowsPerRecord) {
  const std::vector<std::string> batch = {
      example({{"r", int64s({1, 2, 3})}}),
      example({}),
      example({{"r", int64s({})}}),
      example({{"r", int64s({std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()})}}),
  };
  const FeatureSpecs spec{{"r", RaggedFeature{DType::kInt64}}};
  const ParsedFeatures p = parse_example(batch, spec);
  const RaggedTensor& r = p.ragged("r");
  EXPECT_EQ(r.row_splits().dtype(), DType::kInt64);
  EXPECT_EQ(r.splits(), (I{0, 3, 3, 3, 5}));
  EXPECT_EQ(r.values().to_vector<std::int64_t>(),
            (I{1, 2, 3, std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()}));
  // Single: TF returns the values as a dense 1-D tensor.
  const ParsedFeatures one = parse_single_example(batch[0], spec);
  EXPECT_EQ(std::get<Tensor>(one.features.at("r")).to_vector<std::int64_t>(), (I{1, 2, 3}));
  EXPECT_EQ(parse_example(std::vector<std::string>{}, spec).ragged("r").splits(), (I{0}));
}

TEST(ParseExample, PackedAndUnpackedListsReadAlike) {
  // Unpacked: one field per value (what old writers and proto2 emit); packed: serialize_example.
  wire::ProtoWriter fl, ffeat, il, ifeat;
  for (float v : {0.5f, -2.0f, 3.25f}) fl.add_float(1, v);
  ffeat.add_message(2, fl);
  for (std::int64_t v : {-1LL, 0LL, 1LL << 40}) il.add_int64(1, v);
  ifeat.add_message(3, il);
  const std::string unpacked_f = raw_example("x", ffeat), unpacked_i = raw_example("x", ifeat);
  const std::string packed_f = example({{"x", floats({0.5f, -2.0f, 3.25f})}});
  const std::string packed_i = example({{"x", int64s({-1, 0, 1LL << 40})}});
  EXPECT_NE(unpacked_f, packed_f);
  const FeatureSpecs fs{{"x", FixedLenFeature{Shape{3}, DType::kFloat32}}};
  const FeatureSpecs is{{"x", FixedLenFeature{Shape{3}, DType::kInt64}}};
  EXPECT_EQ(parse_single_example(unpacked_f, fs).dense("x").to_vector<float>(), (F{0.5f, -2.0f, 3.25f}));
  EXPECT_EQ(parse_single_example(packed_f, fs).dense("x").to_vector<float>(), (F{0.5f, -2.0f, 3.25f}));
  EXPECT_EQ(parse_single_example(unpacked_i, is).dense("x").to_vector<std::int64_t>(), (I{-1, 0, 1LL << 40}));
  EXPECT_EQ(parse_single_example(packed_i, is).dense("x").to_vector<std::int64_t>(), (I{-1, 0, 1LL << 40}));
}

TEST(ParseExample, EmptyListsAreNotMissing) {
  const std::string rec = example({{"f", floats({})}});
  // shape [0]: an empty list is exactly right.
  EXPECT_EQ(parse_single_example(rec, {{"f", FixedLenFeature{Shape{0}, DType::kFloat32}}}).dense("f").shape(),
            (Shape{0}));
  // shape []: one value is needed; the default does not apply to a present, empty list (as TF).
  const FeatureSpecs with_default{{"f", FixedLenFeature{Shape{}, DType::kFloat32, Tensor::scalar(7.0f)}}};
  EXPECT_HAS(error_of<InvalidArgumentError>([&] { parse_single_example(rec, with_default); }),
             "0 float32 values but FixedLenFeature shape () needs 1");
  // An empty Feature (no list set) IS missing, as in TF: the default applies.
  EXPECT_EQ(parse_single_example(example({{"f", FeatureList{}}}), with_default).dense("f").item<float>(), 7.0f);
}

TEST(ParseExample, FloatSpecialValuesPassThrough) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::string rec = example({{"f", floats({std::nanf(""), inf, -inf, -0.0f, 1e-45f})}});
  const F v =
      parse_single_example(rec, {{"f", VarLenFeature{DType::kFloat32}}}).sparse("f").values().to_vector<float>();
  ASSERT_EQ(v.size(), 5u);
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_EQ(v[1], inf);
  EXPECT_EQ(v[2], -inf);
  EXPECT_TRUE(std::signbit(v[3]));
  EXPECT_EQ(v[4], 1e-45f);
}

TEST(ParseExample, ErrorsNameTheFeatureAndTheRecord) {
  const std::vector<std::string> batch = {example({{"a", floats({1, 2, 3})}, {"b", int64s({1})}}),
                                          example({{"a", floats({1})}})};
  // A required feature missing in record 1.
  EXPECT_HAS(error_of<InvalidArgumentError>([&] {
               parse_example(batch, {{"b", FixedLenFeature{Shape{}, DType::kInt64}}});
             }),
             "parse_example: feature \"b\" of record 1 (data type: int64) is required but could not be found");
  EXPECT_HAS(error_of<InvalidArgumentError>([&] {
               parse_single_example(batch[1], {{"b", FixedLenFeature{Shape{}, DType::kInt64}}});
             }),
             "parse_single_example: feature \"b\" (data type: int64) is required");
  // The wrong kind of list, for every form.
  for (const FeatureSpec& s : {FeatureSpec{FixedLenFeature{Shape{3}, DType::kInt64}},
                               FeatureSpec{VarLenFeature{DType::kInt64}}, FeatureSpec{RaggedFeature{DType::kInt64}}})
    EXPECT_HAS(error_of<InvalidArgumentError>([&] {
                 parse_example(batch, {{"a", s}});
               }),
               "feature \"a\" of record 0: data types don't match: the Example holds a float_list, the spec asks for "
               "int64 (an int64_list)");
  // Too many and too few values.
  EXPECT_HAS(error_of<InvalidArgumentError>([&] {
               parse_example(batch, {{"a", FixedLenFeature{Shape{2}, DType::kFloat32}}});
             }),
             "feature \"a\" of record 0: 3 float32 values but FixedLenFeature shape (2,) needs 2");
  EXPECT_HAS(error_of<InvalidArgumentError>([&] {
               parse_example(batch, {{"a", FixedLenFeature{Shape{3}, DType::kFloat32}}});
             }),
             "feature \"a\" of record 1: 1 float32 values but FixedLenFeature shape (3,) needs 3");
  // Malformed wire data in record 1: DataLossError naming the record and the feature.
  std::string broken = example({{"a", floats({1, 2})}});
  broken.resize(broken.size() - 2);
  const std::string msg = error_of<DataLossError>([&] {
    parse_example(std::vector<std::string>{batch[0], broken}, {{"a", VarLenFeature{DType::kFloat32}}});
  });
  EXPECT_HAS(msg, "parse_example: record 1: ");
  EXPECT_HAS(msg, "malformed");
}

TEST(ParseExample, SpecsAreValidated) {
  const std::vector<std::string> none;
  EXPECT_HAS(error_of<InvalidArgumentError>([&] {
               parse_example(none, {{"x", VarLenFeature{DType::kInt32}}});
             }),
             "feature \"x\": dtype int32 is not one of float32, int64, string");
  EXPECT_THROW(parse_example(none, {{"x", RaggedFeature{DType::kFloat64}}}), InvalidArgumentError);
  // The accessors say what the feature is.
  const ParsedFeatures p = parse_example(none, {{"x", VarLenFeature{DType::kFloat32}}});
  EXPECT_HAS(error_of<InvalidArgumentError>([&] { p.dense("x"); }), "is a SparseTensor, not a dense Tensor");
  EXPECT_HAS(error_of<InvalidArgumentError>([&] { p.ragged("y"); }), "no feature \"y\"");
  EXPECT_TRUE(p.contains("x"));
}

TEST(ParseExample, BytesFeaturesAreStringTensors) {
  const std::string binary("\x00\xff\x80\n", 4);
  const std::vector<std::string> batch = {
      example({{"s", bytes({"a"})}, {"v", bytes({"", binary})}, {"r", bytes({"x", "yy", "zzz"})}}),
      example({{"v", bytes({})}}),
      example({{"s", bytes({binary})}, {"r", bytes({""})}}),
  };
  const FeatureSpecs spec{
      {"s", FixedLenFeature{Shape{}, DType::kString, Tensor::scalar("dflt")}},
      {"v", VarLenFeature{DType::kString}},
      {"r", RaggedFeature{DType::kString}},
      {"m", FixedLenFeature{Shape{2}, DType::kString, Tensor::from_vector<std::string>({"p", "q"})}}};
  const ParsedFeatures p = parse_example(batch, spec);
  EXPECT_EQ(p.dense("s").dtype(), DType::kString);
  EXPECT_EQ(p.dense("s").to_vector<std::string>(), (S{"a", "dflt", binary}));
  EXPECT_EQ(p.dense("m").shape(), (Shape{3, 2}));
  EXPECT_EQ(p.dense("m").to_vector<std::string>(), (S{"p", "q", "p", "q", "p", "q"}));
  const SparseTensor& v = p.sparse("v");
  EXPECT_EQ(v.indices().to_vector<std::int64_t>(), (I{0, 0, 0, 1}));
  EXPECT_EQ(v.values().to_vector<std::string>(), (S{"", binary}));
  EXPECT_EQ(v.dense_shape(), (Shape{3, 2}));
  EXPECT_EQ(v.to_dense(Tensor::scalar("-")).to_vector<std::string>(), (S{"", binary, "-", "-", "-", "-"}));
  const RaggedTensor& r = p.ragged("r");
  EXPECT_EQ(r.splits(), (I{0, 3, 3, 4}));
  EXPECT_EQ(r.row(0).to_vector<std::string>(), (S{"x", "yy", "zzz"}));
  EXPECT_EQ(r.to_tensor().to_vector<std::string>(), (S{"x", "yy", "zzz", "", "", "", "", "", ""}));
  // A bytes list for a numeric spec, and the other way round.
  EXPECT_HAS(error_of<InvalidArgumentError>([&] {
               parse_example(batch, {{"s", VarLenFeature{DType::kInt64}}});
             }),
             "the Example holds a bytes_list, the spec asks for int64");
  EXPECT_HAS(error_of<InvalidArgumentError>([&] {
               parse_single_example(example({{"s", floats({1})}}), {{"s", VarLenFeature{DType::kString}}});
             }),
             "the Example holds a float_list, the spec asks for string (a bytes_list)");
}

TEST(ParseExample, StringTensorInputs) {
  const std::vector<std::string> batch = {example({{"i", int64s({1})}}), example({{"i", int64s({2})}})};
  const FeatureSpecs spec{{"i", FixedLenFeature{Shape{}, DType::kInt64}}};
  EXPECT_EQ(parse_example(Tensor::from_vector<std::string>(batch), spec).dense("i").to_vector<std::int64_t>(),
            (I{1, 2}));
  EXPECT_EQ(parse_single_example(Tensor::scalar(batch[1]), spec).dense("i").item<std::int64_t>(), 2);
  EXPECT_HAS(error_of<InvalidArgumentError>([&] { parse_example(Tensor::scalar(batch[1]), spec); }),
             "must be a 1-D string tensor");
  EXPECT_HAS(error_of<InvalidArgumentError>([&] {
               parse_single_example(Tensor::from_vector<std::uint8_t>({1, 2}), spec);
             }),
             "must be a scalar string tensor; got uint8");
  EXPECT_THROW(parse_example(Tensor(), spec), InvalidArgumentError);
}

TEST(ExampleWire, BytesListsAndWireCornerCases) {
  const std::string binary("\x00\xff\x80\n", 4);
  const std::string rec = example({{"s", bytes({"", binary, "text"})}, {"n", int64s({1})}});
  const std::string keys[] = {"s", "n", "absent"};
  const std::vector<FeatureList> lists = read_feature_lists(rec, keys);
  ASSERT_EQ(lists.size(), 3u);
  EXPECT_EQ(lists[0].kind, ListKind::kBytes);
  EXPECT_EQ(lists[0].bytes, (S{"", binary, "text"}));
  EXPECT_EQ(lists[1].int64s, (I{1}));
  EXPECT_EQ(lists[2].kind, ListKind::kNone);
  EXPECT_EQ(list_kind_name(lists[0].kind), "bytes_list");
  // Round trip through the writer.
  EXPECT_EQ(serialize_example(read_all_feature_lists(rec)), rec);
  // Two Examples concatenated merge; a repeated name: the last entry wins (TF and protobuf).
  const std::string twice = example({{"a", floats({1})}}) + example({{"a", floats({2})}, {"b", floats({3})}});
  EXPECT_EQ(
      parse_single_example(twice, {{"a", VarLenFeature{DType::kFloat32}}}).sparse("a").values().to_vector<float>(),
      (F{2}));
  // A Feature with a float_list and then an int64_list: TF's parser takes the first list.
  wire::ProtoWriter fl, il, feature;
  fl.add_packed_floats(1, std::vector<float>{1.5f});
  il.add_packed_varints(1, std::vector<std::int64_t>{4});
  feature.add_message(2, fl);
  feature.add_message(3, il);
  const std::string two_lists = raw_example("a", feature);
  EXPECT_EQ(
      parse_single_example(two_lists, {{"a", VarLenFeature{DType::kFloat32}}}).sparse("a").values().to_vector<float>(),
      (F{1.5f}));
  EXPECT_THROW(parse_single_example(two_lists, {{"a", VarLenFeature{DType::kInt64}}}), InvalidArgumentError);
  // Unknown fields anywhere are skipped.
  wire::ProtoWriter extra;
  extra.add_varint(7, 99);
  extra.add_bytes(9, "junk");
  EXPECT_EQ(read_all_feature_lists(rec + extra.data()).size(), 2u);
  // An empty record is an Example with no features.
  EXPECT_TRUE(read_all_feature_lists("").empty());
}

TEST(ExampleParser, MapsRecordsInAPipeline) {
  testing::TempDir dir;
  const std::string path = dir.file("ex.tfrecord");
  write_tfrecord_file(
      path, {example({{"label", int64s({3})}, {"tokens", int64s({5, 6, 7})}}), example({{"label", int64s({4})}}),
             example({{"label", int64s({5})}, {"tokens", int64s({8})}})});
  const FeatureSpecs spec{{"label", FixedLenFeature{Shape{}, DType::kInt64}},
                          {"tokens", VarLenFeature{DType::kInt64}},
                          {"unused", FixedLenFeature{Shape{}, DType::kInt64}}};  // not asked for: not required
  auto it = tfrecord_dataset({path})
                .enumerate()
                .map(example_parser(spec, {"tokens", "label"}))
                .padded_batch(2)
                .make_iterator();
  auto b0 = it.next();
  ASSERT_TRUE(b0);
  ASSERT_EQ(b0->size(), 2u);
  EXPECT_EQ((*b0)[0].shape(), (Shape{2, 3}));
  EXPECT_EQ((*b0)[0].to_vector<std::int64_t>(), (I{5, 6, 7, 0, 0, 0}));
  EXPECT_EQ((*b0)[1].to_vector<std::int64_t>(), (I{3, 4}));
  auto b1 = it.next();
  ASSERT_TRUE(b1);
  EXPECT_EQ((*b1)[0].to_vector<std::int64_t>(), (I{8}));
  EXPECT_FALSE(it.next());
  // Errors name the record index when the element carries one.
  write_tfrecord_file(path, {example({{"label", int64s({3})}}), example({{"label", floats({1})}})});
  auto bad = tfrecord_dataset({path}).enumerate().map(example_parser(spec, {"label"})).make_iterator();
  EXPECT_TRUE(bad.next());
  EXPECT_HAS(error_of<InvalidArgumentError>([&] { bad.next(); }), "record 1: parse_single_example: feature \"label\"");
  EXPECT_THROW(example_parser(spec, {"nope"}), InvalidArgumentError);
}

}  // namespace
}  // namespace chorus::data::io
