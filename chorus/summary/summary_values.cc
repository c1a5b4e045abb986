#include <chorus/summary/summary_values.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include <chorus/core/error.h>
#include <chorus/core/tensor.h>
#include <chorus/summary/png.h>

namespace chorus::summary {

std::vector<std::array<double, 3>> histogram_buckets(std::span<const double> data, int bucket_count) {
  CHORUS_REQUIRE(bucket_count >= 0, InvalidArgumentError, "histogram bucket count must be >= 0, got ", bucket_count);
  const auto k = static_cast<std::size_t>(bucket_count);
  std::vector<std::array<double, 3>> out(k, std::array<double, 3>{0, 0, 0});
  if (data.empty() || k == 0) return out;

  std::size_t non_finite = 0;
  double lo = INFINITY, hi = -INFINITY;
  for (double x : data) {
    if (!std::isfinite(x)) {
      ++non_finite;
      continue;
    }
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  CHORUS_REQUIRE(non_finite == 0, InvalidArgumentError, "histogram data has ", non_finite,
                 " non-finite value(s) (NaN or inf) among ", data.size(), "; only finite values can be bucketed");

  const double range = hi - lo;
  if (range == 0) {
    for (auto& row : out) row = {hi, hi, 0};
    out.back()[2] = static_cast<double>(data.size());
    return out;
  }
  const double width = range / static_cast<double>(k);
  for (double x : data) {
    const double b = std::floor((x - lo) / width);
    // b >= 0 since x >= lo; values at (or rounding past) max are clamped into the last bucket.
    const std::size_t i = b >= static_cast<double>(k - 1) ? k - 1 : static_cast<std::size_t>(b);
    out[i][2] += 1;
  }
  // tf.linspace(min, max, k + 1) with its last entry forced to max.
  const double step = range / static_cast<double>(k);
  for (std::size_t i = 0; i < k; ++i) {
    out[i][0] = lo + static_cast<double>(i) * step;
    out[i][1] = i + 1 == k ? hi : lo + static_cast<double>(i + 1) * step;
  }
  return out;
}

namespace {

// tf.image.convert_image_dtype(float → uint8, saturate=True): x · (255 + 0.5), then a saturating
// (truncating) cast, in the input's own precision.
template <typename F>
std::vector<std::uint8_t> to_uint8(const std::vector<F>& v, std::size_t count) {
  std::vector<std::uint8_t> out(count);
  for (std::size_t i = 0; i < count; ++i) {
    const F x = v[i] * static_cast<F>(255.5);
    out[i] = std::isnan(x) ? 0 : static_cast<std::uint8_t>(std::clamp(x, F(0), F(255)));
  }
  return out;
}

}  // namespace

void validate_images(const Tensor& images, int max_outputs) {
  CHORUS_REQUIRE(images.defined(), InvalidArgumentError, "image summary: the images tensor is undefined");
  CHORUS_REQUIRE(images.shape().rank() == 4, InvalidArgumentError,
                 "image summary: images must have rank 4 [k, height, width, channels], got shape ",
                 images.shape().to_string());
  const std::int64_t c = images.shape().dim(3);
  CHORUS_REQUIRE(c == 1 || c == 3 || c == 4, InvalidArgumentError,
                 "image summary: channels must be 1 (gray), 3 (RGB) or 4 (RGBA), got ", c, " in shape ",
                 images.shape().to_string());
  CHORUS_REQUIRE(images.shape().dim(1) > 0 && images.shape().dim(2) > 0, InvalidArgumentError,
                 "image summary: height and width must be > 0, got shape ", images.shape().to_string());
  CHORUS_REQUIRE(images.dtype() == DType::kUInt8 || is_floating(images.dtype()), InvalidArgumentError,
                 "image summary: dtype must be uint8 or floating (values in [0, 1]), got ", dtype_name(images.dtype()));
  CHORUS_REQUIRE(max_outputs >= 0, InvalidArgumentError, "image summary: max_outputs must be >= 0, got ", max_outputs);
}

EncodedImages encode_images(const Tensor& images, int max_outputs) {
  validate_images(images, max_outputs);
  const std::int64_t k = images.shape().dim(0), h = images.shape().dim(1), w = images.shape().dim(2);
  const int c = static_cast<int>(images.shape().dim(3));
  EncodedImages out;
  out.width = w;
  out.height = h;
  const std::int64_t n = std::min<std::int64_t>(k, max_outputs);
  if (n == 0) return out;
  const auto per_image = static_cast<std::size_t>(h * w * c);
  const std::size_t count = static_cast<std::size_t>(n) * per_image;
  std::vector<std::uint8_t> pixels;
  if (images.dtype() == DType::kUInt8) {
    pixels = images.to_vector<std::uint8_t>();
  } else if (images.dtype() == DType::kFloat64) {
    pixels = to_uint8(images.to_vector<double>(), count);
  } else {
    pixels = to_uint8(images.to_vector<float>(), count);  // float32/16, bfloat16: computed in float32, as TF
  }
  for (std::int64_t i = 0; i < n; ++i)
    out.png.push_back(encode_png(pixels.data() + static_cast<std::size_t>(i) * per_image, h, w, c));
  return out;
}

SummaryMetadata plugin_metadata(std::string_view plugin_name, DataClass data_class) {
  SummaryMetadata m;
  m.plugin_data.plugin_name = std::string(plugin_name);
  m.data_class = data_class;
  return m;
}

SummaryValue scalar_value(std::string_view tag, float value) {
  SummaryValue v;
  v.tag = std::string(tag);
  TensorProto t;
  t.dtype = tf_dtype::kFloat;
  t.shape = std::vector<std::int64_t>{};
  t.tensor_content.resize(4);
  std::memcpy(t.tensor_content.data(), &value, 4);
  v.tensor = std::move(t);
  // No data class: byte-for-byte what TF2 writes (docs/formats.md A8); readers map "scalars" to SCALAR.
  v.metadata = plugin_metadata("scalars");
  return v;
}

SummaryValue histogram_value(std::string_view tag, const std::vector<std::array<double, 3>>& buckets) {
  SummaryValue v;
  v.tag = std::string(tag);
  TensorProto t;
  t.dtype = tf_dtype::kDouble;
  t.shape = std::vector<std::int64_t>{static_cast<std::int64_t>(buckets.size()), 3};
  t.tensor_content.resize(buckets.size() * 3 * sizeof(double));
  if (!buckets.empty()) std::memcpy(t.tensor_content.data(), buckets.data(), t.tensor_content.size());
  v.tensor = std::move(t);
  v.metadata = plugin_metadata("histograms", DataClass::kTensor);
  return v;
}

SummaryValue image_value(std::string_view tag, const EncodedImages& images) {
  SummaryValue v;
  v.tag = std::string(tag);
  TensorProto t;
  t.dtype = tf_dtype::kString;
  t.shape = std::vector<std::int64_t>{static_cast<std::int64_t>(2 + images.png.size())};
  t.string_val.push_back(std::to_string(images.width));
  t.string_val.push_back(std::to_string(images.height));
  for (const std::string& png : images.png) t.string_val.push_back(png);
  v.tensor = std::move(t);
  v.metadata = plugin_metadata("images", DataClass::kBlobSequence);
  return v;
}

SummaryValue text_value(std::string_view tag, std::string_view text) {
  SummaryValue v;
  v.tag = std::string(tag);
  TensorProto t;
  t.dtype = tf_dtype::kString;
  t.shape = std::vector<std::int64_t>{};
  t.string_val.emplace_back(text);
  v.tensor = std::move(t);
  v.metadata = plugin_metadata("text", DataClass::kTensor);
  return v;
}

}  // namespace chorus::summary
