#include <chorus/launch/tfrecord_digits.h>

#include <glob.h>

#include <algorithm>
#include <optional>

#include <chorus/core/error.h>
#include <chorus/core/proto_wire.h>
#include <chorus/core/tensor.h>
#include <chorus/data/tfrecord.h>

namespace chorus::launch {
namespace {

using internal::str_cat;
using wire::ProtoReader;

// The feature values we care about, as found in one Feature message.
struct FeatureValue {
  std::optional<std::string> bytes;  // the first bytes_list value
  std::vector<float> floats;
  std::vector<std::int64_t> ints;
  int kind = 0;  // 1 bytes, 2 float, 3 int64, 0 none
};

FeatureValue parse_feature(std::string_view data) {
  FeatureValue out;
  ProtoReader r(data, "tf.train.Feature");
  while (r.next()) {
    const int kind = r.field();
    if (kind < 1 || kind > 3) {
      r.skip();
      continue;
    }
    out.kind = kind;
    ProtoReader list(r.read_bytes(), "tf.train.Feature list");
    while (list.next()) {
      if (list.field() != 1) {
        list.skip();
      } else if (kind == 1) {
        std::string_view v = list.read_bytes();
        if (!out.bytes) out.bytes = std::string(v);
      } else if (kind == 2) {
        wire::read_repeated_floats(list, out.floats);
      } else {
        wire::read_repeated_int64s(list, out.ints);
      }
    }
  }
  return out;
}

}  // namespace

DigitExample parse_digit_example(std::string_view record) {
  std::optional<FeatureValue> image, label;
  ProtoReader example(record, "tf.train.Example");
  while (example.next()) {
    if (example.field() != 1) {
      example.skip();
      continue;
    }
    ProtoReader features(example.read_bytes(), "tf.train.Features");
    while (features.next()) {
      if (features.field() != 1) {
        features.skip();
        continue;
      }
      ProtoReader entry(features.read_bytes(), "tf.train.Features map entry");
      std::string key;
      std::string_view value;
      while (entry.next()) {
        if (entry.field() == 1)
          key = std::string(entry.read_bytes());
        else if (entry.field() == 2)
          value = entry.read_bytes();
        else
          entry.skip();
      }
      if (key == "image")
        image = parse_feature(value);
      else if (key == "label")
        label = parse_feature(value);
    }
  }
  CHORUS_REQUIRE(
      image.has_value(), DataLossError,
      "tf.train.Example has no \"image\" feature; expected \"image\" (bytes, 784 uint8) and \"label\" (int64)");
  CHORUS_REQUIRE(label.has_value(), DataLossError, "tf.train.Example has no \"label\" feature; expected an int64_list");

  DigitExample out;
  if (image->kind == 1 && image->bytes) {
    CHORUS_REQUIRE(image->bytes->size() == static_cast<std::size_t>(kDigitPixels), DataLossError, "\"image\" has ",
                   image->bytes->size(), " bytes; expected ", kDigitPixels, " (28x28 uint8)");
    out.pixels.reserve(kDigitPixels);
    for (unsigned char c : *image->bytes) out.pixels.push_back(static_cast<float>(c) / 255.0f);
  } else if (image->kind == 2) {
    CHORUS_REQUIRE(image->floats.size() == static_cast<std::size_t>(kDigitPixels), DataLossError, "\"image\" has ",
                   image->floats.size(), " floats; expected ", kDigitPixels, " (28x28 in [0, 1])");
    out.pixels = std::move(image->floats);
  } else {
    throw DataLossError(str_cat("\"image\" must be a bytes_list (784 uint8) or a float_list (784 values); got ",
                                image->kind == 3 ? "an int64_list" : "an empty feature"));
  }
  CHORUS_REQUIRE(label->kind == 3 && label->ints.size() == 1, DataLossError,
                 "\"label\" must be an int64_list with one value; got ",
                 label->kind == 3 ? str_cat(label->ints.size(), " values") : std::string("another kind of list"));
  out.label = label->ints[0];
  CHORUS_REQUIRE(out.label >= 0 && out.label <= 9, DataLossError, "\"label\" is ", out.label,
                 "; expected a digit class 0..9");
  return out;
}

std::string serialize_digit_example(const std::vector<std::uint8_t>& pixels, std::int64_t label) {
  CHORUS_REQUIRE(pixels.size() == static_cast<std::size_t>(kDigitPixels), InvalidArgumentError,
                 "serialize_digit_example: ", pixels.size(), " pixels; expected ", kDigitPixels);
  using wire::ProtoWriter;
  const auto entry = [](std::string_view key, const ProtoWriter& feature) {
    ProtoWriter e;
    e.add_bytes(1, key);
    e.add_message(2, feature);
    return e;
  };
  ProtoWriter bytes_list, image;
  bytes_list.add_bytes(1, std::string_view(reinterpret_cast<const char*>(pixels.data()), pixels.size()));
  image.add_message(1, bytes_list);
  ProtoWriter int64_list, label_feature;
  const std::int64_t values[] = {label};
  int64_list.add_packed_varints(1, values);
  label_feature.add_message(3, int64_list);
  ProtoWriter features;
  features.add_message(1, entry("image", image));
  features.add_message(1, entry("label", label_feature));
  ProtoWriter example;
  example.add_message(1, features);
  return example.release();
}

namespace {

// One file's examples; a record that is not a digits example is named by file and position.
data::Dataset digits_of(const std::string& file, const data::TFRecordOptions& options) {
  return data::tfrecord_dataset({file}, options).enumerate().map([file](const data::Element& e) -> data::Element {
    DigitExample d;
    try {
      d = parse_digit_example(e.at(1).item<std::string>());
    } catch (const DataLossError& err) {
      throw DataLossError(str_cat("record ", e.at(0).item<std::int64_t>(), " of '", file, "': ", err.message()));
    }
    return {Tensor::from_vector(d.pixels, Shape{kDigitImageSize, kDigitImageSize, 1}),
            Tensor::scalar(static_cast<std::int32_t>(d.label))};
  });
}

// files[begin, end) in order, concatenated as a balanced tree (a chain would cost one call per
// file for every element).
data::Dataset digits_of(const std::vector<std::string>& files, std::size_t begin, std::size_t end,
                        const data::TFRecordOptions& options) {
  if (end - begin == 1) return digits_of(files[begin], options);
  const std::size_t mid = begin + (end - begin) / 2;
  return digits_of(files, begin, mid, options).concatenate(digits_of(files, mid, end, options));
}

}  // namespace

data::Dataset tfrecord_digits_dataset(const std::vector<std::string>& files, data::TFRecordOptions options) {
  CHORUS_REQUIRE(!files.empty(), InvalidArgumentError, "tfrecord_digits_dataset: no files");
  return digits_of(files, 0, files.size(), options);
}

std::vector<std::string> expand_file_patterns(const std::vector<std::string>& patterns) {
  std::vector<std::string> files;
  for (const auto& list : patterns) {
    std::size_t start = 0;
    while (start <= list.size()) {
      const std::size_t comma = std::min(list.find(',', start), list.size());
      const std::string pattern = list.substr(start, comma - start);
      start = comma + 1;
      if (pattern.empty()) continue;
      glob_t g{};
      const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
      std::vector<std::string> matched(g.gl_pathv, g.gl_pathv + (rc == 0 ? g.gl_pathc : 0));
      ::globfree(&g);
      CHORUS_REQUIRE(!matched.empty(), NotFoundError, "no file matches '", pattern, "'");
      std::sort(matched.begin(), matched.end());
      files.insert(files.end(), matched.begin(), matched.end());
    }
  }
  return files;
}

}  // namespace chorus::launch
