// The tf.Example parser (data/io/example.h) given hostile records (issue 44, item 8): every
// truncation and every flipped byte of a valid Example, lengths and varints that claim more than the
// record holds, group wire types, packed lists of a size that is not a multiple of the element,
// nesting 20,000 deep inside an unknown field, and records with many entries. Each is a
// typed error (DataLossError for wire damage, naming the record, the feature when inside one, and
// the byte offset; InvalidArgumentError only for a spec the decoded record does not meet) or a
// parse — never a crash, a hang, or an allocation the record's size does not bound. Label: hostile.
#include <gtest/gtest.h>

#include <chrono>

#include <chorus/core/error.h>
#include <chorus/core/proto_wire.h>
#include <chorus/data/io/example.h>

namespace chorus::data::io {
namespace {

using wire::ProtoWriter;

std::string valid_example() {
  FeatureList f, i, s;
  f.kind = ListKind::kFloat;
  f.floats = {1, 2, 3, 4};
  i.kind = ListKind::kInt64;
  i.int64s = {-1, 300, 1LL << 50};
  s.kind = ListKind::kBytes;
  s.bytes = {"abc", std::string(20, 'z')};
  return serialize_example({{"f", f}, {"i", i}, {"s", s}});
}

const FeatureSpecs& spec() {
  static const FeatureSpecs s{{"f", FixedLenFeature{Shape{4}, DType::kFloat32}},
                              {"i", VarLenFeature{DType::kInt64}},
                              {"r", RaggedFeature{DType::kInt64}}};
  return s;
}

std::string with_one_feature(std::string_view key, const ProtoWriter& feature) {
  ProtoWriter entry, features, ex;
  entry.add_bytes(1, key);
  entry.add_message(2, feature);
  features.add_message(1, entry);
  ex.add_message(1, features);
  return ex.release();
}

// What parse_example of {good, bad} throws: "ok", or "<class>: <message>". Every feature of `bad`,
// the bytes lists too, is decoded first by the wire layer, which must fail with the same class.
std::string outcome(const std::string& bad, const FeatureSpecs& features) {
  try {
    read_all_feature_lists(bad);
  } catch (const DataLossError&) {
  }
  try {
    parse_example(std::vector<std::string>{valid_example(), bad}, features);
  } catch (const DataLossError& e) {
    return "DataLossError: " + e.message();
  } catch (const InvalidArgumentError& e) {
    return "InvalidArgumentError: " + e.message();
  } catch (const std::exception& e) {
    return std::string("other: ") + e.what();
  }
  return "ok";
}

TEST(ExampleHostile, EveryTruncationIsDataLossNamingTheRecordAndOffset) {
  const std::string good = valid_example();
  for (std::size_t n = 1; n < good.size(); ++n) {
    const std::string got = outcome(good.substr(0, n), spec());
    ASSERT_EQ(got.rfind("DataLossError: parse_example: record 1: ", 0), 0u) << "cut at " << n << ": " << got;
    EXPECT_NE(got.find("byte offset"), std::string::npos) << got;
  }
}

TEST(ExampleHostile, EveryFlippedByteIsATypedErrorOrAParse) {
  const std::string good = valid_example();
  int errors = 0;
  for (std::size_t at = 0; at < good.size(); ++at)
    for (unsigned char mask : {0x01, 0x80, 0xff}) {
      std::string bad = good;
      bad[at] = static_cast<char>(static_cast<unsigned char>(bad[at]) ^ mask);
      const std::string got = outcome(bad, spec());
      ASSERT_TRUE(got == "ok" || got.rfind("DataLossError: ", 0) == 0 || got.rfind("InvalidArgumentError: ", 0) == 0)
          << "byte " << at << " ^ " << int(mask) << ": " << got;
      errors += got != "ok";
    }
  EXPECT_GT(errors, 0);
}

TEST(ExampleHostile, LengthsPastTheEndAreRefusedBeforeAllocating) {
  // Outer Features field claiming 2^62 bytes.
  std::string huge = "\x0a";
  wire::append_varint(huge, 1ULL << 62);
  huge += "\x0a\x00";
  EXPECT_NE(outcome(huge, spec()).find("runs past the end"), std::string::npos) << outcome(huge, spec());
  // A packed float list claiming 1 GiB inside a feature: the error names the feature.
  std::string list = "\x0a";
  wire::append_varint(list, 1ULL << 30);
  list += "abcd";
  ProtoWriter feature;
  feature.add_bytes(2, list);
  const std::string got = outcome(with_one_feature("f", feature), spec());
  EXPECT_EQ(got.rfind("DataLossError: parse_example: record 1: feature \"f\": ", 0), 0u) << got;
  EXPECT_NE(got.find("runs past the end"), std::string::npos) << got;
  // An 11-byte varint key.
  EXPECT_NE(outcome(std::string(11, '\xff'), spec()).find("varint longer than 10 bytes"), std::string::npos);
}

TEST(ExampleHostile, MalformedListsNameTheFeature) {
  // 5 bytes of packed floats.
  ProtoWriter floats, f;
  floats.add_bytes(1, std::string(5, '\0'));
  f.add_message(2, floats);
  std::string got = outcome(with_one_feature("f", f), spec());
  EXPECT_EQ(got.rfind("DataLossError: parse_example: record 1: feature \"f\": ", 0), 0u) << got;
  EXPECT_NE(got.find("not a multiple of the element size 4"), std::string::npos) << got;
  // A packed int64 list ending inside a varint.
  ProtoWriter ints, i;
  ints.add_bytes(1, "\x81\x82");
  i.add_message(3, ints);
  got = outcome(with_one_feature("i", i), spec());
  EXPECT_NE(got.find("feature \"i\": malformed packed repeated field 1"), std::string::npos) << got;
  // bytes_list values with a varint wire type.
  ProtoWriter bytes, s;
  bytes.add_varint(1, 5);
  s.add_message(1, bytes);
  try {
    read_all_feature_lists(with_one_feature("s", s));
    ADD_FAILURE() << "no error";
  } catch (const DataLossError& e) {
    EXPECT_NE(e.message().find("feature \"s\": "), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("cannot be read as bytes"), std::string::npos) << e.message();
  }
  // Group wire types (3, 4) anywhere.
  for (const char* g : {"\x0b", "\x0c", "\x0a\x02\x0b\x00"})
    EXPECT_EQ(outcome(g, spec()).rfind("DataLossError: ", 0), 0u) << outcome(g, spec());
}

TEST(ExampleHostile, DeepNestingInUnknownFieldsIsSkippedFlat) {
  // 20,000 levels of LEN fields inside an unknown Example field: skipped as one payload.
  std::string nested = "x";
  for (int depth = 0; depth < 20'000; ++depth) {
    ProtoWriter w;
    w.add_bytes(1, nested);
    nested = w.release();
  }
  ProtoWriter junk;
  junk.add_bytes(7, nested);
  const std::string record = valid_example() + junk.data();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(outcome(record, spec()), "ok");
  const FeatureSpecs numeric{{"f", FixedLenFeature{Shape{4}, DType::kFloat32}}};
  EXPECT_EQ(parse_single_example(record, numeric).dense("f").to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST(ExampleHostile, ManyEntriesAndEmptyValuesStayBounded) {
  // 200,000 entries of one name (the last wins) and a bytes_list of 500,000 empty strings.
  ProtoWriter features;
  for (int k = 0; k < 200'000; ++k) {
    ProtoWriter ints, feature, entry;
    ints.add_int64(1, k);
    feature.add_message(3, ints);
    entry.add_bytes(1, "i");
    entry.add_message(2, feature);
    features.add_message(1, entry);
  }
  ProtoWriter empties, bytes_feature, entry;
  for (int k = 0; k < 500'000; ++k) empties.add_bytes(1, "");
  bytes_feature.add_message(1, empties);
  entry.add_bytes(1, "e");
  entry.add_message(2, bytes_feature);
  features.add_message(1, entry);
  ProtoWriter ex;
  ex.add_message(1, features);
  const std::string record = ex.release();
  const auto t0 = std::chrono::steady_clock::now();
  const ParsedFeatures p = parse_single_example(record, {{"i", FixedLenFeature{Shape{}, DType::kInt64}}});
  EXPECT_EQ(p.dense("i").item<std::int64_t>(), 199'999);
  const std::string keys[] = {"e"};
  EXPECT_EQ(read_feature_lists(record, keys)[0].bytes.size(), 500'000u);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

}  // namespace
}  // namespace chorus::data::io
