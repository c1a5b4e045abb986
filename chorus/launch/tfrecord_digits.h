// Digit images in TFRecord files of tf.train.Example records — the input chorus-train reads with
// --tfrecord. The layout is the common MNIST-to-TFRecord one:
//
//   tf.train.Example(features=tf.train.Features(feature={
//       "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[img.tobytes()])),  # 784 uint8
//       "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),     # 0..9
//   }))
//
// "image" may instead be a float_list of 784 values in [0, 1]. Images are 28×28×1, row-major;
// bytes are scaled by 1/255 as data/mnist.h does. Other features are ignored. Elements are
// (image [28, 28, 1] float32, label int32 scalar), exactly what data::synthetic_digits and
// data::mnist_dataset yield, so a model trained on one reads the others.
//
// The Example is read by chorus's one tf.Example parser, data/io/example.h (read_feature_lists, on
// core/proto_wire.h; its wire rules: the last entry of a repeated name wins, a Feature's first list
// decides, a Feature with no list is missing). "image" as bytes takes the list's first value.
//
// Errors: a record that is not a valid Example, or lacks "image" or "label", or has an image of
// another size or a label outside 0..9 → DataLossError naming the problem and the value seen
// (thrown by the iterator's next() for that element, as any map error). Framing and CRC errors are
// data/tfrecord.h's. Thread-safe: pure functions; datasets as data/dataset.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/data/dataset.h>
#include <chorus/data/tfrecord.h>

namespace chorus::launch {

inline constexpr int kDigitImageSize = 28;
inline constexpr int kDigitPixels = kDigitImageSize * kDigitImageSize;

struct DigitExample {
  std::vector<float> pixels;  // kDigitPixels values in [0, 1]
  std::int64_t label = 0;
};

// Parses one serialized tf.train.Example of the layout above.
DigitExample parse_digit_example(std::string_view record);
// Serializes the layout above with "image" as bytes (pixels must be kDigitPixels uint8 values):
// what a TF script writes; used by tests and to convert data for chorus-train.
std::string serialize_digit_example(const std::vector<std::uint8_t>& pixels, std::int64_t label);

// tfrecord_dataset(files) mapped through parse_digit_example: (image [28,28,1] float32, label int32).
data::Dataset tfrecord_digits_dataset(const std::vector<std::string>& files, data::TFRecordOptions options = {});

// Expands each entry — a path or a glob(3) pattern ("data/train-*.tfrecord"); an entry may also be
// a comma-separated list of them — into sorted file paths, entries in order. A pattern or path
// that matches nothing → NotFoundError naming it.
std::vector<std::string> expand_file_patterns(const std::vector<std::string>& patterns);

}  // namespace chorus::launch
