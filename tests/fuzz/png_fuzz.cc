// libFuzzer target: PNG decoding and encoding, data/io/png.h (decode_png_values, encode_png) on
// libpng, with the DecodeLimits of a pipeline that bounds memory (2^22 pixels).
//
// Contract (png.h, image_decode.h): DataLossError for corrupt or truncated data,
// ResourceExhaustedError for dimensions past the ceiling. An accepted file: the image's height and
// width are IHDR's, its channels follow the colour type (channels 0: gray 1, gray+alpha 2, RGB 3,
// RGBA 4, palette 3 or 4) or the request; encode_png of it decodes back to the same values (8- and
// 16-bit), and decoding the same bytes twice gives the same values.
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_util.h"
#include <chorus/data/io/png.h>

using chorus::fuzz::check;
namespace data = chorus::data;

namespace {

std::uint32_t be32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 | p[3];
}

void round_trip(const data::Image& im) {
  const data::Image back = data::decode_png_values(data::encode_png(im), {.dtype = im.dtype});
  check(back.height == im.height && back.width == im.width && back.channels == im.channels, "round trip shape");
  check(back.u8 == im.u8 && back.u16 == im.u16, "round trip values");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes = chorus::fuzz::as_view(data, size);
  const data::DecodeLimits limits{.max_pixels = 1 << 22, .max_output_bytes = 1 << 25};
  // The request is taken from the size, so one input is decoded one way, reproducibly.
  static constexpr int kChannels[] = {0, 1, 3, 4};
  const int channels = kChannels[size % 4];
  const auto dtype = (size / 4) % 2 ? data::ImageDType::kUInt16 : data::ImageDType::kUInt8;
  data::Image im;
  try {
    im = data::decode_png_values(bytes, {.channels = channels, .dtype = dtype, .limits = limits}, "fuzz.png");
  } catch (const chorus::Error& e) {
    chorus::fuzz::expect_error<chorus::DataLossError, chorus::ResourceExhaustedError>(e);
    return 0;
  }
  check(size >= 33, "an accepted PNG holds a signature and IHDR");
  check(im.width == be32(data + 16) && im.height == be32(data + 20), "height and width are IHDR's");
  const int color_type = data[25];
  static constexpr int kFileChannels[] = {1, 0, 3, 3, 2, 0, 4};
  if (channels != 0)
    check(im.channels == channels, "the channels asked for");
  else if (color_type == 3)
    check(im.channels == 3 || im.channels == 4, "a palette gives RGB or RGBA");
  else
    check(color_type <= 6 && im.channels == kFileChannels[color_type], "the file's channels");
  check(im.dtype == dtype && static_cast<std::int64_t>(
                                 dtype == data::ImageDType::kUInt8 ? im.u8.size() : im.u16.size()) == im.num_values(),
        "the values fill the shape");
  const data::Image again =
      data::decode_png_values(bytes, {.channels = channels, .dtype = dtype, .limits = limits}, "fuzz.png");
  check(again.u8 == im.u8 && again.u16 == im.u16, "decoding is deterministic");
  round_trip(im);
  return 0;
}
