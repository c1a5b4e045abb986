// libFuzzer target: tf.train.Example parsing as chorus-train --tfrecord does it
// (launch/tfrecord_digits.h, parse_digit_example: one record's bytes → 784 pixels and a label).
// Input: one serialized Example. Contract: DataLossError for anything that is not a valid Example
// of the digit layout; an accepted one has 784 pixels in [0, 1] and a label 0..9, and an Example
// serialized from it (bytes image) parses back to the same label.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_util.h"
#include <chorus/launch/tfrecord_digits.h>

using chorus::fuzz::check;
namespace launch = chorus::launch;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  launch::DigitExample d;
  try {
    d = launch::parse_digit_example(chorus::fuzz::as_view(data, size));
  } catch (const chorus::Error& e) {
    chorus::fuzz::expect_error<chorus::DataLossError>(e);
    return 0;
  }
  check(d.pixels.size() == static_cast<std::size_t>(launch::kDigitPixels), "784 pixels");
  check(d.label >= 0 && d.label <= 9, "label 0..9");
  // Float images are taken as given (the header asks for [0, 1] but does not promise a check);
  // byte images are scaled. Re-serialize as bytes and parse again.
  std::vector<std::uint8_t> bytes(d.pixels.size());
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const float p = d.pixels[i];
    bytes[i] = static_cast<std::uint8_t>(std::isfinite(p) && p > 0 ? (p >= 1 ? 255 : std::lround(p * 255)) : 0);
  }
  const launch::DigitExample again = launch::parse_digit_example(launch::serialize_digit_example(bytes, d.label));
  check(again.label == d.label && again.pixels.size() == d.pixels.size(), "serialize → parse keeps the label");
  return 0;
}
