// decode_png / encode_png (chorus/data/io/png.h) against TensorFlow 2.21: TF (and a small PNG
// writer for what TF cannot write: palette, tRNS, 1/2/4-bit gray, Adam7) writes the files, and every
// decode (channels 0/1/3/4 × uint8/uint16, decode_image's uint8/uint16/float32) must equal
// tf.io.decode_png's bytes exactly (tests/data/io/image_cases.py). Then chorus's encoder: round
// trips, and TF decodes what chorus wrote.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "tests/data/io/image_test_util.h"

namespace chorus::data {
namespace {

using testing::slurp;
using testing::spit;
using testing::TempDir;

TEST(Png, EveryDecodeEqualsTensorFlow) {
  std::string python;
  CHORUS_REQUIRE_INTEROP_PYTHON(python, "tensorflow, PIL");
  TempDir dir;
  const auto cases = testing::tf_image_cases(python, dir.str(""), "png");
  ASSERT_GE(cases.size(), 200u);
  EXPECT_EQ(testing::check_cases(cases, dir.str("")), static_cast<int>(cases.size()));
}

Image random_image(std::int64_t h, std::int64_t w, int c, ImageDType dt, unsigned seed) {
  std::mt19937 rng(seed);
  Image im{.height = h, .width = w, .channels = c, .dtype = dt};
  if (dt == ImageDType::kUInt8) {
    im.u8.resize(static_cast<std::size_t>(im.num_values()));
    for (auto& v : im.u8) v = static_cast<std::uint8_t>(rng());
  } else {
    im.u16.resize(static_cast<std::size_t>(im.num_values()));
    for (auto& v : im.u16) v = static_cast<std::uint16_t>(rng());
  }
  return im;
}

TEST(Png, EncodeDecodeRoundTripsEveryChannelCountAndDepth) {
  for (int c = 1; c <= 4; ++c)
    for (ImageDType dt : {ImageDType::kUInt8, ImageDType::kUInt16})
      for (int level : {-1, 0, 9}) {
        SCOPED_TRACE(::testing::Message()
                     << c << " channels, 16-bit " << (dt == ImageDType::kUInt16) << ", level " << level);
        const Image im = random_image(7, 5, c, dt, static_cast<unsigned>(c * 10 + level));
        const Image back = decode_png_values(encode_png(im, level), {.dtype = dt});
        EXPECT_EQ(back.height, 7);
        EXPECT_EQ(back.width, 5);
        EXPECT_EQ(back.channels, c);
        EXPECT_EQ(back.u8, im.u8);
        EXPECT_EQ(back.u16, im.u16);
      }
}

TEST(Png, TensorFormsRoundTrip) {
  const Tensor img = Tensor::from_vector<std::uint8_t>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, Shape{2, 2, 3});
  const Tensor back = decode_png(encode_png(img));
  EXPECT_EQ(back.dtype(), DType::kUInt8);
  EXPECT_EQ(back.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(back.to_vector<std::uint8_t>(), img.to_vector<std::uint8_t>());
  const Tensor wide = Tensor::from_vector<std::uint16_t>({0, 65535, 257, 4660}, Shape{2, 1, 2});
  const Tensor wide_back = decode_png(encode_png(wide), {.dtype = ImageDType::kUInt16});
  EXPECT_EQ(wide_back.dtype(), DType::kUInt16);
  EXPECT_EQ(wide_back.to_vector<std::uint16_t>(), wide.to_vector<std::uint16_t>());
  // As uint8, a 16-bit file keeps each sample's high byte (TF's png_set_strip_16).
  EXPECT_EQ(decode_png(encode_png(wide)).to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{0, 255, 1, 18}));
  EXPECT_THROW(encode_png(Tensor::from_vector<std::int32_t>({7}, Shape{1, 1, 1})), InvalidArgumentError);
  EXPECT_THROW(encode_png(Tensor::from_vector<float>({1}, Shape{1, 1, 1})), InvalidArgumentError);
  EXPECT_THROW(encode_png(Tensor::from_vector<std::uint8_t>({1}, Shape{1, 1})), InvalidArgumentError);
  EXPECT_THROW(encode_png(Tensor::from_vector<std::uint8_t>({1, 2, 3, 4, 5}, Shape{1, 1, 5})), InvalidArgumentError);
}

// The op forms take and give scalar string tensors, as tf.io.encode_png / decode_png / decode_image
// do, so they compose in a Dataset::map over records or file contents.
TEST(Png, OpFormsTakeAndGiveScalarStringTensors) {
  const Tensor img = Tensor::from_vector<std::uint8_t>({1, 2, 3, 4, 5, 6}, Shape{1, 2, 3});
  const Tensor png = encode_png_tensor(img);
  EXPECT_EQ(png.dtype(), DType::kString);
  EXPECT_EQ(png.shape(), Shape{});
  EXPECT_EQ(png.item<std::string>(), encode_png(img));
  EXPECT_EQ(decode_png(png).to_vector<std::uint8_t>(), img.to_vector<std::uint8_t>());
  EXPECT_EQ(decode_image(png, {.channels = 1}).shape(), (Shape{1, 2, 1}));
  EXPECT_THROW(decode_jpeg(png), DataLossError);  // a PNG is no JPEG: the bytes, not the name, decide
  const Tensor two = Tensor::from_vector<std::string>({png.item<std::string>(), png.item<std::string>()});
  EXPECT_THROW(decode_png(two), InvalidArgumentError);    // not a scalar
  EXPECT_THROW(decode_image(img), InvalidArgumentError);  // not a string
  EXPECT_THROW(decode_png(Tensor()), InvalidArgumentError);
}

TEST(Png, TensorFlowDecodesWhatChorusEncodes) {
  std::string python;
  CHORUS_REQUIRE_INTEROP_PYTHON(python, "tensorflow");
  TempDir dir;
  std::string script = "import sys, numpy as np, tensorflow as tf\nd = sys.argv[1]\n";
  for (int c = 1; c <= 4; ++c)
    for (ImageDType dt : {ImageDType::kUInt8, ImageDType::kUInt16}) {
      const bool wide = dt == ImageDType::kUInt16;
      const std::string name = "c" + std::to_string(c) + (wide ? "_16" : "_8");
      const Image im = random_image(9, 4, c, dt, static_cast<unsigned>(c + 100 * wide));
      spit(dir.str(name + ".png"), encode_png(im));
      spit(dir.str(name + ".raw"), wide ? std::string(reinterpret_cast<const char*>(im.u16.data()), im.u16.size() * 2)
                                        : std::string(reinterpret_cast<const char*>(im.u8.data()), im.u8.size()));
      script += "t = tf.io.decode_png(open(d + '/" + name + ".png', 'rb').read(), dtype=tf." +
                (wide ? "uint16" : "uint8") + ").numpy()\nassert t.shape == (9, 4, " + std::to_string(c) +
                "), t.shape\nassert t.tobytes() == open(d + '/" + name + ".raw', 'rb').read(), '" + name + "'\n";
    }
  spit(dir.str("check.py"), script);
  EXPECT_EQ(chorus::testing::run_interop_command("'" + python + "' " + dir.str("check.py") + " " + dir.str(""), "tf"),
            0);
}

TEST(Png, BadArgumentsAreInvalidArgument) {
  const std::string png = encode_png(random_image(2, 2, 3, ImageDType::kUInt8, 1));
  EXPECT_THROW(decode_png(png, {.channels = 2}), InvalidArgumentError);
  EXPECT_THROW(decode_png(png, {.channels = 5}), InvalidArgumentError);
  EXPECT_THROW(decode_png(png, {.dtype = ImageDType::kFloat32}), InvalidArgumentError);
  std::uint8_t px[4] = {};
  EXPECT_THROW(encode_png(px, 1, 1, 0), InvalidArgumentError);
  EXPECT_THROW(encode_png(px, 1, 1, 5), InvalidArgumentError);
  EXPECT_THROW(encode_png(px, 0, 1, 1), InvalidArgumentError);
  EXPECT_THROW(encode_png(px, 1LL << 31, 1, 1), InvalidArgumentError);
  EXPECT_THROW(encode_png(px, 1, 1, 1, 12), InvalidArgumentError);
  EXPECT_THROW(encode_png(px, 1, 1, 1, 8, 10), InvalidArgumentError);
  EXPECT_THROW(encode_png(nullptr, 1, 1, 1), InvalidArgumentError);
}

TEST(Png, DecodeImageSniffsAndNamesWhatItSaw) {
  const std::string png = encode_png(random_image(3, 2, 1, ImageDType::kUInt8, 2));
  EXPECT_EQ(sniff_image_format(png), "PNG");
  EXPECT_EQ(decode_image(png).shape(), (Shape{3, 2, 1}));
  EXPECT_EQ(decode_image(png, {.channels = 3}).shape(), (Shape{3, 2, 3}));
  try {
    decode_image(std::string("GIF89a\x01\x00\x01\x00", 10), {}, "anim.gif");
    FAIL() << "GIF decoded";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("anim.gif is GIF"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("PNG and JPEG"), std::string::npos) << e.what();
  }
  try {
    decode_image("hello world", {}, "notes.txt");
    FAIL() << "text decoded";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("68 65 6c 6c 6f"), std::string::npos) << e.what();
  }
  EXPECT_THROW(decode_image("BM\x10\x00\x00\x00"), InvalidArgumentError);
  EXPECT_THROW(decode_image(""), DataLossError);
}

}  // namespace
}  // namespace chorus::data
