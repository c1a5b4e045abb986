// The Summary.Values TF2's tf.summary.scalar / histogram / image / text write (the recipes of
// docs/formats.md A8), as pure functions — SummaryWriter uses them, tests check them byte by
// byte, and anyone writing events by other means can reuse them.
//
//   scalar     tensor{DT_FLOAT, shape [], tensor_content 4 bytes} + plugin "scalars"
//              (byte-identical to what TF2 writes; TensorBoard's Rust reader takes only DT_FLOAT)
//   histogram  tensor{DT_DOUBLE, shape [k,3], tensor_content k×3 doubles (left, right, count)}
//              + plugin "histograms", data class TENSOR
//   image      tensor{DT_STRING, shape [2+N], string_val [width, height, png_1 .. png_N]}
//              + plugin "images", data class BLOB_SEQUENCE (width first, as TF2)
//   text       tensor{DT_STRING, shape [], string_val [text]} + plugin "text", data class TENSOR
// Every value carries its metadata (TensorBoard takes a tag's metadata from its first value).
// Thread-safe. Errors: InvalidArgumentError naming the argument, the value seen and what is valid.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/summary/event.h>

namespace chorus {
class Tensor;
}

namespace chorus::summary {

inline constexpr int kDefaultHistogramBuckets = 30;  // TensorBoard's DEFAULT_BUCKET_COUNT

// TF2's histogram bucketing (tensorboard/plugins/histogram/summary_v2.py `_buckets`):
//   - no data: `bucket_count` rows of zeros; bucket_count 0: no rows;
//   - all values equal (v): every row (v, v, 0) except the last, (v, v, n);
//   - else: bucket_count equal-width buckets from min to max; value x goes to bucket
//     floor((x - min) / width), clamped to the last (so max lands in the last bucket); edges are
//     min + i·(max − min)/bucket_count with the last right edge exactly max.
// Non-finite values (NaN, ±inf) are rejected with InvalidArgumentError giving how many there were
// (TF silently produces NaN edges); bucket_count < 0 too.
std::vector<std::array<double, 3>> histogram_buckets(std::span<const double> data,
                                                     int bucket_count = kDefaultHistogramBuckets);

// Images as TF2's tf.summary.image takes them: a rank-4 tensor [k, h, w, c], c ∈ {1, 3, 4},
// dtype uint8 (used as is) or floating (values in [0, 1], converted as tf.image.convert_image_dtype
// with saturate: trunc(clamp(x · 255.5, 0, 255)); NaN → 0). The first min(k, max_outputs)
// images, each PNG-encoded (summary/png.h). InvalidArgumentError for another rank, channel count
// or dtype, a zero height/width, or max_outputs < 0.
struct EncodedImages {
  std::int64_t width = 0, height = 0;
  std::vector<std::string> png;
};
EncodedImages encode_images(const Tensor& images, int max_outputs = 3);
// Checks what encode_images checks, without reading the data.
void validate_images(const Tensor& images, int max_outputs);

SummaryValue scalar_value(std::string_view tag, float value);
SummaryValue histogram_value(std::string_view tag, const std::vector<std::array<double, 3>>& buckets);
SummaryValue image_value(std::string_view tag, const EncodedImages& images);
SummaryValue text_value(std::string_view tag, std::string_view text);

// The metadata each of the above carries.
SummaryMetadata plugin_metadata(std::string_view plugin_name, DataClass data_class = DataClass::kUnknown);

}  // namespace chorus::summary
