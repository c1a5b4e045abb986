#include <chorus/launch/tfrecord_digits.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <chorus/core/error.h>
#include <chorus/data/tfrecord.h>

namespace chorus::launch {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Protobuf encoding written out by hand (protobuf.dev/programming-guides/encoding), independent of
// core/proto_wire.h, so the parser is checked against the wire format itself: what
// tf.train.Example(...).SerializeToString() produces.
std::string varint(std::uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
  return out;
}
std::string len_field(int field, const std::string& payload) {
  return static_cast<char>(field << 3 | 2) + varint(payload.size()) + payload;
}
std::string map_entry(const std::string& key, const std::string& feature) {
  return len_field(1, len_field(1, key) + len_field(2, feature));
}
std::string bytes_feature(const std::string& bytes) { return len_field(1, len_field(1, bytes)); }
std::string int64_feature(std::int64_t v) { return len_field(3, len_field(1, varint(static_cast<std::uint64_t>(v)))); }
std::string example(const std::string& entries) { return len_field(1, entries); }

std::vector<std::uint8_t> ramp() {
  std::vector<std::uint8_t> p(kDigitPixels);
  for (int i = 0; i < kDigitPixels; ++i) p[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i % 256);
  return p;
}

std::string error_of(const std::string& record) {
  try {
    parse_digit_example(record);
  } catch (const DataLossError& e) {
    return e.message();
  }
  ADD_FAILURE() << "parse_digit_example did not throw";
  return "";
}

TEST(TFRecordDigits, ParsesTheWireFormat) {
  const auto pixels = ramp();
  const std::string image(pixels.begin(), pixels.end());
  const std::string record = example(map_entry("label", int64_feature(7)) + map_entry("image", bytes_feature(image)));
  // Sizes as protobuf computes them: the 784-byte value needs a 2-byte length (0x90 0x06).
  EXPECT_EQ(static_cast<unsigned char>(record[0]), 0x0a);
  const DigitExample d = parse_digit_example(record);
  EXPECT_EQ(d.label, 7);
  ASSERT_EQ(d.pixels.size(), static_cast<std::size_t>(kDigitPixels));
  EXPECT_FLOAT_EQ(d.pixels[0], 0.0f);
  EXPECT_FLOAT_EQ(d.pixels[255], 1.0f);
  EXPECT_FLOAT_EQ(d.pixels[300], 44.0f / 255.0f);
}

TEST(TFRecordDigits, SerializeMatchesTheHandEncoding) {
  const auto pixels = ramp();
  const std::string image(pixels.begin(), pixels.end());
  EXPECT_EQ(serialize_digit_example(pixels, 3),
            example(map_entry("image", bytes_feature(image)) + map_entry("label", int64_feature(3))));
}

TEST(TFRecordDigits, AcceptsAFloatImage) {
  std::string floats;
  for (int i = 0; i < kDigitPixels; ++i) {
    const float v = static_cast<float>(i) / kDigitPixels;
    floats.append(reinterpret_cast<const char*>(&v), 4);  // little-endian fixed32, as packed floats are
  }
  const std::string record =
      example(map_entry("image", len_field(2, len_field(1, floats))) + map_entry("label", int64_feature(9)));
  const DigitExample d = parse_digit_example(record);
  EXPECT_EQ(d.label, 9);
  EXPECT_FLOAT_EQ(d.pixels[392], 0.5f);
}

TEST(TFRecordDigits, IgnoresOtherFeatures) {
  const auto pixels = ramp();
  const std::string record = example(map_entry("height", int64_feature(28)) +
                                     map_entry("image", bytes_feature(std::string(pixels.begin(), pixels.end()))) +
                                     map_entry("label", int64_feature(0)));
  EXPECT_EQ(parse_digit_example(record).label, 0);
}

TEST(TFRecordDigits, BadRecordsAreDataLoss) {
  const auto pixels = ramp();
  const std::string image = bytes_feature(std::string(pixels.begin(), pixels.end()));
  EXPECT_THAT(error_of(example(map_entry("label", int64_feature(7)))), HasSubstr("no \"image\" feature"));
  EXPECT_THAT(error_of(example(map_entry("image", image))), HasSubstr("no \"label\" feature"));
  EXPECT_THAT(error_of(example(map_entry("image", bytes_feature("abc")) + map_entry("label", int64_feature(1)))),
              HasSubstr("\"image\" has 3 bytes; expected 784"));
  EXPECT_THAT(error_of(example(map_entry("image", image) + map_entry("label", int64_feature(10)))),
              HasSubstr("\"label\" is 10"));
  EXPECT_THAT(error_of(example(map_entry("image", image) + map_entry("label", bytes_feature("7")))),
              HasSubstr("\"label\" must be an int64_list"));
  EXPECT_THAT(error_of(example(map_entry("image", int64_feature(1)) + map_entry("label", int64_feature(1)))),
              HasSubstr("got an int64_list"));
  EXPECT_THAT(error_of("\x0a\x05\x01"), HasSubstr("malformed"));
}

class TFRecordFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("chorus_tfrecord_digits_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(TFRecordFiles, DatasetYieldsImagesAndLabels) {
  auto pixels = ramp();
  std::vector<std::string> records;
  for (int label = 0; label < 3; ++label) {
    pixels[0] = static_cast<std::uint8_t>(label * 100);
    records.push_back(serialize_digit_example(pixels, label));
  }
  const std::string path = (dir_ / "a.tfrecord").string();
  data::write_tfrecord_file(path, records);
  auto it = tfrecord_digits_dataset({path}).make_iterator();
  for (int label = 0; label < 3; ++label) {
    auto e = it.next();
    ASSERT_TRUE(e.has_value());
    ASSERT_EQ(e->size(), 2u);
    EXPECT_EQ((*e)[0].shape(), (Shape{28, 28, 1}));
    EXPECT_FLOAT_EQ((*e)[0].to_vector<float>()[0], static_cast<float>(label * 100) / 255.0f);
    EXPECT_EQ((*e)[1].to_vector<std::int32_t>(), (std::vector<std::int32_t>{label}));
  }
  EXPECT_FALSE(it.next().has_value());
}

// Issue 40: a label out of range said `"label" is 10; expected a digit class 0..9` without the
// file, so a user with many files could not find the bad one.
TEST_F(TFRecordFiles, ABadRecordIsNamedByFileAndPositionAcrossFiles) {
  const auto pixels = ramp();
  const std::string good = (dir_ / "good.tfrecord").string(), bad = (dir_ / "bad.tfrecord").string();
  data::write_tfrecord_file(good, {serialize_digit_example(pixels, 1), serialize_digit_example(pixels, 2)});
  data::write_tfrecord_file(bad, {serialize_digit_example(pixels, 3), serialize_digit_example(pixels, 10)});
  auto it = tfrecord_digits_dataset({good, good, bad}).make_iterator();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(it.next().has_value()) << i;
  try {
    it.next();
    FAIL() << "no DataLossError";
  } catch (const DataLossError& e) {
    EXPECT_THAT(e.message(), HasSubstr("record 1 of '" + bad + "'"));
    EXPECT_THAT(e.message(), HasSubstr("\"label\" is 10"));
  }
}

TEST_F(TFRecordFiles, PatternsExpandSortedAndMissingOnesAreNamed) {
  for (const char* name : {"train-1.tfrecord", "train-0.tfrecord", "test.tfrecord"}) std::ofstream(dir_ / name) << "";
  const std::string d = dir_.string();
  EXPECT_EQ(expand_file_patterns({d + "/train-*.tfrecord"}),
            (std::vector<std::string>{d + "/train-0.tfrecord", d + "/train-1.tfrecord"}));
  EXPECT_EQ(expand_file_patterns({d + "/test.tfrecord," + d + "/train-1.tfrecord"}),
            (std::vector<std::string>{d + "/test.tfrecord", d + "/train-1.tfrecord"}));
  try {
    expand_file_patterns({d + "/nothing-*.tfrecord"});
    FAIL() << "no NotFoundError";
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.message(), HasSubstr("nothing-*.tfrecord"));
  }
}

}  // namespace
}  // namespace chorus::launch
