#include <chorus/launch/tfrecord_digits.h>

#include <glob.h>

#include <algorithm>

#include <chorus/core/error.h>
#include <chorus/core/tensor.h>
#include <chorus/data/io/example.h>
#include <chorus/data/tfrecord.h>

namespace chorus::launch {

using data::io::FeatureList;
using data::io::ListKind;
using internal::str_cat;

DigitExample parse_digit_example(std::string_view record) {
  static const std::string kKeys[] = {"image", "label"};
  std::vector<FeatureList> lists = data::io::read_feature_lists(record, kKeys);  // DataLossError if malformed
  FeatureList& image = lists[0];
  FeatureList& label = lists[1];
  CHORUS_REQUIRE(
      image.kind != ListKind::kNone, DataLossError,
      "tf.train.Example has no \"image\" feature; expected \"image\" (bytes, 784 uint8) and \"label\" (int64)");
  CHORUS_REQUIRE(label.kind != ListKind::kNone, DataLossError,
                 "tf.train.Example has no \"label\" feature; expected an int64_list");

  DigitExample out;
  if (image.kind == ListKind::kBytes && !image.bytes.empty()) {
    const std::string& bytes = image.bytes.front();  // one value: the 784 pixels
    CHORUS_REQUIRE(bytes.size() == static_cast<std::size_t>(kDigitPixels), DataLossError, "\"image\" has ",
                   bytes.size(), " bytes; expected ", kDigitPixels, " (28x28 uint8)");
    out.pixels.reserve(kDigitPixels);
    for (unsigned char c : bytes) out.pixels.push_back(static_cast<float>(c) / 255.0f);
  } else if (image.kind == ListKind::kFloat) {
    CHORUS_REQUIRE(image.floats.size() == static_cast<std::size_t>(kDigitPixels), DataLossError, "\"image\" has ",
                   image.floats.size(), " floats; expected ", kDigitPixels, " (28x28 in [0, 1])");
    out.pixels = std::move(image.floats);
  } else {
    throw DataLossError(str_cat("\"image\" must be a bytes_list (784 uint8) or a float_list (784 values); got ",
                                image.kind == ListKind::kInt64 ? "an int64_list" : "an empty bytes_list"));
  }
  CHORUS_REQUIRE(label.kind == ListKind::kInt64 && label.int64s.size() == 1, DataLossError,
                 "\"label\" must be an int64_list with one value; got ",
                 label.kind == ListKind::kInt64 ? str_cat(label.int64s.size(), " values")
                                                : str_cat("a ", data::io::list_kind_name(label.kind)));
  out.label = label.int64s[0];
  CHORUS_REQUIRE(out.label >= 0 && out.label <= 9, DataLossError, "\"label\" is ", out.label,
                 "; expected a digit class 0..9");
  return out;
}

std::string serialize_digit_example(const std::vector<std::uint8_t>& pixels, std::int64_t label) {
  CHORUS_REQUIRE(pixels.size() == static_cast<std::size_t>(kDigitPixels), InvalidArgumentError,
                 "serialize_digit_example: ", pixels.size(), " pixels; expected ", kDigitPixels);
  FeatureList image, label_list;
  image.kind = ListKind::kBytes;
  image.bytes.emplace_back(reinterpret_cast<const char*>(pixels.data()), pixels.size());
  label_list.kind = ListKind::kInt64;
  label_list.int64s = {label};
  return data::io::serialize_example({{"image", std::move(image)}, {"label", std::move(label_list)}});
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
