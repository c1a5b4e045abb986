// Image decoding: the vocabulary the PNG and JPEG codecs share (Image, DecodeLimits), and
// decode_image, which sniffs the format as tf.io.decode_image does.
//
//   std::string bytes = read_file("cat.jpg");
//   chorus::Tensor img = chorus::data::decode_image(bytes, {.channels = 3}, "cat.jpg");  // uint8 [h, w, 3]
//
// TensorFlow's names and semantics (tf.io.decode_image, decode_png, decode_jpeg, encode_png):
// the same libraries (libpng, libjpeg-turbo), the same transformations and the same pixels
// (tests/data/io/png_test.cc and jpeg_test.cc compare with TF 2.21 element by element).
//
// dtype. TensorFlow decodes PNGs to uint8 or uint16 and decode_image also to float32. `Image`
// (the byte-level result) holds those values exactly as TF's tensor; the Tensor forms return
// DType::kUInt8, kUInt16 or kFloat32.
// Conversions as TF's kernels do them: 8-bit samples asked for as uint16 (PNG) are v·257; 16-bit
// samples asked for as uint8 keep their high byte (libpng's png_set_strip_16); decode_image's
// float32 is a PNG decoded as uint16 times float(1/65535), a JPEG's uint8 times float(1/255);
// decode_image's uint16 of a JPEG is v·256.
//
// Errors (chorus's classes, the same policy as tfrecord.h; TensorFlow raises InvalidArgumentError
// for all of them: chorus tells a broken file from a bad argument and from a file past a ceiling,
// so an input pipeline can skip corrupt files and still stop on a programming error):
//   - corrupt or truncated data → DataLossError naming `what` (the file name, or "<N bytes>"),
//     the byte offset where libpng/libjpeg stopped (the bytes consumed so far), and the library's
//     own message ("IDAT: incorrect data check", "Premature end of JPEG file");
//   - empty input → DataLossError "empty"; data that is neither PNG nor JPEG → InvalidArgumentError
//     naming what the first bytes look like (GIF, BMP, WebP, ... or their hex) and what chorus
//     decodes (TF also decodes GIF and BMP: chorus does not, yet);
//   - declared dimensions past DecodeLimits → ResourceExhaustedError before anything is
//     allocated for the pixels, naming the dimensions and the ceiling;
//   - bad arguments (channels not 0/1/3/4, ratio not 1/2/4/8, an unknown dct_method) →
//     InvalidArgumentError.
// libpng and libjpeg report errors by longjmp: chorus catches them in C frames that hold no C++
// objects and throws only after the library's frames are gone; nothing is printed to stderr.
//
// Thread-safety: every function here is reentrant (no shared state); decode images on as many
// threads as you like.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/core/tensor.h>

namespace chorus::data {

// The element type of a decoded image, as TF's `dtype` argument.
enum class ImageDType { kUInt8, kUInt16, kFloat32 };

// Ceilings checked against the header (PNG's IHDR, JPEG's SOF) before anything is allocated.
struct DecodeLimits {
  // height · width of the decoded image. The default is TensorFlow's own ceiling (decode_png and
  // decode_jpeg refuse 2^29 pixels or more), so every image TF decodes, chorus decodes too; lower
  // it for a pipeline that must bound memory per image (a 1 KB file may declare 2^29 pixels).
  std::int64_t max_pixels = (std::int64_t{1} << 29) - 1;
  // Bytes of the decoded tensor (height · width · channels · element size). 4 GiB: the largest
  // output of a 2^29 − 1 pixel RGBA uint16 image fits.
  std::int64_t max_output_bytes = std::int64_t{1} << 32;
};

// A decoded image: [height, width, channels] row-major, channels interleaved. Exactly one of u8,
// u16, f32 holds the height·width·channels values (the one `dtype` names).
struct Image {
  std::int64_t height = 0;
  std::int64_t width = 0;
  int channels = 0;
  ImageDType dtype = ImageDType::kUInt8;
  std::vector<std::uint8_t> u8;
  std::vector<std::uint16_t> u16;
  std::vector<float> f32;

  std::int64_t num_values() const { return height * width * channels; }
};

// The Tensor [height, width, channels] of an Image (kUInt8, kUInt16 or kFloat32) on the default
// (CPU) device.
Tensor image_to_tensor(const Image& image);

// What the first bytes of `bytes` are: "PNG", "JPEG", "GIF", "BMP", "WebP", "TIFF", "JPEG XL",
// "ICO", or "unknown". Never throws.
std::string_view sniff_image_format(std::string_view bytes);

struct DecodeImageOptions {
  int channels = 0;  // 0: as in the file; 1 gray, 3 RGB, 4 RGBA (JPEG: 0, 1 or 3, as TF)
  ImageDType dtype = ImageDType::kUInt8;
  DecodeLimits limits;
};

// tf.io.decode_image(contents, channels, dtype) for PNG and JPEG (by signature, not by file
// name). JPEGs are decoded with TF's decode_image settings (fancy upscaling, INTEGER_FAST DCT, no
// truncation recovery). `what` names the input in error messages (a file name).
Image decode_image_values(std::string_view bytes, const DecodeImageOptions& options = {}, std::string_view what = "");
Tensor decode_image(std::string_view bytes, const DecodeImageOptions& options = {}, std::string_view what = "");

// The op forms, as tf.io takes them: `contents` is a scalar string tensor (a record, a file read
// into a dataset element), so they compose in Dataset::map:
//   ds.map([](const Element& e) { return Element{decode_image(e[0], {.channels = 3}), e[1]}; })
// A tensor that is not a scalar string → InvalidArgumentError naming the op, the dtype and the
// shape (TF: "contents must be scalar"). decode_png and decode_jpeg have the same form.
Tensor decode_image(const Tensor& contents, const DecodeImageOptions& options = {}, std::string_view what = "");

namespace internal {
// The bytes of a scalar string tensor (the op forms' `contents`), else InvalidArgumentError.
std::string_view scalar_contents(const char* op, const Tensor& contents);
// "cat.png" or, for an unnamed input, "<N-byte input>": the subject of codec error messages.
std::string image_subject(std::string_view what, std::size_t size);
// InvalidArgumentError unless channels is 0, 1, 3 or 4 (TF's DecodePng / DecodeImage check).
void check_image_channels(const char* op, int channels);
// ResourceExhaustedError when height·width·channels·element_size passes `limits`.
void check_image_limits(const char* op, const std::string& subject, std::int64_t height, std::int64_t width,
                        int channels, std::size_t element_size, const DecodeLimits& limits);
}  // namespace internal

}  // namespace chorus::data
