// libFuzzer target: JPEG decoding, data/io/jpeg.h (decode_jpeg_values) on libjpeg-turbo, with the
// DecodeLimits of a pipeline that bounds memory (2^22 pixels) and TF's options chosen by the
// input's size (channels 0/1/3, ratio 1/2/4/8, fancy upscaling, truncation recovery, an acceptable
// fraction of 1 or 0.5, both DCT methods).
//
// Contract (jpeg.h, image_decode.h): DataLossError for corrupt or truncated data,
// ResourceExhaustedError past the ceilings, InvalidArgumentError only for a conversion libjpeg
// refuses (a CMYK/YCCK file asked for gray). An accepted file: when its markers up to the first SOF
// are well formed (each segment where the last one ends), the output is ⌈width/ratio⌉ ×
// ⌈height/ratio⌉ of that SOF with the channels asked for (0: min(components, 3)); decoding the same
// bytes twice gives the same values.
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_util.h"
#include <chorus/data/io/jpeg.h>

using chorus::fuzz::check;
namespace data = chorus::data;

namespace {

struct Sof {
  bool found = false;
  std::int64_t height = 0, width = 0;
  int components = 0;
};

// The first SOFn of a clean marker chain (FF D8, then FF xx len ... back to back), else not found.
Sof first_sof(const std::uint8_t* p, std::size_t n) {
  Sof s;
  std::size_t at = 2;
  while (at + 4 <= n && p[at] == 0xFF) {
    const int m = p[at + 1];
    const std::size_t len = std::size_t{p[at + 2]} << 8 | p[at + 3];
    const bool sof = m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
    if (sof) {
      if (len < 8 || at + 2 + len > n) return s;
      s.height = std::int64_t{p[at + 5]} << 8 | p[at + 6];
      s.width = std::int64_t{p[at + 7]} << 8 | p[at + 8];
      s.components = p[at + 9];
      s.found = true;
      return s;
    }
    if (m == 0xDA || m == 0xD9 || m == 0xFF || (m >= 0xD0 && m <= 0xD8) || m == 0x01 || len < 2) return s;
    at += 2 + len;
  }
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes = chorus::fuzz::as_view(data, size);
  static constexpr int kChannels[] = {0, 1, 3};
  static constexpr int kRatios[] = {1, 2, 4, 8};
  data::DecodeJpegOptions o;
  o.channels = kChannels[size % 3];
  o.ratio = kRatios[(size / 3) % 4];
  o.fancy_upscaling = (size / 12) % 2 == 0;
  o.try_recover_truncated = (size / 24) % 2 == 1;
  o.acceptable_fraction = (size / 48) % 2 ? 0.5f : 1.0f;
  o.dct_method = (size / 96) % 2 ? "INTEGER_ACCURATE" : "";
  o.limits = {.max_pixels = 1 << 22, .max_output_bytes = 1 << 24};
  data::Image im;
  try {
    im = data::decode_jpeg_values(bytes, o, "fuzz.jpg");
  } catch (const chorus::InvalidArgumentError&) {
    check(o.channels == 1, "InvalidArgumentError only for a gray request libjpeg cannot convert");
    return 0;
  } catch (const chorus::Error& e) {
    chorus::fuzz::expect_error<chorus::DataLossError, chorus::ResourceExhaustedError>(e);
    return 0;
  }
  check(im.height > 0 && im.width > 0 && static_cast<std::int64_t>(im.u8.size()) == im.num_values(),
        "the values fill the shape");
  const Sof sof = first_sof(data, size);
  if (sof.found) {
    check(im.height == (sof.height + o.ratio - 1) / o.ratio && im.width == (sof.width + o.ratio - 1) / o.ratio,
          "the SOF's dimensions, scaled by ratio");
    const int want = o.channels != 0 ? o.channels : (sof.components < 3 ? sof.components : 3);
    check(im.channels == want, "the channels asked for, or min(components, 3)");
  }
  const data::Image again = data::decode_jpeg_values(bytes, o, "fuzz.jpg");
  check(again.u8 == im.u8, "decoding is deterministic");
  return 0;
}
