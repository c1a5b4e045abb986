// JPEG decoding on libjpeg-turbo (Debian libjpeg62-turbo-dev), as tf.io.decode_jpeg.
//
//   chorus::Tensor img = chorus::data::decode_jpeg(bytes, {.channels = 3}, "cat.jpg");  // uint8 [h, w, 3]
//
// decode_jpeg(bytes, options) — tf.io.decode_jpeg(contents, channels, ratio, fancy_upscaling,
// try_recover_truncated, acceptable_fraction, dct_method), the same defaults:
//   - channels 0: min(the file's components, 3) (gray 1, YCbCr 3, CMYK/YCCK 3); 1: gray; 3: RGB.
//     4 is refused, as TF does. CMYK and YCCK files are decoded by libjpeg to CMYK and converted to
//     RGB with TF's formula (Adobe-inverted when the file has an Adobe marker); asking a CMYK file
//     for gray is libjpeg's "Unsupported color conversion request" → InvalidArgumentError.
//   - ratio 1, 2, 4 or 8: libjpeg's scaled decode (output ⌈w/ratio⌉ × ⌈h/ratio⌉).
//   - dct_method "" or "INTEGER_FAST": libjpeg's JDCT_IFAST (TensorFlow's default, not libjpeg's);
//     "INTEGER_ACCURATE": JDCT_ISLOW.
//   - fancy_upscaling: libjpeg's do_fancy_upsampling (smooth chroma upsampling for 4:2:x files).
//   - Progressive, baseline, restart markers, any sampling factors libjpeg-turbo takes.
//   - A file whose data ends early: the rows decoded so far are kept and the rest are zero when
//     rows_read / height ≥ min(1, acceptable_fraction); otherwise DataLossError naming the row.
//     try_recover_truncated: a fake end-of-image marker is fed where the data ends (libjpeg then
//     fills the missing blocks as it does for a short file), as TF's source manager does.
//   - Corrupt but decodable data (libjpeg's warnings: "Corrupt JPEG data: N extraneous bytes")
//     decodes, as in TF; libjpeg's fatal errors → DataLossError.
// The pixels equal TF's (tests/data/io/jpeg_test.cc): the same library and the same settings;
// TF bundles libjpeg-turbo, chorus uses the system's (2.1.5 on Debian 12), whose integer IDCTs and
// upsamplers are bit-exact across versions and SIMD paths.
// Ceilings (DecodeLimits): the frame header (SOF) is read first and the output dimensions
// (after `ratio`) checked against max_pixels and max_output_bytes → ResourceExhaustedError before
// the decoder allocates anything for the image; libjpeg's own working memory (the whole-image
// coefficient buffers of a progressive file) is bounded by 2·max_output_bytes + 64 MiB
// (max_memory_to_use; past it → ResourceExhaustedError).
// Errors: image_decode.h; corrupt → DataLossError "decode_jpeg: corrupt JPEG <what> at byte N of M:
// <libjpeg's message>".
#pragma once

#include <string>
#include <string_view>

#include <chorus/core/tensor.h>
#include <chorus/data/io/image_decode.h>

namespace chorus::data {

struct DecodeJpegOptions {
  int channels = 0;  // 0, 1 or 3
  int ratio = 1;     // 1, 2, 4 or 8
  bool fancy_upscaling = true;
  bool try_recover_truncated = false;
  float acceptable_fraction = 1.0f;
  std::string dct_method;  // "", "INTEGER_FAST" or "INTEGER_ACCURATE"
  DecodeLimits limits;
};

// The uint8 values (Image::u8).
Image decode_jpeg_values(std::string_view bytes, const DecodeJpegOptions& options = {}, std::string_view what = "");
// The kUInt8 tensor [h, w, c].
Tensor decode_jpeg(std::string_view bytes, const DecodeJpegOptions& options = {}, std::string_view what = "");
// The op form: `contents` a scalar string tensor (image_decode.h).
Tensor decode_jpeg(const Tensor& contents, const DecodeJpegOptions& options = {}, std::string_view what = "");

}  // namespace chorus::data
