// PNG decode and encode on libpng (Debian libpng-dev), as tf.io.decode_png and tf.io.encode_png.
//
//   chorus::Tensor img = chorus::data::decode_png(bytes, {.channels = 4}, "cat.png");  // uint8 [h, w, 4]
//   std::string png = chorus::data::encode_png(img);                                   // tf.io.encode_png
//
// decode_png(bytes, {channels, dtype}) — tf.io.decode_png(contents, channels, dtype):
//   - channels 0: as in the file (gray 1, gray+alpha 2, RGB 3, RGBA 4; a palette gives 3, or 4 with
//     a tRNS chunk); 1: gray (colour converted with libpng's rgb_to_gray, weights 0.299 0.587,
//     alpha dropped); 3: RGB (gray replicated, alpha dropped); 4: RGBA (tRNS expanded to alpha,
//     else an opaque alpha added). 2 is refused, as TF does.
//   - dtype uint8: 16-bit files keep each sample's high byte; uint16: 8-bit (and 1/2/4-bit,
//     expanded to 8 first) samples become v·257. Interlaced (Adam7) files, every bit depth and
//     colour type of the PNG spec. The libpng transformations are TF's, in TF's order, so the
//     pixels are TF's exactly (tests/data/io/png_test.cc).
//   - Ancillary chunks are read as libpng reads them: a bad CRC in one is a warning, text and ICC
//     chunks are ignored (at most 8 MiB each is held: png_set_chunk_malloc_max), gamma is not
//     applied (TF applies none either).
// Ceilings (DecodeLimits, image_decode.h): IHDR's width and height are read before libpng runs;
// past max_pixels or max_output_bytes → ResourceExhaustedError naming both, before anything is
// allocated. libpng's own per-side limit (1,000,000, which TF inherits) gives the same error. A
// zlib bomb cannot grow memory: libpng inflates row by row into the buffer the header sized, and
// compressed data past the last row is dropped (a warning, as in TF).
// Errors: image_decode.h. Corrupt or truncated → DataLossError "decode_png: corrupt PNG <what> at
// byte N of M: <libpng's message>" (N: bytes libpng had read when it stopped).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <chorus/core/tensor.h>
#include <chorus/data/io/image_decode.h>

namespace chorus::data {

struct DecodePngOptions {
  int channels = 0;                       // 0, 1, 3 or 4
  ImageDType dtype = ImageDType::kUInt8;  // kUInt8 or kUInt16 (kFloat32 → InvalidArgumentError)
  DecodeLimits limits;
};

// The values (uint8 or uint16 in Image::u8 / u16).
Image decode_png_values(std::string_view bytes, const DecodePngOptions& options = {}, std::string_view what = "");
// The tensor [h, w, c]: kUInt8 or kUInt16.
Tensor decode_png(std::string_view bytes, const DecodePngOptions& options = {}, std::string_view what = "");
// The op form: `contents` a scalar string tensor (image_decode.h).
Tensor decode_png(const Tensor& contents, const DecodePngOptions& options = {}, std::string_view what = "");

// tf.io.encode_png(image, compression): `pixels` holds height·width·channels samples, row-major,
// 8-bit (bits = 8, uint8_t) or 16-bit (bits = 16, uint16_t in host order). channels 1 gray,
// 2 gray+alpha, 3 RGB, 4 RGBA. compression −1 (zlib's default, 6) or 0..9. libpng writes it with
// TF's settings (default filters, zlib memory level 9, no interlace), so decode_png(encode_png(x))
// == x. InvalidArgumentError for channels outside 1..4, a side outside 1..2^31−1, bits not 8/16,
// compression outside −1..9, or a null `pixels`.
std::string encode_png(const void* pixels, std::int64_t height, std::int64_t width, int channels, int bits = 8,
                       int compression = -1);
// An Image (uint8 or uint16; float32 → InvalidArgumentError).
std::string encode_png(const Image& image, int compression = -1);
// A tensor [h, w, c] of kUInt8 (written 8-bit) or kUInt16 (written 16-bit); another dtype or
// rank → InvalidArgumentError.
std::string encode_png(const Tensor& image, int compression = -1);
// The op form of tf.io.encode_png: the PNG as a scalar string tensor on the host.
Tensor encode_png_tensor(const Tensor& image, int compression = -1);

}  // namespace chorus::data
