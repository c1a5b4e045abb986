// decode_jpeg / decode_image on JPEGs (chorus/data/io/jpeg.h) against TensorFlow 2.21: TF writes
// baseline 4:2:0 and 4:4:4, progressive, quality-50 and grayscale JPEGs, Pillow writes 4:2:2 with
// a 64x80 size, CMYK (Adobe) and a progressive 4:2:0; every decode (channels 0/1/3 × default,
// INTEGER_ACCURATE, no fancy upscaling, ratio 2/4/8; decode_image's uint8/uint16/float32) must equal
// tf.io.decode_jpeg's bytes exactly (tests/data/io/image_cases.py). No ±1 is allowed: chorus uses
// the system libjpeg-turbo (2.1.5), TF its bundled one, and their integer IDCTs, colour conversion
// and upsampling are the same code.
#include <gtest/gtest.h>

#include "tests/data/io/image_test_util.h"

namespace chorus::data {
namespace {

using testing::TempDir;

TEST(Jpeg, EveryDecodeEqualsTensorFlow) {
  std::string python;
  CHORUS_REQUIRE_INTEROP_PYTHON(python, "tensorflow, PIL");
  TempDir dir;
  const auto cases = testing::tf_image_cases(python, dir.str(""), "jpeg");
  ASSERT_GE(cases.size(), 190u);
  EXPECT_EQ(testing::check_cases(cases, dir.str("")), static_cast<int>(cases.size()));
  // The CMYK file really is CMYK and decodes to 3 channels (TF's rule), gray to 1.
  const std::string cmyk = testing::slurp(dir.str("cmyk.jpg"));
  EXPECT_EQ(decode_jpeg(cmyk).shape().dim(2), 3);
  EXPECT_THROW(decode_jpeg(cmyk, {.channels = 1}), InvalidArgumentError);  // libjpeg: CMYK → gray unsupported
  EXPECT_EQ(decode_jpeg(testing::slurp(dir.str("gray.jpg"))).shape(), (Shape{20, 31, 1}));
  EXPECT_EQ(decode_image(testing::slurp(dir.str("gray.jpg")), {.channels = 3}).shape(), (Shape{20, 31, 3}));
}

TEST(Jpeg, BadArgumentsAreInvalidArgument) {
  const std::string jpeg("\xff\xd8\xff\xe0", 4);
  EXPECT_THROW(decode_jpeg(jpeg, {.channels = 4}), InvalidArgumentError);
  EXPECT_THROW(decode_jpeg(jpeg, {.channels = 2}), InvalidArgumentError);
  EXPECT_THROW(decode_jpeg(jpeg, {.ratio = 3}), InvalidArgumentError);
  EXPECT_THROW(decode_jpeg(jpeg, {.dct_method = "FLOAT"}), InvalidArgumentError);
  EXPECT_THROW(decode_image(jpeg, {.channels = 4}), InvalidArgumentError);
  EXPECT_THROW(decode_jpeg(""), DataLossError);
  EXPECT_EQ(sniff_image_format(jpeg), "JPEG");
}

TEST(Jpeg, TruncatedHeaderIsDataLossNamingTheFileAndOffset) {
  try {
    decode_jpeg(std::string("\xff\xd8\xff\xe0\x00\x10JFIF", 10), {}, "cut.jpg");
    FAIL() << "decoded";
  } catch (const DataLossError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cut.jpg"), std::string::npos) << m;
    EXPECT_NE(m.find("at byte 10 of 10"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace chorus::data
