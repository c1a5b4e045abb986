// TF2's summary recipes: histogram bucketing (analytic cases), image conversion and layout,
// scalar and text values.
#include <chorus/summary/summary_values.h>

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include <chorus/core/error.h>
#include <chorus/core/tensor.h>
#include <chorus/summary/png.h>

namespace chorus::summary {
namespace {

using Row = std::array<double, 3>;

TEST(HistogramBuckets, EqualWidthBucketsFromMinToMax) {
  // 0..9 in 5 buckets of width 9/5 = 1.8: floor(x / 1.8) = 0,0,1,1,2,2,3,3,4,5→4 (clamped).
  std::vector<double> data;
  for (int i = 0; i < 10; ++i) data.push_back(i);
  const auto b = histogram_buckets(data, 5);
  ASSERT_EQ(b.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_DOUBLE_EQ(b[i][0], 1.8 * i);
    EXPECT_DOUBLE_EQ(b[i][1], 1.8 * (i + 1));
    EXPECT_EQ(b[i][2], 2) << i;
  }
  EXPECT_EQ(b.back()[1], 9.0) << "the last right edge is exactly max";
}

TEST(HistogramBuckets, SingleValueEmptyAndZeroBuckets) {
  const auto one = histogram_buckets(std::vector<double>{3, 3, 3}, 4);
  ASSERT_EQ(one.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(one[i], (Row{3, 3, 0}));
  EXPECT_EQ(one[3], (Row{3, 3, 3}));

  const auto empty = histogram_buckets(std::vector<double>{}, 30);
  ASSERT_EQ(empty.size(), 30u);
  for (const Row& r : empty) EXPECT_EQ(r, (Row{0, 0, 0}));

  EXPECT_TRUE(histogram_buckets(std::vector<double>{1, 2}, 0).empty());
  EXPECT_THROW(histogram_buckets(std::vector<double>{1}, -1), InvalidArgumentError);
}

TEST(HistogramBuckets, CountsSumToTheSizeAndEdgesAscend) {
  std::mt19937 rng(3);
  std::normal_distribution<double> normal(2.0, 5.0);
  std::vector<double> data(10000);
  for (double& x : data) x = normal(rng);
  const auto b = histogram_buckets(data);
  ASSERT_EQ(b.size(), static_cast<std::size_t>(kDefaultHistogramBuckets));
  double total = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    total += b[i][2];
    EXPECT_LT(b[i][0], b[i][1]);
    if (i > 0) {
      EXPECT_NEAR(b[i][0], b[i - 1][1], 1e-12);
    }
  }
  EXPECT_EQ(total, 10000);
  EXPECT_EQ(b.front()[0], *std::min_element(data.begin(), data.end()));
  EXPECT_EQ(b.back()[1], *std::max_element(data.begin(), data.end()));
}

TEST(HistogramBuckets, NonFiniteValuesAreRejectedWithTheirCount) {
  try {
    histogram_buckets(std::vector<double>{1, NAN, INFINITY, 2});
    FAIL();
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("2 non-finite"), std::string::npos) << e.what();
  }
}

TEST(SummaryValues, HistogramValueIsAKx3DoubleTensor) {
  const std::vector<Row> rows{{0, 1, 2}, {1, 2, 5}};
  const SummaryValue v = histogram_value("w", rows);
  EXPECT_EQ(v.tag, "w");
  EXPECT_EQ(v.plugin_name(), "histograms");
  EXPECT_EQ(v.metadata->data_class, DataClass::kTensor);
  EXPECT_EQ(v.tensor->dtype, tf_dtype::kDouble);
  EXPECT_EQ(*v.tensor->shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(v.tensor->to_doubles(), (std::vector<double>{0, 1, 2, 1, 2, 5}));
}

// UINT16 (a 16-bit image's pixels) reads from tensor_content (little-endian) and from int_val.
TEST(SummaryValues, Uint16TensorsReadAsDoubles) {
  TensorProto t;
  t.dtype = tf_dtype::kUInt16;
  t.shape = std::vector<std::int64_t>{3};
  t.tensor_content = std::string("\x00\x00\x01\x01\xff\xff", 6);
  EXPECT_EQ(t.to_doubles(), (std::vector<double>{0, 257, 65535}));
  t.tensor_content.clear();
  t.int_val = {7, 65535, 0};
  EXPECT_EQ(t.to_doubles(), (std::vector<double>{7, 65535, 0}));
  t.int_val.clear();
  t.tensor_content = std::string("\x01\x00\x02", 3);  // 1.5 elements
  EXPECT_THROW(t.to_doubles(), DataLossError);
}

TEST(SummaryValues, ScalarAndTextValues) {
  const SummaryValue s = scalar_value("loss", 0.25f);
  EXPECT_EQ(s.plugin_name(), "scalars");
  EXPECT_EQ(s.tensor->dtype, tf_dtype::kFloat);
  EXPECT_TRUE(s.tensor->shape->empty());
  EXPECT_EQ(s.tensor->to_doubles(), std::vector<double>{0.25});

  const SummaryValue t = text_value("notes", "**bold** text");
  EXPECT_EQ(t.plugin_name(), "text");
  EXPECT_EQ(t.tensor->dtype, tf_dtype::kString);
  EXPECT_TRUE(t.tensor->shape->empty());
  EXPECT_EQ(t.tensor->string_val, std::vector<std::string>{"**bold** text"});
}

TEST(SummaryValues, Uint8ImagesAreEncodedAsIsWidthFirst) {
  // 3 images of 2 (high) × 3 (wide) × 1; only max_outputs = 2 are written.
  std::vector<std::uint8_t> px(3 * 2 * 3);
  for (std::size_t i = 0; i < px.size(); ++i) px[i] = static_cast<std::uint8_t>(i * 10);
  const Tensor images = Tensor::from_vector(px, Shape{3, 2, 3, 1});
  const EncodedImages enc = encode_images(images, 2);
  EXPECT_EQ(enc.width, 3);
  EXPECT_EQ(enc.height, 2);
  ASSERT_EQ(enc.png.size(), 2u);
  EXPECT_EQ(enc.png[0], encode_png(px.data(), 2, 3, 1));
  EXPECT_EQ(enc.png[1], encode_png(px.data() + 6, 2, 3, 1));

  const SummaryValue v = image_value("digits", enc);
  EXPECT_EQ(v.plugin_name(), "images");
  EXPECT_EQ(v.metadata->data_class, DataClass::kBlobSequence);
  EXPECT_EQ(v.tensor->dtype, tf_dtype::kString);
  EXPECT_EQ(*v.tensor->shape, std::vector<std::int64_t>{4});
  ASSERT_EQ(v.tensor->string_val.size(), 4u);
  EXPECT_EQ(v.tensor->string_val[0], "3") << "width first (TF2)";
  EXPECT_EQ(v.tensor->string_val[1], "2");
  EXPECT_EQ(v.tensor->string_val[2], enc.png[0]);

  EXPECT_TRUE(encode_images(images, 0).png.empty());
}

TEST(SummaryValues, FloatImagesConvertAsConvertImageDtype) {
  // trunc(clamp(x * 255.5, 0, 255)); NaN → 0.
  const std::vector<float> x{0.0f, 0.5f, 1.0f, 1.5f, -0.2f, NAN, 0.25f, 0.999f};
  const std::vector<std::uint8_t> want{0, 127, 255, 255, 0, 0, 63, 255};
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const Tensor cast = dtype == DType::kFloat32
                            ? Tensor::from_vector(x, Shape{1, 2, 4, 1})
                            : Tensor::from_vector(std::vector<double>(x.begin(), x.end()), Shape{1, 2, 4, 1});
    const EncodedImages enc = encode_images(cast, 3);
    ASSERT_EQ(enc.png.size(), 1u);
    EXPECT_EQ(enc.png[0], encode_png(want.data(), 2, 4, 1)) << dtype_name(dtype);
  }
}

TEST(SummaryValues, BadImagesAreInvalidArgument) {
  const Tensor rank3 = Tensor::zeros(Shape{2, 2, 1}, DType::kUInt8);
  const Tensor two_channels = Tensor::zeros(Shape{1, 2, 2, 2}, DType::kUInt8);
  const Tensor ints = Tensor::zeros(Shape{1, 2, 2, 1}, DType::kInt32);
  const Tensor empty_h = Tensor::zeros(Shape{1, 0, 2, 1}, DType::kUInt8);
  const Tensor ok = Tensor::zeros(Shape{1, 2, 2, 3}, DType::kUInt8);
  EXPECT_THROW(encode_images(rank3, 1), InvalidArgumentError);
  EXPECT_THROW(encode_images(two_channels, 1), InvalidArgumentError);
  EXPECT_THROW(encode_images(ints, 1), InvalidArgumentError);
  EXPECT_THROW(encode_images(empty_h, 1), InvalidArgumentError);
  EXPECT_THROW(encode_images(ok, -1), InvalidArgumentError);
  EXPECT_THROW(encode_images(Tensor(), 1), InvalidArgumentError);
  EXPECT_EQ(encode_images(ok, 1).png.size(), 1u);
}

}  // namespace
}  // namespace chorus::summary
