#include <chorus/data/io/image_decode.h>

#include <cstdio>
#include <cstring>
#include <limits>

#include <chorus/core/error.h>
#include <chorus/data/io/jpeg.h>
#include <chorus/data/io/png.h>

namespace chorus::data {

namespace internal {

std::string image_subject(std::string_view what, std::size_t size) {
  if (!what.empty()) return std::string(what);
  return chorus::internal::str_cat("<", size, "-byte input>");
}

void check_image_channels(const char* op, int channels) {
  CHORUS_REQUIRE(channels == 0 || channels == 1 || channels == 3 || channels == 4, InvalidArgumentError, op,
                 ": channels must be 0, 1, 3, or 4, got ", channels);
}

void check_image_limits(const char* op, const std::string& subject, std::int64_t height, std::int64_t width,
                        int channels, std::size_t element_size, const DecodeLimits& limits) {
  // height and width are below 2^32 (PNG and JPEG store them in 32 and 16 bits): no overflow.
  const std::int64_t pixels = height * width;
  if (pixels > limits.max_pixels)
    throw ResourceExhaustedError(
        chorus::internal::str_cat(op, ": ", subject, " declares ", width, "x", height, " (width x height) = ", pixels,
                                  " pixels, past the ceiling DecodeLimits::max_pixels = ", limits.max_pixels));
  const std::int64_t bytes = pixels * channels * static_cast<std::int64_t>(element_size);
  if (bytes > limits.max_output_bytes)
    throw ResourceExhaustedError(chorus::internal::str_cat(
        op, ": ", subject, " declares ", width, "x", height, "x", channels, " (width x height x channels), ", bytes,
        " bytes decoded, past the ceiling DecodeLimits::max_output_bytes = ", limits.max_output_bytes));
}

}  // namespace internal

Tensor image_to_tensor(const Image& image) {
  const Shape shape{image.height, image.width, image.channels};
  switch (image.dtype) {
    case ImageDType::kUInt8: return Tensor::from_host(image.u8.data(), shape, DType::kUInt8);
    case ImageDType::kUInt16: return Tensor::from_host(image.u16.data(), shape, DType::kUInt16);
    case ImageDType::kFloat32: return Tensor::from_host(image.f32.data(), shape, DType::kFloat32);
  }
  throw InvalidArgumentError("image_to_tensor: unknown ImageDType");
}

std::string_view sniff_image_format(std::string_view b) {
  const auto starts = [&](std::string_view magic) { return b.substr(0, magic.size()) == magic; };
  if (starts(std::string_view("\x89PNG\r\n\x1a\n", 8))) return "PNG";
  if (starts("\xff\xd8\xff")) return "JPEG";
  if (starts("GIF87a") || starts("GIF89a")) return "GIF";
  if (starts("BM")) return "BMP";
  if (starts("RIFF") && b.size() >= 12 && b.substr(8, 4) == "WEBP") return "WebP";
  if (starts("II*") || starts(std::string_view("MM\0*", 4))) return "TIFF";
  if (starts("\xff\x0a") || starts(std::string_view("\0\0\0\x0cJXL ", 8))) return "JPEG XL";
  if (starts(std::string_view("\0\0\1\0", 4))) return "ICO";
  return "unknown";
}

namespace {

std::string hex_prefix(std::string_view b) {
  std::string out;
  char buf[4];
  for (std::size_t i = 0; i < b.size() && i < 8; ++i) {
    std::snprintf(buf, sizeof buf, "%02x ", static_cast<unsigned char>(b[i]));
    out += buf;
  }
  if (!out.empty()) out.pop_back();
  return out;
}

// TF's decode_image conversions (decode_image_op.cc): uint8 → uint16 is v·256 (v << 8), → float32
// is v · float(1/255); a PNG asked for as float32 is decoded as uint16, then v · float(1/65535).
void convert_u8(Image& image, ImageDType dtype) {
  if (dtype == ImageDType::kUInt16) {
    image.u16.resize(image.u8.size());
    for (std::size_t i = 0; i < image.u8.size(); ++i) image.u16[i] = static_cast<std::uint16_t>(image.u8[i] << 8);
  } else if (dtype == ImageDType::kFloat32) {
    const float scale = static_cast<float>(1.0 / std::numeric_limits<std::uint8_t>::max());
    image.f32.resize(image.u8.size());
    for (std::size_t i = 0; i < image.u8.size(); ++i) image.f32[i] = static_cast<float>(image.u8[i]) * scale;
  } else {
    return;
  }
  image.u8 = {};
  image.dtype = dtype;
}

void convert_u16_to_float(Image& image) {
  const float scale = static_cast<float>(1.0 / std::numeric_limits<std::uint16_t>::max());
  image.f32.resize(image.u16.size());
  for (std::size_t i = 0; i < image.u16.size(); ++i) image.f32[i] = static_cast<float>(image.u16[i]) * scale;
  image.u16 = {};
  image.dtype = ImageDType::kFloat32;
}

}  // namespace

Image decode_image_values(std::string_view bytes, const DecodeImageOptions& options, std::string_view what) {
  internal::check_image_channels("decode_image", options.channels);
  const std::string subject = internal::image_subject(what, bytes.size());
  if (bytes.empty()) throw DataLossError("decode_image: " + subject + " is empty");
  const std::string_view format = sniff_image_format(bytes);
  if (format == "PNG") {
    // float32 is decoded at 16 bits first (lossless for 16-bit files), as TF.
    const ImageDType bits = options.dtype == ImageDType::kUInt8 ? ImageDType::kUInt8 : ImageDType::kUInt16;
    Image image =
        decode_png_values(bytes, {.channels = options.channels, .dtype = bits, .limits = options.limits}, what);
    if (options.dtype == ImageDType::kFloat32) convert_u16_to_float(image);
    return image;
  }
  if (format == "JPEG") {
    CHORUS_REQUIRE(options.channels != 4, InvalidArgumentError, "decode_image: channels must be 0, 1, or 3 for JPEG ",
                   subject, ", got 4");
    // TF decodes with 1-byte samples and converts: the output ceiling counts the final element size.
    DecodeLimits limits = options.limits;
    const std::int64_t element = options.dtype == ImageDType::kUInt8 ? 1 : options.dtype == ImageDType::kUInt16 ? 2 : 4;
    limits.max_output_bytes = options.limits.max_output_bytes / element;
    Image image = decode_jpeg_values(bytes, {.channels = options.channels, .limits = limits}, what);
    convert_u8(image, options.dtype);
    return image;
  }
  if (format == "unknown")
    throw InvalidArgumentError(chorus::internal::str_cat("decode_image: ", subject,
                                                         " is not an image chorus decodes: its first bytes (",
                                                         hex_prefix(bytes), ") are not PNG or JPEG"));
  throw InvalidArgumentError(chorus::internal::str_cat("decode_image: ", subject, " is ", format,
                                                       " (by its first bytes: ", hex_prefix(bytes),
                                                       "); chorus decodes PNG and JPEG only"));
}

Tensor decode_image(std::string_view bytes, const DecodeImageOptions& options, std::string_view what) {
  return image_to_tensor(decode_image_values(bytes, options, what));
}

Tensor decode_image(const Tensor& contents, const DecodeImageOptions& options, std::string_view what) {
  return decode_image(internal::scalar_contents("decode_image", contents), options, what);
}

std::string_view internal::scalar_contents(const char* op, const Tensor& contents) {
  CHORUS_REQUIRE(contents.defined(), InvalidArgumentError, op, ": 'contents' is an undefined tensor");
  CHORUS_REQUIRE(contents.dtype() == DType::kString && contents.shape().rank() == 0, InvalidArgumentError, op,
                 ": 'contents' must be a scalar string tensor, got ", dtype_name(contents.dtype()), " of shape ",
                 contents.shape().to_string());
  return contents.strings()[0];
}

}  // namespace chorus::data
